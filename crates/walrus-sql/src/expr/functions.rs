//! Built-in scalar functions (`now()`, `current_setting()`, `pg_size_pretty()`, ...) and
//! the calls that go out through [`super::Hooks`]: aggregates, `ARRAY(subquery)` and the
//! catalog functions.

use std::cmp::Ordering;

use sqlparser::ast::{self, BinaryOperator};
use walrus_engine::access::datum::{Datum, TypeId};

use super::cast::{as_f64, as_i64};
use super::ops::{binary, compare_values, type_name};
use super::{eval, function_args, function_name, hooks, is_aggregate_name, Scope};
use crate::error::{SqlError, SqlResult};
use crate::numeric;
use crate::value::format_text;

/// Parses PostgreSQL's `X/X` LSN text.
pub(crate) fn parse_lsn(d: &Datum) -> Option<u64> {
    let t = format_text(d)?;
    let (hi, lo) = t.split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// Refuses the parts of a function call walrus does not implement (window functions,
/// WITHIN GROUP, IGNORE NULLS, ...) so they are never silently dropped. Every field is
/// named: a field added to sqlparser's `Function` fails to compile here.
pub fn check_function(f: &ast::Function) -> SqlResult<()> {
    let ast::Function {
        name: _,
        uses_odbc_syntax,
        parameters,
        args,
        filter,
        null_treatment,
        over,
        within_group,
    } = f;
    let name = function_name(f);
    let aggregate = is_aggregate_name(&name);
    if over.is_some() {
        return Err(SqlError::unsupported(format!(
            "window functions are not supported ({name}() OVER ...)"
        )));
    }
    if *uses_odbc_syntax {
        return Err(SqlError::unsupported(
            "ODBC {fn ...} calls are not supported",
        ));
    }
    if !matches!(parameters, ast::FunctionArguments::None) {
        return Err(SqlError::unsupported(
            "parametric function calls are not supported",
        ));
    }
    if null_treatment.is_some() {
        return Err(SqlError::unsupported(
            "IGNORE NULLS / RESPECT NULLS is not supported",
        ));
    }
    if !within_group.is_empty() {
        return Err(SqlError::unsupported(
            "ordered-set aggregates (WITHIN GROUP) are not supported",
        ));
    }
    if filter.is_some() && !aggregate {
        return Err(SqlError::new(
            "42809",
            format!("FILTER specified, but {name} is not an aggregate function"),
        ));
    }
    if let ast::FunctionArguments::List(l) = args {
        let ast::FunctionArgumentList {
            duplicate_treatment,
            args: list,
            clauses,
        } = l;
        if !aggregate {
            if matches!(duplicate_treatment, Some(ast::DuplicateTreatment::Distinct)) {
                return Err(SqlError::new(
                    "42809",
                    format!("DISTINCT specified, but {name} is not an aggregate function"),
                ));
            }
            if !clauses.is_empty() {
                return Err(SqlError::new(
                    "42809",
                    format!("ORDER BY specified, but {name} is not an aggregate function"),
                ));
            }
        }
        for c in clauses {
            if !matches!(c, ast::FunctionArgumentClause::OrderBy(_)) {
                return Err(SqlError::unsupported(format!(
                    "{c} in a function call is not supported"
                )));
            }
        }
        for a in list {
            match a {
                ast::FunctionArg::Unnamed(_) => {}
                other => {
                    return Err(SqlError::unsupported(format!(
                        "named function argument {other} is not supported"
                    )))
                }
            }
        }
    }
    Ok(())
}

pub(crate) fn function(f: &sqlparser::ast::Function, s: &Scope<'_>) -> SqlResult<Datum> {
    check_function(f)?;
    let name = function_name(f);
    if is_aggregate_name(&name) {
        return match s.hooks.and_then(|h| h.aggregate(f, s.frame)) {
            Some(r) => r,
            None => Err(SqlError::new(
                "42803",
                format!("aggregate function {name}() is not allowed here"),
            )),
        };
    }
    if let sqlparser::ast::FunctionArguments::Subquery(q) = &f.args {
        // ARRAY(SELECT ...)
        let rel = hooks(s)?.subquery(q, s.frame)?;
        let items: Vec<Datum> = rel
            .rows
            .into_iter()
            .map(|r| r.into_iter().next().unwrap_or(Datum::Null))
            .collect();
        return super::array::make_array(items);
    }
    // A char(n) argument converts to text without its padding (octet_length counts it).
    let args: Vec<Datum> = function_args(f)
        .into_iter()
        .map(|a| {
            let v = eval(a, s)?;
            Ok(if name != "octet_length" && super::is_char_column(a, s) {
                super::bpchar_text(v)
            } else {
                v
            })
        })
        .collect::<SqlResult<_>>()?;
    if let Some(r) = s.hooks.and_then(|h| h.function(&name, &args)) {
        return r;
    }
    let arg = |i: usize| args.get(i).cloned().unwrap_or(Datum::Null);
    // int2vector (`pg_index.indkey`) has subscripts from 0: array functions would
    // count from 1, text functions read its text form. Only subscripts, ANY and
    // `_pg_expandarray` take it.
    if args.iter().any(|a| matches!(a, Datum::Int2Vector(_))) {
        return Err(SqlError::unsupported(format!(
            "function {name}(int2vector) is not supported"
        )));
    }
    // The text functions would see bytea's hex text form: a wrong answer. Only the
    // ones written for bytea take it.
    if args.iter().any(|a| matches!(a, Datum::Bytea(_)))
        && !matches!(name.as_str(), "length" | "octet_length" | "coalesce")
    {
        return Err(SqlError::unsupported(format!(
            "function {name}(bytea) is not supported"
        )));
    }
    // Likewise for the types whose functions belong to a later issue (json, jsonb,
    // arrays, time, interval): only the functions written for them take them.
    if args.iter().any(|a| {
        matches!(
            a,
            Datum::Json(_)
                | Datum::Jsonb(_)
                | Datum::Array(_)
                | Datum::Time(_)
                | Datum::TimeTz(..)
                | Datum::Reg(_)
                | Datum::Interval(_)
        )
    }) && !matches!(
        name.as_str(),
        "coalesce"
            | "nullif"
            | "array_position"
            | "array_to_string"
            | "array_length"
            | "array_upper"
            | "array_lower"
            | "cardinality"
            | "timezone"
    ) {
        let types: Vec<&str> = args
            .iter()
            .map(|a| a.type_id().map_or("unknown", |t| t.name()))
            .collect();
        return Err(SqlError::unsupported(format!(
            "function {name}({}) is not supported",
            types.join(", ")
        )));
    }
    Ok(match name.as_str() {
        // Unit tests only: a statement that panics midway (the session's panic path).
        #[cfg(test)]
        "walrus_test_panic" => panic!("walrus_test_panic() called"),
        "current_timestamp" | "current_date" | "localtimestamp" | "localtime" | "current_time"
            if !args.is_empty() =>
        {
            return Err(SqlError::unsupported(format!(
                "{name} with a precision is not supported"
            )));
        }
        "now" | "transaction_timestamp" | "statement_timestamp" if !args.is_empty() => {
            let types: Vec<&str> = args.iter().map(type_name).collect();
            return Err(SqlError::new(
                "42883",
                format!("function {name}({}) does not exist", types.join(", ")),
            ));
        }
        "now" | "current_timestamp" | "transaction_timestamp" | "statement_timestamp" => {
            Datum::TimestampTz(s.now)
        }
        // The SQL value functions of the other types: the transaction's start as a wall
        // clock in the session's time zone, as PostgreSQL's (which also take them at
        // transaction start). A precision argument is refused above (no rounding here).
        "current_date" | "localtimestamp" | "localtime" | "current_time" => {
            let ty = match name.as_str() {
                "current_date" => TypeId::Date,
                "localtimestamp" => TypeId::Timestamp,
                "localtime" => TypeId::Time,
                _ => TypeId::TimeTz,
            };
            super::cast::coerce(Datum::TimestampTz(s.now), ty)?
        }
        // timezone(zone, ts) is `ts AT TIME ZONE zone`.
        "timezone" if args.len() == 2 => crate::timezone::at_time_zone(arg(1), arg(0))?,
        "repeat" => {
            let (Some(t), Some(n)) = (format_text(&arg(0)), as_i64(&arg(1))) else {
                return Ok(Datum::Null);
            };
            crate::memory::check_repeat(t.len(), n)?;
            Datum::Text(t.repeat(n.max(0) as usize))
        }
        "abs" => match arg(0) {
            Datum::Int4(v) => Datum::Int4(
                v.checked_abs()
                    .ok_or_else(|| SqlError::new("22003", "integer out of range"))?,
            ),
            Datum::Int8(v) => Datum::Int8(
                v.checked_abs()
                    .ok_or_else(|| SqlError::new("22003", "bigint out of range"))?,
            ),
            Datum::Int2(v) => Datum::Int2(
                v.checked_abs()
                    .ok_or_else(|| SqlError::new("22003", "smallint out of range"))?,
            ),
            Datum::Float8(v) => Datum::Float8(v.abs()),
            Datum::Numeric(t) => Datum::Numeric(t.trim_start_matches('-').to_string()),
            // An untyped literal resolves to abs(double precision).
            Datum::Text(t) if matches!(function_args(f).first(), Some(ast::Expr::Value(_))) => {
                match crate::value::parse_text(walrus_engine::access::datum::TypeId::Float8, &t)? {
                    Datum::Float8(v) => Datum::Float8(v.abs()),
                    other => other,
                }
            }
            Datum::Null => Datum::Null,
            other => {
                return Err(SqlError::new(
                    "42883",
                    format!("function abs({}) does not exist", type_name(&other)),
                ))
            }
        },
        "length" | "octet_length" if matches!(arg(0), Datum::Bytea(_)) => match arg(0) {
            Datum::Bytea(b) => Datum::Int4(b.len() as i32),
            _ => Datum::Null,
        },
        "length" | "char_length" | "lower" | "upper"
            if !matches!(arg(0), Datum::Text(_) | Datum::Null) =>
        {
            // No implicit cast to text for a function argument in PostgreSQL.
            return Err(SqlError::new(
                "42883",
                format!("function {name}({}) does not exist", type_name(&arg(0))),
            ));
        }
        "length" | "char_length" => match format_text(&arg(0)) {
            Some(t) => Datum::Int4(t.chars().count() as i32),
            None => Datum::Null,
        },
        "round" | "trunc" | "ceil" | "ceiling" | "floor" => rounding(&name, &args)?,
        "left" | "right" | "strpos" | "lpad" | "rpad" | "initcap" | "split_part" | "ltrim"
        | "rtrim" | "btrim" | "reverse" => string_function(&name, &args)?,
        "sqrt" | "ln" | "exp" => match arg(0) {
            Datum::Null => Datum::Null,
            Datum::Float8(_) | Datum::Int2(_) | Datum::Int4(_) | Datum::Int8(_) => {
                let x = as_f64(&arg(0)).unwrap_or(0.0);
                float_function(&name, x)?
            }
            _ => {
                return Err(SqlError::unsupported(format!(
                    "function {name}({}) is not supported",
                    type_name(&arg(0))
                )))
            }
        },
        "power" | "pow" => match (arg(0), arg(1)) {
            (Datum::Null, _) | (_, Datum::Null) => Datum::Null,
            (a, b) if float_like(&a) && float_like(&b) => {
                let x = as_f64(&a).unwrap_or(0.0);
                let y = as_f64(&b).unwrap_or(0.0);
                if x == 0.0 && y < 0.0 {
                    return Err(SqlError::new(
                        "2201F",
                        "zero raised to a negative power is undefined",
                    ));
                }
                if x < 0.0 && y.fract() != 0.0 {
                    return Err(SqlError::new(
                        "2201F",
                        "a negative number raised to a non-integer power yields a complex result",
                    ));
                }
                let r = x.powf(y);
                if r.is_infinite() && x.is_finite() && y.is_finite() {
                    return Err(SqlError::new("22003", "value out of range: overflow"));
                }
                if r == 0.0 && x != 0.0 && x.is_finite() && y.is_finite() {
                    return Err(SqlError::new("22003", "value out of range: underflow"));
                }
                Datum::Float8(r)
            }
            (a, b) => {
                return Err(SqlError::unsupported(format!(
                    "function {name}({}, {}) is not supported",
                    type_name(&a),
                    type_name(&b)
                )))
            }
        },
        "chr" => match arg(0) {
            Datum::Null => Datum::Null,
            Datum::Int4(0) => return Err(SqlError::new("54000", "null character not permitted")),
            Datum::Int4(c) => match u32::try_from(c).ok().and_then(char::from_u32) {
                Some(ch) => Datum::Text(ch.to_string()),
                None => {
                    return Err(SqlError::new(
                        "54000",
                        format!("requested character too large for encoding: {c}"),
                    ))
                }
            },
            other => {
                return Err(SqlError::new(
                    "42883",
                    format!("function chr({}) does not exist", type_name(&other)),
                ))
            }
        },
        "octet_length" => match arg(0) {
            Datum::Null => Datum::Null,
            Datum::Text(t) => Datum::Int4(t.len() as i32),
            other => {
                return Err(SqlError::new(
                    "42883",
                    format!(
                        "function octet_length({}) does not exist",
                        type_name(&other)
                    ),
                ))
            }
        },
        // walrus's database locale is C, where case mapping touches ASCII letters only
        // (PostgreSQL: upper('é') = 'é' under C).
        "lower" => format_text(&arg(0))
            .map(|t| Datum::Text(t.to_ascii_lowercase()))
            .unwrap_or(Datum::Null),
        "upper" => format_text(&arg(0))
            .map(|t| Datum::Text(t.to_ascii_uppercase()))
            .unwrap_or(Datum::Null),
        "coalesce" => {
            super::unify_literals(&function_args(f))?;
            args.iter()
                .find(|d| !d.is_null())
                .cloned()
                .unwrap_or(Datum::Null)
        }
        "current_setting" => {
            let n = format_text(&arg(0)).unwrap_or_default();
            match (s.setting)(&n.to_ascii_lowercase()) {
                Some(v) => Datum::Text(v),
                None => {
                    return Err(SqlError::new(
                        "42704",
                        format!("unrecognized configuration parameter \"{n}\""),
                    ))
                }
            }
        }
        "version" => Datum::Text(crate::SERVER_VERSION_STRING.to_string()),
        // Transactions between `xid` and the next one to be assigned (PostgreSQL's
        // `age(xid)`, the usual `age(datfrozenxid)` monitoring). walrus's xids are 64-bit,
        // so the age is a bigint where PostgreSQL's is an integer.
        "age" if args.len() == 1 => {
            let next = (s.setting)(crate::settings::NEXT_XID_KEY)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(0);
            let age = |x: i64| {
                next.checked_sub(x)
                    .map(Datum::Int8)
                    .ok_or_else(|| SqlError::new("22003", "bigint out of range"))
            };
            match arg(0) {
                Datum::Null => Datum::Null,
                Datum::Int8(x) => age(x)?,
                Datum::Int4(x) => age(x as i64)?,
                other => {
                    return Err(SqlError::new(
                        "42883",
                        format!("function age({}) does not exist", type_name(&other)),
                    ))
                }
            }
        }
        "pg_current_wal_lsn" | "pg_current_wal_insert_lsn" => {
            match (s.setting)(crate::settings::WAL_LSN_KEY) {
                Some(l) => Datum::Text(l),
                None => Datum::Null,
            }
        }
        "pg_wal_lsn_diff" => match (parse_lsn(&arg(0)), parse_lsn(&arg(1))) {
            (Some(a), Some(b)) => Datum::Numeric((a as i128 - b as i128).to_string()),
            _ => Datum::Null,
        },
        "pg_sleep" => {
            let secs = match arg(0) {
                Datum::Null => 0.0,
                d => as_f64(&d)
                    .ok_or_else(|| SqlError::new("42883", "function pg_sleep() needs a number"))?,
            };
            let until = std::time::Instant::now()
                + std::time::Duration::from_secs_f64(secs.clamp(0.0, 86_400.0));
            while std::time::Instant::now() < until {
                if s.interrupt
                    .is_some_and(|f| f.load(std::sync::atomic::Ordering::Acquire))
                {
                    return Err(SqlError::new(
                        "57014",
                        "canceling statement due to user request",
                    ));
                }
                std::thread::sleep(
                    std::time::Duration::from_millis(10)
                        .min(until.saturating_duration_since(std::time::Instant::now())),
                );
            }
            Datum::Null
        }
        "pg_backend_pid" => Datum::Int4(
            (s.setting)(crate::settings::BACKEND_PID_KEY)
                .and_then(|p| p.parse().ok())
                .unwrap_or(0),
        ),
        "nullif" => match binary(&arg(0), &BinaryOperator::Eq, &arg(1))? {
            Datum::Bool(true) => Datum::Null,
            _ => arg(0),
        },
        "greatest" | "least" => {
            let mut best: Option<Datum> = None;
            for a in args.iter().filter(|a| !a.is_null()) {
                let better = match &best {
                    None => true,
                    Some(b) => {
                        let o = compare_values(a, b)?;
                        if name == "greatest" {
                            o == Ordering::Greater
                        } else {
                            o == Ordering::Less
                        }
                    }
                };
                if better {
                    best = Some(a.clone());
                }
            }
            best.unwrap_or(Datum::Null)
        }
        "concat" => Datum::Text(args.iter().filter_map(format_text).collect()),
        "replace" => match (
            format_text(&arg(0)),
            format_text(&arg(1)),
            format_text(&arg(2)),
        ) {
            // An empty search string matches nowhere in PostgreSQL (Rust's `replace`
            // would insert `c` between every character).
            (Some(a), Some(b), Some(_)) if b.is_empty() => Datum::Text(a),
            (Some(a), Some(b), Some(c)) => Datum::Text(a.replace(&b, &c)),
            _ => Datum::Null,
        },
        "quote_ident" => match format_text(&arg(0)) {
            Some(t) => Datum::Text(crate::names::quote_ident(&t)),
            None => Datum::Null,
        },
        "current_schemas" => Datum::Text(
            if matches!(arg(0), Datum::Bool(true)) {
                "{pg_catalog,public}"
            } else {
                "{public}"
            }
            .into(),
        ),
        "array_position" => {
            if arg(0).is_null() {
                return Ok(Datum::Null);
            }
            let want = format_text(&arg(1));
            super::array::array_items(&arg(0))?
                .iter()
                .position(|x| format_text(x) == want)
                .map(|i| Datum::Int4(i as i32 + 1))
                .unwrap_or(Datum::Null)
        }
        // array_to_string(array, sep [, null_text]): NULL items are skipped unless
        // null_text is given.
        "array_to_string" => {
            let (arr, Some(sep)) = (arg(0), format_text(&arg(1))) else {
                return Ok(Datum::Null);
            };
            if arr.is_null() {
                return Ok(Datum::Null);
            }
            let null_text = args.get(2).and_then(format_text);
            let items: Vec<String> = super::array::array_items(&arr)?
                .iter()
                .filter_map(|d| format_text(d).or_else(|| null_text.clone()))
                .collect();
            Datum::Text(items.join(&sep))
        }
        "array_length" | "array_upper" | "cardinality" => {
            if arg(0).is_null() {
                return Ok(Datum::Null);
            }
            if name != "cardinality" && !matches!(arg(1), Datum::Int4(1) | Datum::Int8(1)) {
                return Ok(Datum::Null);
            }
            match super::array::array_items(&arg(0))?.len() {
                0 if name != "cardinality" => Datum::Null,
                n => Datum::Int4(n as i32),
            }
        }
        "array_lower" => {
            let n = super::array::array_items(&arg(0))?.len();
            if arg(0).is_null() || n == 0 || !matches!(arg(1), Datum::Int4(1) | Datum::Int8(1)) {
                Datum::Null
            } else {
                Datum::Int4(1)
            }
        }
        "pg_encoding_to_char" => Datum::Text("UTF8".into()),
        "pg_table_is_visible" | "pg_type_is_visible" => Datum::Bool(!arg(0).is_null()),
        "obj_description" | "col_description" | "shobj_description" | "pg_get_partkeydef" => {
            Datum::Null
        }
        // pg_attrdef.adbin holds the default's SQL text already (catalog_views).
        "pg_get_expr" => match arg(0) {
            Datum::Text(e) => Datum::Text(e),
            _ => Datum::Null,
        },
        "has_table_privilege" | "has_schema_privilege" | "has_database_privilege" => {
            Datum::Bool(true)
        }
        "pg_is_in_recovery" => Datum::Bool(false),
        "pg_postmaster_start_time" => Datum::TimestampTz(s.now),
        "pg_size_pretty" => match as_i64(&arg(0)).or_else(|| as_f64(&arg(0)).map(|f| f as i64)) {
            Some(b) => Datum::Text(pretty_size(b)),
            None => Datum::Null,
        },
        "current_user" | "session_user" | "user" | "current_role" => {
            Datum::Text((s.setting)("session_authorization").unwrap_or_else(|| "walrus".into()))
        }
        "current_database" => Datum::Text(
            (s.setting)(crate::settings::DATABASE_KEY).unwrap_or_else(|| "postgres".into()),
        ),
        "current_schema" => Datum::Text("public".into()),
        "current_catalog" => Datum::Text(
            (s.setting)(crate::settings::DATABASE_KEY).unwrap_or_else(|| "postgres".into()),
        ),
        other if POSTGRES_ONLY_FUNCTIONS.contains(&other) => {
            return Err(SqlError::unsupported(format!(
                "function {other}() is not supported"
            )))
        }
        other => {
            // PostgreSQL names the argument types it resolved; these are the values'
            // (a string literal reads `text` here, `unknown` there).
            let types: Vec<&str> = args.iter().map(type_name).collect();
            return Err(SqlError::new(
                "42883",
                format!("function {other}({}) does not exist", types.join(", ")),
            )
            .with_hint(
                "No function matches the given name and argument types. \
                 You might need to add explicit type casts.",
            ));
        }
    })
}

/// PostgreSQL built-in functions walrus does not implement: refused with 0A000 (a known
/// gap) rather than 42883, which would claim PostgreSQL has no such function either.
const POSTGRES_ONLY_FUNCTIONS: &[&str] = &[
    "cbrt",
    "log",
    "log10",
    "sign",
    "mod",
    "div",
    "pi",
    "random",
    "gcd",
    "lcm",
    "degrees",
    "radians",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "width_bucket",
    "scale",
    "min_scale",
    "trim_scale",
    "stddev",
    "stddev_samp",
    "stddev_pop",
    "variance",
    "var_samp",
    "var_pop",
    "corr",
    "covar_pop",
    "covar_samp",
    "regr_slope",
    "regr_intercept",
    "every",
    "bit_and",
    "bit_or",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "bit_length",
    "md5",
    "sha256",
    "ascii",
    "translate",
    "regexp_replace",
    "regexp_match",
    "regexp_matches",
    "regexp_split_to_array",
    "regexp_split_to_table",
    "to_char",
    "to_number",
    "to_date",
    "to_timestamp",
    "date_trunc",
    "date_part",
    "make_date",
    "make_timestamp",
    "justify_days",
    "pg_typeof",
    "format",
    "concat_ws",
    "quote_literal",
    "quote_nullable",
    "starts_with",
    "overlay",
    "to_hex",
    "encode",
    "decode",
    "array_length",
    "cardinality",
    "array_to_string",
    "string_to_array",
    "array_append",
    "array_cat",
    "array_position",
    "json_build_object",
    "jsonb_build_object",
    "json_agg",
    "jsonb_agg",
    "to_json",
    "to_jsonb",
    "row_number",
    "rank",
    "dense_rank",
    "percent_rank",
    "cume_dist",
    "lag",
    "lead",
    "first_value",
    "last_value",
    "nth_value",
    "ntile",
    "num_nulls",
    "num_nonnulls",
    "gen_random_uuid",
    "clock_timestamp",
    "timeofday",
    "isfinite",
    "xmlagg",
];

/// `left`, `right`, `strpos`, `lpad`, `rpad`, `initcap`, `split_part` over text
/// (characters, not bytes), with PostgreSQL's edge cases (negative counts, empty fill).
fn string_function(name: &str, args: &[Datum]) -> SqlResult<Datum> {
    let want = match name {
        "initcap" | "reverse" => 1,
        "ltrim" | "rtrim" | "btrim" => args.len().clamp(1, 2),
        "lpad" | "rpad" => args.len().clamp(2, 3),
        "split_part" => 3,
        _ => 2,
    };
    if args.len() != want {
        return Err(SqlError::new(
            "42883",
            format!("function {name}() does not exist"),
        ));
    }
    if args.iter().any(|a| a.is_null()) {
        return Ok(Datum::Null);
    }
    let text = |i: usize| -> SqlResult<Vec<char>> {
        match &args[i] {
            Datum::Text(t) => Ok(t.chars().collect()),
            other => Err(SqlError::new(
                "42883",
                format!("function {name}({}) does not exist", type_name(other)),
            )),
        }
    };
    let int = |i: usize| -> SqlResult<i64> {
        match &args[i] {
            Datum::Int2(_) | Datum::Int4(_) | Datum::Int8(_) => Ok(as_i64(&args[i]).unwrap_or(0)),
            Datum::Text(t) => {
                match crate::value::parse_text(walrus_engine::access::datum::TypeId::Int4, t)? {
                    Datum::Int4(v) => Ok(v as i64),
                    _ => Ok(0),
                }
            }
            other => Err(SqlError::new(
                "42883",
                format!("function {name}(text, {}) does not exist", type_name(other)),
            )),
        }
    };
    let s = text(0)?;
    let out: String = match name {
        "left" | "right" => {
            let n = int(1)?;
            let len = s.len() as i64;
            let keep = if n >= 0 { n.min(len) } else { (len + n).max(0) } as usize;
            if name == "left" {
                s[..keep].iter().collect()
            } else {
                s[s.len() - keep..].iter().collect()
            }
        }
        "strpos" => {
            let sub = text(1)?;
            let pos = if sub.is_empty() {
                1
            } else {
                s.windows(sub.len())
                    .position(|w| w == sub.as_slice())
                    .map(|p| p as i32 + 1)
                    .unwrap_or(0)
            };
            return Ok(Datum::Int4(pos));
        }
        "lpad" | "rpad" => {
            let len = int(1)?.max(0) as usize;
            let fill = if args.len() == 3 { text(2)? } else { vec![' '] };
            // Refused from the requested length, before any padding is built.
            crate::memory::check_pad(if fill.is_empty() {
                s.len().min(len)
            } else {
                len
            })?;
            if s.len() >= len || fill.is_empty() {
                s.iter().take(len).collect()
            } else {
                let pad: String = fill.iter().cycle().take(len - s.len()).collect();
                let body: String = s.iter().collect();
                if name == "lpad" {
                    pad + &body
                } else {
                    body + &pad
                }
            }
        }
        "initcap" => {
            // C locale: only ASCII letters and digits make words, only ASCII changes case.
            let mut word_start = true;
            s.iter()
                .map(|c| {
                    let out = if word_start {
                        c.to_ascii_uppercase()
                    } else {
                        c.to_ascii_lowercase()
                    };
                    word_start = !c.is_ascii_alphanumeric();
                    out
                })
                .collect()
        }
        "reverse" => s.iter().rev().collect(),
        "ltrim" | "rtrim" | "btrim" => {
            let set = if args.len() == 2 { text(1)? } else { vec![' '] };
            let body: String = s.iter().collect();
            let t = match name {
                "ltrim" => body.trim_start_matches(set.as_slice()),
                "rtrim" => body.trim_end_matches(set.as_slice()),
                _ => body.trim_matches(set.as_slice()),
            };
            t.to_string()
        }
        _ => {
            // split_part(text, delimiter, n): n counts from the end when negative.
            let delim: String = text(1)?.into_iter().collect();
            let n = int(2)?;
            if n == 0 {
                return Err(SqlError::new("22023", "field position must not be zero"));
            }
            let body: String = s.iter().collect();
            let parts: Vec<&str> = if delim.is_empty() {
                vec![body.as_str()]
            } else {
                body.split(delim.as_str()).collect()
            };
            let idx = if n > 0 {
                Some((n - 1) as usize)
            } else {
                parts.len().checked_sub(n.unsigned_abs() as usize)
            };
            idx.and_then(|i| parts.get(i).copied())
                .unwrap_or("")
                .to_string()
        }
    };
    Ok(Datum::Text(out))
}

/// `round`, `trunc` (half away from zero / toward zero, with an optional scale),
/// `ceil`, `floor` over numeric (exact) and float8 (`round` is rint: half to even).
pub(crate) fn rounding(name: &str, args: &[Datum]) -> SqlResult<Datum> {
    use bigdecimal::RoundingMode;
    let scale = match args.get(1) {
        None => 0,
        Some(Datum::Int4(s)) if (0..=1000).contains(s) && matches!(name, "round" | "trunc") => {
            *s as i64
        }
        Some(Datum::Null) => return Ok(Datum::Null),
        Some(other) => {
            return Err(SqlError::unsupported(format!(
                "{name}() with scale argument {} is not supported",
                crate::value::format_text(other).unwrap_or_default()
            )))
        }
    };
    let Some(v) = args.first() else {
        return Err(SqlError::new(
            "42883",
            format!("function {name}() does not exist"),
        ));
    };
    Ok(match v {
        Datum::Null => Datum::Null,
        Datum::Int2(_) | Datum::Int4(_) | Datum::Int8(_) if args.len() == 1 => {
            Datum::Float8(as_f64(v).unwrap_or(0.0))
        }
        Datum::Float8(f) if args.len() == 1 => Datum::Float8(match name {
            "round" => f.round_ties_even(),
            "trunc" => f.trunc(),
            "ceil" | "ceiling" => f.ceil(),
            _ => f.floor(),
        }),
        // An integer argument resolves to the numeric (or float8) variant in PostgreSQL;
        // numeric gives the same digits here.
        Datum::Numeric(_) | Datum::Int2(_) | Datum::Int4(_) | Datum::Int8(_) => {
            let text = crate::value::format_text(v).unwrap_or_default();
            let x = numeric::parse(&text)?;
            let mode = match name {
                "round" => RoundingMode::HalfUp,
                "trunc" => RoundingMode::Down,
                "ceil" | "ceiling" => RoundingMode::Ceiling,
                _ => RoundingMode::Floor,
            };
            Datum::Numeric(numeric::format(&x.with_scale_round(scale, mode)))
        }
        other => {
            return Err(SqlError::unsupported(format!(
                "function {name}({}) is not supported",
                type_name(other)
            )))
        }
    })
}

/// Arguments PostgreSQL resolves to the float8 variant of a math function.
fn float_like(d: &Datum) -> bool {
    matches!(
        d,
        Datum::Float8(_) | Datum::Int2(_) | Datum::Int4(_) | Datum::Int8(_)
    )
}

/// float8 `sqrt`, `ln`, `exp` with PostgreSQL's errors.
fn float_function(name: &str, x: f64) -> SqlResult<Datum> {
    Ok(Datum::Float8(match name {
        "sqrt" if x < 0.0 => {
            return Err(SqlError::new(
                "2201F",
                "cannot take square root of a negative number",
            ))
        }
        "sqrt" => x.sqrt(),
        "ln" if x == 0.0 => return Err(SqlError::new("2201E", "cannot take logarithm of zero")),
        "ln" if x < 0.0 => {
            return Err(SqlError::new(
                "2201E",
                "cannot take logarithm of a negative number",
            ))
        }
        "ln" => x.ln(),
        _ => {
            let r = x.exp();
            if r.is_infinite() && x.is_finite() {
                return Err(SqlError::new("22003", "value out of range: overflow"));
            }
            r
        }
    }))
}

/// `pg_size_pretty`: bytes, kB, MB, GB, TB with PostgreSQL's rounding (half up, 10x rule).
pub(crate) fn pretty_size(bytes: i64) -> String {
    let mut v = bytes;
    for unit in ["bytes", "kB", "MB", "GB", "TB"] {
        if v.abs() < 10 * 1024 || unit == "TB" {
            return format!("{v} {unit}");
        }
        v = (v + v.signum() * 512) / 1024;
    }
    unreachable!("the loop returns at TB")
}
