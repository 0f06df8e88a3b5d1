//! Relation files: one file per relation under `base/`, read and written a page at a time
//! with `pread`/`pwrite`, extended in chunks, synced only by the checkpointer.
//!
//! Rules:
//! 1. Block numbers are handed out by [`RelFiles::allocate_block`] from an in-memory
//!    counter; the file itself is extended ahead of it in chunks so no allocation waits on
//!    a filesystem size change while holding a page latch.
//! 2. A write marks the file for the next checkpoint's sync ([`RelFiles::sync_pending`]);
//!    nothing is fsynced per write (DESIGN §2).
//! 3. A block beyond the end of the file reads as zeros: allocation is not WAL-logged, so
//!    after a crash an allocated block may simply not exist yet; the first WAL record
//!    touching it initialises it.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use walrus_base::{PageId, RelFileId, PAGE_SIZE};

use crate::error::{Error, Result};

/// Blocks added to a file per physical extension (1 MiB).
const EXTEND_CHUNK_BLOCKS: u32 = 128;

struct RelFile {
    file: File,
    /// Blocks handed out (logical size).
    nblocks: AtomicU32,
    /// Blocks the file physically has room for.
    physical_blocks: Mutex<u32>,
}

pub struct RelFiles {
    dir: PathBuf,
    files: RwLock<HashMap<RelFileId, Arc<RelFile>>>,
    sync_pending: Mutex<HashSet<RelFileId>>,
}

impl RelFiles {
    pub fn open(data_dir: &Path) -> Result<RelFiles> {
        let dir = data_dir.join("base");
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io("create directory", dir.display(), e))?;
        Ok(RelFiles {
            dir,
            files: RwLock::new(HashMap::new()),
            sync_pending: Mutex::new(HashSet::new()),
        })
    }

    pub fn path(&self, relfile: RelFileId) -> PathBuf {
        self.dir.join(relfile.0.to_string())
    }

    fn get(&self, relfile: RelFileId) -> Result<Arc<RelFile>> {
        if let Some(f) = self.files.read().get(&relfile) {
            return Ok(f.clone());
        }
        let mut files = self.files.write();
        if let Some(f) = files.get(&relfile) {
            return Ok(f.clone());
        }
        let path = self.path(relfile);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io("open file", path.display(), e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat file", path.display(), e))?
            .len();
        let blocks = (len / PAGE_SIZE as u64) as u32;
        let rf = Arc::new(RelFile {
            file,
            nblocks: AtomicU32::new(blocks),
            physical_blocks: Mutex::new(blocks),
        });
        files.insert(relfile, rf.clone());
        Ok(rf)
    }

    /// Creates (or opens) the file of a relation.
    pub fn create(&self, relfile: RelFileId) -> Result<()> {
        self.get(relfile).map(|_| ())
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
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove file", path.display(), e)),
        }
    }

    /// Logical number of blocks.
    pub fn nblocks(&self, relfile: RelFileId) -> Result<u32> {
        Ok(self.get(relfile)?.nblocks.load(Ordering::Acquire))
    }

    /// Hands out the next block number, extending the file ahead in chunks.
    pub fn allocate_block(&self, relfile: RelFileId) -> Result<u32> {
        let rf = self.get(relfile)?;
        let block = rf.nblocks.fetch_add(1, Ordering::AcqRel);
        let mut phys = rf.physical_blocks.lock();
        if block >= *phys {
            let target = block + EXTEND_CHUNK_BLOCKS;
            rf.file
                .set_len(target as u64 * PAGE_SIZE as u64)
                .map_err(|e| Error::io("extend file", self.path(relfile).display(), e))?;
            *phys = target;
        }
        Ok(block)
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
        crate::io::read_page_at(&rf.file, buf, id.block.0 as u64 * PAGE_SIZE as u64)
            .map_err(|e| Error::io("read block of", self.path(id.relfile).display(), e))
    }

    /// Writes a sealed page home. Only `buffer::write_path` calls this.
    pub fn write_page(&self, id: PageId, buf: &[u8]) -> Result<()> {
        let rf = self.get(id.relfile)?;
        crate::io::write_page_at(&rf.file, buf, id.block.0 as u64 * PAGE_SIZE as u64)
            .map_err(|e| Error::io("write block of", self.path(id.relfile).display(), e))?;
        self.sync_pending.lock().insert(id.relfile);
        Ok(())
    }

    /// Syncs every file written since the last call (the checkpointer's job). A failed
    /// sync is returned; the caller must not retry it (see module docs of `io`).
    pub fn sync_pending(&self) -> Result<usize> {
        let pending: Vec<RelFileId> = self.sync_pending.lock().drain().collect();
        for relfile in &pending {
            let rf = match self.files.read().get(relfile) {
                Some(f) => f.clone(),
                None => continue,
            };
            rf.file
                .sync_data()
                .map_err(|e| Error::io("fsync file", self.path(*relfile).display(), e))?;
        }
        if !pending.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(pending.len())
    }

    /// All relation files present on disk (for offline verification tools).
    pub fn list(&self) -> Result<Vec<RelFileId>> {
        let mut out = Vec::new();
        let rd = std::fs::read_dir(&self.dir)
            .map_err(|e| Error::io("read directory", self.dir.display(), e))?;
        for ent in rd.flatten() {
            if let Some(id) = ent.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                out.push(RelFileId(id));
            }
        }
        out.sort();
        Ok(out)
    }
}

/// fsync a directory so a created or renamed file's entry is durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let f = File::open(dir).map_err(|e| Error::io("open directory", dir.display(), e))?;
    f.sync_all()
        .map_err(|e| Error::io("fsync directory", dir.display(), e))
}
