//! Row locks taken by `SELECT ... FOR UPDATE | NO KEY UPDATE | SHARE | KEY SHARE` (and
//! by foreign-key checks): PostgreSQL's four tuple lock modes and their conflict table,
//! held until the locking transaction (or the savepoint that took them) ends.
//!
//! Where they live: in memory, keyed by the locked version's place (relation file, block,
//! line pointer), InnoDB-style, rather than in the tuple's xmax with multixacts as
//! PostgreSQL stores them. Any number of sharers need no multi-xid machinery, taking a
//! lock writes neither a page nor WAL, and a crash drops every lock with the
//! transactions that held them (as it must). The cost is memory per locked row (an
//! entry of 32 bytes in a map) for as long as the transaction runs; PostgreSQL's way
//! costs a page write per locked row instead.
//!
//! How it stays exact against updates: a version's changer (UPDATE, DELETE) asks this
//! table under the page's exclusive latch, just before stamping xmax; a locker checks
//! the version's xmax under (at least) a shared latch of the same page and then checks
//! and adds its entry in one step under the table's shard lock (`acquire`: two lockers
//! may hold the shared latch at once). So a lock and a change of one version, or two
//! locks, never both succeed unless their modes are compatible. Each entry records the version's
//! xmin: a line pointer reused for another tuple after pruning does not inherit an old
//! entry's lock.
//!
//! Waiting: a conflicting holder is reported by its owner xid (the subtransaction that
//! took the lock), and the caller waits on that xid's lock (`TxnManager::wait_for`),
//! which ends when the transaction ends or that savepoint is rolled back; deadlocks are
//! found by the same waits-for graph as row changes.
//!
//! Cost when unused: one atomic load per row change (`held` is zero).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use walrus_base::{RelFileId, Tid, Xid};

/// PostgreSQL's row lock strengths, weakest first. An UPDATE that changes no column of
/// a unique index acts as `NoKeyUpdate` against them; any other UPDATE, and a DELETE,
/// as `Update`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RowLockMode {
    KeyShare,
    Share,
    NoKeyUpdate,
    Update,
}

impl RowLockMode {
    /// PostgreSQL's tuple-lock conflict table.
    pub fn conflicts_with(self, other: RowLockMode) -> bool {
        use RowLockMode::*;
        matches!(
            (self, other),
            (Update, _) | (_, Update) | (NoKeyUpdate, NoKeyUpdate | Share) | (Share, NoKeyUpdate)
        )
    }
}

/// One held lock.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The xid that took it (a subtransaction's, inside a savepoint).
    owner: Xid,
    mode: RowLockMode,
    /// The locked version's xmin: an entry whose xmin differs from the tuple now at the
    /// place locks nothing.
    xmin: Xid,
}

/// Where a lock is: relation file and the version's tid (redirects resolved).
pub type RowLockKey = (RelFileId, Tid);

const SHARDS: usize = 64;

/// One shard of the table: the entries at each locked place.
type Shard = Mutex<HashMap<RowLockKey, Vec<Entry>>>;

pub struct RowLocks {
    shards: Box<[Shard]>,
    /// Entries held, all shards: zero lets row changes skip the lookup.
    held: AtomicUsize,
    /// Per owner, the places its locks were carried to by non-key updates of the
    /// versions it locked ([`RowLocks::carry_over`]), released with its own.
    carried: Mutex<HashMap<Xid, Vec<RowLockKey>>>,
}

impl Default for RowLocks {
    fn default() -> Self {
        RowLocks {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            held: AtomicUsize::new(0),
            carried: Mutex::new(HashMap::new()),
        }
    }
}

impl RowLocks {
    fn shard(&self, key: &RowLockKey) -> &Shard {
        let h = (key.0 .0 as usize)
            .wrapping_mul(0x9E37_79B9)
            .wrapping_add(key.1.block as usize * 311 + key.1.offset as usize);
        &self.shards[h % SHARDS]
    }

