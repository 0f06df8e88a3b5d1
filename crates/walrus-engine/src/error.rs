//! The engine's error type. Four classes (CONVENTIONS §7.4): bad input and operating
//! errors are `Error` values; broken invariants are `assert!` panics; a failed WAL or
//! data-file sync aborts the process (see `wal::flush`), never an `Error`.

use walrus_base::{Lsn, PageId, Xid};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("could not {what} \"{path}\": {source}")]
    Io {
        what: &'static str,
        path: String,
        source: std::io::Error,
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

    #[error(
        "deadlock detected: transaction {waiter} waits for {holder}, which waits for {waiter}"
    )]
    Deadlock { waiter: Xid, holder: Xid },

    #[error("canceling statement due to user request")]
    Canceled,

    #[error("relation \"{0}\" does not exist")]
    UndefinedTable(String),

    #[error("relation \"{0}\" was truncated or dropped and recreated by a concurrent transaction; retry the statement")]
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

    #[error("{0}")]
    FeatureNotSupported(String),

    #[error("row is too big: size {size}, maximum size {max}")]
    RowTooBig { size: usize, max: usize },

    #[error("the database system is shutting down or failed earlier (at {0}); restart it")]
    Unusable(Lsn),
}

impl Error {
    pub fn io(what: &'static str, path: impl std::fmt::Display, source: std::io::Error) -> Error {
        Error::Io {
            what,
            path: path.to_string(),
            source,
        }
    }

    /// PostgreSQL SQLSTATE for this error, so the server layer never spells one itself.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Error::Io { .. } => "58030",
            Error::ChecksumMismatch { .. } | Error::Misdirected { .. } => "XX001",
            Error::BadDataDirectory { .. } | Error::BadWal(_) | Error::Decode { .. } => "XX002",
            Error::UniqueViolation { .. } => "23505",
            Error::SerializationFailure | Error::TableRewritten(_) => "40001",
            Error::Deadlock { .. } => "40P01",
            Error::Canceled => "57014",
            Error::UndefinedTable(_) => "42P01",
            Error::DuplicateTable(_) => "42P07",
            Error::UndefinedColumn(_) => "42703",
            Error::NotNullViolation { .. } => "23502",
            Error::DatatypeMismatch(_) => "42804",
            Error::InvalidInput(_) => "22023",
            Error::FeatureNotSupported(_) => "0A000",
            Error::RowTooBig { .. } => "54000",
            Error::Unusable(_) => "57P03",
        }
    }

    /// Whether retrying the whole transaction may succeed (40001 / 40P01).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::SerializationFailure | Error::Deadlock { .. } | Error::TableRewritten(_)
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
