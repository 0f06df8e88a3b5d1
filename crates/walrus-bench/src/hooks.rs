//! The crash tests' I/O hooks ([`walrus_engine::io::IoHooks`]), installed only by
//! `walrus-bench tpcb-run`, and `walrus-bench powercut`, which plays a power cut.
//!
//! - **Torn write** (`--tear-write N`): the N-th data-page write that really changes the
//!   page's second half writes only its first 4 KiB, then the process aborts, as a power
//!   cut after one sector would leave it.
//! - **Power-loss journal** (`--powerloss-journal FILE`): SIGKILL keeps the operating
//!   system's page cache, so a missing or failed sync can never make a kill test fail.
//!   The journal records, before each write, the bytes it replaces (an undo log), and
//!   after each sync, which writes that sync made durable; file creations, renames and
//!   directory syncs likewise. After the child is killed, `powercut` undoes, newest
//!   first, every write no `fdatasync`/`fsync` of its file covered, deletes files whose
//!   creation no directory sync covered and moves back renames likewise: the directory
//!   is then what the disk would hold after a power cut at the moment of the kill. With
//!   `--keep-fraction F` each unsynced 4 KiB block survives with probability F (a disk
//!   may have written some of them), which tears pages the way real power loss can.
//!   `O_DSYNC` writes are durable when they return. Removals are taken as durable at
//!   once (a removed file never comes back): the model errs toward keeping less.
//! - **Injected failure** (`--fail-io KIND:OP:N:ERRNO`): the N-th operation of that kind
//!   fails with that error, to check the engine's I/O failure policy.
//!
//! Journal entries are appended with one `write` each, before the operation they
//! describe and under one lock with it, so their order is the order of the writes; the
//! journal itself is an ordinary file, which SIGKILL does not lose.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{bail, Context};
use parking_lot::Mutex;
use walrus_base::{PAGE_SIZE, SECTOR_SIZE};
use walrus_engine::io::{FileKind, IoHooks, IoOp};

/// What `tpcb-run` asked for.
#[derive(Default)]
pub struct HookConfig {
    pub tear_write: u64,
    pub journal: Option<PathBuf>,
    pub fail_io: Option<String>,
}

/// Installs the hooks `cfg` asks for, if any.
pub fn install(cfg: HookConfig) -> anyhow::Result<()> {
    if cfg.tear_write == 0 && cfg.journal.is_none() && cfg.fail_io.is_none() {
        return Ok(());
    }
    let journal = match &cfg.journal {
        Some(p) => Some(Mutex::new(Journal {
            file: OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("open journal {}", p.display()))?,
            seq: 0,
        })),
        None => None,
    };
    let fail = cfg.fail_io.as_deref().map(FailRule::parse).transpose()?;
    let hooks = TestHooks {
        tear_at: cfg.tear_write,
        tear_count: AtomicU64::new(0),
        journal,
        fail,
    };
    walrus_engine::io::install_hooks(Box::new(hooks)).map_err(|e| anyhow::anyhow!(e))
}

/// Injected failures count operations only from here on (after the schema is loaded).
static FAILURES_ARMED: AtomicBool = AtomicBool::new(false);

pub fn arm_failures() {
    FAILURES_ARMED.store(true, Ordering::SeqCst);
}

struct TestHooks {
    tear_at: u64,
    tear_count: AtomicU64,
    journal: Option<Mutex<Journal>>,
    fail: Option<FailRule>,
}

impl IoHooks for TestHooks {
    fn around(
        &self,
        op: &IoOp<'_>,
        run: &mut dyn FnMut() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        if let Some(f) = &self.fail {
            if let Some(e) = f.check(op) {
                return Err(e);
            }
        }
        if self.tear_at > 0 {
            // An atomic write (`page_protection = atomic`) cannot tear: the device writes
            // all of it or none.
            if let IoOp::Write {
                kind: FileKind::Data,
                file,
                offset,
                buf,
                atomic: false,
            } = op
            {
                if buf.len() == PAGE_SIZE && self.should_tear(file, buf, *offset) {
                    file.write_all_at(&buf[..SECTOR_SIZE], *offset)?;
                    // The half-write must be in the image the next open reads; then die
                    // without running any destructor.
                    let _ = file.sync_data();
                    eprintln!("walrus-bench: tore a page write, killing the process");
                    std::process::abort();
                }
            }
        }
        match &self.journal {
            Some(j) => journaled(j, op, run),
            None => run(),
        }
    }
}

