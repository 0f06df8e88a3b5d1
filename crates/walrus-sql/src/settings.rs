//! What statements read as settings ([`SettingsView`]), and the internal setting keys
//! whose values are computed when read. The session owns and changes the settings
//! (`session/settings.rs`); evaluation and the executor only read them through a view.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use walrus_engine::Engine;

/// Internal setting name whose value is the WAL insert position at the moment it is
/// read (`pg_current_wal_lsn()`); computed by [`SettingsView::get`], never stored.
pub(crate) const WAL_LSN_KEY: &str = "walrus.insert_lsn";
/// The next xid to be assigned, read when asked (`age(xid)`).
pub(crate) const NEXT_XID_KEY: &str = "walrus.next_xid";
/// Internal key holding the database name the client connected to.
pub(crate) const DATABASE_KEY: &str = "walrus.database";
/// Internal key holding the session's pid (`pg_backend_pid()`).
pub(crate) const BACKEND_PID_KEY: &str = "walrus.backend_pid";

/// What statements read as settings (`current_setting()`, `SHOW`, `pg_settings`): the
/// session's map, shared through an `Arc` (copied only by `SET`), plus values computed
/// when read — so nothing is written into the map per statement.
#[derive(Clone)]
pub(crate) struct SettingsView {
    map: Arc<BTreeMap<String, String>>,
    engine: Engine,
    /// The session's plan-cache counters (`walrus_stat_plan_cache()`).
    plan_stats: Option<Arc<PlanCacheStats>>,
    /// `set_config()` calls the running statement made, for the session to apply when
    /// it ends (statements only read settings while they run).
    pending: Option<PendingSettings>,
}

/// Settings changes a statement asked for: `(name, value, is_local)`.
pub(crate) type PendingSettings = Arc<std::sync::Mutex<Vec<(String, String, bool)>>>;

/// A session's extended-protocol plan cache counters (`session/plan_cache.rs`), shared
/// with the statements it runs so `walrus_stat_plan_cache()` can report them.
#[derive(Default, Debug)]
pub(crate) struct PlanCacheStats {
    /// Statements planned: each new SQL text, and every re-plan after an invalidation.
    pub(crate) plans: AtomicU64,
    /// Executions that reused a plan still valid.
    pub(crate) hits: AtomicU64,
    /// Plans found stale (DDL since they were made) and re-planned.
    pub(crate) invalidations: AtomicU64,
    /// Executions answered by a cached point lookup.
    pub(crate) point_lookups: AtomicU64,
}

/// Keys under which [`SettingsView::all`] reports the plan-cache counters, in
/// `walrus_stat_plan_cache`'s column order (hidden from `pg_settings`, as every
/// `walrus.` key is).
pub(crate) const PLAN_CACHE_KEYS: [&str; 4] = [
    "walrus.plan_cache.plans",
    "walrus.plan_cache.hits",
    "walrus.plan_cache.invalidations",
    "walrus.plan_cache.point_lookups",
];

impl SettingsView {
    pub(crate) fn new(map: Arc<BTreeMap<String, String>>, engine: Engine) -> SettingsView {
        SettingsView {
            map,
            engine,
            plan_stats: None,
            pending: None,
        }
    }

    /// The view through which statements may ask for settings changes.
    pub(crate) fn with_pending(mut self, pending: PendingSettings) -> SettingsView {
        self.pending = Some(pending);
        self
    }

    /// `set_config(name, value, is_local)`: the change is applied by the session when
    /// the statement ends (checked then, as SET checks it); returns the value.
    pub(crate) fn set_config(
        &self,
        name: &str,
        value: &str,
        local: bool,
    ) -> crate::error::SqlResult<String> {
        let Some(p) = &self.pending else {
            return Err(crate::error::SqlError::unsupported(
                "set_config() is not supported here",
            ));
        };
        let name = name.to_ascii_lowercase();
        crate::guc::check_settable(&name)?;
        p.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name, value.to_string(), local));
        Ok(value.to_string())
    }

    /// The view with the session's plan-cache counters.
    pub(crate) fn with_plan_stats(mut self, stats: Arc<PlanCacheStats>) -> SettingsView {
        self.plan_stats = Some(stats);
        self
    }

    /// The engine the settings are read from.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn get(&self, name: &str) -> Option<String> {
        if name == WAL_LSN_KEY {
            return Some(self.engine.wal().insert_lsn().to_string());
        }
        if name == NEXT_XID_KEY {
            return Some(self.engine.txn_manager().next_xid().0.to_string());
        }
        self.map
            .get(name)
            .cloned()
            .or_else(|| crate::guc::postgres_default(name).map(str::to_string))
    }

    /// Every setting a session can see: PostgreSQL's defaults for the parameters walrus
    /// keeps no value of its own for, then the session's own values over them.
    pub(crate) fn all(&self) -> BTreeMap<String, String> {
        let mut all: BTreeMap<String, String> = crate::guc::postgres_defaults()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        all.extend(self.map.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(p) = &self.plan_stats {
            let counters = [&p.plans, &p.hits, &p.invalidations, &p.point_lookups];
            for (k, c) in PLAN_CACHE_KEYS.iter().zip(counters) {
                all.insert(k.to_string(), c.load(Ordering::Relaxed).to_string());
            }
        }
        all
    }
}
