//! walrus-sql: SQL text → engine calls, as a pipeline with no module cycle:
//!
//! 1. **parse** (`session/parse.rs`): transaction control and SET/SHOW/RESET by their
//!    first words, the utility statements sqlparser's grammar does not match
//!    ([`utility`]), everything else with sqlparser (PostgreSQL dialect);
//! 2. **plan** (`plan/`): binding of column references, output column names and types,
//!    the single-table access path (unique-index point lookup versus sequential scan),
//!    parameter types for Describe. There is no plan tree yet: the executor calls these
//!    as it reaches each query level, after reading its FROM items (the single-table
//!    path applies WHERE while reading) and before evaluating the select list, GROUP BY,
//!    HAVING and ORDER BY over those rows;
//! 3. **execute** (`exec/`): SELECT over materialised relations (nested-loop joins,
//!    grouping, set operations, sorting, subqueries), INSERT/UPDATE/DELETE, DDL and COPY
//!    on the engine's `Transaction`, with the `pg_catalog` / `information_schema` tables
//!    computed by `catalog_views/`;
//! 4. expressions (the [`expr`] module) are evaluated over a row with only values,
//!    types and row frames in hand; what they need from outside comes through
//!    [`expr::Scope`] and [`expr::Hooks`].
//!
//! A [`Session`] drives it for one connection: statement dispatch, its transaction
//! (implicit per statement, or an explicit block), the aborted-block state (every
//! statement fails with 25P02 until ROLLBACK, as in PostgreSQL), and session settings. A
//! statement never applies halfway: outside a block its implicit transaction rolls back
//! on error; inside a block the block becomes aborted.
//!
//! Dependencies run one way: `session` → `exec` → `plan` → `expr` → `value`/`error`, with
//! `catalog_views` used by `exec` and importing neither; the shared leaves are `rel`
//! (row shapes), `names`, `settings` (the read-only settings view), `result`, `guc`,
//! `timeout`, `memory` (the per-statement row budget) and `utility`. See `src/README.md`.

#![forbid(unsafe_code)]

pub mod binary;
mod catalog_views;
pub mod error;
mod exec;
mod expandarray;
mod stored_expr;
pub use exec::temp_file_stats;
pub mod expr;
mod guc;
pub mod interval;
pub mod json;
mod memory;
mod names;
pub mod numeric;
mod plan;
mod rel;
mod result;
mod rewrite;
mod session;
mod settings;
pub mod stack;
mod stats;
mod timeout;
pub mod timetz;
pub mod timezone;
pub mod utility;
pub mod value;

pub use catalog_views::catalog_relations;
pub use error::{SqlError, SqlResult};
pub use memory::{statement_memory_limit, SETTING as STATEMENT_MEMORY_LIMIT};
pub use result::{Column, CopyIn, CopyOut, Outcome, QueryResult, RowSink};
pub use session::{internal_error, Session};

/// What `version()` and `server_version` report: PostgreSQL 15 compatible.
pub const SERVER_VERSION: &str = "15.18";
pub const SERVER_VERSION_STRING: &str = "PostgreSQL 15.18 (walrus 0.1.0) on x86_64-pc-linux-gnu";