impl TestHooks {
    /// Only a write that replaces a real older version of the page's second half is
    /// counted: tearing it certainly leaves an inconsistent page, so a test expecting
    /// detection cannot pass by luck.
    fn should_tear(&self, file: &File, buf: &[u8], offset: u64) -> bool {
        let mut old = vec![0u8; PAGE_SIZE - SECTOR_SIZE];
        let n = file
            .read_at(&mut old, offset + SECTOR_SIZE as u64)
            .unwrap_or(0);
        if n < old.len() || old[..] == buf[SECTOR_SIZE..] || old.iter().all(|&b| b == 0) {
            return false;
        }
        self.tear_count.fetch_add(1, Ordering::SeqCst) + 1 == self.tear_at
    }
}

/// `KIND:OP:N:ERRNO`, e.g. `wal:sync:3:EIO`: the 3rd sync of a WAL segment fails.
struct FailRule {
    kind: FileKind,
    op: &'static str,
    nth: u64,
    errno: i32,
    seen: AtomicU64,
}

impl FailRule {
    fn parse(s: &str) -> anyhow::Result<FailRule> {
        let parts: Vec<&str> = s.split(':').collect();
        let [kind, op, nth, errno] = parts[..] else {
            bail!("--fail-io wants KIND:OP:N:ERRNO, got {s:?}");
        };
        let kind = match kind {
            "data" => FileKind::Data,
            "wal" => FileKind::Wal,
            "clog" => FileKind::Clog,
            "control" => FileKind::Control,
            "dwb" => FileKind::DoubleWrite,
            _ => bail!("--fail-io kind must be data, wal, clog, control or dwb, got {kind:?}"),
        };
        let op = match op {
            "write" => "write",
            "sync" => "sync",
            "reserve" => "reserve",
            "read" => "read",
            _ => bail!("--fail-io op must be write, sync, reserve or read, got {op:?}"),
        };
        let errno = match errno {
            "EIO" => libc::EIO,
            "ENOSPC" => libc::ENOSPC,
            _ => bail!("--fail-io errno must be EIO or ENOSPC, got {errno:?}"),
        };
        Ok(FailRule {
            kind,
            op,
            nth: nth.parse().context("--fail-io N")?,
            errno,
            seen: AtomicU64::new(0),
        })
    }

    fn check(&self, op: &IoOp<'_>) -> Option<std::io::Error> {
        let (kind, name) = match op {
            IoOp::Write { kind, .. } => (*kind, "write"),
            IoOp::Sync { kind, .. } => (*kind, "sync"),
            IoOp::Reserve { kind, .. } => (*kind, "reserve"),
            IoOp::Read { kind, .. } => (*kind, "read"),
            _ => return None,
        };
        if kind != self.kind || name != self.op || !FAILURES_ARMED.load(Ordering::SeqCst) {
            return None;
        }
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        (n == self.nth).then(|| {
            eprintln!(
                "walrus-bench: injecting errno {} into {name} #{n} of {kind:?}",
                self.errno
            );
            std::io::Error::from_raw_os_error(self.errno)
        })
    }
}

// ---------------------------------------------------------------------------------------
// The power-loss journal.

const TAG_WRITE: u8 = b'W';
/// A write issued with `RWF_ATOMIC`: a power cut keeps all of it or none.
const TAG_WRITE_ATOMIC: u8 = b'A';
const TAG_SYNC: u8 = b'S';
const TAG_CREATE: u8 = b'C';
const TAG_RENAME: u8 = b'R';
const TAG_REMOVE: u8 = b'X';
const TAG_SYNC_DIR: u8 = b'D';

struct Journal {
    file: File,
    /// Entries appended so far: an entry's sequence number is its index.
    seq: u64,
}

impl Journal {
    fn append(&mut self, entry: &[u8]) -> std::io::Result<u64> {
        let mut framed = Vec::with_capacity(entry.len() + 4);
        framed.extend_from_slice(&(entry.len() as u32).to_le_bytes());
        framed.extend_from_slice(entry);
        self.file.write_all(&framed)?;
        self.seq += 1;
        Ok(self.seq - 1)
    }
}

