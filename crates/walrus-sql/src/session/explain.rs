//! Plain `EXPLAIN <query>` is answered by `exec/explain.rs` (the plan walrus runs, for
//! the shapes it can state exactly).
//!
//! `EXPLAIN (VERBOSE, FORMAT JSON) <statement>` and `... EXECUTE name(args)`, in the shape
//! sqlx's `describe` reads: one JSON document with a `Plan` object. walrus has no plan
//! tree, so the plan is a single node (`"Node Type": "Walrus"`) with no `Output` list,
//! which tells a client nothing it could take for a nullability hint. A statement with
//! an outer join is refused (its inner side's columns can be NULL, which PostgreSQL's
//! plan would show and this one cannot), as is every other EXPLAIN form (0A000).

use sqlparser::ast::{AnalyzeFormatKind, Expr, Statement, UtilityOption};
use walrus_engine::access::datum::{Datum, TypeId};

use super::Session;
use crate::error::{SqlError, SqlResult};
use crate::names::object_name;
use crate::result::{Column, QueryResult};

/// Whether `options` say exactly VERBOSE (optionally true) and FORMAT JSON.
fn verbose_json(options: &[UtilityOption]) -> bool {
    let mut verbose = false;
    let mut json = false;
    for o in options {
        let name = o.name.value.to_ascii_lowercase();
        let arg = o.arg.as_ref().map(|a| a.to_string().to_ascii_lowercase());
        match (name.as_str(), arg.as_deref()) {
            ("verbose", None | Some("true") | Some("on")) => verbose = true,
            ("format", Some("json")) => json = true,
            _ => return false,
        }
    }
    verbose && json
}

impl Session {
    pub(super) fn explain(&mut self, st: &Statement) -> SqlResult<QueryResult> {
        let Statement::Explain {
            describe_alias: _,
            analyze,
            verbose,
            query_plan,
            estimate,
            statement,
            format,
            options,
        } = st
        else {
            return Err(SqlError::unsupported("EXPLAIN is not supported by walrus"));
        };
        let form_ok = !*analyze
            && !*query_plan
            && !*estimate
            && match (options, format) {
                (Some(o), None) => verbose_json(o),
                (None, Some(AnalyzeFormatKind::Keyword(f))) => {
                    *verbose && f.to_string().eq_ignore_ascii_case("json")
                }
                _ => false,
            };
        if !form_ok {
            // Plain EXPLAIN (text format) of a query: the plan walrus runs
            // (`exec/explain.rs`).
            let text_form = !*analyze
                && !*verbose
                && !*query_plan
                && !*estimate
                && match (options, format) {
                    (None, None) => true,
                    (Some(o), None) => o.iter().all(|o| {
                        o.name.value.eq_ignore_ascii_case("format")
                            && o.arg
                                .as_ref()
                                .is_some_and(|a| a.to_string().eq_ignore_ascii_case("text"))
                    }),
                    (None, Some(AnalyzeFormatKind::Keyword(f))) => {
                        f.to_string().eq_ignore_ascii_case("text")
                    }
                    _ => false,
                };
            if let (true, Statement::Query(_)) = (text_form, statement.as_ref()) {
                let mut inner = statement.as_ref().clone();
                crate::rewrite::rewrite(&mut inner)?;
                let Statement::Query(q) = &inner else {
                    return Err(SqlError::unsupported(
                        "EXPLAIN of this statement is not supported",
                    ));
                };
                let lines = crate::exec::explain::explain_query(self, q, &[])?;
                return Ok(QueryResult {
                    tag_only: false,
                    tag: "EXPLAIN".into(),
                    columns: vec![Column::new("QUERY PLAN", TypeId::Text)],
                    rows: lines.into_iter().map(|l| vec![Datum::Text(l)]).collect(),
                });
            }
            return Err(SqlError::unsupported(
                "EXPLAIN is supported as EXPLAIN <query> (text format) and EXPLAIN (VERBOSE, FORMAT JSON)",
            ));
        }
        let text = match statement.as_ref() {
            Statement::Execute {
                name: Some(name),
                parameters,
                ..
            } => {
                if parameters.iter().any(|p| !matches!(p, Expr::Value(_))) {
                    return Err(SqlError::unsupported(
                        "EXPLAIN EXECUTE with non-constant arguments is not supported",
                    ));
                }
                let n = object_name(name);
                match (self.prepared.get(&n), self.protocol_statements.get(&n)) {
                    (Some((stmt, _)), _) => stmt.to_string(),
                    (None, Some(sql)) => sql.clone(),
                    (None, None) => {
                        return Err(SqlError::new(
                            "26000",
                            format!("prepared statement \"{n}\" does not exist"),
                        ))
                    }
                }
            }
            Statement::Query(_)
            | Statement::Insert(_)
            | Statement::Update { .. }
            | Statement::Delete(_) => statement.to_string(),
            other => {
                return Err(SqlError::unsupported(format!(
                    "EXPLAIN of {} is not supported",
                    other.to_string().split_whitespace().next().unwrap_or("")
                )))
            }
        };
        let upper = text.to_ascii_uppercase();
        if [
            "LEFT JOIN",
            "LEFT OUTER JOIN",
            "RIGHT JOIN",
            "RIGHT OUTER JOIN",
            "FULL JOIN",
            "FULL OUTER JOIN",
        ]
        .iter()
        .any(|j| upper.contains(j))
        {
            return Err(SqlError::unsupported(
                "EXPLAIN of a statement with an outer join is not supported",
            ));
        }
        let plan = "[\n  {\n    \"Plan\": {\n      \"Node Type\": \"Walrus\",\n      \"Parallel Aware\": false,\n      \"Async Capable\": false\n    }\n  }\n]";
        Ok(QueryResult {
            tag_only: false,
            tag: "EXPLAIN".into(),
            columns: vec![Column::new("QUERY PLAN", TypeId::Json)],
            rows: vec![vec![Datum::Json(plan.into())]],
        })
    }

    /// Remembers a statement prepared through the extended protocol (Parse with a
    /// name), so `EXPLAIN ... EXECUTE name` can find it.
    pub fn remember_protocol_statement(&mut self, name: &str, sql: &str) {
        if !name.is_empty() {
            self.protocol_statements
                .insert(name.to_string(), sql.to_string());
        }
    }

    /// Forgets a statement the client closed.
    pub fn forget_protocol_statement(&mut self, name: &str) {
        self.protocol_statements.remove(name);
    }
}
