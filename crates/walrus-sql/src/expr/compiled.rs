//! Expressions prepared once per statement for the per-row paths of a scan (WHERE,
//! grouping keys, aggregate arguments, the select list and sort keys): column
//! references resolved to row positions, integer literals and parameters parsed, and
//! integer comparisons and arithmetic done directly.
//!
//! The fast form never decides anything [`super::eval`] would decide differently: it
//! handles a value only when every operand it met is an integer (or, for `AND`/`OR`
//! and `IS [NOT] NULL`, a boolean or NULL), where `eval` ends in the same
//! comparison or in the same [`super::binary`] call; anything else makes it answer
//! "not mine" and the caller evaluates the original expression with `eval`. Operands
//! are evaluated in `eval`'s order, so an error (overflow, division by zero) is the one
//! `eval` raises.

use std::cmp::Ordering;

use sqlparser::ast::{BinaryOperator, Expr, Value};
use walrus_engine::access::datum::Datum;
use walrus_engine::catalog::ColumnDef;

use super::cast::literal;
use super::ops::binary;
use crate::error::SqlResult;
use crate::rel::{col_ref_str, find_col, ColName};

/// An expression's fast form (see the module comment).
#[derive(Clone, Debug)]
pub(crate) enum Fast {
    /// The row's value at this position.
    Column(usize),
    /// An integer constant (literal or parameter).
    Int(Datum),
    /// A comparison or arithmetic operator over integers.
    Binary(Box<Fast>, BinaryOperator, Box<Fast>),
    /// `AND` (true) or `OR` (false) over booleans and NULLs.
    Logic(Box<Fast>, bool, Box<Fast>),
    /// `IS NULL` (false) or `IS NOT NULL` (true).
    IsNull(Box<Fast>, bool),
    /// `x [NOT] BETWEEN low AND high` over integers (negated when true).
    Between(Box<[Fast; 3]>, bool),
}