fn put_path(out: &mut Vec<u8>, p: &Path) {
    let b = p.as_os_str().as_encoded_bytes();
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Whether the descriptor was opened with `O_DSYNC` (its writes are durable on return).
fn is_dsync(file: &File) -> bool {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd()))
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| i64::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|flags| flags & libc::O_DSYNC as i64 != 0)
}

fn journaled(
    j: &Mutex<Journal>,
    op: &IoOp<'_>,
    run: &mut dyn FnMut() -> std::io::Result<()>,
) -> std::io::Result<()> {
    match *op {
        IoOp::Write {
            file,
            offset,
            buf,
            atomic,
            ..
        } => {
            if is_dsync(file) {
                return run();
            }
            let mut j = j.lock();
            let meta = file.metadata()?;
            let old_len = meta.len();
            let end = (offset + buf.len() as u64).min(old_len);
            let mut saved = vec![0u8; end.saturating_sub(offset) as usize];
            if !saved.is_empty() {
                file.read_exact_at(&mut saved, offset)?;
            }
            let mut e = vec![if atomic { TAG_WRITE_ATOMIC } else { TAG_WRITE }];
            e.extend_from_slice(&meta.ino().to_le_bytes());
            e.extend_from_slice(&offset.to_le_bytes());
            e.extend_from_slice(&(buf.len() as u64).to_le_bytes());
            e.extend_from_slice(&old_len.to_le_bytes());
            e.extend_from_slice(&saved);
            j.append(&e)?;
            run()
        }
        IoOp::Reserve { file, .. } => {
            let mut j = j.lock();
            let meta = file.metadata()?;
            let mut e = vec![TAG_WRITE];
            e.extend_from_slice(&meta.ino().to_le_bytes());
            e.extend_from_slice(&meta.len().to_le_bytes());
            e.extend_from_slice(&0u64.to_le_bytes());
            e.extend_from_slice(&meta.len().to_le_bytes());
            j.append(&e)?;
            run()
        }
        IoOp::Sync { file, .. } => {
            // Writes journaled before the sync started are durable once it returns;
            // writes racing with it are conservatively not.
            let ino = file.metadata()?.ino();
            let upto = j.lock().seq;
            run()?;
            let mut e = vec![TAG_SYNC];
            e.extend_from_slice(&ino.to_le_bytes());
            e.extend_from_slice(&upto.to_le_bytes());
            j.lock().append(&e)?;
            Ok(())
        }
        IoOp::Open { path, create, .. } => {
            let mut j = j.lock();
            let existed = path.exists();
            run()?;
            if create && !existed {
                let ino = std::fs::metadata(path)?.ino();
                let mut e = vec![TAG_CREATE];
                e.extend_from_slice(&ino.to_le_bytes());
                put_path(&mut e, &absolute(path)?);
                j.append(&e)?;
            }
            Ok(())
        }
        IoOp::Rename { from, to, .. } => {
            let mut j = j.lock();
            let ino = std::fs::metadata(from)?.ino();
            let mut e = vec![TAG_RENAME];
            e.extend_from_slice(&ino.to_le_bytes());
            put_path(&mut e, &absolute(from)?);
            put_path(&mut e, &absolute(to)?);
            j.append(&e)?;
            run()
        }
        IoOp::Remove { path, .. } => {
            let mut j = j.lock();
            let ino = std::fs::metadata(path).map(|m| m.ino()).unwrap_or(0);
            run()?;
            let mut e = vec![TAG_REMOVE];
            e.extend_from_slice(&ino.to_le_bytes());
            j.append(&e)?;
            Ok(())
        }
        IoOp::Read { .. } => run(),
        IoOp::SyncDir { dir } => {
            let upto = j.lock().seq;
            run()?;
            let mut e = vec![TAG_SYNC_DIR];
            e.extend_from_slice(&upto.to_le_bytes());
            put_path(&mut e, &absolute(dir)?);
            j.lock().append(&e)?;
            Ok(())
        }
    }
}

fn absolute(p: &Path) -> std::io::Result<PathBuf> {
    let parent = p.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = match parent {
        Some(d) => d.canonicalize()?,
        None => std::env::current_dir()?,
    };
    Ok(match p.file_name() {
        Some(n) => dir.join(n),
        None => dir,
    })
}

