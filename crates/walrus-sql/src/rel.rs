//! The shape of a row source, shared by planning, execution and expression evaluation:
//! the columns of an intermediate result ([`ColName`]), a materialised relation
//! ([`Rel`]) and one row as expressions see it ([`Frame`]), with column lookup by
//! (qualifier, name).

use sqlparser::ast::Expr;
use walrus_engine::access::datum::{Datum, TypeId};

use crate::error::{SqlError, SqlResult};
use crate::names::ident;

/// A column of an intermediate result: the range-variable name that qualifies it (table
/// name or alias), its name, and its type when known without looking at values.
#[derive(Clone, Debug)]
pub struct ColName {
    pub qual: Option<String>,
    pub name: String,
    pub ty: Option<TypeId>,
    /// A `char(n)` (bpchar) column: stored blank-padded, its trailing spaces do not
    /// count in comparisons, `length`, `||` and casts to text.
    pub bpchar: bool,
    /// A column merged away by a USING / NATURAL join: reachable qualified (`a.id`),
    /// not by its bare name nor by `*` (the merged column stands for it).
    pub hidden: bool,
}

/// A materialised relation.
#[derive(Clone, Debug, Default)]
pub struct Rel {
    pub cols: Vec<ColName>,
    pub rows: Vec<Vec<Datum>>,
}

/// One row as expressions see it, chained to the enclosing query's row.
pub struct Frame<'a> {
    pub cols: &'a [ColName],
    pub row: &'a [Datum],
    pub outer: Option<&'a Frame<'a>>,
}

impl Frame<'_> {
    /// The value of `qual.name`, searching outwards; `None` if no frame has it.
    pub fn lookup(&self, qual: Option<&str>, name: &str) -> SqlResult<Option<Datum>> {
        match find_col(self.cols, qual, name)? {
            Some(i) => Ok(Some(self.row.get(i).cloned().unwrap_or(Datum::Null))),
            None => match self.outer {
                Some(o) => o.lookup(qual, name),
                None => Ok(None),
            },
        }
    }
}

/// `(qualifier, column)` of a column reference expression.
pub fn col_ref(e: &Expr) -> Option<(Option<String>, String)> {
    match e {
        Expr::Identifier(i) => Some((None, ident(i))),
        Expr::CompoundIdentifier(ids) if ids.len() >= 2 => {
            Some((Some(ident(&ids[ids.len() - 2])), ident(&ids[ids.len() - 1])))
        }
        Expr::CompoundIdentifier(ids) => ids.last().map(|i| (None, ident(i))),
        _ => None,
    }
}

pub fn no_column(qual: Option<&str>, name: &str) -> SqlError {
    match qual {
        Some(q) => SqlError::new("42703", format!("column {q}.{name} does not exist")),
        None => SqlError::new("42703", format!("column \"{name}\" does not exist")),
    }
}

pub(crate) fn find_col(
    cols: &[ColName],
    qual: Option<&str>,
    name: &str,
) -> SqlResult<Option<usize>> {
    let mut hit = None;
    for (i, c) in cols.iter().enumerate() {
        let reachable = match qual {
            None => !c.hidden,
            Some(q) => c.qual.as_deref() == Some(q),
        };
        if c.name == name && reachable {
            if hit.is_some() {
                return Err(SqlError::new(
                    "42702",
                    format!("column reference \"{name}\" is ambiguous"),
                ));
            }
            hit = Some(i);
        }
    }
    Ok(hit)
}
