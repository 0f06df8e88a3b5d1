//! What a statement returns to the session's caller: a [`QueryResult`] (command tag,
//! columns, rows), or for `COPY ... FROM STDIN` a request for the data ([`Outcome`]).

use walrus_engine::access::datum::{Datum, TypeId};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: TypeId,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueryResult {
    /// Command tag: `SELECT 1`, `INSERT 0 1`, `UPDATE 3`, `BEGIN`, ...
    pub tag: String,
    /// Empty for statements that return no rows.
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Datum>>,
}

impl QueryResult {
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
    /// `COPY ... FROM STDIN`: the caller collects the data and calls [`crate::Session::copy_in`].
    CopyIn {
        table: String,
        columns: Vec<String>,
    },
}
