//! The engine's error type. Four classes (CONVENTIONS §7.4): bad input and operating
//! errors are `Error` values; broken invariants are `assert!` panics; a failed WAL or
//! data-file sync aborts the process (see `wal::flush`), never an `Error`.

use walrus_base::{Lsn, PageId};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// PostgreSQL's wording: `could not extend file "base/16385": No space left on
    /// device`. The OS error is part of the message, not a separate source, so a printer
    /// that walks the source chain does not say it twice.
    #[error("could not {what} \"{path}\": {}", os_text(cause))]
    Io {
        what: &'static str,
        path: String,
        cause: std::io::Error,
    },

    #[error(
        "invalid page in block {} of relation {} ({relation}): checksum stored {stored:08X}, computed {computed:08X}",
        page.block, page.relfile
    )]
    ChecksumMismatch {
        page: PageId,
        relation: String,
        stored: u32,
        computed: u32,
    },

    #[error("misdirected page: expected {expected}, found {found}")]
    Misdirected { expected: PageId, found: PageId },

    #[error("data directory \"{dir}\" is not usable: {reason}")]
    BadDataDirectory { dir: String, reason: String },

    #[error("WAL is damaged or missing: {0}")]
    BadWal(String),

    /// `wal_sync_method = pmem` cannot be used: libpmem is missing, or the WAL directory
    /// is not persistent memory.
    #[error(transparent)]
    Pmem(#[from] crate::wal::pmem::PmemError),

    #[error("could not decode {what} at {at}: {reason}")]
    Decode {
        what: &'static str,
        at: String,
        reason: String,
    },

    #[error("duplicate key value violates unique constraint \"{index}\"")]
    UniqueViolation { index: String, detail: String },

    #[error("could not serialize access due to concurrent update")]
    SerializationFailure,

    /// A lock wait (row or table) would close a cycle of waiting transactions; the
    /// transaction that would close it is the one refused.
    #[error("deadlock detected")]
    Deadlock,

    #[error("canceling statement due to user request")]
    Canceled,

    /// PostgreSQL's `lock_timeout` expired while waiting for a lock.
    #[error("canceling statement due to lock timeout")]
    LockTimeout,

    /// `FOR UPDATE NOWAIT` (and kin) found the row locked.
    #[error("could not obtain lock on row in relation \"{0}\"")]
    RowLockNotAvailable(String),

    /// `LOCK TABLE ... NOWAIT` found a conflicting lock.
    #[error("could not obtain lock on relation \"{0}\"")]
    LockNotAvailable(String),

    #[error("relation \"{0}\" does not exist")]
    UndefinedTable(String),

    #[error("index \"{0}\" does not exist")]
    UndefinedIndex(String),

    /// DROP of an object something else needs (2BP01): the index of a primary key.
    #[error("{0}")]
    DependentObjects(String),

    /// DROP of a table another table's foreign key references (2BP01), with what
    /// depends on it (PostgreSQL's detail).
    #[error("{message}")]
    HasDependents { message: String, detail: String },

    /// A constraint name already used on the table (42710).
    #[error("{0}")]
    DuplicateObject(String),

    /// No such constraint (42704).
    #[error("{0}")]
    UndefinedObject(String),

    /// A statement found the table's files replaced or gone: TRUNCATE or DROP TABLE
    /// committed by another transaction since the statement read the definition.
    #[error("relation \"{0}\" was truncated or dropped by a concurrent transaction; retry the statement")]
    TableRewritten(String),

    #[error("relation \"{0}\" already exists")]
    DuplicateTable(String),

    #[error("column \"{0}\" does not exist")]
    UndefinedColumn(String),

    #[error(
        "null value in column \"{column}\" of relation \"{table}\" violates not-null constraint"
    )]
    NotNullViolation { column: String, table: String },

    #[error("{0}")]
    DatatypeMismatch(String),

    #[error("{0}")]
    InvalidInput(String),

    /// A page or tuple does not hold what its references promise (XX001,
    /// `data_corrupted`): a damaged page that passed its checksum, or a bug.
    #[error("{0}")]
    DataCorrupted(String),

    /// Out of a resource a statement needs (53000, `insufficient_resources`): no buffer
    /// could be freed for a page.
    #[error("{0}")]
    InsufficientResources(String),

    /// A limit of the implementation (54000, `program_limit_exceeded`).
    #[error("{0}")]
    ProgramLimitExceeded(String),

    #[error("{0}")]
    FeatureNotSupported(String),

    /// `nextval` at a sequence's bound without CYCLE, or `setval` outside its bounds
    /// (2200H, `sequence_generator_limit_exceeded`; 22003 for setval).
    #[error("{message}")]
    SequenceLimit {
        message: String,
        sqlstate: &'static str,
    },

    /// A statement the SQL layer's rules refuse, worded and coded by it (e.g. 23502
    /// when SET NOT NULL finds a NULL).
    #[error("{message}")]
    Rejected {
        message: String,
        sqlstate: &'static str,
    },

    #[error("row is too big: size {size}, maximum size {max}")]
    RowTooBig { size: usize, max: usize },

    #[error("the database system is shutting down or failed earlier (at {0}); restart it")]
    Unusable(Lsn),

    /// An always-on invariant check failed inside background work (reported, not
    /// propagated as a panic: see `engine/vacuum.rs`).
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    pub fn io(what: &'static str, path: impl std::fmt::Display, source: std::io::Error) -> Error {
        Error::Io {
            what,
            path: path.to_string(),
            cause: source,
        }
    }

    /// PostgreSQL SQLSTATE for this error, so the server layer never spells one itself.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            e if e.is_out_of_space() => "53100",
            Error::Io { cause, .. } if cause.kind() == std::io::ErrorKind::NotFound => "58P01",
            Error::Io { .. } => "58030",
            Error::ChecksumMismatch { .. } | Error::Misdirected { .. } => "XX001",
            Error::BadDataDirectory { .. } | Error::BadWal(_) | Error::Decode { .. } => "XX002",
            Error::UniqueViolation { .. } => "23505",
            Error::SerializationFailure | Error::TableRewritten(_) => "40001",
            Error::Deadlock => "40P01",
            Error::Canceled => "57014",
            Error::LockTimeout | Error::RowLockNotAvailable(_) | Error::LockNotAvailable(_) => {
                "55P03"
            }
            Error::UndefinedTable(_) => "42P01",
            Error::UndefinedIndex(_) => "42704",
            Error::DependentObjects(_) | Error::HasDependents { .. } => "2BP01",
            Error::DuplicateObject(_) => "42710",
            Error::UndefinedObject(_) => "42704",
            Error::DuplicateTable(_) => "42P07",
            Error::UndefinedColumn(_) => "42703",
            Error::NotNullViolation { .. } => "23502",
            Error::DatatypeMismatch(_) => "42804",
            Error::InvalidInput(_) => "22023",
            Error::DataCorrupted(_) => "XX001",
            Error::InsufficientResources(_) => "53000",
            Error::ProgramLimitExceeded(_) => "54000",
            Error::FeatureNotSupported(_) => "0A000",
            Error::RowTooBig { .. } => "54000",
            Error::SequenceLimit { sqlstate, .. } | Error::Rejected { sqlstate, .. } => sqlstate,
            Error::Unusable(_) => "57P03",
            Error::Internal(_) => "XX000",
            // system_error: the machine lacks the library or the device.
            Error::Pmem(_) => "58000",
        }
    }

    /// A full disk (or quota): the operation changed nothing and may succeed once space
    /// is freed.
    pub fn is_out_of_space(&self) -> bool {
        matches!(self, Error::Io { cause, .. } if crate::io::is_out_of_space(cause))
    }

    /// Whether retrying the whole transaction may succeed (40001 / 40P01).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::SerializationFailure | Error::Deadlock | Error::TableRewritten(_)
        )
    }
}

