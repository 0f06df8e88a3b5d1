//! SQL expressions the catalog keeps as text — column defaults and CHECK constraints:
//! their parse (cached per thread), their text as PostgreSQL's `pg_get_expr` /
//! `pg_get_constraintdef` print it, and the columns they name. A leaf module: the
//! executor and the catalog views both read it, and it reads neither.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use sqlparser::ast::{self, Expr};

use crate::error::{SqlError, SqlResult};
use crate::names::ident;

thread_local! {
    /// Stored expressions parsed on this thread, by their text.
    static PARSED: RefCell<HashMap<String, Arc<Expr>>> = RefCell::new(HashMap::new());
}

/// Most distinct expression texts a thread keeps parsed.
const PARSED_MAX: usize = 1024;

/// The parsed form of a stored expression's text (parsed once per thread).
pub(crate) fn parse(text: &str) -> SqlResult<Arc<Expr>> {
    if let Some(e) = PARSED.with(|p| p.borrow().get(text).cloned()) {
        return Ok(e);
    }
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    let e = sqlparser::parser::Parser::new(&dialect)
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| {
            SqlError::new(
                "XX000",
                format!("stored expression {text} does not parse: {e}"),
            )
        })?;
    let e = Arc::new(e);
    PARSED.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() >= PARSED_MAX {
            p.clear();
        }
        p.insert(text.to_string(), e.clone());
    });
    Ok(e)
}

/// An expression default as PostgreSQL's `pg_get_expr` prints the common forms: an
/// operator in parentheses, a string literal with its resolved type (`'x'::text`, and
/// `'s'::regclass` as nextval's argument), function calls with their arguments so
/// printed; anything else as written.
pub(crate) fn deparse(e: &ast::Expr) -> String {
    fn string(s: &str, ty: &str) -> String {
        format!("'{}'::{ty}", s.replace('\'', "''"))
    }
    match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) => string(s, "text"),
            _ => e.to_string(),
        },
        ast::Expr::BinaryOp { left, op, right } => {
            format!("({} {op} {})", deparse(left), deparse(right))
        }
        ast::Expr::Nested(inner) => deparse(inner),
        ast::Expr::Function(f) => {
            let name = f.name.to_string().to_ascii_lowercase();
            let ast::FunctionArguments::List(list) = &f.args else {
                return e.to_string();
            };
            if !list.clauses.is_empty() || list.duplicate_treatment.is_some() {
                return e.to_string();
            }
            let mut args = Vec::new();
            for a in &list.args {
                let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(x)) = a else {
                    return e.to_string();
                };
                args.push(match (name.as_str(), x) {
                    ("nextval", ast::Expr::Value(v)) => match &v.value {
                        ast::Value::SingleQuotedString(s) => string(s, "regclass"),
                        _ => deparse(x),
                    },
                    _ => deparse(x),
                });
            }
            format!("{name}({})", args.join(", "))
        }
        _ => e.to_string(),
    }
}

/// The distinct column names `e` mentions, in order of first mention.
pub(crate) fn columns_mentioned(e: &Expr) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let _ = ast::visit_expressions(e, |x| {
        let name = match x {
            Expr::Identifier(i) => Some(ident(i)),
            Expr::CompoundIdentifier(ids) => ids.last().map(ident),
            _ => None,
        };
        if let Some(n) = name {
            if !out.contains(&n) {
                out.push(n);
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    out
}
