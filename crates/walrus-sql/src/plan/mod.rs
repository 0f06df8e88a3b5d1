//! Planning: the decisions made about a statement from its text and the catalog, before
//! (or apart from) reading rows.
//!
//! There is no separate plan tree yet: the executor calls these as it reaches each
//! clause, still before it reads a row for it. What is decided here:
//!
//! - `bind.rs`: column references resolve in the FROM list or an enclosing query (42703
//!   even on an empty table), aggregate and subquery detection;
//! - `columns.rs`: the column names of relations and outputs (aliases, `AS t(a, b)`,
//!   GROUP BY ordinals and aliases, `JOIN ... USING`);
//! - `types.rs`: output column types known without rows;
//! - `access.rs`: for a lone table, unique-index point lookup or sequential scan;
//! - `params.rs`: the types of `$n` parameters for the extended protocol's Describe.
//!
//! Depends on `expr` (function names, types, constant folding for index keys) and the
//! shared row shapes in `rel`; never on the executor or the session.

mod access;
mod bind;
mod columns;
pub(crate) mod estimate;
mod params;
mod types;

pub(crate) use access::{choose_access, conjuncts, Access};
pub(crate) use bind::{
    aggregate_calls, bind, check_grouped, contains_aggregate, contains_subquery,
};
pub(crate) use columns::{
    check_group_by_constant, output_name, rename, resolve_group_expr, star_reference, table_cols,
};
pub(crate) use params::{highest_param, infer_params};
pub(crate) use types::{cast_origin, static_columns, static_type, typed_columns};
