//! Relation files: one file per relation under `base/`, read and written a page at a time
//! with `pread`/`pwrite`, extended in chunks, synced only by the checkpointer.
//!
//! Rules:
//! 1. Block numbers are handed out by [`RelFiles::allocate_block`] from an in-memory
//!    counter; the file itself is extended ahead of it in chunks so no allocation waits on
//!    a filesystem size change while holding a page latch.
//! 2. Extension *reserves disk space* (`fallocate`, or zero pages where the filesystem
//!    cannot): a full disk shows as an error of the operation that needed the block,
//!    before it changed anything (SQLSTATE 53100), never later as a page write that
//!    cannot land. Code past its point of no return (a B-tree split whose first half is
//!    logged) reserves room up front ([`RelFiles::reserve`]) and allocates with
//!    [`RelFiles::allocate_block_committed`], which cannot fail for lack of space.
//! 3. A write marks the file for the next checkpoint's sync ([`RelFiles::sync_pending`]);
//!    nothing is fsynced per write (DESIGN §2).
//! 4. A block beyond the end of the file reads as zeros: allocation is not WAL-logged, so
//!    after a crash an allocated block may simply not exist yet; the first WAL record
//!    touching it initialises it.
//! 5. With `page_protection = atomic` every page write goes through a second, `O_DIRECT`
//!    descriptor of the file with `RWF_ATOMIC` ([`io::write_page_atomic`]): the device
//!    writes the whole page or none of it. Reads stay buffered; a direct write invalidates
//!    the cached range, so they see it.
//! 6. A committed DROP or TRUNCATE removes its files off the committing session's path:
//!    unlinking a large file frees its extents and page cache (0.2 s for 640 MB here).
//!    The commit queues them ([`RelFiles::queue_unlinks`]) under the commit barrier, a
//!    helper thread removes them, and a checkpoint removes any still queued before it
//!    completes: replay from its redo point would not see the drop again, so a file left
//!    then would stay forever.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use walrus_base::{PageId, RelFileId, PAGE_SIZE};

use crate::error::{Error, Result};
use crate::io::{self, FileKind};

/// Blocks added to a file per physical extension (1 MiB).
const EXTEND_CHUNK_BLOCKS: u32 = 128;

struct RelFile {
    file: File,
    /// Blocks handed out (logical size).
    nblocks: AtomicU32,
    /// Blocks the file has disk space for; written under `extend`.
    physical_blocks: AtomicU32,
    /// Serializes allocation and extension.
    extend: Mutex<()>,
    /// The `O_DIRECT` descriptor atomic page writes use, opened at the first one.
    direct: std::sync::OnceLock<File>,
}

pub struct RelFiles {
    dir: PathBuf,
    /// Whether asking for a file that does not exist creates it: only while recovery
    /// replays (WAL may touch a relation whose file a later DROP removed). Afterwards a
    /// file is made only by [`RelFiles::create`], so a reader racing a DROP gets an error
    /// instead of leaving an empty file behind.
    create_missing: std::sync::atomic::AtomicBool,
    files: RwLock<HashMap<RelFileId, Arc<RelFile>>>,
    sync_pending: Mutex<HashSet<RelFileId>>,
    /// `page_protection = atomic`: page writes are `RWF_ATOMIC` (rule 5).
    atomic_writes: std::sync::atomic::AtomicBool,
    /// Pages written atomically (`pg_stat_bgwriter.atomic_page_writes`).
    pub atomic_page_writes: std::sync::atomic::AtomicU64,
    /// Files of committed drops still to be removed (rule 6). A queued file that is not
    /// open cannot be opened again.
    unlink_queue: Mutex<Vec<RelFileId>>,
    /// Held while queued files are removed, so a return from
    /// [`RelFiles::remove_queued`] means every file queued before the call is gone,
    /// those another thread was removing included.
    unlinking: Mutex<()>,
}

