//! Page-writer threads: keep clean victims ahead of the clock hand and keep the number of
//! dirty pages in check by writing from the head of the dirty queue (oldest `rec_lsn`
//! first, which also advances the redo LSN an incremental checkpoint could use).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use walrus_base::limits::PAGE_WRITER_BATCH_PAGES_MAX;
use walrus_base::Lsn;

use super::{BufferPool, Writer};

pub struct PageWriters {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pool: Arc<BufferPool>,
}

impl PageWriters {
    pub fn start(pool: Arc<BufferPool>, n: usize, delay: Duration) -> PageWriters {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n.max(1))
            .map(|i| {
                let (pool, stop) = (pool.clone(), stop.clone());
                std::thread::Builder::new()
                    .name(format!("walrus-pagewriter-{i}"))
                    .spawn(move || run(&pool, &stop, delay))
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

fn run(pool: &BufferPool, stop: &AtomicBool, delay: Duration) {
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
        if let Err(e) = pool.clean_ahead_of_clock(scan, PAGE_WRITER_BATCH_PAGES_MAX) {
            tracing::error!("page writer could not write a page: {e}");
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        // Keep at most half the pool dirty: write the oldest pages first.
        let high = pool.nframes() / 2;
        let mut rounds = 0;
        while pool.dirty_pages() > high && rounds < 16 && !stop.load(Ordering::Acquire) {
            match pool.flush_queue_head(Lsn::MAX, PAGE_WRITER_BATCH_PAGES_MAX, Writer::PageWriter) {
                Ok((0, _)) => break,
                Ok(_) => rounds += 1,
                Err(e) => {
                    tracing::error!("page writer could not write a page: {e}");
                    break;
                }
            }
        }
    }
}