#[derive(clap::Args)]
pub struct PowercutArgs {
    /// The data directory the killed child used.
    #[arg(long)]
    data: PathBuf,
    /// The journal it wrote (`tpcb-run --powerloss-journal`); removed afterwards.
    #[arg(long)]
    journal: PathBuf,
    /// Probability that an unsynced 4 KiB block reached the disk anyway.
    #[arg(long, default_value_t = 0.0)]
    keep_fraction: f64,
    /// Seed for the blocks kept.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

enum Entry {
    Write {
        ino: u64,
        offset: u64,
        len: u64,
        old_len: u64,
        saved: Vec<u8>,
        /// Kept or undone as a whole (an `RWF_ATOMIC` write), not per 4 KiB block.
        atomic: bool,
    },
    Sync {
        ino: u64,
        upto: u64,
    },
    Create {
        ino: u64,
        path: PathBuf,
    },
    Rename {
        ino: u64,
        from: PathBuf,
        to: PathBuf,
    },
    Remove {
        ino: u64,
    },
    SyncDir {
        upto: u64,
        dir: PathBuf,
    },
}

fn read_journal(bytes: &[u8]) -> anyhow::Result<Vec<Entry>> {
    // Every field is read through `Fields`, which fails on a short entry instead of
    // panicking: a journal is a file, and a damaged one must be a clear error.
    struct Fields<'a>(&'a [u8], usize);
    impl Fields<'_> {
        fn take(&mut self, n: usize) -> anyhow::Result<&[u8]> {
            let out = self
                .0
                .get(self.1..self.1 + n)
                .context("power-loss journal: entry cut short")?;
            self.1 += n;
            Ok(out)
        }
        fn u64(&mut self) -> anyhow::Result<u64> {
            Ok(u64::from_le_bytes(self.take(8)?.try_into()?))
        }
        fn path(&mut self) -> anyhow::Result<PathBuf> {
            let n = u32::from_le_bytes(self.take(4)?.try_into()?) as usize;
            Ok(PathBuf::from(
                String::from_utf8_lossy(self.take(n)?).into_owned(),
            ))
        }
        fn rest(&mut self) -> Vec<u8> {
            self.0[self.1..].to_vec()
        }
    }
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let n = u32::from_le_bytes(bytes[at..at + 4].try_into()?) as usize;
        if n == 0 || at + 4 + n > bytes.len() {
            break; // the last append was cut short by the kill: it never happened
        }
        let mut f = Fields(&bytes[at + 4..at + 4 + n], 1);
        let tag = bytes[at + 4];
        at += 4 + n;
        out.push(match tag {
            TAG_WRITE | TAG_WRITE_ATOMIC => Entry::Write {
                ino: f.u64()?,
                offset: f.u64()?,
                len: f.u64()?,
                old_len: f.u64()?,
                saved: f.rest(),
                atomic: tag == TAG_WRITE_ATOMIC,
            },
            TAG_SYNC => Entry::Sync {
                ino: f.u64()?,
                upto: f.u64()?,
            },
            TAG_CREATE => Entry::Create {
                ino: f.u64()?,
                path: f.path()?,
            },
            TAG_RENAME => Entry::Rename {
                ino: f.u64()?,
                from: f.path()?,
                to: f.path()?,
            },
            TAG_REMOVE => Entry::Remove { ino: f.u64()? },
            TAG_SYNC_DIR => Entry::SyncDir {
                upto: f.u64()?,
                dir: f.path()?,
            },
            t => bail!("power-loss journal: unknown entry tag {t}"),
        });
    }
    Ok(out)
}

/// Every regular file under `dir`, by inode.
fn files_by_inode(dir: &Path, out: &mut HashMap<u64, PathBuf>) -> std::io::Result<()> {
    for ent in std::fs::read_dir(dir)? {
        let ent = ent?;
        let meta = ent.metadata()?;
        if meta.is_dir() {
            files_by_inode(&ent.path(), out)?;
        } else {
            out.insert(meta.ino(), ent.path().canonicalize()?);
        }
    }
    Ok(())
}

