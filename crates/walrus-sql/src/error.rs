//! SQL errors: a SQLSTATE and a message in PostgreSQL's style (lower case, no period).

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SqlError {
    pub sqlstate: &'static str,
    pub message: String,
    pub detail: Option<String>,
    /// PostgreSQL's HINT field: what the user can do about it.
    pub hint: Option<String>,
    /// PostgreSQL's CONTEXT field: where the error arose (`COPY t, line 3, column a:
    /// "x"`).
    pub context: Option<String>,
}

impl SqlError {
    pub fn new(sqlstate: &'static str, message: impl Into<String>) -> SqlError {
        SqlError {
            sqlstate,
            message: message.into(),
            detail: None,
            hint: None,
            context: None,
        }
    }
    pub fn unsupported(what: impl Into<String>) -> SqlError {
        SqlError::new("0A000", what)
    }
    pub fn syntax(what: impl Into<String>) -> SqlError {
        SqlError::new("42601", what)
    }
    /// Whether this is an error of evaluating rows (data exceptions like 22012,
    /// constraint violations, cancels, resources) rather than of the statement itself:
    /// the extended protocol reports those at Execute, never at Describe.
    pub fn is_run_time(&self) -> bool {
        matches!(
            self.sqlstate.get(..2),
            Some("22" | "23" | "40" | "53" | "54" | "55" | "57" | "XX")
        )
    }
    pub fn with_hint(mut self, hint: impl Into<String>) -> SqlError {
        self.hint = Some(hint.into());
        self
    }
    pub fn with_context(mut self, context: impl Into<String>) -> SqlError {
        self.context = Some(context.into());
        self
    }
    pub fn with_detail(mut self, detail: impl Into<String>) -> SqlError {
        self.detail = Some(detail.into());
        self
    }
}

impl From<walrus_engine::Error> for SqlError {
    fn from(e: walrus_engine::Error) -> SqlError {
        let detail = match &e {
            walrus_engine::Error::UniqueViolation { detail, .. }
            | walrus_engine::Error::HasDependents { detail, .. } => Some(detail.clone()),
            _ => None,
        };
        // PostgreSQL's hint for a full disk; the operation failed before changing
        // anything, so freeing space and retrying is all it takes.
        let hint = match &e {
            _ if e.sqlstate() == "53100" => Some("Check free disk space.".to_string()),
            walrus_engine::Error::HasDependents { .. } => {
                Some("Use DROP ... CASCADE to drop the dependent objects too.".to_string())
            }
            _ => None,
        };
        SqlError {
            sqlstate: e.sqlstate(),
            message: e.to_string(),
            detail,
            hint,
            context: None,
        }
    }
}

pub type SqlResult<T> = Result<T, SqlError>;