/// An OS error as `strerror` spells it, without Rust's " (os error N)" suffix.
fn os_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .map(str::to_string)
            .unwrap_or(text),
        None => text,
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<crate::txn::clog::ClogError> for Error {
    /// A status lost to truncation is a broken invariant reported as XX000; an
    /// unreadable clog segment is an I/O error (58030) naming the file.
    fn from(e: crate::txn::clog::ClogError) -> Error {
        use crate::txn::clog::ClogError;
        match e {
            ClogError::Truncated { .. } => Error::Internal(e.to_string()),
            ClogError::Unreadable {
                xid: _,
                path,
                cause,
            } => Error::Io {
                what: "read the commit-status log",
                path,
                cause,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full disk is SQLSTATE 53100 with the OS's words once, as PostgreSQL prints it;
    /// other I/O errors stay 58030.
    #[test]
    fn a_full_disk_is_53100_and_says_so_once() {
        let full = Error::io(
            "extend file",
            "base/16384",
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert_eq!(full.sqlstate(), "53100");
        assert!(full.is_out_of_space());
        assert_eq!(
            full.to_string(),
            "could not extend file \"base/16384\": No space left on device"
        );
        assert!(std::error::Error::source(&full).is_none());
        let quota = Error::io(
            "write",
            "x",
            std::io::Error::from_raw_os_error(libc::EDQUOT),
        );
        assert_eq!(quota.sqlstate(), "53100");
        let other = Error::io("read", "x", std::io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(other.sqlstate(), "58030");
        assert!(!other.is_out_of_space());
        assert_eq!(
            other.to_string(),
            "could not read \"x\": Input/output error"
        );
    }
}
