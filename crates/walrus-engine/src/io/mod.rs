//! I/O seams: the one place the engine's bytes reach the operating system.
//!
//! Every write, sync, file creation, rename and removal of a data page, WAL segment,
//! commit-status segment or the control file goes through a function here. Normally each
//! is a plain system call. A test harness (the `walrus-bench` crate, never the `walrus`
//! binary) may install [`IoHooks`] once per process, to observe or alter each operation:
//! tear a page write and die, record what a power cut would lose, or fail an operation
//! with an injected error. Nothing in the shipping binary installs hooks, and no
//! environment variable does: `walrus serve` cannot be made to damage its own data.
//!
//! Media assumptions (redb style): a 4 KiB sector write is atomic, an 8 KiB page write is
//! not; `fdatasync` makes written data (and the file size) durable; a created, renamed or
//! removed directory entry is durable only after the directory is fsynced; a failed
//! `fsync` may have dropped dirty pages, so it is never retried: the caller stops the
//! server ([`crate::fatal_io`]) and recovery replays WAL.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::OnceLock;

use walrus_base::PAGE_SIZE;

/// What a file holds, so a hook can tell the engine's I/O paths apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A relation file (heap or index pages).
    Data,
    /// A WAL segment.
    Wal,
    /// A commit-status log segment.
    Clog,
    /// The control file.
    Control,
    /// The double-write buffer's file (`protect::dwb`).
    DoubleWrite,
    /// Anything else (statistics, temporary files).
    Other,
}

/// One I/O operation, as shown to [`IoHooks::around`].
#[derive(Debug)]
pub enum IoOp<'a> {
    /// `buf` is about to be written at `offset` of `file`.
    Write {
        kind: FileKind,
        file: &'a File,
        offset: u64,
        buf: &'a [u8],
        /// Issued with `RWF_ATOMIC` (`page_protection = atomic`): the device writes all
        /// of `buf` or none of it, so a power cut cannot tear it. The write itself goes
        /// through the file's `O_DIRECT` descriptor; `file` is its buffered twin, for a
        /// hook to read the old bytes through.
        atomic: bool,
    },
    /// A data page is about to be read at `offset` of `file`.
    Read {
        kind: FileKind,
        file: &'a File,
        offset: u64,
    },
    /// `file` is about to be synced (`fdatasync`, or `fsync` when `all`).
    Sync {
        kind: FileKind,
        file: &'a File,
        all: bool,
    },
    /// Disk space for `[from, to)` is about to be reserved; the file grows to `to`.
    Reserve {
        kind: FileKind,
        file: &'a File,
        from: u64,
        to: u64,
    },
    /// `path` is about to be opened for writing, created if `create` and missing.
    Open {
        kind: FileKind,
        path: &'a Path,
        create: bool,
    },
    Rename {
        kind: FileKind,
        from: &'a Path,
        to: &'a Path,
    },
    Remove {
        kind: FileKind,
        path: &'a Path,
    },
    /// A directory is about to be fsynced (making its entries durable).
    SyncDir {
        dir: &'a Path,
    },
}

/// Test hooks around every engine I/O operation. `around` must call `run` at most once
/// (it performs the real operation) and return its result, or return an error without
/// calling it (an injected failure).
pub trait IoHooks: Send + Sync + 'static {
    fn around(
        &self,
        op: &IoOp<'_>,
        run: &mut dyn FnMut() -> std::io::Result<()>,
    ) -> std::io::Result<()>;
}

static HOOKS: OnceLock<Box<dyn IoHooks>> = OnceLock::new();

/// Installs the process's I/O hooks; only test harnesses call this, before opening an
/// engine. Fails if hooks were installed already.
pub fn install_hooks(hooks: Box<dyn IoHooks>) -> Result<(), &'static str> {
    HOOKS
        .set(hooks)
        .map_err(|_| "I/O hooks are already installed")
}

#[inline]
fn with_hooks(op: IoOp<'_>, mut run: impl FnMut() -> std::io::Result<()>) -> std::io::Result<()> {
    match HOOKS.get() {
        None => run(),
        Some(h) => h.around(&op, &mut run),
    }
}

/// Writes all of `buf` at `offset`.
pub fn write_at(kind: FileKind, file: &File, buf: &[u8], offset: u64) -> std::io::Result<()> {
    with_hooks(
        IoOp::Write {
            kind,
            file,
            offset,
            buf,
            atomic: false,
        },
        || file.write_all_at(buf, offset),
    )
}

/// One page in memory aligned for `O_DIRECT` (4 KiB covers every device's
/// `dio_mem_align`).
#[repr(C, align(4096))]
struct DirectPage([u8; PAGE_SIZE]);

thread_local! {
    /// Each writing thread's bounce buffer for atomic page writes: the page copies the
    /// writers hand in are not aligned for `O_DIRECT`.
    static DIRECT_PAGE: std::cell::RefCell<Box<DirectPage>> =
        std::cell::RefCell::new(Box::new(DirectPage([0; PAGE_SIZE])));
}