impl RelFiles {
    pub fn open(data_dir: &Path) -> Result<RelFiles> {
        let dir = data_dir.join("base");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("create directory", "base", e))?;
        Ok(RelFiles {
            dir,
            create_missing: std::sync::atomic::AtomicBool::new(true),
            files: RwLock::new(HashMap::new()),
            sync_pending: Mutex::new(HashSet::new()),
            atomic_writes: std::sync::atomic::AtomicBool::new(false),
            atomic_page_writes: std::sync::atomic::AtomicU64::new(0),
            unlink_queue: Mutex::new(Vec::new()),
            unlinking: Mutex::new(()),
        })
    }
}

/// How errors name a relation's file: relative to the data directory (`base/16385`), as
/// PostgreSQL names `base/16384/16385`. An error goes to the client, which must not
/// learn where the server keeps its data.
pub fn shown(relfile: RelFileId) -> String {
    format!("base/{}", relfile.0)
}

impl RelFiles {
    pub fn path(&self, relfile: RelFileId) -> PathBuf {
        self.dir.join(relfile.0.to_string())
    }

    /// `page_protection = atomic`: from now on every page write is atomic (rule 5).
    pub fn use_atomic_writes(&self) {
        self.atomic_writes.store(true, Ordering::Release);
    }

    /// Recovery is over: from now on only [`RelFiles::create`] makes files.
    pub fn stop_creating_missing(&self) {
        self.create_missing.store(false, Ordering::Release);
    }

    fn get(&self, relfile: RelFileId) -> Result<Arc<RelFile>> {
        self.get_or_create(relfile, self.create_missing.load(Ordering::Acquire))
    }