/// How column names resolve where the expression is evaluated.
pub(crate) enum Columns<'a> {
    /// A table's row, as `eval` resolves names without a frame (`Scope::columns`).
    Table(&'a [ColumnDef]),
    /// A frame's row (`Frame::lookup`): only names found in the frame itself, not in
    /// an enclosing query's.
    Frame(&'a [ColName]),
}

fn int(d: &Datum) -> Option<i64> {
    match d {
        Datum::Int2(x) => Some(*x as i64),
        Datum::Int4(x) => Some(*x as i64),
        Datum::Int8(x) => Some(*x),
        _ => None,
    }
}

impl Fast {
    /// The fast form of `e`, or `None` when any part of it is outside what it handles.
    pub(crate) fn compile(e: &Expr, cols: &Columns<'_>, params: &[Datum]) -> Option<Fast> {
        Some(match e {
            Expr::Nested(inner) => Fast::compile(inner, cols, params)?,
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => match cols {
                Columns::Table(defs) => {
                    // `eval` without a frame: the last name part, folded, by position.
                    let name = match e {
                        Expr::Identifier(id) => id.value.as_str(),
                        Expr::CompoundIdentifier(ids) => ids.last()?.value.as_str(),
                        _ => return None,
                    };
                    let folded = name.to_ascii_lowercase();
                    Fast::Column(defs.iter().position(|c| c.name == folded)?)
                }
                Columns::Frame(names) => {
                    let (qual, name) = col_ref_str(e)?;
                    Fast::Column(find_col(names, qual.as_deref(), &name).ok()??)
                }
            },
            Expr::Value(v) => {
                let d = match &v.value {
                    Value::Number(..) => literal(&v.value).ok()?,
                    Value::Placeholder(p) => {
                        let n: usize = p.trim_start_matches('$').parse().ok()?;
                        params.get(n.checked_sub(1)?)?.clone()
                    }
                    _ => return None,
                };
                int(&d)?;
                Fast::Int(d)
            }
            Expr::BinaryOp { left, op, right } => {
                let (l, r) = (
                    Fast::compile(left, cols, params)?,
                    Fast::compile(right, cols, params)?,
                );
                match op {
                    BinaryOperator::And | BinaryOperator::Or => {
                        Fast::Logic(Box::new(l), matches!(op, BinaryOperator::And), Box::new(r))
                    }
                    BinaryOperator::Eq
                    | BinaryOperator::NotEq
                    | BinaryOperator::Lt
                    | BinaryOperator::LtEq
                    | BinaryOperator::Gt
                    | BinaryOperator::GtEq
                    | BinaryOperator::Plus
                    | BinaryOperator::Minus
                    | BinaryOperator::Multiply
                    | BinaryOperator::Divide
                    | BinaryOperator::Modulo => Fast::Binary(Box::new(l), op.clone(), Box::new(r)),
                    _ => return None,
                }
            }
            Expr::Between {
                expr,
                negated,
                low,
                high,
            } => Fast::Between(
                Box::new([
                    Fast::compile(expr, cols, params)?,
                    Fast::compile(low, cols, params)?,
                    Fast::compile(high, cols, params)?,
                ]),
                *negated,
            ),
            Expr::IsNull(x) => Fast::IsNull(Box::new(Fast::compile(x, cols, params)?), false),
            Expr::IsNotNull(x) => Fast::IsNull(Box::new(Fast::compile(x, cols, params)?), true),
            _ => return None,
        })
    }

    /// The value over `row`, `Ok(None)` when the expression must go to `eval` instead.
    pub(crate) fn eval(&self, row: &[Datum]) -> SqlResult<Option<Datum>> {
        Ok(Some(match self {
            Fast::Column(i) => row.get(*i).cloned().unwrap_or(Datum::Null),
            Fast::Int(d) => d.clone(),
            Fast::Binary(l, op, r) => {
                // A comparison of integer columns and constants, read in place: no
                // value is built for the operands.
                if let (Some(x), Some(y)) = (l.int_in_place(row), r.int_in_place(row)) {
                    if let Some(holds) = comparison(op, x.0.cmp(&y.0)) {
                        return Ok(Some(Datum::Bool(holds)));
                    }
                    // Arithmetic that neither overflows its result type nor divides by
                    // zero; anything else goes to `binary` below for its error.
                    if let Some(v) = arithmetic(op, x, y) {
                        return Ok(Some(v));
                    }
                }
                let Some(a) = l.eval(row)? else {
                    return Ok(None);
                };
                let Some(b) = r.eval(row)? else {
                    return Ok(None);
                };
                let (Some(x), Some(y)) = (int(&a), int(&b)) else {
                    return Ok(None);
                };
                match comparison(op, x.cmp(&y)) {
                    Some(holds) => Datum::Bool(holds),
                    // Arithmetic keeps `eval`'s result types and overflow errors.
                    None => binary(&a, op, &b)?,
                }
            }
            Fast::Logic(l, and, r) => {
                let truth = |d: Datum| match d {
                    Datum::Bool(b) => Some(Some(b)),
                    Datum::Null => Some(None),
                    _ => None,
                };
                let Some(a) = l.eval(row)?.and_then(truth) else {
                    return Ok(None);
                };
                if a == Some(!and) {
                    return Ok(Some(Datum::Bool(!and)));
                }
                let Some(b) = r.eval(row)?.and_then(truth) else {
                    return Ok(None);
                };
                match (a, b) {
                    (Some(x), Some(y)) => Datum::Bool(if *and { x && y } else { x || y }),
                    (_, Some(y)) if y != *and => Datum::Bool(!and),
                    _ => Datum::Null,
                }
            }
            Fast::IsNull(x, negated) => {
                let Some(v) = x.eval(row)? else {
                    return Ok(None);
                };
                Datum::Bool(v.is_null() != *negated)
            }
            Fast::Between(parts, negated) => {
                // `eval` evaluates all three, in this order, then compares: each part
                // must be an integer here, else `eval` answers (and raises any error
                // in its order).
                let mut v = [0i64; 3];
                for (part, out) in parts.iter().zip(v.iter_mut()) {
                    // Columns and constants read in place; other parts evaluated.
                    let i = match part.int_in_place(row) {
                        Some((i, _)) => Some(i),
                        None => part.eval(row)?.as_ref().and_then(int),
                    };
                    match i {
                        Some(i) => *out = i,
                        None => return Ok(None),
                    }
                }
                let [x, low, high] = v;
                Datum::Bool((low <= x && x <= high) != *negated)
            }
        }))
    }
}

impl Fast {
    /// The integer a column or constant operand holds, or integer arithmetic over such
    /// operands computes (`aid % 10` in `aid % 10 = 0`), and its width's rank (int2 0,
    /// int4 1, int8 2), without building a value (`None`: another kind of operand, not
    /// an integer there, NULL included, or arithmetic that errs, which `eval` raises).
    fn int_in_place(&self, row: &[Datum]) -> Option<(i64, u8)> {
        let d = match self {
            Fast::Column(i) => row.get(*i)?,
            Fast::Int(d) => d,
            Fast::Binary(l, op, r) => {
                return integer_arithmetic(op, l.int_in_place(row)?, r.int_in_place(row)?)
            }
            _ => return None,
        };
        match d {
            Datum::Int2(x) => Some((*x as i64, 0)),
            Datum::Int4(x) => Some((*x as i64, 1)),
            Datum::Int8(x) => Some((*x, 2)),
            _ => None,
        }
    }
}

/// `x op y` for integer operands as [`binary`] computes it (the result has the wider
/// operand's type), or `None` when `op` is not arithmetic or the result is an error
/// there (overflow, division by zero), which `binary` then raises.
fn arithmetic(op: &BinaryOperator, x: (i64, u8), y: (i64, u8)) -> Option<Datum> {
    let (v, rank) = integer_arithmetic(op, x, y)?;
    Some(match rank {
        0 => Datum::Int2(v as i16),
        1 => Datum::Int4(v as i32),
        _ => Datum::Int8(v),
    })
}

/// [`arithmetic`]'s value and its type's rank, checked to fit that type.
fn integer_arithmetic(
    op: &BinaryOperator,
    (x, xr): (i64, u8),
    (y, yr): (i64, u8),
) -> Option<(i64, u8)> {
    let v = match op {
        BinaryOperator::Plus => x.checked_add(y)?,
        BinaryOperator::Minus => x.checked_sub(y)?,
        BinaryOperator::Multiply => x.checked_mul(y)?,
        BinaryOperator::Divide => x.checked_div(y)?,
        BinaryOperator::Modulo => x.checked_rem(y)?,
        _ => return None,
    };
    let rank = xr.max(yr);
    let fits = match rank {
        0 => i16::try_from(v).is_ok(),
        1 => i32::try_from(v).is_ok(),
        _ => true,
    };
    fits.then_some((v, rank))
}

/// Whether `ord` satisfies comparison operator `op`; `None` for arithmetic.
fn comparison(op: &BinaryOperator, ord: Ordering) -> Option<bool> {
    Some(match op {
        BinaryOperator::Eq => ord == Ordering::Equal,
        BinaryOperator::NotEq => ord != Ordering::Equal,
        BinaryOperator::Lt => ord == Ordering::Less,
        BinaryOperator::LtEq => ord != Ordering::Greater,
        BinaryOperator::Gt => ord == Ordering::Greater,
        BinaryOperator::GtEq => ord != Ordering::Less,
        _ => return None,
    })
}

/// An expression with its fast form, if it has one: evaluated through the fast form
/// where it answers, else through `fallback` (the caller's `eval`).
pub(crate) struct Prepared<'e> {
    pub expr: &'e Expr,
    pub fast: Option<Fast>,
}

