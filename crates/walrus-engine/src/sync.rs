//! Atomics for code that is model-checked with loom: the std types normally, loom's under
//! `--cfg loom` (see `.ci/run`), so a loom test explores every interleaving of the real
//! code rather than of a copy of it. Used by the commit-status log's lock-free paths and
//! the group-commit hand-off.

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicU64};
#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicBool, AtomicU64};

/// A spin-wait step that loom can see (it must know a thread is waiting on another).
#[inline]
pub fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// A mutex with parking_lot's guard-returning `lock`, modelled under loom.
#[cfg(not(loom))]
pub use parking_lot::Mutex;

#[cfg(loom)]
pub struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub fn new(v: T) -> Mutex<T> {
        Mutex(loom::sync::Mutex::new(v))
    }
    pub fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0.lock().expect("loom mutex poisoned")
    }
}

/// Threads as the group-commit hand-off uses them: the current handle, park with a
/// safety-net timeout (loom has no timeouts: it must prove no wake-up is ever lost).
pub mod thread {
    #[cfg(loom)]
    pub use loom::thread::{current, Thread};
    #[cfg(not(loom))]
    pub use std::thread::{current, Thread};

    #[cfg(loom)]
    pub use loom::thread::yield_now;
    #[cfg(not(loom))]
    pub use std::thread::yield_now;

    /// The end of a bounded polling episode. Loom has no clock, so under loom an episode
    /// is one poll, which may end in any of the three ways (covered, leaderless, expired
    /// and then park) depending on the interleaving.
    pub struct Deadline {
        #[cfg(not(loom))]
        at: std::time::Instant,
        #[cfg(loom)]
        polls_left: u32,
    }

    impl Deadline {
        #[cfg(not(loom))]
        pub fn after(d: std::time::Duration) -> Deadline {
            Deadline {
                at: std::time::Instant::now() + d,
            }
        }
        #[cfg(loom)]
        pub fn after(_d: std::time::Duration) -> Deadline {
            Deadline { polls_left: 1 }
        }
        #[cfg(not(loom))]
        pub fn passed(&mut self) -> bool {
            std::time::Instant::now() >= self.at
        }
        #[cfg(loom)]
        pub fn passed(&mut self) -> bool {
            self.polls_left = self.polls_left.saturating_sub(1);
            self.polls_left == 0
        }
    }

    #[cfg(not(loom))]
    pub fn park_timeout(d: std::time::Duration) {
        std::thread::park_timeout(d)
    }
    #[cfg(loom)]
    pub fn park_timeout(_d: std::time::Duration) {
        loom::thread::park()
    }
}
