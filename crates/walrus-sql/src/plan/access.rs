//! Access path choice for a single table: a point lookup through a unique index when the
//! WHERE clause pins all of that index's columns with equalities to constants, else a
//! sequential scan. (No statistics: the choice is by shape only.)

use sqlparser::ast::{self, Expr};
use walrus_engine::access::datum::Datum;
use walrus_engine::catalog::{IndexDef, TableDef};

use crate::expr::{coerce, eval, Scope};
use crate::names::ident;

/// How to read the rows of a table that may match a filter.
pub(crate) enum Access<'d> {
    /// Every row, through a sequential scan.
    Scan,
    /// The rows whose `index` key equals `key` (already coerced to the column types).
    Index {
        index: &'d IndexDef,
        key: Vec<Datum>,
    },
    /// No row can match: a constant does not fit its column's type.
    Nothing,
}

/// The access path for rows of `def` matching `filter`: through a unique index when the
/// filter pins all its columns with equalities to constants, else a sequential scan.
/// The filter itself must still be applied to what the path returns.
pub(crate) fn choose_access<'d>(
    def: &'d TableDef,
    filter: Option<&Expr>,
    params: &[Datum],
    now: i64,
    get: &dyn Fn(&str) -> Option<String>,
) -> Access<'d> {
    let mut eqs: Vec<(usize, Datum)> = Vec::new();
    if let Some(f) = filter {
        collect_equalities(f, def, params, now, get, &mut eqs);
    }
    let index = def
        .indexes
        .iter()
        .filter(|i| i.unique)
        .find(|i| i.columns.iter().all(|c| eqs.iter().any(|(ec, _)| ec == c)));
    match index {
        Some(idx) => {
            let mut key = Vec::new();
            for c in &idx.columns {
                let v = eqs
                    .iter()
                    .find(|(ec, _)| ec == c)
                    .map(|(_, v)| v.clone())
                    .unwrap_or(Datum::Null);
                let col = &def.columns[*c];
                // A char(n) key is stored blank-padded: the constant is padded the same
                // way (assign), so 'ab' finds 'ab  ' as PostgreSQL's bpchar equality.
                let k = if col.declared == walrus_engine::catalog::DeclaredType::Char {
                    crate::expr::assign(v, col)
                } else {
                    coerce(v, col.ty)
                };
                key.push(match k {
                    Ok(k) => k,
                    // A constant that does not fit the column type matches nothing.
                    Err(_) => return Access::Nothing,
                });
            }
            Access::Index { index: idx, key }
        }
        None => Access::Scan,
    }
}

/// Collects `column = constant` conjuncts of a WHERE clause.
fn collect_equalities(
    e: &Expr,
    def: &TableDef,
    params: &[Datum],
    now: i64,
    get: &dyn Fn(&str) -> Option<String>,
    out: &mut Vec<(usize, Datum)>,
) {
    match e {
        Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::And,
            right,
        } => {
            collect_equalities(left, def, params, now, get, out);
            collect_equalities(right, def, params, now, get, out);
        }
        Expr::Nested(inner) => collect_equalities(inner, def, params, now, get, out),
        Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Eq,
            right,
        } => {
            let col_of = |x: &Expr| match x {
                Expr::Identifier(i) => def.column_index(&ident(i)),
                Expr::CompoundIdentifier(ids) => {
                    ids.last().and_then(|i| def.column_index(&ident(i)))
                }
                _ => None,
            };
            let scope = Scope {
                columns: &[],
                row: None,
                params,
                now,
                setting: get,
                interrupt: None,
                frame: None,
                hooks: None,
            };
            if let Some(c) = col_of(left) {
                if let Ok(v) = eval(right, &scope) {
                    out.push((c, v));
                }
            } else if let Some(c) = col_of(right) {
                if let Ok(v) = eval(left, &scope) {
                    out.push((c, v));
                }
            }
        }
        _ => {}
    }
}
