//! Expression evaluation over one row: literals, `$n` parameters, column references,
//! arithmetic, comparison, boolean logic, casts and the functions pgbench and psql use.

use std::cmp::Ordering;

use sqlparser::ast::{
    BinaryOperator, CastKind, DataType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
    UnaryOperator, Value,
};
use walrus_engine::access::datum::{compare_datums, Datum, TypeId};
use walrus_engine::catalog::ColumnDef;

use crate::error::{SqlError, SqlResult};
use crate::rel::{Frame, Rel};
use crate::value::{format_text, parse_text};

/// What an expression can see.
pub struct Scope<'a> {
    pub columns: &'a [ColumnDef],
    pub row: Option<&'a [Datum]>,
    pub params: &'a [Datum],
    /// Transaction start time (now() / CURRENT_TIMESTAMP), PostgreSQL microseconds.
    pub now: i64,
    pub setting: &'a dyn Fn(&str) -> Option<String>,
    /// The session's cancel flag (pg_sleep and long evaluations poll it).
    pub interrupt: Option<&'a std::sync::atomic::AtomicBool>,
    /// The row of a multi-table query (qualified names, outer rows of correlated
    /// subqueries). When set, column references resolve here instead of `columns`.
    pub frame: Option<&'a Frame<'a>>,
    /// Subqueries, aggregates over the current group, and catalog-aware functions.
    pub hooks: Option<&'a dyn Hooks>,
}

