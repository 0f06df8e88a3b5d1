//! I/O seams: the one place data-file bytes reach the operating system, and the
//! test-only fault injector that tears a page write and kills the process.
//!
//! Media assumptions (redb style): a 4 KiB sector write is atomic, an 8 KiB page write is
//! not; `fdatasync` makes written data durable; a failed `fsync` may have dropped dirty
//! pages, so it is never retried (the caller aborts and recovery replays WAL).

pub mod fault;

use std::fs::File;
use std::os::unix::fs::FileExt;

use walrus_base::{PAGE_SIZE, SECTOR_SIZE};

/// Writes one page at `offset`. With the `fault-injection` feature an armed injector may
/// write only the first sector and terminate the process instead.
pub fn write_page_at(file: &File, buf: &[u8], offset: u64) -> std::io::Result<()> {
    debug_assert_eq!(buf.len(), PAGE_SIZE);
    if fault::should_tear(file, buf, offset) {
        file.write_all_at(&buf[..SECTOR_SIZE], offset)?;
        // Make the half-write reach the disk image the next open will see, then die
        // without running any destructor, exactly like a power cut after one sector.
        let _ = file.sync_data();
        fault::die();
    }
    file.write_all_at(buf, offset)
}

/// Gives `file` disk space for the byte range `[from, to)` and makes it at least `to`
/// bytes long; the new range reads as zeros. `fallocate` where the filesystem has it,
/// else zero pages written one chunk at a time. Fails with `ENOSPC` when the disk is full.
pub fn reserve_space(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    if to <= from {
        return Ok(());
    }
    // SAFETY: `file` is an open descriptor for the whole call; fallocate reads no memory.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, from as i64, (to - from) as i64) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if !matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
    ) {
        return Err(err);
    }
    // Never write zeros over a page that is already there: bytes up to the current end
    // of the file may hold pages (recovery writes blocks past the reserved size).
    let zeros = vec![0u8; PAGE_SIZE * 16];
    let mut at = from.max(file.metadata()?.len());
    while at < to {
        let n = zeros.len().min((to - at) as usize);
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Whether an I/O error means the disk (or the user's quota) is full.
pub fn is_out_of_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Reads one page; bytes beyond the end of the file read as zeros (a block that was
/// allocated but never written).
pub fn read_page_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                buf[done..].fill(0);
                break;
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
