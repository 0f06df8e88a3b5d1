//! The group-commit hand-off: who flushes, who waits, who is woken.
//!
//! One committer at a time is the leader: it flushes (writes and syncs everything
//! inserted so far). The others first *poll* for a bounded time, yielding the CPU between
//! looks at the flushed LSN (InnoDB's spin wait for the redo flush): a sync takes
//! 100-200 µs on an SSD, about what waking fourteen parked threads one by one costs the
//! leader, and a poller needs no wake-up at all. A poller that finds no leader running
//! tries to lead. One whose budget runs out (a slow device; the caller sets the budget
//! from the measured sync time) registers in `queue` and parks. After its flush the leader
//! unparks exactly the parked waiters the flush covered, plus the lowest one left, which
//! leads the next flush. (Waking every waiter after each sync sent the uncovered ones
//! straight back to sleep: two context switches each, for nothing.)
//!
//! Invariant (checked by the loom model below): a waiter whose LSN is not yet durable is
//! never left parked with no leader running — whoever leaves the protocol while waiters
//! remain and no leader runs wakes the lowest of them. In production a parked waiter also
//! re-checks every 2 ms, a safety net the model does not rely on.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::time::Duration;

use crate::sync::thread::{self, Thread};
use crate::sync::{AtomicBool, AtomicU64, Mutex};

struct Waiter {
    lsn: u64,
    thread: Thread,
}

pub(crate) struct GroupCommit {
    leader: AtomicBool,
    queue: Mutex<Vec<Waiter>>,
    /// Committers currently parked.
    waiting: AtomicU64,
    /// Committers currently polling.
    polling: AtomicU64,
}

/// How a polling episode ended.
enum Poll {
    Covered,
    Leaderless,
    Expired,
}

/// How a [`GroupCommit::wait`] ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// This caller led a flush.
    Led,
    /// Someone else's flush covered this caller's LSN.
    Covered,
}

impl GroupCommit {
    pub(crate) fn new() -> GroupCommit {
        GroupCommit {
            leader: AtomicBool::new(false),
            queue: Mutex::new(Vec::new()),
            waiting: AtomicU64::new(0),
            polling: AtomicU64::new(0),
        }
    }

    /// Committers waiting for a flush, polling or parked: the leader uses it to see
    /// whether its batch is still growing.
    pub(crate) fn queued(&self) -> u64 {
        self.waiting.load(Relaxed) + self.polling.load(Relaxed)
    }

    /// Returns once `flushed() >= lsn`. `lead` is called (by at most one thread at a
    /// time) to flush; it must make `flushed()` cover at least `lsn`. A caller that cannot
    /// lead polls for up to `poll` before it parks (zero: park at once).
    ///
    /// Giving up leadership and registering as a waiter both happen under `queue`'s lock,
    /// so a waiter either registers before the leader lets go (and is woken by it) or
    /// sees that there is no leader (and tries to become it): no stale read of `leader`
    /// can strand it.
    pub(crate) fn wait(
        &self,
        lsn: u64,
        flushed: &dyn Fn() -> u64,
        lead: &dyn Fn(),
        poll: Duration,
    ) -> Outcome {
        // The thread handle (an Arc clone) only when this caller has to wait.
        let mut me: Option<Thread> = None;
        'elect: loop {
            if !self.leader.swap(true, AcqRel) {
                let _leading = crate::AbortOnUnwind("group-commit flush leader");
                let led = flushed() < lsn;
                if led {
                    lead();
                    assert!(
                        flushed() >= lsn,
                        "group-commit leader did not flush its own LSN"
                    );
                }
                let mut q = self.queue.lock();
                // An RMW rather than a plain store: with `store(false, Release)` the loom
                // model reports a waiter stranded with no leader (a schedule not
                // reproduced by hand, possibly a limit of loom's store modelling); with
                // the swap every bounded schedule verifies. It costs one locked xchg per
                // flush.
                self.leader.swap(false, AcqRel);
                Self::wake(&mut q, flushed());
                return if led { Outcome::Led } else { Outcome::Covered };
            }
            if !poll.is_zero() {
                match self.poll(lsn, flushed, poll) {
                    Poll::Covered => return Outcome::Covered,
                    Poll::Leaderless => continue 'elect,
                    Poll::Expired => {}
                }
            }
            let id = {
                let mut q = self.queue.lock();
                if flushed() >= lsn {
                    return Outcome::Covered;
                }
                if !self.leader.load(Acquire) {
                    continue 'elect; // the leader let go meanwhile: try to become it
                }
                let t = me.get_or_insert_with(thread::current);
                q.push(Waiter {
                    lsn,
                    thread: t.clone(),
                });
                t.id()
            };
            self.waiting.fetch_add(1, Relaxed);
            loop {
                thread::park_timeout(Duration::from_millis(2));
                let mut q = self.queue.lock();
                let covered = flushed() >= lsn;
                let leaderless = !self.leader.load(Acquire);
                if !covered && !leaderless {
                    continue; // woken early; still registered, keep waiting
                }
                q.retain(|w| w.thread.id() != id);
                self.waiting.fetch_sub(1, Relaxed);
                if !covered {
                    continue 'elect;
                }
                if leaderless {
                    // We may have been woken to lead the next flush and no longer need
                    // to: pass that on, or the rest could wait with no leader.
                    Self::wake(&mut q, flushed());
                }
                return Outcome::Covered;
            }
        }
    }

    /// Yields between looks at the flushed LSN until it covers `lsn`, no leader runs, or
    /// `budget` is spent. Never sleeps, so it needs no wake-up: a leader that lets go with
    /// pollers uncovered leaves them to notice and elect one of themselves.
    fn poll(&self, lsn: u64, flushed: &dyn Fn() -> u64, budget: Duration) -> Poll {
        self.polling.fetch_add(1, Relaxed);
        let mut until = thread::Deadline::after(budget);
        let end = loop {
            thread::yield_now();
            if flushed() >= lsn {
                break Poll::Covered;
            }
            if !self.leader.load(Acquire) {
                break Poll::Leaderless;
            }
            if until.passed() {
                break Poll::Expired;
            }
        };
        self.polling.fetch_sub(1, Relaxed);
        end
    }

    /// Unparks the waiters whose LSN is durable, and the lowest remaining one to lead the
    /// next flush. Called with the queue locked.
    fn wake(q: &mut Vec<Waiter>, flushed: u64) {
        let mut next: Option<&Waiter> = None;
        for w in q.iter() {
            if w.lsn <= flushed {
                w.thread.unpark();
            } else if next.is_none_or(|n| w.lsn < n.lsn) {
                next = Some(w);
            }
        }
        if let Some(n) = next {
            n.thread.unpark();
        }
        q.retain(|w| w.lsn > flushed);
    }
}