/// What the query executor lends to expression evaluation.
pub trait Hooks {
    /// Runs a subquery whose enclosing row is `outer`.
    fn subquery(&self, q: &sqlparser::ast::Query, outer: Option<&Frame<'_>>) -> SqlResult<Rel>;
    /// The value of aggregate call `f` over the current group (`None`: not grouped).
    fn aggregate(
        &self,
        f: &sqlparser::ast::Function,
        outer: Option<&Frame<'_>>,
    ) -> Option<SqlResult<Datum>>;
    /// Functions and casts that need the catalog (`pg_get_indexdef`, `::regclass`, ...).
    fn function(&self, name: &str, args: &[Datum]) -> Option<SqlResult<Datum>>;
}

/// Aggregate function names (evaluated over a group, never per row).
pub fn is_aggregate_name(name: &str) -> bool {
    matches!(
        name,
        "count"
            | "sum"
            | "min"
            | "max"
            | "avg"
            | "string_agg"
            | "array_agg"
            | "bool_and"
            | "bool_or"
            | "every"
    )
}

pub fn type_from_sql(dt: &DataType) -> SqlResult<TypeId> {
    use DataType as D;
    Ok(match dt {
        D::Int(_) | D::Integer(_) | D::Int4(_) => TypeId::Int4,
        D::SmallInt(_) | D::Int2(_) => TypeId::Int2,
        D::BigInt(_) | D::Int8(_) => TypeId::Int8,
        D::Boolean | D::Bool => TypeId::Bool,
        D::Double(_) | D::DoublePrecision | D::Float8 | D::Real | D::Float4 | D::Float(_) => {
            TypeId::Float8
        }
        D::Numeric(_) | D::Decimal(_) | D::Dec(_) => TypeId::Numeric,
        D::Text
        | D::Varchar(_)
        | D::Char(_)
        | D::Character(_)
        | D::CharVarying(_)
        | D::CharacterVarying(_)
        | D::String(_) => TypeId::Text,
        D::Timestamp(_, tz) => match tz {
            sqlparser::ast::TimezoneInfo::WithTimeZone | sqlparser::ast::TimezoneInfo::Tz => {
                TypeId::TimestampTz
            }
            _ => TypeId::Timestamp,
        },
        D::Date => TypeId::Date,
        D::Custom(name, _) => {
            let n = name
                .0
                .last()
                .map(|p| p.to_string().to_ascii_lowercase())
                .unwrap_or_default();
            match n.trim_matches('"') {
                "text" | "name" | "varchar" | "bpchar" | "char" => TypeId::Text,
                "int2" => TypeId::Int2,
                "int4" | "int" => TypeId::Int4,
                "int8" | "oid" => TypeId::Int8,
                "float8" => TypeId::Float8,
                "numeric" => TypeId::Numeric,
                "bool" => TypeId::Bool,
                "timestamptz" => TypeId::TimestampTz,
                "timestamp" => TypeId::Timestamp,
                "date" => TypeId::Date,
                other => {
                    return Err(SqlError::new(
                        "42704",
                        format!("type \"{other}\" is not supported"),
                    ))
                }
            }
        }
        other => {
            return Err(SqlError::new(
                "42704",
                format!("type \"{other}\" is not supported"),
            ))
        }
    })
}

fn as_i64(d: &Datum) -> Option<i64> {
    match d {
        Datum::Int2(v) => Some(*v as i64),
        Datum::Int4(v) => Some(*v as i64),
        Datum::Int8(v) => Some(*v),
        _ => None,
    }
}

fn as_f64(d: &Datum) -> Option<f64> {
    match d {
        Datum::Float8(v) => Some(*v),
        Datum::Numeric(s) => s.parse().ok(),
        other => as_i64(other).map(|v| v as f64),
    }
}

/// Converts a value to `ty` (assignment and explicit casts).
pub fn coerce(d: Datum, ty: TypeId) -> SqlResult<Datum> {
    if d.is_null() || d.type_id() == Some(ty) {
        return Ok(d);
    }
    let range = || SqlError::new("22003", format!("{} out of range", ty.name()));
    Ok(match (ty, &d) {
        (TypeId::Int2, _) if as_i64(&d).is_some() => {
            Datum::Int2(i16::try_from(as_i64(&d).unwrap_or(0)).map_err(|_| range())?)
        }
        (TypeId::Int4, _) if as_i64(&d).is_some() => {
            Datum::Int4(i32::try_from(as_i64(&d).unwrap_or(0)).map_err(|_| range())?)
        }
        (TypeId::Int8, _) if as_i64(&d).is_some() => Datum::Int8(as_i64(&d).unwrap_or(0)),
        (TypeId::Int2 | TypeId::Int4 | TypeId::Int8, Datum::Float8(f)) => {
            coerce(Datum::Int8(f.round() as i64), ty)?
        }
        (TypeId::Float8, _) if as_f64(&d).is_some() => Datum::Float8(as_f64(&d).unwrap_or(0.0)),
        (TypeId::Numeric, _) if as_i64(&d).is_some() || matches!(d, Datum::Float8(_)) => {
            Datum::Numeric(format_text(&d).unwrap_or_default())
        }
        (TypeId::Text, _) => Datum::Text(format_text(&d).unwrap_or_default()),
        (TypeId::TimestampTz, Datum::Timestamp(v)) => Datum::TimestampTz(*v),
        (TypeId::Timestamp, Datum::TimestampTz(v)) => Datum::Timestamp(*v),
        (_, Datum::Text(s)) => parse_text(ty, s)?,
        _ => {
            return Err(SqlError::new(
                "42846",
                format!(
                    "cannot cast type {} to {}",
                    d.type_id().map(|t| t.name()).unwrap_or("unknown"),
                    ty.name()
                ),
            ))
        }
    })
}

fn literal(v: &Value) -> SqlResult<Datum> {
    Ok(match v {
        Value::Number(n, _) => {
            if let Ok(i) = n.parse::<i32>() {
                Datum::Int4(i)
            } else if let Ok(i) = n.parse::<i64>() {
                Datum::Int8(i)
            } else {
                Datum::Numeric(n.clone())
            }
        }
        Value::SingleQuotedString(s)
        | Value::EscapedStringLiteral(s)
        | Value::DollarQuotedString(sqlparser::ast::DollarQuotedString { value: s, .. }) => {
            Datum::Text(s.clone())
        }
        Value::Boolean(b) => Datum::Bool(*b),
        Value::Null => Datum::Null,
        other => {
            return Err(SqlError::unsupported(format!(
                "literal {other} is not supported"
            )))
        }
    })
}

pub fn eval(e: &Expr, s: &Scope<'_>) -> SqlResult<Datum> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Placeholder(p) => {
                let n: usize = p
                    .trim_start_matches('$')
                    .parse()
                    .map_err(|_| SqlError::syntax(format!("bad parameter {p}")))?;
                s.params
                    .get(n.wrapping_sub(1))
                    .cloned()
                    .ok_or_else(|| SqlError::new("08P01", format!("there is no parameter ${n}")))
            }
            other => literal(other),
        },
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) if s.frame.is_some() => {
            let (qual, name) = crate::rel::col_ref(e).unwrap_or_default();
            match s
                .frame
                .map(|f| f.lookup(qual.as_deref(), &name))
                .transpose()?
            {
                Some(Some(d)) => Ok(d),
                _ => Err(crate::rel::no_column(qual.as_deref(), &name)),
            }
        }
        Expr::Identifier(id) => column(s, &id.value),
        Expr::CompoundIdentifier(ids) => {
            column(s, &ids.last().map(|i| i.value.clone()).unwrap_or_default())
        }
        Expr::Case {
            operand,
            conditions,
            else_result,
            ..
        } => {
            let subject = operand.as_ref().map(|o| eval(o, s)).transpose()?;
            for w in conditions {
                let hit = match &subject {
                    Some(v) => binary(v, &BinaryOperator::Eq, &eval(&w.condition, s)?)?,
                    None => eval(&w.condition, s)?,
                };
                if matches!(hit, Datum::Bool(true)) {
                    return eval(&w.result, s);
                }
            }
            else_result
                .as_ref()
                .map(|e| eval(e, s))
                .unwrap_or(Ok(Datum::Null))
        }
        Expr::Subquery(q) => {
            let rel = hooks(s)?.subquery(q, s.frame)?;
            if rel.rows.len() > 1 {
                return Err(SqlError::new(
                    "21000",
                    "more than one row returned by a subquery used as an expression",
                ));
            }
            Ok(rel
                .rows
                .into_iter()
                .next()
                .and_then(|r| r.into_iter().next())
                .unwrap_or(Datum::Null))
        }
        Expr::Exists { subquery, negated } => {
            let rel = hooks(s)?.subquery(subquery, s.frame)?;
            Ok(Datum::Bool(rel.rows.is_empty() == *negated))
        }
        Expr::InSubquery {
            expr,
            subquery,
            negated,
        } => {
            let v = eval(expr, s)?;
            let rel = hooks(s)?.subquery(subquery, s.frame)?;
            let items: Vec<Datum> = rel
                .rows
                .into_iter()
                .map(|r| r.into_iter().next().unwrap_or(Datum::Null))
                .collect();
            in_values(&v, &items, *negated)
        }
        Expr::Collate { expr, .. } => eval(expr, s),
        Expr::IsTrue(x) => Ok(Datum::Bool(matches!(eval(x, s)?, Datum::Bool(true)))),
        Expr::IsNotTrue(x) => Ok(Datum::Bool(!matches!(eval(x, s)?, Datum::Bool(true)))),
        Expr::IsFalse(x) => Ok(Datum::Bool(matches!(eval(x, s)?, Datum::Bool(false)))),
        Expr::IsNotFalse(x) => Ok(Datum::Bool(!matches!(eval(x, s)?, Datum::Bool(false)))),
        Expr::IsDistinctFrom(a, b) | Expr::IsNotDistinctFrom(a, b) => {
            let (l, r) = (eval(a, s)?, eval(b, s)?);
            let same = match (l.is_null(), r.is_null()) {
                (true, true) => true,
                (false, false) => compare_values(&l, &r)? == Ordering::Equal,
                _ => false,
            };
            Ok(Datum::Bool(
                same == matches!(e, Expr::IsNotDistinctFrom(..)),
            ))
        }
        Expr::Like {
            negated,
            expr,
            pattern,
            escape_char,
            any: false,
        }
        | Expr::ILike {
            negated,
            expr,
            pattern,
            escape_char,
            any: false,
        } => {
            let (v, p) = (eval(expr, s)?, eval(pattern, s)?);
            let esc = match escape_char {
                Some(e) => format_text(&eval(e, s)?).and_then(|t| t.chars().next()),
                None => Some('\\'),
            };
            match (format_text(&v), format_text(&p)) {
                (Some(v), Some(p)) => {
                    let fold = matches!(e, Expr::ILike { .. });
                    let m = if fold {
                        like_match(&v.to_lowercase(), &p.to_lowercase(), esc)
                    } else {
                        like_match(&v, &p, esc)
                    };
                    Ok(Datum::Bool(m != *negated))
                }
                _ => Ok(Datum::Null),
            }
        }
        Expr::AnyOp {
            left,
            compare_op,
            right,
            ..
        }
        | Expr::AllOp {
            left,
            compare_op,
            right,
        } => {
            let v = eval(left, s)?;
            let items = match right.as_ref() {
                Expr::Subquery(q) => hooks(s)?
                    .subquery(q, s.frame)?
                    .rows
                    .into_iter()
                    .map(|r| r.into_iter().next().unwrap_or(Datum::Null))
                    .collect(),
                other => match eval(other, s)? {
                    Datum::Null => return Ok(Datum::Null),
                    d => parse_array_text(&format_text(&d).unwrap_or_default())?
                        .into_iter()
                        .map(|t| t.map(Datum::Text).unwrap_or(Datum::Null))
                        .collect::<Vec<_>>(),
                },
            };
            let all = matches!(e, Expr::AllOp { .. });
            let mut saw_null = false;
            for it in &items {
                match binary(&v, compare_op, it)? {
                    Datum::Bool(b) if b != all => return Ok(Datum::Bool(!all)),
                    Datum::Null => saw_null = true,
                    _ => {}
                }
            }
            Ok(if saw_null {
                Datum::Null
            } else {
                Datum::Bool(all)
            })
        }
        Expr::Array(a) => {
            let items = a
                .elem
                .iter()
                .map(|x| eval(x, s))
                .collect::<SqlResult<Vec<_>>>()?;
            Ok(Datum::Text(format_array_text(&items)))
        }
        Expr::Nested(inner) => eval(inner, s),
        Expr::UnaryOp { op, expr } => {
            let v = eval(expr, s)?;
            match op {
                UnaryOperator::Minus => arith(&Datum::Int4(0), &v, &BinaryOperator::Minus),
                UnaryOperator::Plus => Ok(v),
                UnaryOperator::Not => Ok(match v {
                    Datum::Bool(b) => Datum::Bool(!b),
                    Datum::Null => Datum::Null,
                    _ => {
                        return Err(SqlError::new(
                            "42804",
                            "argument of NOT must be type boolean",
                        ))
                    }
                }),
                other => Err(SqlError::unsupported(format!(
                    "operator {other} is not supported"
                ))),
            }
        }
        Expr::BinaryOp { left, op, right } => {
            if matches!(op, BinaryOperator::And | BinaryOperator::Or) {
                return logic(eval(left, s)?, op, || eval(right, s));
            }
            let (l, r) = (eval(left, s)?, eval(right, s)?);
            match op {
                BinaryOperator::PGRegexMatch
                | BinaryOperator::PGRegexIMatch
                | BinaryOperator::PGRegexNotMatch
                | BinaryOperator::PGRegexNotIMatch => regex_op(&l, op, &r),
                BinaryOperator::PGCustomBinaryOperator(parts) => {
                    let op = match parts.last().map(String::as_str) {
                        Some("~") => BinaryOperator::PGRegexMatch,
                        Some("~*") => BinaryOperator::PGRegexIMatch,
                        Some("!~") => BinaryOperator::PGRegexNotMatch,
                        Some("!~*") => BinaryOperator::PGRegexNotIMatch,
                        Some("=") => BinaryOperator::Eq,
                        Some("<>") => BinaryOperator::NotEq,
                        Some("<") => BinaryOperator::Lt,
                        Some(">") => BinaryOperator::Gt,
                        Some("<=") => BinaryOperator::LtEq,
                        Some(">=") => BinaryOperator::GtEq,
                        Some("||") => BinaryOperator::StringConcat,
                        _ => {
                            return Err(SqlError::new(
                                "42883",
                                format!("operator does not exist: {}", parts.join(".")),
                            ))
                        }
                    };
                    match op {
                        BinaryOperator::PGRegexMatch
                        | BinaryOperator::PGRegexIMatch
                        | BinaryOperator::PGRegexNotMatch
                        | BinaryOperator::PGRegexNotIMatch => regex_op(&l, &op, &r),
                        _ => binary(&l, &op, &r),
                    }
                }
                _ => binary(&l, op, &r),
            }
        }
        Expr::IsNull(x) => Ok(Datum::Bool(eval(x, s)?.is_null())),
        Expr::IsNotNull(x) => Ok(Datum::Bool(!eval(x, s)?.is_null())),
        Expr::Between {
            expr,
            negated,
            low,
            high,
        } => {
            let v = eval(expr, s)?;
            let ge = binary(&v, &BinaryOperator::GtEq, &eval(low, s)?)?;
            let le = binary(&v, &BinaryOperator::LtEq, &eval(high, s)?)?;
            let both = logic(ge, &BinaryOperator::And, || Ok(le))?;
            Ok(if *negated { eval_not(both) } else { both })
        }
        Expr::InList {
            expr,
            list,
            negated,
        } => {
            let v = eval(expr, s)?;
            let items = list
                .iter()
                .map(|i| eval(i, s))
                .collect::<SqlResult<Vec<_>>>()?;
            in_values(&v, &items, *negated)
        }
        Expr::Cast {
            kind: CastKind::Cast | CastKind::DoubleColon,
            expr,
            data_type,
            ..
        } => {
            let v = eval(expr, s)?;
            let custom = match data_type {
                DataType::Regclass => Some("regclass".to_string()),
                DataType::Custom(name, _) => name.0.last().map(|p| {
                    p.to_string()
                        .to_ascii_lowercase()
                        .trim_matches('"')
                        .to_string()
                }),
                _ => None,
            };
            if let Some(n) = custom.as_deref() {
                match n {
                    "regclass" | "regtype" | "regnamespace" | "regproc" => {
                        if v.is_null() {
                            return Ok(Datum::Null);
                        }
                        return hooks(s)?
                            .function(&format!("::{n}"), &[v])
                            .unwrap_or_else(|| Err(SqlError::unsupported(format!("cast to {n}"))));
                    }
                    "oid" | "xid" | "regrole" => return coerce(v, TypeId::Int8),
                    "name" | "char" | "bpchar" => return coerce(v, TypeId::Text),
                    _ => {}
                }
            }
            coerce(v, type_from_sql(data_type)?)
        }
        Expr::TypedString(ts) => {
            let ty = type_from_sql(&ts.data_type)?;
            let text = match &ts.value.value {
                Value::SingleQuotedString(v) => v.clone(),
                other => other.to_string(),
            };
            parse_text(ty, &text)
        }
        Expr::Function(f) => function(f, s),
        other => Err(SqlError::unsupported(format!(
            "expression {other} is not supported"
        ))),
    }
}