    /// A lock on the version at `key` (whose xmin is `xmin`) that conflicts with
    /// `mode` and is not held by the asking transaction (`mine` tells its xids): the
    /// holder's owner xid, to wait on. Called under the page's latch.
    pub fn conflict(
        &self,
        key: RowLockKey,
        xmin: Xid,
        mode: RowLockMode,
        mine: impl Fn(Xid) -> bool,
    ) -> Option<Xid> {
        if self.held.load(Ordering::Acquire) == 0 {
            return None;
        }
        let shard = self.shard(&key).lock();
        shard.get(&key)?.iter().find_map(|e| {
            (e.xmin == xmin && e.mode.conflicts_with(mode) && !mine(e.owner)).then_some(e.owner)
        })
    }

    /// A non-key update replaced the locked version at `from` (xmin `from_xmin`) by
    /// the one at `to` (xmin `to_xmin`): the locks on the old version hold the new one
    /// too, as PostgreSQL carries its lockers into the new version's xmax. (Only KEY
    /// SHARE can be held by others on a version a non-key update changes.) Without
    /// this, a KEY SHARE lock of a foreign-key check would no longer stop a DELETE of
    /// the row's next version. Called under the old page's latch.
    pub fn carry_over(&self, from: RowLockKey, from_xmin: Xid, to: RowLockKey, to_xmin: Xid) {
        if self.held.load(Ordering::Acquire) == 0 {
            return;
        }
        let moved: Vec<Entry> = match self.shard(&from).lock().get(&from) {
            Some(entries) => entries
                .iter()
                .filter(|e| e.xmin == from_xmin)
                .copied()
                .collect(),
            None => return,
        };
        if moved.is_empty() {
            return;
        }
        {
            let mut shard = self.shard(&to).lock();
            let entries = shard.entry(to).or_default();
            for e in &moved {
                entries.push(Entry {
                    xmin: to_xmin,
                    ..*e
                });
            }
            self.held.fetch_add(moved.len(), Ordering::AcqRel);
        }
        let mut carried = self.carried.lock();
        for e in &moved {
            carried.entry(e.owner).or_default().push(to);
        }
    }

    /// Takes `owner`'s lock if no other transaction holds a conflicting one: the check
    /// and the entry under one shard lock, so two lockers that both hold the page's
    /// shared latch cannot both get conflicting locks. `Err(holder)` names one to wait
    /// for; `Ok(false)` means `owner` already held this mode or a stronger one there, so
    /// nothing was added (and there is nothing more to release).
    pub fn acquire(
        &self,
        key: RowLockKey,
        xmin: Xid,
        owner: Xid,
        mode: RowLockMode,
        mine: impl Fn(Xid) -> bool,
    ) -> Result<bool, Xid> {
        let mut shard = self.shard(&key).lock();
        let entries = shard.entry(key).or_default();
        if let Some(holder) = entries.iter().find_map(|e| {
            (e.xmin == xmin && e.mode.conflicts_with(mode) && !mine(e.owner)).then_some(e.owner)
        }) {
            return Err(holder);
        }
        if entries
            .iter()
            .any(|e| e.owner == owner && e.xmin == xmin && e.mode >= mode)
        {
            return Ok(false);
        }
        entries.push(Entry { owner, mode, xmin });
        self.held.fetch_add(1, Ordering::AcqRel);
        Ok(true)
    }

