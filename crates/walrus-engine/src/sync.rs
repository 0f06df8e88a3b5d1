//! Atomics for code that is model-checked with loom: the std types normally, loom's under
//! `--cfg loom` (see `.ci/run`), so a loom test explores every interleaving of the real
//! code rather than of a copy of it. Only the commit-status log's lock-free paths use
//! this today.

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