fn eval_not(d: Datum) -> Datum {
    match d {
        Datum::Bool(b) => Datum::Bool(!b),
        other => other,
    }
}

fn column(s: &Scope<'_>, name: &str) -> SqlResult<Datum> {
    let lname = name.to_ascii_lowercase();
    let i = s
        .columns
        .iter()
        .position(|c| c.name == lname)
        .ok_or_else(|| SqlError::new("42703", format!("column \"{name}\" does not exist")))?;
    let row = s
        .row
        .ok_or_else(|| SqlError::new("42703", format!("column \"{name}\" does not exist")))?;
    Ok(row.get(i).cloned().unwrap_or(Datum::Null))
}

fn logic(l: Datum, op: &BinaryOperator, r: impl FnOnce() -> SqlResult<Datum>) -> SqlResult<Datum> {
    let to_b = |d: &Datum| match d {
        Datum::Bool(b) => Ok(Some(*b)),
        Datum::Null => Ok(None),
        _ => Err(SqlError::new(
            "42804",
            "argument of AND/OR must be type boolean",
        )),
    };
    let lb = to_b(&l)?;
    let and = matches!(op, BinaryOperator::And);
    if lb == Some(!and) {
        return Ok(Datum::Bool(!and)); // short-circuit: false AND x, true OR x
    }
    let rb = to_b(&r()?)?;
    Ok(match (lb, rb) {
        (Some(a), Some(b)) => Datum::Bool(if and { a && b } else { a || b }),
        (_, Some(b)) if b != and => Datum::Bool(!and),
        _ => Datum::Null,
    })
}

