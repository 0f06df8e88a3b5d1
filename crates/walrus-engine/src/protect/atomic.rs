//! `page_protection = atomic | auto`: whether the data directory's file system and device
//! guarantee that an 8 KiB page write is atomic, read with Linux `statx`
//! (`STATX_WRITE_ATOMIC`: `stx_atomic_write_unit_min/max`, Linux 6.11+).
//!
//! Where the device reports it, torn pages cannot happen for writes issued with
//! `RWF_ATOMIC` through `O_DIRECT`, and neither page images nor double writes are needed:
//! `page_protection = atomic` is accepted there (and `auto` picks it), and every data
//! page write goes through `io::write_page_atomic` (`storage/relfile.rs`, rule 5).
//! Elsewhere `atomic` is refused with what the device reports and `auto` resolves to
//! `dwb`, both with the probe's figures.
//!
//! Which devices answer: NVMe and SCSI drives that advertise atomic write units, and,
//! without such hardware, XFS on Linux 6.16+ with reflink (it makes larger writes atomic
//! in software, by writing out of place); ext4 on a device without atomic units and
//! tmpfs do not.

use std::path::Path;

use walrus_base::PAGE_SIZE;

/// `STATX_WRITE_ATOMIC` (include/uapi/linux/stat.h).
const STATX_WRITE_ATOMIC: u32 = 0x0001_0000;
/// Byte offsets in `struct statx` (256 bytes, stable ABI).
const OFF_MASK: usize = 0;
const OFF_UNIT_MIN: usize = 168;
const OFF_UNIT_MAX: usize = 172;
const OFF_SEGMENTS_MAX: usize = 176;

/// What `statx` says about atomic writes to files in a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicWriteSupport {
    /// The kernel answered the `STATX_WRITE_ATOMIC` query (6.11+ and a file system that
    /// knows it); when false the unit sizes are zero.
    pub reported: bool,
    pub unit_min: u32,
    pub unit_max: u32,
    pub segments_max: u32,
}

impl AtomicWriteSupport {
    /// An 8 KiB page can be written as one atomic unit.
    pub fn covers_page(&self) -> bool {
        self.reported
            && self.unit_min != 0
            && self.unit_min as usize <= PAGE_SIZE
            && self.unit_max as usize >= PAGE_SIZE
    }

    /// The device's figures, for messages.
    pub fn describe(&self) -> String {
        if !self.reported {
            return "the kernel or file system reports no atomic write support \
                    (statx STATX_WRITE_ATOMIC not answered)"
                .into();
        }
        format!(
            "statx reports atomic write unit min {} bytes, max {} bytes, {} segment(s); \
             an 8 KiB page needs min <= 8192 <= max",
            self.unit_min, self.unit_max, self.segments_max
        )
    }
}

/// Probes `dir` with a temporary file (statx answers per file for regular files).
pub fn probe(dir: &Path) -> std::io::Result<AtomicWriteSupport> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("atomic_write_probe.tmp");
    std::fs::write(&path, [0u8; 0])?;
    let result = statx_atomic(&path);
    let _ = std::fs::remove_file(&path);
    result
}

fn statx_atomic(path: &Path) -> std::io::Result<AtomicWriteSupport> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))?;
    // 256 bytes: the size of `struct statx`, read back as native 32-bit words (every
    // field used here is a 32-bit field at a 4-aligned offset).
    let mut buf = [0u32; 64];
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call; `buf` is a
    // writable 256-byte buffer, the size of `struct statx`, which the kernel fills with
    // `copy_to_user` (no alignment needed) and never writes past.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_statx,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            0,
            STATX_WRITE_ATOMIC,
            buf.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let u32at = |at: usize| buf[at / 4];
    let reported = u32at(OFF_MASK) & STATX_WRITE_ATOMIC != 0;
    Ok(AtomicWriteSupport {
        reported,
        unit_min: if reported { u32at(OFF_UNIT_MIN) } else { 0 },
        unit_max: if reported { u32at(OFF_UNIT_MAX) } else { 0 },
        segments_max: if reported { u32at(OFF_SEGMENTS_MAX) } else { 0 },
    })
}

/// Accepts `page_protection = atomic` for data directory `dir` when its device writes an
/// 8 KiB page atomically; otherwise the refusal, with what the device reports.
pub fn require_atomic(dir: &Path) -> Result<AtomicWriteSupport, String> {
    match probe(&dir.join("base")) {
        Ok(s) if s.covers_page() => Ok(s),
        Ok(s) => Err(format!(
            "page_protection = atomic is not possible here: {} (data directory {}); use dwb",
            s.describe(),
            dir.display()
        )),
        Err(e) => Err(format!(
            "page_protection = atomic: could not ask the file system about atomic writes in {}: {e}; use dwb",
            dir.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe answers on this machine's disk and on tmpfs; wherever the answer does
    /// not cover an 8 KiB page, the refusal carries the figures.
    #[test]
    fn probe_answers_and_refusal_names_the_figures() {
        let dir = tempfile::tempdir().unwrap();
        let s = probe(dir.path()).unwrap();
        assert!(!dir.path().join("atomic_write_probe.tmp").exists());
        match require_atomic(dir.path()) {
            Ok(found) => assert!(found.covers_page() && s.covers_page()),
            Err(msg) => {
                assert!(!s.covers_page());
                assert!(msg.starts_with("page_protection = atomic"), "{msg}");
                if s.reported {
                    assert!(msg.contains(&format!("min {} bytes", s.unit_min)), "{msg}");
                } else {
                    assert!(msg.contains("reports no atomic write support"), "{msg}");
                }
            }
        }
        // The figures decide coverage exactly.
        let dev = |min, max| AtomicWriteSupport {
            reported: true,
            unit_min: min,
            unit_max: max,
            segments_max: 1,
        };
        assert!(dev(4096, 65536).covers_page());
        assert!(dev(8192, 8192).covers_page());
        assert!(!dev(4096, 4096).covers_page());
        assert!(!dev(16384, 65536).covers_page());
        assert!(!dev(0, 0).covers_page());
    }
}