/// Model checks (`RUSTFLAGS="--cfg loom" cargo test -p walrus-engine --lib loom`): every
/// interleaving of committers inserting, leading and waiting ends with every committer
/// returned and its LSN durable — no lost wake-up, no waiter stranded without a leader.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// `n` committers; `poll` is each one's polling budget (zero: park at once).
    fn committers(n: usize, poll: Duration) {
        // Bounded preemptions (loom's standard way to keep 3+ threads tractable): every
        // schedule with at most 3 forced switches, which covers the hand-off races.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(move || {
            let gc = Arc::new(GroupCommit::new());
            let inserted = Arc::new(AtomicU64::new(0));
            let flushed = Arc::new(AtomicU64::new(0));
            let hs: Vec<_> = (0..n)
                .map(|_| {
                    let (gc, inserted, flushed) = (gc.clone(), inserted.clone(), flushed.clone());
                    loom::thread::spawn(move || {
                        let lsn = inserted.fetch_add(1, AcqRel) + 1; // insert a commit record
                        let f = flushed.clone();
                        let out = gc.wait(
                            lsn,
                            &|| f.load(Acquire),
                            &|| {
                                // The leader syncs everything inserted so far.
                                let upto = inserted.load(Acquire);
                                flushed.fetch_max(upto, AcqRel);
                            },
                            poll,
                        );
                        assert!(flushed.load(Acquire) >= lsn);
                        out
                    })
                })
                .collect();
            let outs: Vec<Outcome> = hs.into_iter().map(|h| h.join().unwrap()).collect();
            assert!(outs.contains(&Outcome::Led), "someone must have flushed");
            assert!(gc.queue.lock().is_empty(), "a waiter stayed registered");
        });
    }

    #[test]
    fn loom_group_commit_two_committers() {
        committers(2, Duration::ZERO);
    }

    #[test]
    fn loom_group_commit_three_committers() {
        committers(3, Duration::ZERO);
    }

    /// Pollers: a poll that ends covered, leaderless or expired (then parks), in every
    /// interleaving with the leader letting go.
    #[test]
    fn loom_group_commit_two_committers_polling() {
        committers(2, Duration::from_micros(100));
    }

    #[test]
    fn loom_group_commit_three_committers_polling() {
        committers(3, Duration::from_micros(100));
    }
}

#[cfg(all(test, not(loom)))]
mod leader_tests {
    use super::*;

    /// A leader that panics mid-flush stops the process (the parent sees an abort with
    /// the reason) instead of leaving the leader flag set, which would hang every later
    /// commit. Runs itself as a child process, since the expected outcome is an abort.
    #[test]
    fn a_panicking_leader_stops_the_process() {
        const CHILD: &str = "WALRUS_TEST_LEADER_PANIC_CHILD";
        if std::env::var(CHILD).is_ok() {
            let gc = GroupCommit::new();
            gc.wait(
                1,
                &|| 0,
                &|| panic!("injected flush failure"),
                Duration::ZERO,
            );
            unreachable!("the panicking leader returned");
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "wal::group_commit::leader_tests::a_panicking_leader_stops_the_process",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "the child survived:\n{err}");
        assert!(
            err.contains("the group-commit flush leader panicked"),
            "the child died for another reason:\n{err}"
        );
    }
}
