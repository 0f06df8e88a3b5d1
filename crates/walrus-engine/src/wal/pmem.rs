//! libpmem (PMDK), loaded at run time: the few functions `wal_sync_method = pmem` uses.
//!
//! Why at run time (`dlopen` through `libloading`) and not linked: `walrus serve` must
//! start on a machine without libpmem; only the pmem method needs it, and only that method
//! fails, with "libpmem not found: install libpmem1".
//!
//! This is one of the few modules with `unsafe`. The invariants it relies on:
//! 1. The function pointers are used only while the `Library` they came from is loaded:
//!    [`Pmem`] owns it, and every [`PmemMap`] holds an `Arc<Pmem>`, so the library outlives
//!    every mapping and every call.
//! 2. A [`PmemMap`] owns `[addr, addr + len)`, mapped by `pmem_map_file` and unmapped only
//!    in its `Drop`. Stores into it go through `&mut self` ([`PmemMap::copy_nodrain`]), so
//!    Rust's borrow rules forbid two at once; reads of WAL go through `pread` on the file,
//!    never through the mapping.
//! 3. Each declared signature matches `libpmem.h` of PMDK 1.x (`LIBPMEM_1.0` symbols).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

/// The name `dlopen` looks for unless `wal_pmem_library` says otherwise (Debian's
/// `libpmem1` package installs `libpmem.so.1`).
pub const LIBRARY_DEFAULT: &str = "libpmem.so.1";

/// libpmem's own switch: with `PMEM_IS_PMEM_FORCE=1` it reports every mapping as
/// persistent memory without looking (its test knob). walrus then cannot know whether
/// the WAL is durable, and says so.
pub const FORCE_ENV: &str = "PMEM_IS_PMEM_FORCE";

const PMEM_FILE_CREATE: c_int = 1 << 0;
const PMEM_FILE_TMPFILE: c_int = 1 << 3;

type MapFileFn = unsafe extern "C" fn(
    path: *const c_char,
    len: usize,
    flags: c_int,
    mode: c_uint,
    mapped_len: *mut usize,
    is_pmem: *mut c_int,
) -> *mut c_void;
type UnmapFn = unsafe extern "C" fn(addr: *mut c_void, len: usize) -> c_int;
type IsPmemFn = unsafe extern "C" fn(addr: *const c_void, len: usize) -> c_int;
type MemcpyNodrainFn =
    unsafe extern "C" fn(dest: *mut c_void, src: *const c_void, len: usize) -> *mut c_void;
type DrainFn = unsafe extern "C" fn();
type ErrormsgFn = unsafe extern "C" fn() -> *const c_char;

#[derive(Debug, thiserror::Error)]
pub enum PmemError {
    #[error("libpmem not found: install libpmem1 (wal_sync_method = pmem loads \"{library}\": {reason})")]
    NotFound { library: String, reason: String },
    #[error("libpmem \"{library}\" lacks {symbol}: {reason}")]
    MissingSymbol {
        library: String,
        symbol: &'static str,
        reason: String,
    },
    #[error("could not map \"{path}\" with pmem_map_file: {reason}")]
    Map { path: PathBuf, reason: String },
    #[error(
        "WAL directory \"{dir}\" is not persistent memory (pmem_is_pmem is false): \
         wal_sync_method = pmem needs a DAX file system on PMEM or CXL memory with a \
         persistence domain; to try it without one (NOT durable), set {FORCE_ENV}=1"
    )]
    NotPmem { dir: PathBuf },
}

/// The loaded library and the functions walrus calls.
pub struct Pmem {
    library: String,
    map_file: MapFileFn,
    unmap: UnmapFn,
    is_pmem: IsPmemFn,
    memcpy_nodrain: MemcpyNodrainFn,
    drain: DrainFn,
    errormsg: ErrormsgFn,
    /// Kept loaded for as long as the pointers above are used (invariant 1); declared
    /// last so it is dropped last.
    _lib: libloading::Library,
}

impl std::fmt::Debug for Pmem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pmem")
            .field("library", &self.library)
            .finish()
    }
}

