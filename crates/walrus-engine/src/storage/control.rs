//! The control file: the latest checkpoint and the facts a data directory is fixed to.
//!
//! Double-buffered: two 512-byte copies, each with its own CRC32C and a sequence number.
//! An update overwrites the *older* copy and fsyncs, so a torn or failed write leaves the
//! newer copy intact; open picks the valid copy with the highest sequence. Both copies
//! invalid means the directory cannot be trusted and open fails with a clear message.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use walrus_base::{Lsn, Xid, PAGE_SIZE};

use crate::error::{Error, Result};
use crate::io::{self, FileKind};

const MAGIC: u64 = 0x5741_4C52_5553_4331; // "WALRUSC1"
/// On-disk format version; a data directory of a version outside
/// `FORMAT_VERSION_OLDEST_READ..=FORMAT_VERSION` is refused at open.
/// 2: WAL block references without an image carry no image header, and heap records
/// no longer log what the record's xid implies (xmax, and a fresh version's header).
/// 3: version 2's layout once the commit-status log has been truncated
/// (`clog_oldest` > 0). A binary that reads only version 2 knows no truncation point and
/// would read the deleted segments' statuses as "in progress", hiding committed rows,
/// so it must refuse such a directory; one never truncated stays readable by it.
/// 4: heap tuple headers of 32 bytes (versions 2 and 3 padded them to 40): every heap
/// page changed, so versions 2 and 3 are no longer read.
/// 5: version 4's layout once the commit-status log has been truncated (as 3 was to 2).
pub const FORMAT_VERSION: u32 = 5;
/// The oldest format this binary opens (see [`FORMAT_VERSION`]).
pub const FORMAT_VERSION_OLDEST_READ: u32 = 4;
const COPY_SIZE: usize = 512;
const FILE_NAME: &str = "control";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbState {
    ShutDown = 1,
    InProduction = 2,
    InRecovery = 3,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlData {
    pub seq: u64,
    pub cluster_id: u64,
    pub format_version: u32,
    pub page_size: u32,
    pub wal_segment_size: u64,
    pub state: DbState,
    /// Start of the latest checkpoint record.
    pub checkpoint_lsn: Lsn,
    /// Where replay starts after a crash.
    pub redo_lsn: Lsn,
    pub next_xid: Xid,
    pub next_relfile: u32,
    /// The commit-status log keeps statuses from this xid on (a segment boundary; the
    /// segments below were truncated after a freeze pass). Zero in control files written
    /// before truncation existed, which is their truth.
    pub clog_oldest: Xid,
    /// WAL replay rate (bytes/s) the last crash recovery measured; 0 = never measured
    /// (control files written before it existed read as 0, which is their truth). The
    /// page writers size the dirty-page lag for `recovery_time_target` from it.
    pub replay_rate_bps: u64,
    /// `page_protection` the directory last ran with (`PageProtection::code`); 0 = not
    /// recorded. A change between restarts is logged and followed by a checkpoint.
    pub page_protection: u32,
    /// When the latest checkpoint completed (seconds since the Unix epoch; 0 = unknown),
    /// for `pg_control_checkpoint().checkpoint_time`.
    pub checkpoint_time: u64,
    /// `replay_rate_bps` comes from the calibration `walrus init` ran (a synthetic crash
    /// replayed in a scratch directory), not from a recovery of this directory. False
    /// in control files written before calibration existed, which is their truth.
    pub replay_rate_calibrated: bool,
    /// The part of a restart that does not grow with the WAL (opening the directory, the
    /// first reads of pages into a cold pool), in milliseconds, measured with
    /// `replay_rate_bps`; 0 in control files written before it existed.
    pub replay_fixed_ms: u32,
}

impl ControlData {
    fn encode(&self) -> [u8; COPY_SIZE] {
        let mut b = [0u8; COPY_SIZE];
        let mut at = 0;
        let mut put = |v: &[u8]| {
            b[at..at + v.len()].copy_from_slice(v);
            at += v.len();
        };
        put(&MAGIC.to_le_bytes());
        put(&self.seq.to_le_bytes());
        put(&self.cluster_id.to_le_bytes());
        put(&self.format_version.to_le_bytes());
        put(&self.page_size.to_le_bytes());
        put(&self.wal_segment_size.to_le_bytes());
        put(&(self.state as u32).to_le_bytes());
        put(&self.checkpoint_lsn.0.to_le_bytes());
        put(&self.redo_lsn.0.to_le_bytes());
        put(&self.next_xid.0.to_le_bytes());
        put(&self.next_relfile.to_le_bytes());
        put(&self.clog_oldest.0.to_le_bytes());
        put(&self.replay_rate_bps.to_le_bytes());
        put(&self.page_protection.to_le_bytes());
        put(&self.checkpoint_time.to_le_bytes());
        put(&u32::from(self.replay_rate_calibrated).to_le_bytes());
        put(&self.replay_fixed_ms.to_le_bytes());
        let crc = crc32c::crc32c(&b[..COPY_SIZE - 4]);
        b[COPY_SIZE - 4..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<ControlData> {
        if b.len() != COPY_SIZE {
            return None;
        }
        let crc = u32::from_le_bytes(b[COPY_SIZE - 4..].try_into().ok()?);
        if crc != crc32c::crc32c(&b[..COPY_SIZE - 4]) {
            return None;
        }
        let u64at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
        let u32at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
        if u64at(0) != MAGIC {
            return None;
        }
        let state = match u32at(40) {
            1 => DbState::ShutDown,
            2 => DbState::InProduction,
            3 => DbState::InRecovery,
            _ => return None,
        };
        Some(ControlData {
            seq: u64at(8),
            cluster_id: u64at(16),
            format_version: u32at(24),
            page_size: u32at(28),
            wal_segment_size: u64at(32),
            state,
            checkpoint_lsn: Lsn(u64at(44)),
            redo_lsn: Lsn(u64at(52)),
            next_xid: Xid(u64at(60)),
            next_relfile: u32at(68),
            clog_oldest: Xid(u64at(72)),
            replay_rate_bps: u64at(80),
            page_protection: u32at(88),
            checkpoint_time: u64at(92),
            replay_rate_calibrated: u32at(100) == 1,
            replay_fixed_ms: u32at(104),
        })
    }
}

pub struct ControlFile {
    path: PathBuf,
    file: File,
    current: ControlData,
}

impl ControlFile {
    pub fn create(dir: &Path, data: ControlData) -> Result<ControlFile> {
        let path = dir.join(FILE_NAME);
        let file = io::create_new(FileKind::Control, &path)
            .map_err(|e| Error::io("create control file", path.display(), e))?;
        let mut cf = ControlFile {
            path,
            file,
            current: data,
        };
        // Write both copies so a fresh directory never has a garbage second copy.
        cf.write_copy(0)?;
        cf.write_copy(1)?;
        Ok(cf)
    }

    pub fn open(dir: &Path) -> Result<ControlFile> {
        let path = dir.join(FILE_NAME);
        let bad = |reason: String| Error::BadDataDirectory {
            dir: dir.display().to_string(),
            reason,
        };
        let file = io::open_rw(FileKind::Control, &path, false, false)
            .map_err(|e| bad(format!("cannot open control file {}: {e}", path.display())))?;
        let mut buf = vec![0u8; COPY_SIZE * 2];
        let n = file
            .read_at(&mut buf, 0)
            .map_err(|e| Error::io("read control file", path.display(), e))?;
        let a = if n >= COPY_SIZE {
            ControlData::decode(&buf[..COPY_SIZE])
        } else {
            None
        };
        let b = if n >= 2 * COPY_SIZE {
            ControlData::decode(&buf[COPY_SIZE..])
        } else {
            None
        };
        let current = match (a, b) {
            (Some(a), Some(b)) => {
                if a.seq >= b.seq {
                    a
                } else {
                    b
                }
            }
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => {
                return Err(bad(format!(
                    "control file {} is corrupt: neither copy has a valid checksum",
                    path.display()
                )))
            }
        };
        if !(FORMAT_VERSION_OLDEST_READ..=FORMAT_VERSION).contains(&current.format_version) {
            return Err(bad(format!(
                "data directory has format version {}, this walrus reads versions {} to {}",
                current.format_version, FORMAT_VERSION_OLDEST_READ, FORMAT_VERSION
            )));
        }
        if current.page_size as usize != PAGE_SIZE {
            return Err(bad(format!(
                "data directory was created with page size {}, this walrus uses {}",
                current.page_size, PAGE_SIZE
            )));
        }
        Ok(ControlFile {
            path,
            file,
            current,
        })
    }

    pub fn data(&self) -> &ControlData {
        &self.current
    }

    /// Durably replaces the control data (overwriting the older copy).
    pub fn update(&mut self, mut data: ControlData) -> Result<()> {
        data.seq = self.current.seq + 1;
        self.current = data;
        self.write_copy((self.current.seq % 2) as usize)
    }

    fn write_copy(&mut self, slot: usize) -> Result<()> {
        // The oldest version that can read what this copy says (see FORMAT_VERSION).
        self.current.format_version = if self.current.clog_oldest.0 > 0 {
            FORMAT_VERSION
        } else {
            FORMAT_VERSION_OLDEST_READ
        };
        let bytes = self.current.encode();
        io::write_at(
            FileKind::Control,
            &self.file,
            &bytes,
            (slot * COPY_SIZE) as u64,
        )
        .map_err(|e| Error::io("write control file", self.path.display(), e))?;
        if let Err(e) = io::sync_data(FileKind::Control, &self.file) {
            // A failed fsync of the control file leaves its state unknown: stop here.
            crate::fatal_io("fsync control file", &e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ControlData {
        ControlData {
            seq: 0,
            cluster_id: 99,
            format_version: FORMAT_VERSION,
            page_size: PAGE_SIZE as u32,
            wal_segment_size: 1 << 24,
            state: DbState::ShutDown,
            checkpoint_lsn: Lsn(1234),
            redo_lsn: Lsn(1000),
            next_xid: Xid(77),
            next_relfile: 16390,
            clog_oldest: Xid(3 << 20),
            replay_rate_bps: 45_000_000,
            page_protection: 2,
            checkpoint_time: 1_790_000_000,
            replay_rate_calibrated: true,
            replay_fixed_ms: 140,
        }
    }

    #[test]
    fn new_fields_round_trip_and_old_copies_read_them_as_zero() {
        let d = sample();
        let b = d.encode();
        assert_eq!(ControlData::decode(&b), Some(d.clone()));
        // A copy written before the fields existed has zeros there.
        let mut old = b;
        old[80..108].fill(0);
        let crc = crc32c::crc32c(&old[..COPY_SIZE - 4]);
        old[COPY_SIZE - 4..].copy_from_slice(&crc.to_le_bytes());
        let o = ControlData::decode(&old).unwrap();
        assert_eq!(
            (o.replay_rate_bps, o.page_protection, o.checkpoint_time),
            (0, 0, 0)
        );
        assert!(!o.replay_rate_calibrated);
        assert_eq!(o.replay_fixed_ms, 0);
        assert_eq!(o.clog_oldest, d.clog_oldest);
    }

    #[test]
    fn another_format_version_is_refused_with_both_versions_named() {
        let dir = tempfile::tempdir().unwrap();
        let old = sample();
        ControlFile::create(dir.path(), old).unwrap();
        // A directory from before the 32-byte tuple header: patch the version in both copies, fixing
        // their checksums, as that binary would have written them.
        let path = dir.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        for copy in 0..2 {
            let mut d = ControlData::decode(&bytes[copy * COPY_SIZE..(copy + 1) * COPY_SIZE])
                .expect("a valid copy");
            d.format_version = FORMAT_VERSION_OLDEST_READ - 1;
            bytes[copy * COPY_SIZE..(copy + 1) * COPY_SIZE].copy_from_slice(&d.encode());
        }
        std::fs::write(&path, &bytes).unwrap();
        let err = ControlFile::open(dir.path())
            .err()
            .expect("must be refused")
            .to_string();
        assert!(
            err.contains(&format!(
                "format version {}",
                FORMAT_VERSION_OLDEST_READ - 1
            )) && err.contains(&format!(
                "reads versions {FORMAT_VERSION_OLDEST_READ} to {FORMAT_VERSION}"
            )),
            "{err}"
        );
    }

    /// A directory is written as version 4 until its clog is first truncated, then as
    /// version 5, which binaries that know no truncation point refuse.
    #[test]
    fn the_version_written_is_the_oldest_that_can_read_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = sample();
        d.clog_oldest = Xid(0);
        let mut cf = ControlFile::create(dir.path(), d.clone()).unwrap();
        let on_disk = || ControlFile::open(dir.path()).unwrap().data().format_version;
        assert_eq!(on_disk(), FORMAT_VERSION_OLDEST_READ);
        d.clog_oldest = Xid(1 << 20);
        cf.update(d).unwrap();
        assert_eq!(on_disk(), FORMAT_VERSION);
    }

    #[test]
    fn roundtrip_and_newest_copy_wins() {
        let dir = tempfile::tempdir().unwrap();
        let mut cf = ControlFile::create(dir.path(), sample()).unwrap();
        let mut d = sample();
        d.redo_lsn = Lsn(5000);
        cf.update(d).unwrap();
        let cf2 = ControlFile::open(dir.path()).unwrap();
        assert_eq!(cf2.data().redo_lsn, Lsn(5000));
        assert_eq!(cf2.data().wal_segment_size, 1 << 24);
        assert_eq!(cf2.data().next_xid, Xid(77));
    }

    #[test]
    fn one_corrupt_copy_falls_back_and_two_fail_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let mut cf = ControlFile::create(dir.path(), sample()).unwrap();
        let mut d = sample();
        d.redo_lsn = Lsn(5000);
        cf.update(d).unwrap(); // seq 1 -> copy 1
        drop(cf);
        let path = dir.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[COPY_SIZE + 50] ^= 0xFF; // damage the newer copy
        std::fs::write(&path, &bytes).unwrap();
        let cf = ControlFile::open(dir.path()).unwrap();
        assert_eq!(cf.data().redo_lsn, Lsn(1000), "fell back to the older copy");
        bytes[50] ^= 0xFF;
        std::fs::write(&path, &bytes).unwrap();
        let err = ControlFile::open(dir.path()).err().expect("must fail");
        assert!(
            err.to_string()
                .contains("neither copy has a valid checksum"),
            "{err}"
        );
    }

    #[test]
    fn wrong_page_size_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = sample();
        d.page_size = 4096;
        ControlFile::create(dir.path(), d).unwrap();
        let err = ControlFile::open(dir.path()).err().expect("must fail");
        assert!(err.to_string().contains("page size 4096"), "{err}");
    }
}
