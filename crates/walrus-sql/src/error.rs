//! SQL errors: a SQLSTATE and a message in PostgreSQL's style (lower case, no period).

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SqlError {
    pub sqlstate: &'static str,
    pub message: String,
    pub detail: Option<String>,
}

impl SqlError {
    pub fn new(sqlstate: &'static str, message: impl Into<String>) -> SqlError {
        SqlError {
            sqlstate,
            message: message.into(),
            detail: None,
        }
    }
    pub fn unsupported(what: impl Into<String>) -> SqlError {
        SqlError::new("0A000", what)
    }
    pub fn syntax(what: impl Into<String>) -> SqlError {
        SqlError::new("42601", what)
    }
}

impl From<walrus_engine::Error> for SqlError {
    fn from(e: walrus_engine::Error) -> SqlError {
        let detail = match &e {
            walrus_engine::Error::UniqueViolation { detail, .. } => Some(detail.clone()),
            _ => None,
        };
        SqlError {
            sqlstate: e.sqlstate(),
            message: e.to_string(),
            detail,
        }
    }
}

pub type SqlResult<T> = Result<T, SqlError>;