/// Writes one data page at `offset` as a single atomic unit: `pwritev2(RWF_ATOMIC)` on
/// `direct` (the file opened with `O_DIRECT`), from an aligned copy. `buffered` is the
/// same file's ordinary descriptor, shown to the hooks. A device or file system that
/// cannot write the page atomically fails the write (`EINVAL`/`EOPNOTSUPP`), never
/// tears it: the caller treats that like any failed data write.
pub fn write_page_atomic(
    buffered: &File,
    direct: &File,
    buf: &[u8],
    offset: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    assert_eq!(buf.len(), PAGE_SIZE, "an atomic write is one whole page");
    with_hooks(
        IoOp::Write {
            kind: FileKind::Data,
            file: buffered,
            offset,
            buf,
            atomic: true,
        },
        || {
            DIRECT_PAGE.with(|page| {
                let mut page = page.borrow_mut();
                page.0.copy_from_slice(buf);
                let iov = libc::iovec {
                    iov_base: page.0.as_mut_ptr().cast(),
                    iov_len: PAGE_SIZE,
                };
                let off = libc::off_t::try_from(offset).map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, "offset too large")
                })?;
                // SAFETY: `iov` points at this thread's page-sized, 4 KiB-aligned buffer,
                // borrowed mutably for the whole call, so nothing else touches it while
                // the kernel reads it; `direct` is an open descriptor owned by the
                // caller for the duration of the call.
                let n =
                    unsafe { libc::pwritev2(direct.as_raw_fd(), &iov, 1, off, libc::RWF_ATOMIC) };
                match n {
                    n if n < 0 => Err(std::io::Error::last_os_error()),
                    // An atomic write is never partial: anything else is the kernel
                    // breaking its contract, reported rather than retried.
                    n if n as usize == PAGE_SIZE => Ok(()),
                    n => Err(std::io::Error::other(format!(
                        "atomic page write wrote {n} of {PAGE_SIZE} bytes"
                    ))),
                }
            })
        },
    )
}

/// Opens an existing data file a second time with `O_DIRECT`, for atomic page writes.
pub fn open_direct(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// Writes one data page at `offset`.
pub fn write_page_at(file: &File, buf: &[u8], offset: u64) -> std::io::Result<()> {
    debug_assert_eq!(buf.len(), PAGE_SIZE);
    write_at(FileKind::Data, file, buf, offset)
}

/// `fdatasync`. A failure must never be retried (see the module docs).
pub fn sync_data(kind: FileKind, file: &File) -> std::io::Result<()> {
    with_hooks(
        IoOp::Sync {
            kind,
            file,
            all: false,
        },
        || file.sync_data(),
    )
}

/// `fsync` (data and metadata).
pub fn sync_all(kind: FileKind, file: &File) -> std::io::Result<()> {
    with_hooks(
        IoOp::Sync {
            kind,
            file,
            all: true,
        },
        || file.sync_all(),
    )
}

/// Opens `path` for reading and writing; creates it when `create` (never truncating);
/// `O_DSYNC` when `dsync`.
pub fn open_rw(kind: FileKind, path: &Path, create: bool, dsync: bool) -> std::io::Result<File> {
    let mut out = None;
    with_hooks(IoOp::Open { kind, path, create }, || {
        let mut oo = OpenOptions::new();
        oo.read(true).write(true).create(create).truncate(false);
        if dsync {
            oo.custom_flags(libc::O_DSYNC);
        }
        out = Some(oo.open(path)?);
        Ok(())
    })?;
    out.ok_or_else(|| std::io::Error::other("an I/O hook reported an open it did not run"))
}

/// Creates `path`, which must not exist (`O_CREAT | O_EXCL`).
pub fn create_new(kind: FileKind, path: &Path) -> std::io::Result<File> {
    let mut out = None;
    with_hooks(
        IoOp::Open {
            kind,
            path,
            create: true,
        },
        || {
            out = Some(
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(path)?,
            );
            Ok(())
        },
    )?;
    out.ok_or_else(|| std::io::Error::other("an I/O hook reported an open it did not run"))
}

pub fn rename(kind: FileKind, from: &Path, to: &Path) -> std::io::Result<()> {
    with_hooks(IoOp::Rename { kind, from, to }, || {
        std::fs::rename(from, to)
    })
}

pub fn remove_file(kind: FileKind, path: &Path) -> std::io::Result<()> {
    with_hooks(IoOp::Remove { kind, path }, || std::fs::remove_file(path))
}

/// fsyncs a directory so the entries created, renamed or removed in it are durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    with_hooks(IoOp::SyncDir { dir }, || File::open(dir)?.sync_all())
}

/// Gives `file` disk space for the byte range `[from, to)` and makes it at least `to`
/// bytes long; the new range reads as zeros. `fallocate` where the filesystem has it,
/// else zero pages written one chunk at a time. Fails with `ENOSPC` when the disk is full.
pub fn reserve_space(kind: FileKind, file: &File, from: u64, to: u64) -> std::io::Result<()> {
    if to <= from {
        return Ok(());
    }
    with_hooks(
        IoOp::Reserve {
            kind,
            file,
            from,
            to,
        },
        || reserve_space_now(file, from, to),
    )
}

fn reserve_space_now(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
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

/// Reads one data page; bytes beyond the end of the file read as zeros (a block that was
/// allocated but never written).
pub fn read_page_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    with_hooks(
        IoOp::Read {
            kind: FileKind::Data,
            file,
            offset,
        },
        || read_zero_filled(file, buf, offset),
    )
}

fn read_zero_filled(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
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

/// Grows `file` to `len` bytes without reserving space (a sparse tail): the fallback
/// when [`reserve_space`] found the disk full.
pub fn set_len(kind: FileKind, file: &File, len: u64) -> std::io::Result<()> {
    let from = file.metadata()?.len();
    with_hooks(
        IoOp::Reserve {
            kind,
            file,
            from,
            to: len,
        },
        || file.set_len(len),
    )
}
