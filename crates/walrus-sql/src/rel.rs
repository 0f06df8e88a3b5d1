//! The shape of a row source, shared by planning, execution and expression evaluation:
//! the columns of an intermediate result ([`ColName`]), a materialised relation
//! ([`Rel`]) and one row as expressions see it ([`Frame`]), with column lookup by
//! (qualifier, name).

use std::borrow::Cow;

use sqlparser::ast::Expr;
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::{ColumnDef, DeclaredType};

use crate::error::{SqlError, SqlResult};
use crate::names::{ident, ident_ref};
use crate::result::Column;

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
    /// Set for a plain column of a user table: what RowDescription reports for it.
    pub origin: Option<Origin>,
}

/// A column as the protocol describes it beyond its engine type: for a user table's
/// column its table's OID, its number and its declared type (`varchar(20)` is OID 1043
/// with modifier 24 although the engine stores text); for a cast to such a type, the
/// type alone (table 0). Drivers see the sizes, precisions and table names PostgreSQL
/// shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    pub table_oid: u32,
    pub attnum: i16,
    pub type_oid: u32,
    pub typmod: i32,
}

/// The PostgreSQL type OID of a table column as declared: the engine keeps one text
/// type, but `varchar` is 1043 and `char` 1042 to clients.
pub fn column_type_oid(c: &ColumnDef) -> u32 {
    match (c.ty, c.declared) {
        (TypeId::Text, DeclaredType::Varchar) => 1043,
        (TypeId::Text, DeclaredType::Char) => 1042,
        (TypeId::Array(TypeId::Text), DeclaredType::Varchar) => 1015,
        (TypeId::Array(TypeId::Text), DeclaredType::Char) => 1014,
        (ty, _) => ty.pg_oid(),
    }
}

impl ColName {
    /// This column as a result column (`ty` unknown: reported as text).
    pub fn to_column(&self) -> Column {
        let ty = self.ty.unwrap_or(TypeId::Text);
        match self.origin {
            Some(o) => Column {
                type_oid: o.type_oid,
                typmod: o.typmod,
                table_oid: o.table_oid,
                attnum: o.attnum,
                ..Column::new(self.name.clone(), ty)
            },
            None => Column::new(self.name.clone(), ty),
        }
    }
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

/// [`col_ref`] borrowing the names when they need no folding (the per-row path).
pub(crate) fn col_ref_str(e: &Expr) -> Option<(Option<Cow<'_, str>>, Cow<'_, str>)> {
    match e {
        Expr::Identifier(i) => Some((None, ident_ref(i))),
        Expr::CompoundIdentifier(ids) if ids.len() >= 2 => Some((
            Some(ident_ref(&ids[ids.len() - 2])),
            ident_ref(&ids[ids.len() - 1]),
        )),
        Expr::CompoundIdentifier(ids) => ids.last().map(|i| (None, ident_ref(i))),
        _ => None,
    }
}

pub fn no_column(qual: Option<&str>, name: &str) -> SqlError {
    match qual {
        Some(q) => SqlError::new("42703", format!("column {q}.{name} does not exist")),
        None => SqlError::new("42703", format!("column \"{name}\" does not exist")),
    }
}

/// Prefix of a column reference by position (`plan::positional`): a NUL, which no SQL
/// identifier can hold.
pub(crate) const POSITIONAL_PREFIX: &str = "\u{0}#";

pub(crate) fn find_col(
    cols: &[ColName],
    qual: Option<&str>,
    name: &str,
) -> SqlResult<Option<usize>> {
    if let Some(pos) = name.strip_prefix(POSITIONAL_PREFIX) {
        return Ok(pos.parse().ok().filter(|&i: &usize| i < cols.len()));
    }
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