    fn get_or_create(&self, relfile: RelFileId, create: bool) -> Result<Arc<RelFile>> {
        if let Some(f) = self.files.read().get(&relfile) {
            return Ok(f.clone());
        }
        let mut files = self.files.write();
        if let Some(f) = files.get(&relfile) {
            return Ok(f.clone());
        }
        let path = self.path(relfile);
        if self.unlink_queue.lock().contains(&relfile) {
            // Dropped: a reader with a stale definition must not see the file again.
            let gone = std::io::Error::from(std::io::ErrorKind::NotFound);
            return Err(Error::io("open file", shown(relfile), gone));
        }
        let file = io::open_rw(FileKind::Data, &path, create, false)
            .map_err(|e| Error::io("open file", shown(relfile), e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat file", shown(relfile), e))?
            .len();
        let blocks = (len / PAGE_SIZE as u64) as u32;
        let rf = Arc::new(RelFile {
            file,
            nblocks: AtomicU32::new(blocks),
            physical_blocks: AtomicU32::new(blocks),
            extend: Mutex::new(()),
            direct: std::sync::OnceLock::new(),
        });
        files.insert(relfile, rf.clone());
        Ok(rf)
    }

    /// Creates (or opens) the file of a relation.
    pub fn create(&self, relfile: RelFileId) -> Result<()> {
        self.get_or_create(relfile, true).map(|_| ())
    }

    pub fn exists(&self, relfile: RelFileId) -> bool {
        self.files.read().contains_key(&relfile) || self.path(relfile).exists()
    }

    /// Removes a relation's file (DROP/TRUNCATE after commit). Its pages must already be
    /// gone from the buffer pool.
    pub fn unlink(&self, relfile: RelFileId) -> Result<()> {
        self.files.write().remove(&relfile);
        self.sync_pending.lock().remove(&relfile);
        let path = self.path(relfile);
        match io::remove_file(FileKind::Data, &path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove file", shown(relfile), e)),
        }
    }

    /// A committed DROP/TRUNCATE's files, queued for [`RelFiles::remove_queued`] (rule
    /// 6). Queued before the commit lets a checkpoint choose its redo point, so that
    /// checkpoint finds them.
    pub fn queue_unlinks(&self, relfiles: &[RelFileId]) {
        self.unlink_queue.lock().extend_from_slice(relfiles);
    }

    /// A dropped file leaves the open set: no more reads, writes or syncs. Its pages must
    /// already be gone from the buffer pool; it stays on disk until removed.
    pub fn forget(&self, relfile: RelFileId) {
        self.files.write().remove(&relfile);
        self.sync_pending.lock().remove(&relfile);
    }

    /// Removes every queued file. A file that cannot be removed is left behind (it only
    /// takes space, as PostgreSQL leaves it with a warning) and named in the error.
    pub fn remove_queued(&self) -> Result<()> {
        let _one_at_a_time = self.unlinking.lock();
        let mut result = Ok(());
        loop {
            let Some(relfile) = self.unlink_queue.lock().last().copied() else {
                return result;
            };
            // Still queued while it is removed: until it is gone it cannot be reopened.
            let path = self.path(relfile);
            let removed = match io::remove_file(FileKind::Data, &path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(Error::io("remove file", shown(relfile), e))
                }
                _ => Ok(()),
            };
            self.unlink_queue.lock().retain(|&q| q != relfile);
            result = result.and(removed);
        }
    }

    /// Logical number of blocks.
    pub fn nblocks(&self, relfile: RelFileId) -> Result<u32> {
        Ok(self.get(relfile)?.nblocks.load(Ordering::Acquire))
    }

    /// Hands out the next block number, extending the file ahead in chunks. On a full
    /// disk it fails without handing out anything.
    pub fn allocate_block(&self, relfile: RelFileId) -> Result<u32> {
        let rf = self.get(relfile)?;
        let _g = rf.extend.lock();
        let block = rf.nblocks.load(Ordering::Acquire);
        self.extend_to(&rf, relfile, block + 1)?;
        rf.nblocks.fetch_max(block + 1, Ordering::AcqRel);
        Ok(block)
    }

    /// Like [`RelFiles::allocate_block`], for a caller that can no longer fail (it has
    /// logged half of a change): when no disk space is left the file grows sparsely, the
    /// block gets its space when first written, and until then the page writer's writes
    /// of it fail and are retried while the WAL holds the page. Callers reserve room
    /// first, so this fallback is for concurrent reservers outrunning each other.
    pub fn allocate_block_committed(&self, relfile: RelFileId) -> Result<u32> {
        let rf = self.get(relfile)?;
        let _g = rf.extend.lock();
        let block = rf.nblocks.load(Ordering::Acquire);
        if let Err(e) = self.extend_to(&rf, relfile, block + 1) {
            tracing::warn!("{e}; extending it without reserving space");
            let len = (block as u64 + 1) * PAGE_SIZE as u64;
            if rf.file.metadata().map(|m| m.len()).unwrap_or(0) < len {
                io::set_len(FileKind::Data, &rf.file, len)
                    .map_err(|e| Error::io("extend file", shown(relfile), e))?;
            }
            rf.physical_blocks.fetch_max(block + 1, Ordering::AcqRel);
        }
        rf.nblocks.fetch_max(block + 1, Ordering::AcqRel);
        Ok(block)
    }

    /// Makes sure the next `blocks` allocations find disk space, so that an operation
    /// can fail on a full disk before it changes anything. Cheap when room is there.
    pub fn reserve(&self, relfile: RelFileId, blocks: u32) -> Result<()> {
        let rf = self.get(relfile)?;
        let need = |rf: &RelFile| rf.nblocks.load(Ordering::Acquire) + blocks;
        if rf.physical_blocks.load(Ordering::Acquire) >= need(&rf) {
            return Ok(());
        }
        let _g = rf.extend.lock();
        self.extend_to(&rf, relfile, need(&rf))
    }

    /// With `extend` held: gives the file disk space for at least `blocks` blocks, a
    /// chunk ahead when the disk has it, exactly `blocks` when it has only that.
    fn extend_to(&self, rf: &RelFile, relfile: RelFileId, blocks: u32) -> Result<()> {
        let phys = rf.physical_blocks.load(Ordering::Acquire);
        if blocks <= phys {
            return Ok(());
        }
        let mut target = blocks.max(phys + EXTEND_CHUNK_BLOCKS);
        loop {
            match io::reserve_space(
                FileKind::Data,
                &rf.file,
                phys as u64 * PAGE_SIZE as u64,
                target as u64 * PAGE_SIZE as u64,
            ) {
                Ok(()) => break,
                Err(e) if io::is_out_of_space(&e) && target > blocks => target = blocks,
                Err(e) => {
                    return Err(Error::io("extend file", shown(relfile), e));
                }
            }
        }
        rf.physical_blocks.store(target, Ordering::Release);
        Ok(())
    }

    /// Recovery: block `id` exists (a WAL record touched it), so later allocation must not
    /// hand it out again.
    pub fn note_block_exists(&self, id: PageId) -> Result<()> {
        let rf = self.get(id.relfile)?;
        rf.nblocks.fetch_max(id.block.0 + 1, Ordering::AcqRel);
        Ok(())
    }

    pub fn read_page(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        let rf = self.get(id.relfile)?;
        io::read_page_at(&rf.file, buf, id.block.0 as u64 * PAGE_SIZE as u64)
            .map_err(|e| Error::io("read block of", shown(id.relfile), e))
    }

    /// Writes a sealed page home. Only `buffer::write_path` calls this.
    pub fn write_page(&self, id: PageId, buf: &[u8]) -> Result<()> {
        let rf = self.get(id.relfile)?;
        let offset = id.block.0 as u64 * PAGE_SIZE as u64;
        if self.atomic_writes.load(Ordering::Acquire) {
            let direct = match rf.direct.get() {
                Some(d) => d,
                None => {
                    let path = self.path(id.relfile);
                    let d = io::open_direct(&path)
                        .map_err(|e| Error::io("open (O_DIRECT) file", shown(id.relfile), e))?;
                    // A racing writer may have set it first: either descriptor works.
                    let _ = rf.direct.set(d);
                    rf.direct
                        .get()
                        .ok_or_else(|| Error::Internal("O_DIRECT descriptor vanished".into()))?
                }
            };
            io::write_page_atomic(&rf.file, direct, buf, offset)
                .map_err(|e| Error::io("write block (RWF_ATOMIC) of", shown(id.relfile), e))?;
            self.atomic_page_writes.fetch_add(1, Ordering::Relaxed);
        } else {
            io::write_page_at(&rf.file, buf, offset)
                .map_err(|e| Error::io("write block of", shown(id.relfile), e))?;
        }
        self.sync_pending.lock().insert(id.relfile);
        Ok(())
    }

    /// Syncs every file written since the last call (the checkpointer's job). A failed
    /// sync stops the process: the kernel may have dropped the dirty pages and cleared
    /// the error, so a retry could "succeed" while the pages never reach disk
    /// (PostgreSQL's fsyncgate; see the module docs of `io`). Recovery then replays them
    /// from WAL, which the checkpoint that needed this sync has not recycled.
    pub fn sync_pending(&self) -> Result<usize> {
        let pending: Vec<RelFileId> = self.sync_pending.lock().drain().collect();
        for relfile in &pending {
            let rf = match self.files.read().get(relfile) {
                Some(f) => f.clone(),
                None => continue,
            };
            if let Err(e) = io::sync_data(FileKind::Data, &rf.file) {
                crate::fatal_io(&format!("fsync file {}", self.path(*relfile).display()), &e);
            }
        }
        if !pending.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(pending.len())
    }

    /// Syncs the files of `relfiles` now (a double-write batch's home writes), leaving
    /// them in the pending set: the next checkpoint syncs them again, which costs little,
    /// and never finds the set emptied by someone whose sync has not finished. A failure
    /// stops the process, as in [`RelFiles::sync_pending`].
    pub fn sync_files(&self, relfiles: &std::collections::BTreeSet<RelFileId>) -> Result<()> {
        for relfile in relfiles {
            let rf = self.get(*relfile)?;
            if let Err(e) = io::sync_data(FileKind::Data, &rf.file) {
                crate::fatal_io(&format!("fsync file {}", self.path(*relfile).display()), &e);
            }
        }
        Ok(())
    }

    /// All relation files present on disk (for offline verification tools).
    pub fn list(&self) -> Result<Vec<RelFileId>> {
        let mut out = Vec::new();
        let rd =
            std::fs::read_dir(&self.dir).map_err(|e| Error::io("read directory", "base", e))?;
        for ent in rd.flatten() {
            if let Some(id) = ent.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                out.push(RelFileId(id));
            }
        }
        out.sort();
        Ok(out)
    }
}

