//! What statements read as settings ([`SettingsView`]), and the internal setting keys
//! whose values are computed when read. The session owns and changes the settings
//! (`session/settings.rs`); evaluation and the executor only read them through a view.

use std::collections::BTreeMap;
use std::sync::Arc;

use walrus_engine::Engine;

/// Internal setting name whose value is the WAL insert position at the moment it is
/// read (`pg_current_wal_lsn()`); computed by [`SettingsView::get`], never stored.
pub(crate) const WAL_LSN_KEY: &str = "walrus.insert_lsn";
/// The next xid to be assigned, read when asked (`age(xid)`).
pub(crate) const NEXT_XID_KEY: &str = "walrus.next_xid";
/// Internal key holding the database name the client connected to.
pub(crate) const DATABASE_KEY: &str = "walrus.database";

/// What statements read as settings (`current_setting()`, `SHOW`, `pg_settings`): the
/// session's map, shared through an `Arc` (copied only by `SET`), plus values computed
/// when read — so nothing is written into the map per statement.
#[derive(Clone)]
pub(crate) struct SettingsView {
    map: Arc<BTreeMap<String, String>>,
    engine: Engine,
}

impl SettingsView {
    pub(crate) fn new(map: Arc<BTreeMap<String, String>>, engine: Engine) -> SettingsView {
        SettingsView { map, engine }
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
        all
    }
}
