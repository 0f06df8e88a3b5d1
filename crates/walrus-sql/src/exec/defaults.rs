//! Column defaults: what INSERT writes into a column it leaves out or gives `DEFAULT`
//! (also `INSERT ... DEFAULT VALUES` and `UPDATE ... SET c = DEFAULT`). A default is
//! kept in the catalog as SQL text, parsed once per session thread (`stored_expr`), and evaluated per
//! row like any expression (so `now()`, `nextval(...)` and casts behave as written);
//! an identity column's default is its sequence's `nextval`.
//!
//! [`DmlHooks`] gives INSERT's and UPDATE's expressions what they need beyond the row:
//! the sequence functions and `::regclass` over the transaction's catalog.

use std::sync::Arc;

use sqlparser::ast::{self, Expr};
use walrus_engine::access::datum::Datum;
use walrus_engine::catalog::{CatalogView, ColumnDefault, TableDef};
use walrus_engine::Engine;

use super::sequence::{self, SequenceContext, SharedSessionSequences};
use super::Env;
use crate::error::{SqlError, SqlResult};
use crate::expr::{eval, Hooks, Scope};
use crate::rel::{Frame, Rel};

/// Whether `e` is the keyword `DEFAULT` (sqlparser reads it in VALUES and SET as an
/// unquoted identifier).
pub(crate) fn is_default_keyword(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(i) if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default"))
}

/// The value column `i` of `def` gets by default (NULL when it has none), not yet
/// assigned to the column's type. `scope` must carry [`DmlHooks`] for `nextval`.
pub(crate) fn default_value(def: &TableDef, i: usize, scope: &Scope<'_>) -> SqlResult<Datum> {
    match def.default_of(i) {
        None => Ok(Datum::Null),
        Some(ColumnDefault::Expr(text)) => {
            let e = crate::stored_expr::parse(text)?;
            let bare = Scope {
                columns: &[],
                row: None,
                frame: None,
                ..*scope
            };
            eval(&e, &bare)
        }
        Some(ColumnDefault::Identity { sequence, .. }) => scope
            .hooks
            .and_then(|h| {
                h.function(
                    "nextval",
                    &[Datum::Text(crate::names::quote_ident(sequence))],
                )
            })
            .unwrap_or_else(|| {
                Err(SqlError::new(
                    "XX000",
                    "identity column evaluated without its sequence",
                ))
            }),
    }
}

/// `GENERATED ALWAYS AS IDENTITY` columns refuse a value given for them (428C9).
pub(crate) fn check_not_always(def: &TableDef, i: usize) -> SqlResult<()> {
    if let Some(ColumnDefault::Identity { always: true, .. }) = def.default_of(i) {
        let c = &def.columns[i].name;
        return Err(SqlError::new(
            "428C9",
            format!("cannot insert a non-DEFAULT value into column \"{c}\""),
        )
        .with_detail(format!(
            "Column \"{c}\" is an identity column defined as GENERATED ALWAYS."
        ))
        .with_hint("Use OVERRIDING SYSTEM VALUE to override."));
    }
    Ok(())
}

/// Expression hooks for INSERT's and UPDATE's own expressions (VALUES, SET, defaults):
/// the sequence functions and `::regclass`; subqueries are not run here.
pub(crate) struct DmlHooks {
    engine: Engine,
    catalog: Arc<CatalogView>,
    session: SharedSessionSequences,
}

impl DmlHooks {
    pub(crate) fn new(env: &mut dyn Env) -> SqlResult<DmlHooks> {
        Ok(DmlHooks {
            engine: env.engine().clone(),
            catalog: env.txn().catalog()?,
            session: env.sequences(),
        })
    }
}

impl Hooks for DmlHooks {
    fn subquery(&self, _q: &ast::Query, _outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        Err(SqlError::unsupported("subqueries are not supported here"))
    }
    fn aggregate(
        &self,
        _f: &ast::Function,
        _outer: Option<&Frame<'_>>,
    ) -> Option<SqlResult<Datum>> {
        None
    }
    fn function(&self, name: &str, args: &[Datum]) -> Option<SqlResult<Datum>> {
        if name == "::regclass" {
            return match args {
                [Datum::Text(t)] => Some(sequence::regclass(&self.catalog, t)),
                _ => None,
            };
        }
        let cx = SequenceContext {
            engine: &self.engine,
            catalog: &self.catalog,
            session: &self.session,
        };
        sequence::function(&cx, name, args)
    }
}
