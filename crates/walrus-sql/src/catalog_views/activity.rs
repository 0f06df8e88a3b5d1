//! The rows of `pg_stat_activity` and `pg_locks`: the engine's registry of sessions
//! and its table locks, as PostgreSQL 15 shows them.

use walrus_engine::access::datum::Datum;
use walrus_engine::engine::BackendActivity;

use super::{b, o, relfile_oid, t, xid, Snapshot, ROLE_OID};

/// PostgreSQL's OID of the one database walrus serves (`pg_database`).
const DATABASE_OID: i64 = 5;

impl Snapshot {
    /// The rows of `name` if it is one of these views.
    pub(super) fn activity_rows(&self, name: &str) -> Option<Vec<Vec<Datum>>> {
        Some(match name {
            "pg_stat_activity" => self
                .backends
                .iter()
                .map(|(pid, a)| self.activity_row(*pid, a))
                .collect(),
            "pg_locks" => self.lock_rows(),
            _ => return None,
        })
    }

    fn activity_row(&self, pid: i32, a: &BackendActivity) -> Vec<Datum> {
        let n = Datum::Null;
        let when = |v: Option<i64>| v.map_or(Datum::Null, Datum::TimestampTz);
        let waiting = a.lock_owner.is_some_and(|owner| {
            self.table_locks
                .iter()
                .any(|l| l.owner == owner && !l.granted)
        });
        let opt_t = |v: &str| if v.is_empty() { Datum::Null } else { t(v) };
        vec![
            o(DATABASE_OID),
            opt_t(&a.database),
            Datum::Int4(pid),
            n.clone(),
            o(ROLE_OID),
            opt_t(&a.user),
            t(&a.application_name),
            a.client_addr.as_deref().map_or(Datum::Null, t),
            n.clone(),
            a.client_port.map_or(Datum::Null, Datum::Int4),
            Datum::TimestampTz(a.backend_start),
            when(a.xact_start),
            when(a.query_start),
            when(a.state_change),
            if waiting { t("Lock") } else { n.clone() },
            if waiting { t("relation") } else { n.clone() },
            t(a.state.name()),
            a.backend_xid.map_or(Datum::Null, |x| xid(x.0)),
            n.clone(),
            n,
            t(&a.query),
            t("client backend"),
        ]
    }

    /// Each session's own virtual-transaction lock and transaction-id lock (as
    /// PostgreSQL lists them), then every table lock granted or awaited.
    fn lock_rows(&self) -> Vec<Vec<Datum>> {
        let n = Datum::Null;
        let owner_of = |owner: walrus_base::Xid| {
            self.backends
                .iter()
                .find(|(_, a)| a.lock_owner == Some(owner))
                .map(|(pid, _)| *pid)
        };
        // PostgreSQL's "backend id / local transaction number".
        let vxid = |pid: Option<i32>, owner: walrus_base::Xid| {
            let local = owner.0 & !(1u64 << 63);
            format!("{}/{local}", pid.map_or(0, |p| p - 999))
        };
        let row = |locktype: &str,
                   relation: Datum,
                   virtualxid: Datum,
                   transactionid: Datum,
                   owner: walrus_base::Xid,
                   mode: &str,
                   granted: bool| {
            let pid = owner_of(owner);
            vec![
                t(locktype),
                if matches!(relation, Datum::Null) {
                    n.clone()
                } else {
                    o(DATABASE_OID)
                },
                relation,
                n.clone(),
                n.clone(),
                virtualxid,
                transactionid,
                n.clone(),
                n.clone(),
                n.clone(),
                t(&vxid(pid, owner)),
                pid.map_or(Datum::Null, Datum::Int4),
                t(mode),
                b(granted),
                b(false),
                n.clone(),
            ]
        };
        let mut out = Vec::new();
        for (pid, a) in &self.backends {
            let Some(owner) = a.lock_owner else { continue };
            out.push(row(
                "virtualxid",
                n.clone(),
                t(&vxid(Some(*pid), owner)),
                n.clone(),
                owner,
                "ExclusiveLock",
                true,
            ));
            if let Some(x) = a.backend_xid {
                out.push(row(
                    "transactionid",
                    n.clone(),
                    n.clone(),
                    xid(x.0),
                    owner,
                    "ExclusiveLock",
                    true,
                ));
            }
        }
        for l in &self.table_locks {
            out.push(row(
                "relation",
                o(relfile_oid(l.relfile)),
                n.clone(),
                n.clone(),
                l.owner,
                l.mode.name(),
                l.granted,
            ));
        }
        out
    }
}