pub fn binary(l: &Datum, op: &BinaryOperator, r: &Datum) -> SqlResult<Datum> {
    use BinaryOperator as B;
    match op {
        B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq => {
            if l.is_null() || r.is_null() {
                return Ok(Datum::Null);
            }
            let ord = compare_values(l, r)?;
            Ok(Datum::Bool(match op {
                B::Eq => ord == Ordering::Equal,
                B::NotEq => ord != Ordering::Equal,
                B::Lt => ord == Ordering::Less,
                B::LtEq => ord != Ordering::Greater,
                B::Gt => ord == Ordering::Greater,
                _ => ord != Ordering::Less,
            }))
        }
        B::StringConcat => {
            if l.is_null() || r.is_null() {
                return Ok(Datum::Null);
            }
            Ok(Datum::Text(format!(
                "{}{}",
                format_text(l).unwrap_or_default(),
                format_text(r).unwrap_or_default()
            )))
        }
        B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo => arith(l, r, op),
        other => Err(SqlError::unsupported(format!(
            "operator {other} is not supported"
        ))),
    }
}

/// Compares two non-null values, converting a text literal to the other side's type.
pub fn compare_values(l: &Datum, r: &Datum) -> SqlResult<Ordering> {
    match (l, r) {
        (Datum::Text(t), other) if !matches!(other, Datum::Text(_)) => {
            let ty = other.type_id().unwrap_or(TypeId::Text);
            Ok(compare_datums(&parse_text(ty, t)?, other))
        }
        (other, Datum::Text(t)) if !matches!(other, Datum::Text(_)) => {
            let ty = other.type_id().unwrap_or(TypeId::Text);
            Ok(compare_datums(other, &parse_text(ty, t)?))
        }
        (a, b)
            if as_f64(a).is_some()
                && as_f64(b).is_some()
                && (as_i64(a).is_none() || as_i64(b).is_none()) =>
        {
            Ok(as_f64(a)
                .unwrap_or(0.0)
                .partial_cmp(&as_f64(b).unwrap_or(0.0))
                .unwrap_or(Ordering::Equal))
        }
        (a, b) => Ok(compare_datums(a, b)),
    }
}