    /// Records `owner`'s lock with no conflict check (tests).
    #[cfg(test)]
    fn add(&self, key: RowLockKey, xmin: Xid, owner: Xid, mode: RowLockMode) -> bool {
        let mut shard = self.shard(&key).lock();
        let entries = shard.entry(key).or_default();
        if entries
            .iter()
            .any(|e| e.owner == owner && e.xmin == xmin && e.mode >= mode)
        {
            return false;
        }
        entries.push(Entry { owner, mode, xmin });
        self.held.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Drops the locks `owner` took at each of `keys` (a transaction's end, or the
    /// rollback of the savepoint that took them). Done before the owner's xid lock is
    /// released, so a woken waiter finds them gone.
    pub fn release(&self, keys: &[(RowLockKey, Xid)]) {
        let mut owners: Vec<Xid> = keys.iter().map(|(_, o)| *o).collect();
        owners.sort_unstable();
        owners.dedup();
        let carried: Vec<(RowLockKey, Xid)> = {
            let mut c = self.carried.lock();
            owners
                .iter()
                .filter_map(|o| c.remove(o).map(|keys| (o, keys)))
                .flat_map(|(o, keys)| keys.into_iter().map(move |k| (k, *o)))
                .collect()
        };
        for (key, owner) in keys.iter().chain(&carried) {
            let mut shard = self.shard(key).lock();
            let Some(entries) = shard.get_mut(key) else {
                continue;
            };
            let before = entries.len();
            entries.retain(|e| e.owner != *owner);
            let dropped = before - entries.len();
            if entries.is_empty() {
                shard.remove(key);
            }
            self.held.fetch_sub(dropped, Ordering::AcqRel);
        }
    }

    /// Entries held now (tests, and a view's count).
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RowLockMode::*;

    #[test]
    fn the_conflict_table_is_postgresqls() {
        let modes = [KeyShare, Share, NoKeyUpdate, Update];
        // Rows and columns in `modes` order: PostgreSQL's "Conflicting Row-Level Locks".
        let expected = [
            [false, false, false, true],
            [false, false, true, true],
            [false, true, true, true],
            [true, true, true, true],
        ];
        for (i, a) in modes.iter().enumerate() {
            for (j, b) in modes.iter().enumerate() {
                assert_eq!(a.conflicts_with(*b), expected[i][j], "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn locks_conflict_by_mode_owner_and_version_and_are_released() {
        let locks = RowLocks::default();
        let key = (RelFileId(7), Tid::new(3, 4));
        let (a, b) = (Xid(100), Xid(200));
        let not_mine = |_: Xid| false;
        assert!(locks.add(key, Xid(5), a, Share));
        assert!(
            !locks.add(key, Xid(5), a, KeyShare),
            "a stronger one is held"
        );
        assert!(locks.add(key, Xid(5), b, Share), "sharers coexist");
        assert_eq!(locks.conflict(key, Xid(5), KeyShare, not_mine), None);
        assert_eq!(locks.conflict(key, Xid(5), NoKeyUpdate, not_mine), Some(a));
        assert_eq!(
            locks.conflict(key, Xid(5), Update, |x| x == a),
            Some(b),
            "own locks never conflict"
        );
        assert_eq!(
            locks.conflict(key, Xid(6), Update, not_mine),
            None,
            "another tuple in the same place is not locked"
        );
        locks.release(&[(key, a)]);
        assert_eq!(locks.conflict(key, Xid(5), Update, not_mine), Some(b));
        locks.release(&[(key, b)]);
        assert_eq!(locks.held(), 0);
        assert_eq!(locks.conflict(key, Xid(5), Update, not_mine), None);
    }

    #[test]
    fn acquire_checks_and_takes_in_one_step() {
        let locks = RowLocks::default();
        let key = (RelFileId(7), Tid::new(1, 1));
        let (a, b) = (Xid(100), Xid(200));
        assert_eq!(locks.acquire(key, Xid(5), a, Update, |x| x == a), Ok(true));
        assert_eq!(locks.acquire(key, Xid(5), b, Update, |x| x == b), Err(a));
        assert_eq!(locks.acquire(key, Xid(5), b, KeyShare, |x| x == b), Err(a));
        assert_eq!(locks.acquire(key, Xid(5), a, Share, |x| x == a), Ok(false));
        locks.release(&[(key, a)]);
        assert_eq!(
            locks.acquire(key, Xid(5), b, KeyShare, |x| x == b),
            Ok(true)
        );
        assert_eq!(
            locks.acquire(key, Xid(5), a, KeyShare, |x| x == a),
            Ok(true)
        );
        assert_eq!(locks.held(), 2);
    }

    #[test]
    fn a_non_key_update_carries_the_locks_to_the_new_version_until_released() {
        let locks = RowLocks::default();
        let (old, new) = (
            (RelFileId(7), Tid::new(3, 4)),
            (RelFileId(7), Tid::new(3, 9)),
        );
        let (locker, updater) = (Xid(100), Xid(200));
        assert!(locks.add(old, Xid(5), locker, KeyShare));
        locks.carry_over(old, Xid(5), new, updater);
        assert_eq!(
            locks.conflict(new, updater, Update, |x| x == updater),
            Some(locker),
            "the new version is locked too"
        );
        assert_eq!(locks.conflict(new, updater, NoKeyUpdate, |_| false), None);
        locks.release(&[(old, locker)]);
        assert_eq!(locks.held(), 0, "released with the original");
        assert_eq!(locks.conflict(new, updater, Update, |_| false), None);
    }
}