/// What `powercut` did, printed for the test log.
#[derive(Default, Debug)]
struct Undone {
    writes: u64,
    bytes: u64,
    blocks_kept: u64,
    creations: u64,
    renames: u64,
    durable_writes: u64,
}

pub fn powercut(a: PowercutArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(&a.journal)
        .with_context(|| format!("read journal {}", a.journal.display()))?;
    let entries = read_journal(&bytes)?;
    let data = a.data.canonicalize()?;
    // Last sync sequence per inode, and per directory.
    let mut synced: HashMap<u64, u64> = HashMap::new();
    let mut dir_synced: HashMap<PathBuf, u64> = HashMap::new();
    for e in &entries {
        match e {
            Entry::Sync { ino, upto } => {
                let s = synced.entry(*ino).or_default();
                *s = (*s).max(*upto);
            }
            Entry::SyncDir { upto, dir } => {
                let s = dir_synced.entry(dir.clone()).or_default();
                *s = (*s).max(*upto);
            }
            _ => {}
        }
    }
    let dir_durable = |p: &Path, seq: u64| {
        p.parent()
            .and_then(|d| dir_synced.get(d))
            .is_some_and(|&u| seq < u)
    };
    let mut where_now = HashMap::new();
    files_by_inode(&data, &mut where_now)?;
    let mut dead: HashSet<u64> = HashSet::new();
    let mut rng = a.seed | 1;
    let mut keep = |fraction: f64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        fraction > 0.0 && (rng % 1_000_000) as f64 / 1e6 < fraction
    };
    let mut u = Undone::default();
    for (seq, e) in entries.iter().enumerate().rev() {
        let seq = seq as u64;
        match e {
            Entry::Remove { ino } => {
                // Everything journaled earlier for this inode belonged to a removed file.
                dead.insert(*ino);
            }
            Entry::Write {
                ino,
                offset,
                len,
                old_len,
                saved,
                atomic,
            } => {
                if dead.contains(ino) {
                    continue;
                }
                if synced.get(ino).is_some_and(|&u| seq < u) {
                    u.durable_writes += 1;
                    continue;
                }
                let Some(path) = where_now.get(ino) else {
                    continue;
                };
                let f = OpenOptions::new().write(true).open(path)?;
                let cur_len = f.metadata()?.len();
                // Restore the replaced bytes block by block; a kept block keeps the new
                // bytes (the disk wrote it before the power went). An atomic write is
                // kept or restored as a whole: one decision for all its blocks.
                let whole = atomic.then(|| keep(a.keep_fraction));
                let block = 4096u64;
                let mut b = offset - offset % block;
                while b < offset + len {
                    let lo = b.max(*offset);
                    let hi = (b + block).min(offset + len).min(*old_len);
                    if lo < hi {
                        if whole.unwrap_or_else(|| keep(a.keep_fraction)) {
                            u.blocks_kept += 1;
                        } else {
                            let s = saved
                                .get((lo - offset) as usize..(hi - offset) as usize)
                                .context("power-loss journal: write entry without its old bytes")?;
                            f.write_all_at(s, lo)?;
                        }
                    }
                    b += block;
                }
                if cur_len > *old_len && !whole.unwrap_or_else(|| keep(a.keep_fraction)) {
                    f.set_len(*old_len)?;
                }
                u.writes += 1;
                u.bytes += len;
            }
            Entry::Create { ino, path } => {
                if dead.contains(ino) || dir_durable(path, seq) {
                    continue;
                }
                if let Some(p) = where_now.remove(ino) {
                    std::fs::remove_file(&p)?;
                    u.creations += 1;
                }
            }
            Entry::Rename { ino, from, to } => {
                if dead.contains(ino) || (dir_durable(from, seq) && dir_durable(to, seq)) {
                    continue;
                }
                if let Some(p) = where_now.get(ino).cloned() {
                    std::fs::rename(&p, from)?;
                    where_now.insert(*ino, from.clone());
                    u.renames += 1;
                }
            }
            Entry::Sync { .. } | Entry::SyncDir { .. } => {}
        }
    }
    // Nothing is synced here on purpose: the next process reads the page cache, which
    // now holds what the disk would.
    println!("powercut: {u:?}");
    std::fs::remove_file(&a.journal)?;
    Ok(())
}
