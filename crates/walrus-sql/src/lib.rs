//! walrus-sql: SQL text → engine calls. Parse with sqlparser (PostgreSQL dialect), with a
//! small front parser for the utility statements PostgreSQL clients send that sqlparser's
//! grammar does not match (`utility`), and for transaction control and SET/SHOW, which
//! only need their first words. Binding, planning (unique-index point lookup versus
//! sequential scan) and execution are done statement by statement in [`Session`].
//!
//! A `Session` owns one connection's state: its transaction (implicit per statement, or an
//! explicit block), the aborted-block state (every statement fails with 25P02 until
//! ROLLBACK, as in PostgreSQL), and session settings. A statement never applies halfway:
//! outside a block its implicit transaction rolls back on error; inside a block the
//! block becomes aborted.

#![forbid(unsafe_code)]

mod catalog_views;
pub mod error;
pub mod expr;
mod guc;
mod names;
mod plan;
pub(crate) mod query;
mod rel;
mod result;
pub(crate) mod session;
mod settings;
mod timeout;
pub mod utility;
pub mod value;

pub use error::{SqlError, SqlResult};
pub use result::{Column, Outcome, QueryResult};
pub use session::Session;

/// What `version()` and `server_version` report: PostgreSQL 15 compatible.
pub const SERVER_VERSION: &str = "15.18";
pub const SERVER_VERSION_STRING: &str = "PostgreSQL 15.18 (walrus 0.1.0) on x86_64-pc-linux-gnu";
