//! Temporary files for sorts and hash tables that outgrow `work_mem`: rows written in
//! a private format (each datum's type, then the engine's row encoding), read back in
//! order, the file removed when its handle drops. The process-wide counts of files and
//! bytes written are PostgreSQL's `temp_files` / `temp_bytes` ([`temp_file_stats`]).

use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use walrus_engine::access::datum::{decode_row, encode_row, Datum, TypeId};

use crate::error::{SqlError, SqlResult};

static TEMP_FILES: AtomicU64 = AtomicU64::new(0);
static TEMP_BYTES: AtomicU64 = AtomicU64::new(0);
static NEXT_NAME: AtomicU64 = AtomicU64::new(0);

/// (temporary files created, bytes written to them) since the process started, as
/// PostgreSQL's `pg_stat_database.temp_files` / `temp_bytes` count them.
pub fn temp_file_stats() -> (u64, u64) {
    (
        TEMP_FILES.load(Ordering::Relaxed),
        TEMP_BYTES.load(Ordering::Relaxed),
    )
}

fn io_error(what: &str, e: std::io::Error) -> SqlError {
    SqlError::new("58030", format!("could not {what} temporary file: {e}"))
}

/// One temporary file: written row by row, then read back from the start.
pub(super) struct SpillFile {
    path: PathBuf,
    file: Option<BufWriter<File>>,
    rows: u64,
    buf: Vec<u8>,
}

impl SpillFile {
    pub(super) fn create() -> SqlResult<SpillFile> {
        let name = format!(
            "walrus_tmp.{}.{}",
            std::process::id(),
            NEXT_NAME.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_error("create", e))?;
        TEMP_FILES.fetch_add(1, Ordering::Relaxed);
        Ok(SpillFile {
            path,
            file: Some(BufWriter::new(file)),
            rows: 0,
            buf: Vec::new(),
        })
    }

    pub(super) fn write_row(&mut self, row: &[Datum]) -> SqlResult<()> {
        let Some(w) = self.file.as_mut() else {
            return Err(SqlError::new(
                "XX000",
                "temporary file written after reading",
            ));
        };
        self.buf.clear();
        self.buf
            .extend_from_slice(&(row.len() as u32).to_le_bytes());
        for d in row {
            self.buf
                .push(d.type_id().map(|t| t.to_u8() + 1).unwrap_or(0));
        }
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        encode_row(row, &mut self.buf);
        let len = (self.buf.len() - at - 4) as u32;
        self.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
        w.write_all(&self.buf)
            .map_err(|e| io_error("write to", e))?;
        TEMP_BYTES.fetch_add(self.buf.len() as u64, Ordering::Relaxed);
        self.rows += 1;
        Ok(())
    }

    /// Ends writing; the rows come back in the order written.
    pub(super) fn reader(&mut self) -> SqlResult<SpillReader> {
        let mut file = match self.file.take() {
            Some(w) => w
                .into_inner()
                .map_err(|e| io_error("write to", e.into_error()))?,
            None => File::open(&self.path).map_err(|e| io_error("open", e))?,
        };
        file.seek(SeekFrom::Start(0))
            .map_err(|e| io_error("read", e))?;
        Ok(SpillReader {
            file: BufReader::new(file),
            left: self.rows,
        })
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        self.file = None;
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads a [`SpillFile`]'s rows back.
pub(super) struct SpillReader {
    file: BufReader<File>,
    left: u64,
}

impl SpillReader {
    pub(super) fn next_row(&mut self) -> SqlResult<Option<Vec<Datum>>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let mut n = [0u8; 4];
        self.read(&mut n)?;
        let mut tags = vec![0u8; u32::from_le_bytes(n) as usize];
        self.read(&mut tags)?;
        self.read(&mut n)?;
        let mut bytes = vec![0u8; u32::from_le_bytes(n) as usize];
        self.read(&mut bytes)?;
        let types: Vec<TypeId> = tags
            .iter()
            .map(|&t| {
                // A NULL's slot is marked in the row's bitmap; its type is not read.
                TypeId::from_u8(t.wrapping_sub(1)).unwrap_or(TypeId::Text)
            })
            .collect();
        decode_row(&bytes, &types)
            .map(Some)
            .map_err(|e| SqlError::new("XX001", format!("bad temporary file row: {e}")))
    }

    fn read(&mut self, buf: &mut [u8]) -> SqlResult<()> {
        self.file.read_exact(buf).map_err(|e| io_error("read", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_come_back_as_written_and_the_file_goes_on_drop() {
        let rows = vec![
            vec![Datum::Int4(1), Datum::Null, Datum::Text("a\u{e9}".into())],
            vec![],
            vec![
                Datum::Numeric("2.50".into()),
                Datum::Float8(-0.0),
                Datum::Bool(true),
                Datum::Int8(i64::MIN),
                Datum::Null,
            ],
        ];
        let (files, bytes) = temp_file_stats();
        let mut f = SpillFile::create().unwrap();
        let path = f.path.clone();
        for r in &rows {
            f.write_row(r).unwrap();
        }
        let mut rd = f.reader().unwrap();
        let mut back = Vec::new();
        while let Some(r) = rd.next_row().unwrap() {
            back.push(r);
        }
        assert_eq!(format!("{back:?}"), format!("{rows:?}"));
        assert!(temp_file_stats().0 > files && temp_file_stats().1 > bytes);
        assert!(path.exists());
        drop(rd);
        drop(f);
        assert!(!path.exists());
    }
}