fn arith(l: &Datum, r: &Datum, op: &BinaryOperator) -> SqlResult<Datum> {
    if l.is_null() || r.is_null() {
        return Ok(Datum::Null);
    }
    // An untyped parameter or literal ('5', $1 sent as text) takes the other side's type.
    match (l, r) {
        (Datum::Text(t), other) if other.type_id().is_some_and(|ty| ty != TypeId::Text) => {
            let ty = other.type_id().unwrap_or(TypeId::Text);
            return arith(&parse_text(ty, t)?, r, op);
        }
        (other, Datum::Text(t)) if other.type_id().is_some_and(|ty| ty != TypeId::Text) => {
            let ty = other.type_id().unwrap_or(TypeId::Text);
            return arith(l, &parse_text(ty, t)?, op);
        }
        _ => {}
    }
    let overflow = || SqlError::new("22003", "integer out of range");
    if let (Some(a), Some(b)) = (as_i64(l), as_i64(r)) {
        let v = match op {
            BinaryOperator::Plus => a.checked_add(b),
            BinaryOperator::Minus => a.checked_sub(b),
            BinaryOperator::Multiply => a.checked_mul(b),
            BinaryOperator::Divide | BinaryOperator::Modulo => {
                if b == 0 {
                    return Err(SqlError::new("22012", "division by zero"));
                }
                if matches!(op, BinaryOperator::Divide) {
                    a.checked_div(b)
                } else {
                    a.checked_rem(b)
                }
            }
            _ => None,
        }
        .ok_or_else(overflow)?;
        // Result type: the wider of the two operand types (PostgreSQL's int rules).
        let wide = matches!(l, Datum::Int8(_)) || matches!(r, Datum::Int8(_));
        return Ok(if wide {
            Datum::Int8(v)
        } else {
            Datum::Int4(i32::try_from(v).map_err(|_| overflow())?)
        });
    }
    match (as_f64(l), as_f64(r)) {
        (Some(a), Some(b)) => {
            let v = match op {
                BinaryOperator::Plus => a + b,
                BinaryOperator::Minus => a - b,
                BinaryOperator::Multiply => a * b,
                BinaryOperator::Divide => {
                    if b == 0.0 {
                        return Err(SqlError::new("22012", "division by zero"));
                    }
                    a / b
                }
                _ => a % b,
            };
            Ok(
                if matches!(l, Datum::Numeric(_)) || matches!(r, Datum::Numeric(_)) {
                    Datum::Numeric(v.to_string())
                } else {
                    Datum::Float8(v)
                },
            )
        }
        _ => Err(SqlError::new(
            "42883",
            format!(
                "operator does not exist: {} {op} {}",
                type_name(l),
                type_name(r)
            ),
        )),
    }
}

