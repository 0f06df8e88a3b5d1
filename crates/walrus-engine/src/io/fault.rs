//! Test-only fault injection (feature `fault-injection`): tear the Nth data-page write.
//!
//! Armed from the environment so that a crash-test child process can be told where to
//! fail: `WALRUS_FAULT_TEAR_WRITE=N` makes the N-th data-page write (counted from the
//! start of the process, 1-based) that actually changes the second half of the page on
//! disk write only its first 4 KiB, then kills the process with SIGKILL. Requiring the
//! second half to differ guarantees the resulting page really is torn, so a test that
//! expects detection cannot pass by luck. Without the feature everything here is a no-op.

use std::fs::File;

#[cfg(feature = "fault-injection")]
mod imp {
    use std::fs::File;
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    use walrus_base::{PAGE_SIZE, SECTOR_SIZE};

    static TEAR_AT: OnceLock<u64> = OnceLock::new();
    static WRITES: AtomicU64 = AtomicU64::new(0);

    fn tear_at() -> u64 {
        *TEAR_AT.get_or_init(|| {
            std::env::var("WALRUS_FAULT_TEAR_WRITE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        })
    }

    pub fn should_tear(file: &File, buf: &[u8], offset: u64) -> bool {
        let at = tear_at();
        if at == 0 {
            return false;
        }
        let mut old = vec![0u8; PAGE_SIZE - SECTOR_SIZE];
        let n = file
            .read_at(&mut old, offset + SECTOR_SIZE as u64)
            .unwrap_or(0);
        if n < old.len() || old[..] == buf[SECTOR_SIZE..] || old.iter().all(|&b| b == 0) {
            // Only tear a write that replaces a real older version of the page's second
            // half: then the torn page is certainly inconsistent.
            return false;
        }
        WRITES.fetch_add(1, Ordering::SeqCst) + 1 == at
    }

    pub fn die() -> ! {
        eprintln!("walrus fault injection: tore a page write, killing the process");
        std::process::abort()
    }
}

#[cfg(feature = "fault-injection")]
pub fn should_tear(file: &File, buf: &[u8], offset: u64) -> bool {
    imp::should_tear(file, buf, offset)
}

#[cfg(not(feature = "fault-injection"))]
pub fn should_tear(_file: &File, _buf: &[u8], _offset: u64) -> bool {
    false
}

pub fn die() -> ! {
    #[cfg(feature = "fault-injection")]
    imp::die();
    #[cfg(not(feature = "fault-injection"))]
    std::process::abort()
}