impl Pmem {
    /// Loads libpmem from `library` (a file name `dlopen` searches for, or a path).
    pub fn load(library: &str) -> Result<Arc<Pmem>, PmemError> {
        // SAFETY: loading runs the library's initializers. libpmem's only reads its
        // environment variables and CPU features; it starts no threads and registers
        // nothing that outlives the `Library`.
        let lib =
            unsafe { libloading::Library::new(library) }.map_err(|e| PmemError::NotFound {
                library: library.to_string(),
                reason: e.to_string(),
            })?;
        // SAFETY: each type below is that function's signature in libpmem.h (invariant
        // 3); the pointers are copied out of their `Symbol`s and used only while `lib`,
        // moved into the same `Pmem`, stays loaded (invariant 1).
        let pmem = unsafe {
            Pmem {
                library: library.to_string(),
                map_file: symbol::<MapFileFn>(&lib, library, "pmem_map_file")?,
                unmap: symbol::<UnmapFn>(&lib, library, "pmem_unmap")?,
                is_pmem: symbol::<IsPmemFn>(&lib, library, "pmem_is_pmem")?,
                memcpy_nodrain: symbol::<MemcpyNodrainFn>(&lib, library, "pmem_memcpy_nodrain")?,
                drain: symbol::<DrainFn>(&lib, library, "pmem_drain")?,
                errormsg: symbol::<ErrormsgFn>(&lib, library, "pmem_errormsg")?,
                _lib: lib,
            }
        };
        Ok(Arc::new(pmem))
    }

    /// Whether libpmem was told to call every mapping persistent memory
    /// (`PMEM_IS_PMEM_FORCE=1`): then nothing says the WAL is durable.
    pub fn forced() -> bool {
        std::env::var(FORCE_ENV).is_ok_and(|v| v.trim() == "1")
    }

