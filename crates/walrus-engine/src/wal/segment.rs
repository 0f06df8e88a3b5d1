//! WAL segment files: `wal/<segno as 16 hex digits>`, each `segment_size` bytes, created
//! zero-filled (so `fdatasync` never has file-size metadata to flush) or recycled from
//! segments a checkpoint no longer needs.
//!
//! With `wal_sync_method = pmem` the same files are also mapped with libpmem
//! (`wal::pmem`): writes become `pmem_memcpy_nodrain` stores into the mapping and the
//! writer drains them (`Segments::drain`) instead of syncing; creation, recycling and
//! reading (`pread`, coherent with the mapping) do not change.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use walrus_base::Lsn;

use super::pmem::{Pmem, PmemError, PmemMap};
use crate::error::{Error, Result};
use crate::io::{self, FileKind};
use crate::storage::relfile::sync_dir;

/// `wal_sync_method`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncMethod {
    Fdatasync,
    Fsync,
    /// Segments opened with `O_DSYNC`: every write is durable when it returns.
    OpenDatasync,
    /// No durability at all. Tests and comparisons only; logged loudly at start.
    None,
    /// Segments mapped with libpmem (`pmem_map_file`) on persistent memory; the writer
    /// copies WAL in with `pmem_memcpy_nodrain` and a flush is `pmem_drain`: no system
    /// call on the commit path.
    Pmem,
}

impl SyncMethod {
    pub fn parse(s: &str) -> Option<SyncMethod> {
        match s {
            "fdatasync" => Some(SyncMethod::Fdatasync),
            "fsync" => Some(SyncMethod::Fsync),
            "open_datasync" => Some(SyncMethod::OpenDatasync),
            "none" | "off" => Some(SyncMethod::None),
            "pmem" => Some(SyncMethod::Pmem),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            SyncMethod::Fdatasync => "fdatasync",
            SyncMethod::Fsync => "fsync",
            SyncMethod::OpenDatasync => "open_datasync",
            SyncMethod::None => "none",
            SyncMethod::Pmem => "pmem",
        }
    }
}

pub struct Segments {
    dir: PathBuf,
    pub segment_size: u64,
    method: SyncMethod,
    open: Mutex<HashMap<u64, Arc<File>>>,
    /// Serializes changes to the directory's set of segments: creating one (the flush
    /// leader on the commit path, the checkpointer ahead of it) and recycling (the
    /// checkpointer). Without it two creators of one segment share a temporary file
    /// and one rename fails, and a recycle could rename an old segment over one just
    /// created and already open for writing.
    files: Mutex<()>,
    /// libpmem, loaded when the method is `pmem` (and only then).
    pmem: Option<Arc<Pmem>>,
    /// Mapped segments (pmem only). Each mapping has its own lock: stores need `&mut`
    /// (`wal::pmem` invariant 2), and only the WAL writer path, serialized by the caller's
    /// `write_state`, stores, so the lock is never contended.
    maps: Mutex<HashMap<u64, Arc<Mutex<PmemMap>>>>,
}

impl Segments {
    /// The segments of `data_dir/wal` (libpmem from its default name for `pmem`).
    pub fn new(data_dir: &Path, segment_size: u64, method: SyncMethod) -> Result<Segments> {
        Segments::open_with(data_dir, segment_size, method, super::pmem::LIBRARY_DEFAULT)
    }

