//! What a statement returns to the session's caller: a [`QueryResult`] (command tag,
//! columns, rows), or a COPY's data exchange ([`Outcome`]).

use walrus_engine::access::datum::{Datum, TypeId};

pub use crate::exec::copy::{CopyIn, CopyOut};

/// A result column as RowDescription reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    /// The engine type of the values.
    pub ty: TypeId,
    /// The PostgreSQL type OID clients see: `ty`'s, or the declared one of a table
    /// column (1043 for `varchar`, whose values the engine keeps as text).
    pub type_oid: u32,
    /// `atttypmod`: -1, or e.g. 24 for `varchar(20)`, 655366 for `numeric(10,2)`.
    pub typmod: i32,
    /// For a plain user-table column: its table's OID and column number (else 0, 0).
    pub table_oid: u32,
    pub attnum: i16,
}

impl Column {
    /// A computed column (no table, no type modifier).
    pub fn new(name: impl Into<String>, ty: TypeId) -> Column {
        Column {
            name: name.into(),
            ty,
            type_oid: ty.pg_oid(),
            typmod: -1,
            table_oid: 0,
            attnum: 0,
        }
    }
}

/// Where a lone SELECT sent by the simple query protocol streams its rows as the scan
/// produces them (the server's DataRow writer), instead of collecting them in
/// [`QueryResult::rows`]: [`crate::Session::execute_streaming`].
pub trait RowSink {
    /// The result's columns, once, before the first row.
    fn columns(&mut self, cols: &[Column]) -> crate::SqlResult<()>;
    /// One result row.
    fn row(&mut self, row: &[walrus_engine::access::datum::Datum]) -> crate::SqlResult<()>;
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueryResult {
    /// Command tag: `SELECT 1`, `INSERT 0 1`, `UPDATE 3`, `BEGIN`, ...
    pub tag: String,
    /// Empty for statements that return no rows.
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Datum>>,
    /// No RowDescription although the tag says `SELECT n`: CREATE TABLE AS.
    pub tag_only: bool,
}

impl QueryResult {
    /// Whether the client is sent a RowDescription (and rows): a result with columns,
    /// SHOW, and a SELECT even without columns (`select from t`), as PostgreSQL does;
    /// not CREATE TABLE AS, whose tag is also `SELECT n`.
    pub fn returns_rows(&self) -> bool {
        !self.columns.is_empty()
            || (!self.tag_only && (self.tag.starts_with("SELECT") || self.tag == "SHOW"))
    }

    pub(crate) fn tag(t: impl Into<String>) -> QueryResult {
        QueryResult {
            tag: t.into(),
            ..Default::default()
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Done(QueryResult),
    /// `COPY ... FROM STDIN`: the caller passes each CopyData message's bytes to
    /// [`crate::Session::copy_data`], then calls [`crate::Session::copy_done`] (or
    /// [`crate::Session::copy_fail`]).
    CopyIn(Box<CopyIn>),
    /// `COPY ... TO STDOUT`: the rows are computed and the statement is over; the
    /// caller sends [`CopyOut::messages`] as CopyData, then `COPY n`.
    CopyOut(Box<CopyOut>),
}