/// fsync a directory so a created, renamed or removed file's entry is durable. A failure
/// stops the process, as for any failed sync.
pub fn sync_dir(dir: &Path) -> Result<()> {
    if let Err(e) = io::sync_dir(dir) {
        crate::fatal_io(&format!("fsync directory {}", dir.display()), &e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocation reserves real space a chunk ahead (the file is not sparse), a
    /// reservation beyond the chunk extends at once, and a committed allocation hands out
    /// the next block like a normal one.
    #[test]
    fn allocation_reserves_disk_space_ahead() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let files = RelFiles::open(dir.path()).unwrap();
        let rel = RelFileId(16384);
        files.create(rel).unwrap();
        assert_eq!(files.allocate_block(rel).unwrap(), 0);
        assert_eq!(files.allocate_block(rel).unwrap(), 1);
        let meta = std::fs::metadata(files.path(rel)).unwrap();
        let chunk = EXTEND_CHUNK_BLOCKS as u64 * PAGE_SIZE as u64;
        assert_eq!(meta.len(), chunk);
        assert!(
            meta.blocks() * 512 >= chunk,
            "extension left the file sparse: {} bytes allocated",
            meta.blocks() * 512
        );
        files.reserve(rel, EXTEND_CHUNK_BLOCKS + 10).unwrap();
        let len = std::fs::metadata(files.path(rel)).unwrap().len();
        assert!(len >= (2 + EXTEND_CHUNK_BLOCKS as u64 + 10) * PAGE_SIZE as u64);
        assert_eq!(files.allocate_block_committed(rel).unwrap(), 2);
        assert_eq!(files.nblocks(rel).unwrap(), 3);
    }

    /// A dropped file, once forgotten, cannot be opened while it waits in the queue (a
    /// reader with a stale definition gets "not found", never the old rows), and
    /// `remove_queued` removes every queued file, a missing one included.
    #[test]
    fn queued_files_stay_closed_until_removed() {
        let dir = tempfile::tempdir().unwrap();
        let files = RelFiles::open(dir.path()).unwrap();
        files.stop_creating_missing();
        let (dropped, vanished, kept) = (RelFileId(16384), RelFileId(16385), RelFileId(16386));
        for r in [dropped, vanished, kept] {
            files.create(r).unwrap();
            files.allocate_block(r).unwrap();
        }
        files.queue_unlinks(&[dropped, vanished]);
        std::fs::remove_file(files.path(vanished)).unwrap();
        // Still open: reads go on until the pages leave the pool and the file is forgotten.
        assert_eq!(files.nblocks(dropped).unwrap(), 1);
        files.forget(dropped);
        files.forget(vanished);
        let err = files.nblocks(dropped).unwrap_err();
        assert_eq!(err.sqlstate(), "58P01", "{err}");
        assert!(files.path(dropped).exists(), "removal is the queue's job");
        files.remove_queued().unwrap();
        assert!(!files.path(dropped).exists());
        assert!(files.path(kept).exists());
        assert_eq!(files.nblocks(kept).unwrap(), 1);
        let err = files.nblocks(dropped).unwrap_err();
        assert_eq!(err.sqlstate(), "58P01", "{err}");
        files.remove_queued().unwrap();
    }
}