    /// As [`Segments::new`], loading libpmem from `pmem_library` when the method is
    /// `pmem`. Then the WAL directory must be persistent memory (`pmem_is_pmem`), or
    /// libpmem told to pretend it is (`PMEM_IS_PMEM_FORCE=1`): anything else is refused
    /// here, before a record is written.
    pub fn open_with(
        data_dir: &Path,
        segment_size: u64,
        method: SyncMethod,
        pmem_library: &str,
    ) -> Result<Segments> {
        assert!(segment_size >= 1 << 16 && segment_size.is_power_of_two());
        let dir = data_dir.join("wal");
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io("create directory", dir.display(), e))?;
        let pmem = match method {
            SyncMethod::Pmem => {
                let pmem = Pmem::load(pmem_library)?;
                pmem.check_dir(&dir)?;
                Some(pmem)
            }
            SyncMethod::Fdatasync
            | SyncMethod::Fsync
            | SyncMethod::OpenDatasync
            | SyncMethod::None => None,
        };
        Ok(Segments {
            dir,
            segment_size,
            method,
            open: Mutex::new(HashMap::new()),
            files: Mutex::new(()),
            pmem,
            maps: Mutex::new(HashMap::new()),
        })
    }

    /// Whether writes go into libpmem mappings (`wal_sync_method = pmem`).
    pub fn is_mapped(&self) -> bool {
        self.pmem.is_some()
    }

    pub fn method(&self) -> SyncMethod {
        self.method
    }

    /// Whether a flushed commit survives a power failure, as far as walrus can tell, in
    /// words for the log and `walrus_stat_wal.durability`. `pmem` with
    /// `PMEM_IS_PMEM_FORCE=1` is reported as not durable: libpmem then skips its check,
    /// and the directory is typically tmpfs (DRAM).
    pub fn durability(&self) -> &'static str {
        match self.method {
            SyncMethod::None => "NOT DURABLE: wal_sync_method = none",
            SyncMethod::Pmem if Pmem::forced() => {
                "NOT DURABLE: PMEM_IS_PMEM_FORCE=1 made libpmem call the WAL directory \
                 persistent memory without checking"
            }
            SyncMethod::Fdatasync
            | SyncMethod::Fsync
            | SyncMethod::OpenDatasync
            | SyncMethod::Pmem => "durable",
        }
    }

    /// The WAL directory (`data_dir/wal`, which may be a symbolic link to
    /// `wal_directory`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes segment files left half-created by a crash or a full disk (`*.tmp`): they
    /// hold no WAL, only disk space. Called when the engine opens the log for writing.
    pub fn remove_temp_files(&self) -> Result<usize> {
        let rd = std::fs::read_dir(&self.dir)
            .map_err(|e| Error::io("read directory", self.dir.display(), e))?;
        let mut removed = 0;
        for ent in rd.flatten() {
            if ent
                .file_name()
                .to_str()
                .is_some_and(|n| n.ends_with(".tmp"))
            {
                let p = ent.path();
                std::fs::remove_file(&p)
                    .map_err(|e| Error::io("remove temporary WAL file", p.display(), e))?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    pub fn path(&self, segno: u64) -> PathBuf {
        self.dir.join(format!("{segno:016X}"))
    }

    pub fn segno(&self, lsn: Lsn) -> u64 {
        lsn.0 / self.segment_size
    }

    /// Segment numbers present on disk, ascending.
    pub fn list(&self) -> Result<Vec<u64>> {
        let mut v = Vec::new();
        let rd = std::fs::read_dir(&self.dir)
            .map_err(|e| Error::io("read directory", self.dir.display(), e))?;
        for ent in rd.flatten() {
            if let Some(n) = ent
                .file_name()
                .to_str()
                .and_then(|s| u64::from_str_radix(s, 16).ok())
            {
                v.push(n);
            }
        }
        v.sort_unstable();
        Ok(v)
    }

    fn open_existing(&self, segno: u64) -> Result<Option<Arc<File>>> {
        if let Some(f) = self.open.lock().get(&segno) {
            return Ok(Some(f.clone()));
        }
        let path = self.path(segno);
        let dsync = self.method == SyncMethod::OpenDatasync;
        match io::open_rw(FileKind::Wal, &path, false, dsync) {
            Ok(f) => {
                let len = f
                    .metadata()
                    .map_err(|e| Error::io("stat", path.display(), e))?
                    .len();
                if len != self.segment_size {
                    return Err(Error::BadWal(format!(
                        "segment {} has {len} bytes, expected {}",
                        path.display(),
                        self.segment_size
                    )));
                }
                let f = Arc::new(f);
                self.open.lock().insert(segno, f.clone());
                Ok(Some(f))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("open WAL segment", path.display(), e)),
        }
    }

    /// The segment file, created (recycled or zero-filled) if it does not exist.
    fn open_or_create(&self, segno: u64) -> Result<Arc<File>> {
        Ok(self.open_or_create_counted(segno)?.0)
    }

    /// [`Segments::open_or_create`], and whether this call created the file.
    fn open_or_create_counted(&self, segno: u64) -> Result<(Arc<File>, bool)> {
        if let Some(f) = self.open_existing(segno)? {
            return Ok((f, false));
        }
        let _files = self.files.lock();
        // Another thread may have created it while we waited.
        if let Some(f) = self.open_existing(segno)? {
            return Ok((f, false));
        }
        let path = self.path(segno);
        let tmp = self.dir.join(format!("{segno:016X}.tmp"));
        // A leftover temporary file of an interrupted creation is started over.
        let _ = std::fs::remove_file(&tmp);
        let f = io::create_new(FileKind::Wal, &tmp)
            .map_err(|e| Error::io("create WAL segment", tmp.display(), e))?;
        let zeros = vec![0u8; 1 << 20];
        let mut off = 0;
        while off < self.segment_size {
            let n = zeros.len().min((self.segment_size - off) as usize);
            if let Err(e) = io::write_at(FileKind::Wal, &f, &zeros[..n], off) {
                // A full disk: give back what the half-made segment took.
                let _ = std::fs::remove_file(&tmp);
                return Err(Error::io("zero-fill WAL segment", tmp.display(), e));
            }
            off += n as u64;
        }
        if let Err(e) = io::sync_all(FileKind::Wal, &f) {
            crate::fatal_io("fsync new WAL segment", &e);
        }
        io::rename(FileKind::Wal, &tmp, &path)
            .map_err(|e| Error::io("rename WAL segment", path.display(), e))?;
        sync_dir(&self.dir)?;
        Ok((
            self.open_existing(segno)?.expect("segment just created"),
            true,
        ))
    }

    /// Writes `bytes` at `lsn`, across segment boundaries as needed. With `pmem` the
    /// bytes are stored into the mapping and durable only after [`Segments::drain`] on
    /// this same thread.
    pub fn write(&self, mut lsn: Lsn, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let segno = self.segno(lsn);
            let off = lsn.0 % self.segment_size;
            let n = bytes.len().min((self.segment_size - off) as usize);
            if self.pmem.is_some() {
                self.mapping(segno)?
                    .lock()
                    .copy_nodrain(off as usize, &bytes[..n]);
            } else {
                let f = self.open_or_create(segno)?;
                io::write_at(FileKind::Wal, &f, &bytes[..n], off)
                    .map_err(|e| Error::io("write WAL segment", self.path(segno).display(), e))?;
            }
            bytes = &bytes[n..];
            lsn = lsn.add(n as u64);
        }
        Ok(())
    }

    /// `pmem`: makes every store this thread made through [`Segments::write`] durable
    /// (`pmem_drain`). A no-op for the other methods, which sync per segment.
    pub fn drain(&self) {
        if let Some(p) = &self.pmem {
            p.drain();
        }
    }

    /// Segment `segno`'s mapping (pmem only), created (file and mapping) if needed.
    fn mapping(&self, segno: u64) -> Result<Arc<Mutex<PmemMap>>> {
        let pmem = self
            .pmem
            .as_ref()
            .expect("mapping() only with wal_sync_method = pmem");
        if let Some(m) = self.maps.lock().get(&segno) {
            return Ok(m.clone());
        }
        // Make sure the file exists (zero-filled and synced, or recycled) first.
        self.open_or_create(segno)?;
        let mut maps = self.maps.lock();
        if let Some(m) = maps.get(&segno) {
            return Ok(m.clone());
        }
        let path = self.path(segno);
        let map = pmem.map(&path)?;
        if map.len() as u64 != self.segment_size {
            return Err(Error::BadWal(format!(
                "segment {} mapped {} bytes, expected {}",
                path.display(),
                map.len(),
                self.segment_size
            )));
        }
        // The directory passed `check_dir`, but a file elsewhere (a symbolic link, a
        // bind mount) could still be on another device.
        if !map.is_pmem() {
            return Err(PmemError::NotPmem { dir: path }.into());
        }
        let map = Arc::new(Mutex::new(map));
        maps.insert(segno, map.clone());
        Ok(map)
    }

    /// Makes everything written to segment `segno` durable. A failure is fatal.
    pub fn sync(&self, segno: u64) {
        let f = match self.open.lock().get(&segno) {
            Some(f) => f.clone(),
            None => return,
        };
        let res = match self.method {
            SyncMethod::Fdatasync => io::sync_data(FileKind::Wal, &f),
            SyncMethod::Fsync => io::sync_all(FileKind::Wal, &f),
            // pmem: the writer drained its stores before it moved `written` (see
            // `Wal::write_upto`); there is nothing left to sync.
            SyncMethod::OpenDatasync | SyncMethod::None | SyncMethod::Pmem => Ok(()),
        };
        if let Err(e) = res {
            crate::fatal_io("fsync WAL segment", &e);
        }
    }

    /// Reads up to `buf.len()` bytes at `lsn`; returns how many were available before a
    /// missing segment.
    pub fn read(&self, mut lsn: Lsn, buf: &mut [u8]) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            let segno = self.segno(lsn);
            let off = lsn.0 % self.segment_size;
            let n = (buf.len() - done).min((self.segment_size - off) as usize);
            let Some(f) = self.open_existing(segno)? else {
                break;
            };
            f.read_exact_at(&mut buf[done..done + n], off)
                .map_err(|e| Error::io("read WAL segment", self.path(segno).display(), e))?;
            done += n;
            lsn = lsn.add(n as u64);
        }
        Ok(done)
    }

    pub fn exists(&self, segno: u64) -> bool {
        self.path(segno).exists()
    }

    /// Recycles segments wholly before `keep_from` by renaming them to future segment
    /// numbers (at most `future_max` kept ahead); removes the rest. Returns (recycled,
    /// removed).
    pub fn recycle_before(
        &self,
        keep_from: Lsn,
        current: Lsn,
        future_max: u64,
    ) -> Result<(usize, usize)> {
        let keep_segno = self.segno(keep_from);
        let _files = self.files.lock();
        let all = self.list()?;
        let mut next_future = all.last().copied().unwrap_or(0).max(self.segno(current)) + 1;
        let future_limit = self.segno(current) + future_max;
        let (mut recycled, mut removed) = (0, 0);
        for segno in all.into_iter().filter(|&s| s < keep_segno) {
            self.open.lock().remove(&segno);
            // A recycled segment is mapped again under its new number when written.
            self.maps.lock().remove(&segno);
            let from = self.path(segno);
            if next_future <= future_limit {
                let to = self.path(next_future);
                io::rename(FileKind::Wal, &from, &to)
                    .map_err(|e| Error::io("recycle WAL segment", from.display(), e))?;
                next_future += 1;
                recycled += 1;
            } else {
                io::remove_file(FileKind::Wal, &from)
                    .map_err(|e| Error::io("remove WAL segment", from.display(), e))?;
                removed += 1;
            }
        }
        if recycled + removed > 0 {
            sync_dir(&self.dir)?;
        }
        Ok((recycled, removed))
    }

    /// Creates segment `segno` ahead of need (called off the commit path); false when it
    /// existed already (another thread made it first).
    /// With `pmem` it is mapped too, so the commit path never maps a segment either.
    pub fn preallocate(&self, segno: u64) -> Result<bool> {
        let made = self.open_or_create_counted(segno)?.1;
        if self.pmem.is_some() {
            self.mapping(segno)?;
        }
        Ok(made)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flush leader and the checkpointer may create the same segment at once (the
    /// leader crossing into it while the checkpointer preallocates it): both succeed and
    /// see one file. Before creation was serialized, one of them failed to rename the
    /// shared temporary file, and the WAL writer treats that as fatal.
    #[test]
    fn concurrent_creators_of_one_segment_both_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let segs = Segments::new(dir.path(), 1 << 16, SyncMethod::None).unwrap();
        for segno in 1..40 {
            let barrier = std::sync::Barrier::new(2);
            std::thread::scope(|s| {
                let a = s.spawn(|| {
                    barrier.wait();
                    segs.preallocate(segno)
                });
                barrier.wait();
                let b = segs.write(Lsn(segno << 16), b"record");
                a.join().unwrap().unwrap();
                b.unwrap();
            });
            let mut back = [0u8; 6];
            assert_eq!(segs.read(Lsn(segno << 16), &mut back).unwrap(), 6);
            assert_eq!(&back, b"record", "segment {segno} lost the write");
        }
    }
}
