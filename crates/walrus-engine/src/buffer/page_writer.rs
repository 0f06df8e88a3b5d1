//! Page-writer threads: keep clean victims ahead of the clock hand and write from the
//! head of the dirty queue (oldest `rec_lsn` first, which advances the redo point of an
//! incremental checkpoint).
//!
//! They flush the queue head for three reasons, whichever asks for the most:
//! - more than half the pool is dirty (backends must keep finding clean victims);
//! - the redo lag (`insert LSN − oldest rec_lsn`) is over `FlushControl::lag_target`,
//!   which the checkpointer sizes from `recovery_time_target` and the measured replay
//!   rate (incremental checkpoints, DESIGN §5);
//! - a checkpoint that would miss `checkpoint_target_time` alone asks for help up to
//!   its redo point (`checkpoint_upto`).
//!
//! All threads flush in parallel: `BufferPool::flush_queue_head` hands each a disjoint
//! run of the queue, and with `dwb` each batch takes its own double-write slot.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use walrus_base::limits::PAGE_WRITER_BATCH_PAGES_MAX;
use walrus_base::Lsn;

use super::{BufferPool, Writer, WriterRole};

/// What the page writers aim for, set by the checkpointer; read by every round.
#[derive(Debug)]
pub struct FlushControl {
    /// Flush entries whose `rec_lsn` is more than this many bytes of WAL behind the
    /// insert position (`u64::MAX`: no lag target, classic checkpoints).
    pub lag_target: AtomicU64,
    /// A checkpoint asks for help: flush entries below this LSN (0: none).
    pub checkpoint_upto: AtomicU64,
    /// `extreme_flush_dirty_page`: four times larger batches while helping a checkpoint.
    pub extreme: bool,
    /// One entry per page-writer thread.
    pub threads: Box<[PageWriterStats]>,
}

/// Per-thread counters for `walrus_flush_detail()`.
#[derive(Debug, Default)]
pub struct PageWriterStats {
    pub pages: AtomicU64,
    pub batches: AtomicU64,
    /// Pages per second over the thread's last full second.
    pub rate: AtomicU64,
}

impl FlushControl {
    pub fn new(threads: usize, extreme: bool) -> FlushControl {
        FlushControl {
            lag_target: AtomicU64::new(u64::MAX),
            checkpoint_upto: AtomicU64::new(0),
            extreme,
            threads: (0..threads.max(1))
                .map(|_| PageWriterStats::default())
                .collect(),
        }
    }

    /// Batch size for one `flush_queue_head` call by a page writer.
    fn batch_pages(&self) -> usize {
        let helping = self.checkpoint_upto.load(Ordering::Acquire) != 0;
        if helping && self.extreme {
            PAGE_WRITER_BATCH_PAGES_MAX * 4
        } else {
            PAGE_WRITER_BATCH_PAGES_MAX
        }
    }

    /// The LSN below which the queue head should be written now (`Lsn::ZERO`: nothing
    /// to do for the lag or a checkpoint).
    fn flush_upto(&self, insert: Lsn) -> Lsn {
        let lag = self.lag_target.load(Ordering::Acquire);
        let by_lag = if lag == u64::MAX || insert.0 <= lag {
            Lsn::ZERO
        } else {
            Lsn(insert.0 - lag)
        };
        by_lag.max(Lsn(self.checkpoint_upto.load(Ordering::Acquire)))
    }
}

pub struct PageWriters {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pool: Arc<BufferPool>,
}

impl PageWriters {
    pub fn start(
        pool: Arc<BufferPool>,
        control: Arc<FlushControl>,
        delay: Duration,
    ) -> PageWriters {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..control.threads.len())
            .map(|i| {
                let (pool, stop, control) = (pool.clone(), stop.clone(), control.clone());
                std::thread::Builder::new()
                    .name(format!("walrus-pagewriter-{i}"))
                    .spawn(move || run(&pool, &control, i, &stop, delay))
                    .expect("spawn page writer")
            })
            .collect();
        PageWriters {
            stop,
            threads,
            pool,
        }
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.pool.wake_writers();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for PageWriters {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(pool: &BufferPool, control: &FlushControl, me: usize, stop: &AtomicBool, delay: Duration) {
    let _role = WriterRole::enter(Writer::PageWriter);
    let stats = &control.threads[me];
    let mut window = (Instant::now(), 0u64);
    let record = |n: usize| {
        if n > 0 {
            stats.pages.fetch_add(n as u64, Ordering::Relaxed);
            stats.batches.fetch_add(1, Ordering::Relaxed);
        }
    };
    while !stop.load(Ordering::Acquire) {
        {
            let mut woken = pool.writer_wake.0.lock();
            if !*woken {
                pool.writer_wake.1.wait_for(&mut woken, delay);
            }
            *woken = false;
        }
        if stop.load(Ordering::Acquire) {
            break;
        }
        let scan = (pool.nframes() / 8).max(32);
        match pool.clean_ahead_of_clock(scan, PAGE_WRITER_BATCH_PAGES_MAX) {
            Ok(n) => record(n),
            Err(e) => {
                tracing::error!("page writer could not write a page: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        }
        // The queue head: for the dirty share of the pool, the redo lag, a checkpoint.
        let high = pool.nframes() / 2;
        let mut rounds = 0;
        while rounds < 64 && !stop.load(Ordering::Acquire) {
            let upto = if pool.dirty_pages() > high {
                Lsn::MAX
            } else {
                control.flush_upto(pool.wal.insert_lsn())
            };
            if upto == Lsn::ZERO {
                break;
            }
            match pool.flush_queue_head(upto, control.batch_pages(), Writer::PageWriter) {
                Ok((n, more)) => {
                    record(n);
                    if n == 0 || !more {
                        break;
                    }
                    rounds += 1;
                }
                Err(e) => {
                    tracing::error!("page writer could not write a page: {e}");
                    break;
                }
            }
        }
        let now = Instant::now();
        if now.duration_since(window.0) >= Duration::from_secs(1) {
            let pages = stats.pages.load(Ordering::Relaxed);
            let secs = now.duration_since(window.0).as_secs_f64();
            stats
                .rate
                .store(((pages - window.1) as f64 / secs) as u64, Ordering::Relaxed);
            window = (now, pages);
        }
    }
}