impl<'e> Prepared<'e> {
    pub(crate) fn new(expr: &'e Expr, cols: &Columns<'_>, params: &[Datum]) -> Prepared<'e> {
        Prepared {
            expr,
            fast: Fast::compile(expr, cols, params),
        }
    }

    pub(crate) fn eval(
        &self,
        row: &[Datum],
        fallback: impl FnOnce(&Expr) -> SqlResult<Datum>,
    ) -> SqlResult<Datum> {
        if let Some(f) = &self.fast {
            if let Some(v) = f.eval(row)? {
                return Ok(v);
            }
        }
        fallback(self.expr)
    }
}

#[cfg(test)]
mod tests {
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;
    use walrus_engine::access::datum::TypeId;

    use super::*;
    use crate::expr::{eval, Scope};
    use crate::rel::Frame;

    fn def(name: &str, ty: TypeId) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            ty,
            not_null: false,
            typmod: -1,
            declared: Default::default(),
        }
    }

    fn col(name: &str, ty: TypeId) -> ColName {
        ColName {
            qual: Some("x".into()),
            name: name.into(),
            ty: Some(ty),
            bpchar: false,
            hidden: false,
            origin: None,
        }
    }

    /// A random expression over int2 `a`, int4 `b`, int8 `c`, text `t`, with integer
    /// literals at the types' edges, a numeric literal, NULL, and parameters.
    fn expr_text(x: &mut u64, depth: u32) -> String {
        let mut next = |n: u64| {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            *x % n
        };
        if depth == 0 || next(3) == 0 {
            const ATOMS: [&str; 17] = [
                "a",
                "b",
                "c",
                "x.b",
                "t",
                "0",
                "1",
                "3",
                "10",
                "32767",
                "2147483647",
                "2147483648",
                "9223372036854775807",
                "12345678901234567890",
                "NULL",
                "$1",
                "$2",
            ];
            return ATOMS[next(ATOMS.len() as u64) as usize].to_string();
        }
        const OPS: [&str; 13] = [
            "+", "-", "*", "/", "%", "=", "<>", "<", "<=", ">", ">=", "AND", "OR",
        ];
        match next(10) {
            0 => format!("({} IS NULL)", expr_text(x, depth - 1)),
            1 => format!("({} IS NOT NULL)", expr_text(x, depth - 1)),
            k @ (2 | 3) => {
                let not = if k == 3 { "NOT " } else { "" };
                let (v, lo, hi) = (
                    expr_text(x, depth - 1),
                    expr_text(x, depth - 1),
                    expr_text(x, depth - 1),
                );
                format!("({v} {not}BETWEEN {lo} AND {hi})")
            }
            _ => {
                let op = OPS[next(OPS.len() as u64) as usize];
                let l = expr_text(x, depth - 1);
                let r = expr_text(x, depth - 1);
                format!("({l} {op} {r})")
            }
        }
    }

    fn rows() -> Vec<Vec<Datum>> {
        let mut out = vec![
            vec![Datum::Null, Datum::Null, Datum::Null, Datum::Null],
            vec![
                Datum::Int2(i16::MAX),
                Datum::Int4(i32::MIN),
                Datum::Int8(i64::MAX),
                Datum::Text("5".into()),
            ],
            vec![
                Datum::Int2(0),
                Datum::Int4(0),
                Datum::Int8(0),
                Datum::Text("abc".into()),
            ],
        ];
        for i in -3..4i64 {
            out.push(vec![
                Datum::Int2(i as i16 * 7),
                Datum::Int4(i as i32 * 1000 + 3),
                if i == 1 {
                    Datum::Null
                } else {
                    Datum::Int8(i * 10)
                },
                Datum::Text(i.to_string()),
            ]);
        }
        out
    }

    fn same(fast: &SqlResult<Datum>, general: &SqlResult<Datum>) -> bool {
        match (fast, general) {
            (Ok(a), Ok(b)) => a == b,
            (Err(a), Err(b)) => a.sqlstate == b.sqlstate && a.message == b.message,
            _ => false,
        }
    }

    /// Wherever the fast form answers, it answers what `eval` answers (values, NULLs,
    /// and errors such as integer overflow 22003 and division by zero 22012), resolving
    /// names as a table row (WHERE of a scan) and as a frame (grouping, projection).
    #[test]
    fn fast_forms_agree_with_eval() {
        let defs = [
            def("a", TypeId::Int2),
            def("b", TypeId::Int4),
            def("c", TypeId::Int8),
            def("t", TypeId::Text),
        ];
        let names = [
            col("a", TypeId::Int2),
            col("b", TypeId::Int4),
            col("c", TypeId::Int8),
            col("t", TypeId::Text),
        ];
        let params = [Datum::Int4(7), Datum::Text("5".into())];
        let get = |_: &str| -> Option<String> { None };
        let (mut answered, mut fell_back, mut errors) = (0usize, 0usize, 0usize);
        let mut x: u64 = 0x2545f4914f6cdd1d;
        for _ in 0..3000 {
            let text = expr_text(&mut x, 3);
            let e = Parser::new(&PostgreSqlDialect {})
                .try_with_sql(&text)
                .and_then(|mut p| p.parse_expr())
                .unwrap_or_else(|err| panic!("{text}: {err}"));
            let table = Fast::compile(&e, &Columns::Table(&defs), &params);
            let frame_form = Fast::compile(&e, &Columns::Frame(&names), &params);
            for row in rows() {
                let scope = Scope {
                    columns: &defs,
                    row: Some(&row),
                    params: &params,
                    now: 0,
                    setting: &get,
                    interrupt: None,
                    frame: None,
                    hooks: None,
                };
                let general = eval(&e, &scope);
                let frame = Frame {
                    cols: &names,
                    row: &row,
                    outer: None,
                };
                let framed = Scope {
                    columns: &[],
                    row: None,
                    frame: Some(&frame),
                    ..scope
                };
                let general_framed = eval(&e, &framed);
                for (form, want) in [(&table, &general), (&frame_form, &general_framed)] {
                    let Some(f) = form else {
                        fell_back += 1;
                        continue;
                    };
                    match f.eval(&row) {
                        Ok(None) => fell_back += 1,
                        Ok(Some(v)) => {
                            answered += 1;
                            assert!(
                                same(&Ok(v.clone()), want),
                                "{text} over {row:?}: fast {v:?}, eval {want:?}"
                            );
                        }
                        Err(err) => {
                            answered += 1;
                            errors += 1;
                            assert!(
                                same(&Err(err.clone()), want),
                                "{text} over {row:?}: fast {err:?}, eval {want:?}"
                            );
                        }
                    }
                }
            }
        }
        // The test means something only if the fast forms answer often, errors included.
        assert!(answered > 10_000, "fast forms answered {answered} times");
        assert!(fell_back > 1_000, "fell back {fell_back} times");
        assert!(errors > 100, "fast forms raised {errors} errors");
    }

    /// Names that `eval` would not find in the frame itself (an outer query's, an
    /// ambiguous one) and non-integer constants are left to `eval`.
    #[test]
    fn unresolved_names_and_other_constants_are_left_to_eval() {
        let names = [col("a", TypeId::Int4), col("a", TypeId::Int4)];
        let parse = |s: &str| {
            Parser::new(&PostgreSqlDialect {})
                .try_with_sql(s)
                .and_then(|mut p| p.parse_expr())
                .unwrap()
        };
        let frame = Columns::Frame(&names);
        assert!(
            Fast::compile(&parse("a"), &frame, &[]).is_none(),
            "ambiguous"
        );
        assert!(
            Fast::compile(&parse("z"), &frame, &[]).is_none(),
            "not here"
        );
        assert!(Fast::compile(&parse("1.5 < 2"), &frame, &[]).is_none());
        assert!(Fast::compile(&parse("'1' = 1"), &frame, &[]).is_none());
        assert!(Fast::compile(&parse("$1 = 1"), &frame, &[Datum::Text("1".into())]).is_none());
        assert!(Fast::compile(&parse("$1 = 1"), &frame, &[Datum::Int8(1)]).is_some());
        let defs = [ColumnDef {
            name: "bid".into(),
            ty: TypeId::Int4,
            not_null: false,
            typmod: -1,
            declared: Default::default(),
        }];
        let f = Fast::compile(&parse("BID = 3"), &Columns::Table(&defs), &[]).unwrap();
        assert_eq!(f.eval(&[Datum::Int4(3)]).unwrap(), Some(Datum::Bool(true)));
        // A NULL operand is not an integer: left to `eval` (which gives NULL).
        assert_eq!(f.eval(&[Datum::Null]).unwrap(), None);
    }
}