    /// libpmem's message for the last failed call on this thread.
    fn last_error(&self) -> String {
        // SAFETY: pmem_errormsg returns a pointer to a thread-local, NUL-terminated
        // buffer (or NULL); it is copied out before any other libpmem call on this thread.
        unsafe {
            let p = (self.errormsg)();
            if p.is_null() {
                String::from("unknown error")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }

    /// Maps the whole of the existing file `path` (its length is the mapping's).
    pub fn map(self: &Arc<Self>, path: &Path) -> Result<PmemMap, PmemError> {
        self.map_with(path, 0, 0)
    }

    /// Whether a file in `dir` would be persistent memory: maps an unnamed temporary file
    /// there (`PMEM_FILE_TMPFILE`, gone when unmapped) and asks `pmem_is_pmem`.
    pub fn check_dir(self: &Arc<Self>, dir: &Path) -> Result<(), PmemError> {
        let probe = self.map_with(dir, 1 << 16, PMEM_FILE_CREATE | PMEM_FILE_TMPFILE)?;
        if probe.is_pmem {
            Ok(())
        } else {
            // The resolved path: `data_dir/wal` may be a link to `wal_directory`.
            Err(PmemError::NotPmem {
                dir: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
            })
        }
    }

    fn map_with(
        self: &Arc<Self>,
        path: &Path,
        len: usize,
        flags: c_int,
    ) -> Result<PmemMap, PmemError> {
        let map_err = |reason: String| PmemError::Map {
            path: path.to_path_buf(),
            reason,
        };
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| map_err("the path contains a NUL byte".into()))?;
        let mut mapped_len = 0usize;
        let mut is_pmem: c_int = 0;
        // SAFETY: `c_path` is NUL-terminated and lives across the call; both out-pointers
        // point at live locals; with `len == 0` and no flags libpmem maps an existing file
        // whole, otherwise creates an unnamed file of `len` bytes in the directory.
        let addr = unsafe {
            (self.map_file)(
                c_path.as_ptr(),
                len,
                flags,
                0o600,
                &mut mapped_len,
                &mut is_pmem,
            )
        };
        let Some(addr) = NonNull::new(addr.cast::<u8>()) else {
            return Err(map_err(self.last_error()));
        };
        // pmem_map_file's answer is pmem_is_pmem's; ask the function itself as well, over
        // the whole mapping, and believe the mapping is pmem only if both say so.
        // SAFETY: `[addr, addr + mapped_len)` was just mapped by libpmem; the call reads
        // only libpmem's own bookkeeping about that range.
        let whole = unsafe { (self.is_pmem)(addr.as_ptr().cast::<c_void>(), mapped_len) };
        Ok(PmemMap {
            pmem: self.clone(),
            addr,
            len: mapped_len,
            is_pmem: is_pmem != 0 && whole != 0,
        })
    }

    /// Waits until every `pmem_memcpy_nodrain` store *this thread* issued (on any
    /// mapping) has reached the persistence domain: it is a store fence, so it covers no
    /// other thread's stores; whoever copies must drain. It cannot fail; a poisoned line
    /// shows up as SIGBUS at the store, which ends the process like any fatal WAL error.
    pub fn drain(&self) {
        // SAFETY: pmem_drain takes no arguments and touches no memory of ours.
        unsafe { (self.drain)() }
    }
}

/// The function `name` of `lib`, as a `T`.
///
/// # Safety
/// `T` must be the function's C signature, and the returned pointer must not be used
/// after `lib` is unloaded.
unsafe fn symbol<T: Copy>(
    lib: &libloading::Library,
    library: &str,
    name: &'static str,
) -> Result<T, PmemError> {
    // SAFETY: the caller vouches for `T` and for the pointer's lifetime (above).
    let s = unsafe { lib.get::<T>(name.as_bytes()) }.map_err(|e| PmemError::MissingSymbol {
        library: library.to_string(),
        symbol: name,
        reason: e.to_string(),
    })?;
    Ok(*s)
}

/// One file mapped by `pmem_map_file`, unmapped on drop (invariant 2).
pub struct PmemMap {
    pmem: Arc<Pmem>,
    addr: NonNull<u8>,
    len: usize,
    is_pmem: bool,
}

// SAFETY: the mapping is plain shared memory owned by this value; stores need `&mut self`
// (invariant 2), so moving it to or sharing it with another thread adds no data race.
unsafe impl Send for PmemMap {}
// SAFETY: as above: `&PmemMap` allows no store and no load through the mapping.
unsafe impl Sync for PmemMap {}

impl PmemMap {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// `pmem_is_pmem` for the whole mapping (and `pmem_map_file`'s flag agreed).
    pub fn is_pmem(&self) -> bool {
        self.is_pmem
    }

    /// Copies `src` to `offset` of the mapping with `pmem_memcpy_nodrain`: the bytes are
    /// flushed from the CPU caches (or written non-temporally) but durable only after the
    /// next [`Pmem::drain`] on this thread.
    pub fn copy_nodrain(&mut self, offset: usize, src: &[u8]) {
        assert!(
            offset <= self.len && src.len() <= self.len - offset,
            "copy of {} bytes at {offset} outside a {}-byte mapping",
            src.len(),
            self.len
        );
        // SAFETY: the destination range is inside the mapping (asserted above), which this
        // value owns exclusively for the call (`&mut self`, invariant 2); `src` is a live
        // slice and cannot overlap a mapping no Rust reference points into.
        unsafe {
            (self.pmem.memcpy_nodrain)(
                self.addr.as_ptr().add(offset).cast::<c_void>(),
                src.as_ptr().cast::<c_void>(),
                src.len(),
            );
        }
    }
}

impl Drop for PmemMap {
    fn drop(&mut self) {
        // SAFETY: `addr`/`len` are exactly what pmem_map_file returned, unmapped only here
        // (invariant 2), and the library is still loaded (`self.pmem`, invariant 1).
        let rc = unsafe { (self.pmem.unmap)(self.addr.as_ptr().cast::<c_void>(), self.len) };
        if rc != 0 {
            // Nothing is lost (stores were drained before the flushed LSN moved); only
            // address space leaks.
            tracing::warn!("pmem_unmap failed: {}", self.pmem.last_error());
        }
    }
}
