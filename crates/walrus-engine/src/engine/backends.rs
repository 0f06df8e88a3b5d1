//! The sessions (backends) connected to this engine: what `pg_stat_activity` and
//! `pg_locks` show of each, and how `pg_cancel_backend` / `pg_terminate_backend` reach
//! one.
//!
//! Each session registers once ([`Backends::register`]) and keeps its entry up to date
//! itself: a statement's start and end each take the entry's own mutex once (nobody
//! else takes it but a reader of the views), so sessions never contend with each other
//! here. The entry goes when the session's [`BackendHandle`] is dropped.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use walrus_base::Xid;

/// What a session is doing, PostgreSQL's `pg_stat_activity.state`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendState {
    #[default]
    Idle,
    Active,
    IdleInTransaction,
    IdleInTransactionAborted,
}

impl BackendState {
    pub fn name(self) -> &'static str {
        match self {
            BackendState::Idle => "idle",
            BackendState::Active => "active",
            BackendState::IdleInTransaction => "idle in transaction",
            BackendState::IdleInTransactionAborted => "idle in transaction (aborted)",
        }
    }
}

/// One session's row of `pg_stat_activity` (times in PostgreSQL's microseconds since
/// 2000-01-01).
#[derive(Clone, Debug, Default)]
pub struct BackendActivity {
    pub user: String,
    pub database: String,
    pub application_name: String,
    pub client_addr: Option<String>,
    pub client_port: Option<i32>,
    pub backend_start: i64,
    pub state: BackendState,
    /// The running statement's text, or the last one's when idle.
    pub query: String,
    pub query_start: Option<i64>,
    pub xact_start: Option<i64>,
    pub state_change: Option<i64>,
    /// The identity its transaction's table locks are held by (`pg_locks`).
    pub lock_owner: Option<Xid>,
    pub backend_xid: Option<Xid>,
}

struct Backend {
    activity: Mutex<BackendActivity>,
    /// The session's interrupt flag: set by a cancel (and a terminate).
    interrupt: Arc<AtomicBool>,
    /// Set by `pg_terminate_backend`: the session ends at its next check.
    terminate: AtomicBool,
    /// Called by a terminate to wake a session blocked reading from its client (the
    /// server shuts the socket's read side); none for sessions without a client.
    wake: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

#[derive(Default)]
pub struct Backends {
    next_pid: AtomicI32,
    all: Mutex<BTreeMap<i32, Arc<Backend>>>,
}

/// A session's registration: its pid, and its entry to keep current. Dropping it
/// removes the entry.
pub struct BackendHandle {
    backends: Arc<Backends>,
    pid: i32,
    entry: Arc<Backend>,
}

impl Backends {
    /// Registers a session whose interrupt flag is `interrupt`; pids are given out
    /// from 1000 up (per engine, never reused while it runs).
    pub fn register(self: &Arc<Self>, interrupt: Arc<AtomicBool>, now: i64) -> BackendHandle {
        let pid = 1000 + self.next_pid.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Backend {
            activity: Mutex::new(BackendActivity {
                backend_start: now,
                state_change: Some(now),
                ..Default::default()
            }),
            interrupt,
            terminate: AtomicBool::new(false),
            wake: Mutex::new(None),
        });
        self.all.lock().insert(pid, entry.clone());
        BackendHandle {
            backends: self.clone(),
            pid,
            entry,
        }
    }

    /// Every session's pid and activity, by pid.
    pub fn list(&self) -> Vec<(i32, BackendActivity)> {
        let all: Vec<(i32, Arc<Backend>)> = self
            .all
            .lock()
            .iter()
            .map(|(p, b)| (*p, b.clone()))
            .collect();
        all.into_iter()
            .map(|(p, b)| (p, b.activity.lock().clone()))
            .collect()
    }

    /// `pg_cancel_backend`: interrupts the session's running statement. False if no
    /// session has that pid.
    pub fn cancel(&self, pid: i32) -> bool {
        match self.all.lock().get(&pid) {
            Some(b) => {
                b.interrupt.store(true, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// `pg_terminate_backend`: the session ends (its running statement interrupted,
    /// a wait for its client's next message woken). False if no session has that pid.
    pub fn terminate(&self, pid: i32) -> bool {
        let Some(b) = self.all.lock().get(&pid).cloned() else {
            return false;
        };
        b.terminate.store(true, Ordering::Release);
        b.interrupt.store(true, Ordering::Release);
        if let Some(wake) = b.wake.lock().as_ref() {
            wake();
        }
        true
    }
}

impl BackendHandle {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Changes this session's activity (one short lock of its own entry).
    pub fn update(&self, change: impl FnOnce(&mut BackendActivity)) {
        change(&mut self.entry.activity.lock());
    }

    /// Whether `pg_terminate_backend` asked this session to end.
    pub fn terminate_requested(&self) -> bool {
        self.entry.terminate.load(Ordering::Acquire)
    }

    /// How a terminate wakes this session when it waits for its client.
    pub fn set_wake(&self, wake: Box<dyn Fn() + Send + Sync>) {
        *self.entry.wake.lock() = Some(wake);
    }
}

impl Drop for BackendHandle {
    fn drop(&mut self) {
        self.backends.all.lock().remove(&self.pid);
    }
}
