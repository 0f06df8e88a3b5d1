//! The data directory's lock: `walrus.pid`, holding the owner's pid, exclusively locked
//! (an advisory `flock`) by every process that opens the directory — the server,
//! `walrus recover`, `walrus verify`, the test and benchmark tools — for as long as it
//! has it open. A second opener gets a clear error naming the owner's pid instead of
//! recovering or writing a directory a live server is using.
//!
//! The kernel drops the lock when the process dies, however it dies, so a pid file left
//! by a crash never blocks a restart, even when its pid now belongs to an unrelated
//! process (checking that the pid exists gets that wrong). A clean close removes the
//! file.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The lock file's name in the data directory.
pub const LOCK_FILE: &str = "walrus.pid";

pub struct DirLock {
    path: PathBuf,
    /// Holds the lock; closing it releases it.
    file: File,
}

impl DirLock {
    /// Locks `dir` for this process and writes its pid into the lock file.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let path = dir.join(LOCK_FILE);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io("open lock file", path.display(), e))?;
        match file.try_lock() {
            Ok(()) => {
                let pid = std::process::id().to_string();
                file.set_len(0)
                    .and_then(|_| file.rewind())
                    .and_then(|_| file.write_all(pid.as_bytes()))
                    .map_err(|e| Error::io("write lock file", path.display(), e))?;
                Ok(DirLock { path, file })
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                Err(Error::BadDataDirectory {
                    dir: dir.display().to_string(),
                    reason: format!(
                        "another walrus (pid {}) is running on it; stop it first",
                        pid.trim()
                    ),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => {
                Err(Error::io("lock data directory", path.display(), e))
            }
        }
    }

    /// Removes the lock file, then releases the lock (a clean close).
    pub fn release(self) {
        let _ = std::fs::remove_file(&self.path);
        drop(self.file);
    }
}

/// Whether a live process holds the lock of the lock file at `path`.
pub fn is_held(path: &Path) -> bool {
    match File::open(path) {
        Ok(f) => f.try_lock_shared().is_err(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_opener_is_refused_until_the_first_releases() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path()).unwrap();
        assert!(is_held(&dir.path().join(LOCK_FILE)));
        let err = DirLock::acquire(dir.path()).err().expect("second lock");
        assert!(
            err.to_string()
                .contains(&format!("another walrus (pid {})", std::process::id())),
            "{err}"
        );
        first.release();
        assert!(!dir.path().join(LOCK_FILE).exists());
        DirLock::acquire(dir.path()).unwrap().release();
    }
}