fn type_name(d: &Datum) -> &'static str {
    d.type_id().map(|t| t.name()).unwrap_or("unknown")
}

/// Parses PostgreSQL's `X/X` LSN text.
fn parse_lsn(d: &Datum) -> Option<u64> {
    let t = format_text(d)?;
    let (hi, lo) = t.split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

pub fn function_args(f: &sqlparser::ast::Function) -> Vec<&Expr> {
    match &f.args {
        FunctionArguments::List(l) => l
            .args
            .iter()
            .filter_map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
                | FunctionArg::Named {
                    arg: FunctionArgExpr::Expr(e),
                    ..
                } => Some(e),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

pub fn function_name(f: &sqlparser::ast::Function) -> String {
    f.name
        .0
        .last()
        .map(|p| p.to_string().to_ascii_lowercase())
        .unwrap_or_default()
}

fn hooks<'a>(s: &Scope<'a>) -> SqlResult<&'a dyn Hooks> {
    s.hooks
        .ok_or_else(|| SqlError::unsupported("subqueries are not supported here"))
}

/// `v IN (items)` with SQL's three-valued result.
fn in_values(v: &Datum, items: &[Datum], negated: bool) -> SqlResult<Datum> {
    if v.is_null() {
        return Ok(Datum::Null);
    }
    let mut saw_null = false;
    for it in items {
        match binary(v, &BinaryOperator::Eq, it)? {
            Datum::Bool(true) => return Ok(Datum::Bool(!negated)),
            Datum::Null => saw_null = true,
            _ => {}
        }
    }
    Ok(if saw_null {
        Datum::Null
    } else {
        Datum::Bool(negated)
    })
}

/// SQL `LIKE`: `%` any run, `_` one character, `esc` quotes the next character.
pub fn like_match(v: &str, p: &str, esc: Option<char>) -> bool {
    let (v, p): (Vec<char>, Vec<char>) = (v.chars().collect(), p.chars().collect());
    // Iterative matcher with one backtrack point for the last `%` (linear in practice).
    let (mut vi, mut pi) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while vi < v.len() {
        let (lit, step) = match p.get(pi) {
            Some(&c) if Some(c) == esc => (p.get(pi + 1).copied(), 2),
            Some('%') => {
                star = Some((pi, vi));
                pi += 1;
                continue;
            }
            Some('_') => (None, 1),
            Some(&c) => (Some(c), 1),
            None => (Some('\0'), 0),
        };
        let ok = step > 0 && lit.is_none_or(|c| c == v[vi]);
        if ok {
            vi += 1;
            pi += step;
        } else if let Some((sp, sv)) = star {
            pi = sp + 1;
            vi = sv + 1;
            star = Some((sp, sv + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '%')
}

/// `~`, `~*`, `!~`, `!~*` with PostgreSQL's (POSIX-like) regular expressions.
fn regex_op(l: &Datum, op: &BinaryOperator, r: &Datum) -> SqlResult<Datum> {
    let (Some(text), Some(pat)) = (format_text(l), format_text(r)) else {
        return Ok(Datum::Null);
    };
    let fold = matches!(
        op,
        BinaryOperator::PGRegexIMatch | BinaryOperator::PGRegexNotIMatch
    );
    let re = regex::RegexBuilder::new(&pat)
        .case_insensitive(fold)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| {
            SqlError::new(
                "2201B",
                format!(
                    "invalid regular expression: {}",
                    e.to_string().lines().last().unwrap_or("")
                ),
            )
        })?;
    let negate = matches!(
        op,
        BinaryOperator::PGRegexNotMatch | BinaryOperator::PGRegexNotIMatch
    );
    Ok(Datum::Bool(re.is_match(&text) != negate))
}

/// Arrays travel as PostgreSQL's text form (`{a,b,"c d"}`): walrus has no array type in
/// storage, and the catalog functions psql uses only need to build and search them.
pub fn format_array_text(items: &[Datum]) -> String {
    let mut out = String::from("{");
    for (i, d) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match format_text(d) {
            None => out.push_str("NULL"),
            Some(t) => {
                let plain = !t.is_empty()
                    && !t.eq_ignore_ascii_case("null")
                    && !t.contains(|c: char| "{},\"\\ ".contains(c));
                if plain {
                    out.push_str(&t);
                } else {
                    out.push('"');
                    for c in t.chars() {
                        if c == '"' || c == '\\' {
                            out.push('\\');
                        }
                        out.push(c);
                    }
                    out.push('"');
                }
            }
        }
    }
    out.push('}');
    out
}

/// Parses a one-dimensional array literal; `None` elements are SQL NULLs.
pub fn parse_array_text(t: &str) -> SqlResult<Vec<Option<String>>> {
    let bad = || SqlError::new("22P02", format!("malformed array literal: \"{t}\""));
    let inner = t
        .trim()
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .ok_or_else(bad)?;
    let mut out = Vec::new();
    let mut chars = inner.chars().peekable();
    if inner.trim().is_empty() {
        return Ok(out);
    }
    loop {
        let mut item = String::new();
        let mut quoted = false;
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek() == Some(&'"') {
            quoted = true;
            chars.next();
            loop {
                match chars.next().ok_or_else(bad)? {
                    '\\' => item.push(chars.next().ok_or_else(bad)?),
                    '"' => break,
                    c => item.push(c),
                }
            }
        }
        while let Some(&c) = chars.peek() {
            if c == ',' {
                break;
            }
            if quoted && c != ' ' {
                return Err(bad());
            }
            item.push(c);
            chars.next();
        }
        let item = if quoted {
            item
        } else {
            item.trim().to_string()
        };
        out.push(if !quoted && item.eq_ignore_ascii_case("null") {
            None
        } else {
            Some(item)
        });
        if chars.next().is_none() {
            break;
        }
    }
    Ok(out)
}

fn function(f: &sqlparser::ast::Function, s: &Scope<'_>) -> SqlResult<Datum> {
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
        return Ok(Datum::Text(format_array_text(&items)));
    }
    let args: Vec<Datum> = function_args(f)
        .into_iter()
        .map(|a| eval(a, s))
        .collect::<SqlResult<_>>()?;
    if let Some(r) = s.hooks.and_then(|h| h.function(&name, &args)) {
        return r;
    }
    let arg = |i: usize| args.get(i).cloned().unwrap_or(Datum::Null);
    Ok(match name.as_str() {
        "now" | "current_timestamp" | "transaction_timestamp" | "statement_timestamp" => {
            Datum::TimestampTz(s.now)
        }
        "repeat" => {
            let (Some(t), Some(n)) = (format_text(&arg(0)), as_i64(&arg(1))) else {
                return Ok(Datum::Null);
            };
            if n > 100_000_000 / (t.len() as i64).max(1) {
                return Err(SqlError::new("54000", "requested length too large"));
            }
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
            Datum::Float8(v) => Datum::Float8(v.abs()),
            other => other,
        },
        "length" | "char_length" => match format_text(&arg(0)) {
            Some(t) => Datum::Int4(t.chars().count() as i32),
            None => Datum::Null,
        },
        "lower" => format_text(&arg(0))
            .map(|t| Datum::Text(t.to_lowercase()))
            .unwrap_or(Datum::Null),
        "upper" => format_text(&arg(0))
            .map(|t| Datum::Text(t.to_uppercase()))
            .unwrap_or(Datum::Null),
        "coalesce" => args
            .iter()
            .find(|d| !d.is_null())
            .cloned()
            .unwrap_or(Datum::Null),
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
        "pg_backend_pid" => Datum::Int4(std::process::id() as i32),
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
            (Some(a), Some(b), Some(c)) => Datum::Text(a.replace(&b, &c)),
            _ => Datum::Null,
        },
        "quote_ident" => match format_text(&arg(0)) {
            Some(t)
                if t.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                    && !t.is_empty() =>
            {
                Datum::Text(t)
            }
            Some(t) => Datum::Text(format!("\"{}\"", t.replace('"', "\"\""))),
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
            let Some(arr) = format_text(&arg(0)) else {
                return Ok(Datum::Null);
            };
            let want = format_text(&arg(1));
            parse_array_text(&arr)?
                .iter()
                .position(|x| *x == want)
                .map(|i| Datum::Int4(i as i32 + 1))
                .unwrap_or(Datum::Null)
        }
        "array_to_string" => {
            let (Some(arr), Some(sep)) = (format_text(&arg(0)), format_text(&arg(1))) else {
                return Ok(Datum::Null);
            };
            let items: Vec<String> = parse_array_text(&arr)?.into_iter().flatten().collect();
            Datum::Text(items.join(&sep))
        }
        "array_length" | "array_upper" | "cardinality" => match format_text(&arg(0)) {
            Some(arr) => match parse_array_text(&arr)?.len() {
                0 => Datum::Null,
                n => Datum::Int4(n as i32),
            },
            None => Datum::Null,
        },
        "pg_encoding_to_char" => Datum::Text("UTF8".into()),
        "pg_table_is_visible" | "pg_type_is_visible" => Datum::Bool(!arg(0).is_null()),
        "obj_description" | "col_description" | "shobj_description" | "pg_get_expr"
        | "pg_get_partkeydef" => Datum::Null,
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
        other => {
            return Err(SqlError::new(
                "42883",
                format!("function {other}() does not exist"),
            ))
        }
    })
}

/// `pg_size_pretty`: bytes, kB, MB, GB, TB with PostgreSQL's rounding (half up, 10x rule).
fn pretty_size(bytes: i64) -> String {
    let mut v = bytes;
    for unit in ["bytes", "kB", "MB", "GB", "TB"] {
        if v.abs() < 10 * 1024 || unit == "TB" {
            return format!("{v} {unit}");
        }
        v = (v + v.signum() * 512) / 1024;
    }
    unreachable!("the loop returns at TB")
}
