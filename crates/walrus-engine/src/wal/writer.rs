//! The WAL writer (PostgreSQL's walwriter): one thread that, every `wal_writer_delay`,
//! writes and flushes all WAL inserted so far and prepares the next segments.
//!
//! - **Bounded loss with `synchronous_commit = off`.** An asynchronous commit returns
//!   before its record is durable; this thread makes it durable within one delay plus
//!   one flush (the promise is PostgreSQL's 3 × `wal_writer_delay`), whatever else the
//!   server does. A committer wakes it early once `wal_writer_flush_after` of WAL waits
//!   unflushed, and an inserter wakes it when the ring is half full, so sessions seldom
//!   write WAL themselves (`pg_stat_wal.wal_buffers_full` counts the times they must).
//! - **Segments prepared ahead.** After each round it creates (recycles or zero-fills,
//!   then fsyncs file and directory) the segments the insert position will reach next
//!   (`Wal::preallocate_next`), so a session seldom creates one in the foreground
//!   (`walrus_stat_wal.segments_created_by_sessions` counts when it does). The
//!   checkpointer still does it too, but may be busy for minutes in a spread checkpoint.
//!
//! Its flush is an ordinary group-commit flush: it leads or joins like any committer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::Wal;

pub struct WalWriter {
    wal: Arc<Wal>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl WalWriter {
    pub fn start(wal: Arc<Wal>, delay: Duration) -> std::io::Result<WalWriter> {
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s) = (wal.clone(), stop.clone());
        let handle = std::thread::Builder::new()
            .name("walrus-walwriter".into())
            .spawn(move || run(&w, delay, &s))?;
        Ok(WalWriter {
            wal,
            stop,
            handle: Some(handle),
        })
    }

    /// Stops the thread (after its current round); WAL inserted since is left to the
    /// caller (shutdown's checkpoint flushes it, an immediate stop leaves it).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        self.wal.wake_writer();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn run(wal: &Wal, delay: Duration, stop: &AtomicBool) {
    // A full disk is logged once per episode, as the checkpointer does.
    let mut space_short = false;
    loop {
        wal.writer_sleep(delay);
        if stop.load(Ordering::Acquire) {
            return;
        }
        let upto = wal.inserted_upto();
        if upto > wal.flushed_lsn() {
            wal.flush(upto);
            wal.stats.writer_flushes.fetch_add(1, Ordering::Relaxed);
        }
        match wal.preallocate_next() {
            Ok(()) => space_short = false,
            Err(e) => {
                if !space_short {
                    tracing::warn!("WAL writer could not prepare the next WAL segment: {e}");
                }
                space_short = true;
            }
        }
    }
}
