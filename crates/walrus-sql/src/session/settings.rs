//! Session settings: their defaults, SET / RESET / SHOW, and a transaction block's undo
//! of the settings changed in it (SET LOCAL lasts until the block ends; a rollback undoes
//! every SET). The time settings the session enforces (`statement_timeout`,
//! `lock_timeout`, `idle_in_transaction_session_timeout`) are kept parsed too.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use walrus_engine::access::datum::{Datum, TypeId};

use super::parse::isolation_of;
use super::Session;
use crate::error::{SqlError, SqlResult};
use crate::result::{Column, QueryResult};

/// A setting's value from before the current transaction block changed it.
#[derive(Clone)]
pub(crate) struct SettingUndo {
    name: String,
    old: Option<String>,
    /// Changed only with SET LOCAL: restored at COMMIT too.
    local: bool,
}

pub(crate) fn default_settings() -> BTreeMap<String, String> {
    [
        ("server_version", crate::SERVER_VERSION),
        ("server_version_num", "150018"),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        // The database locale: byte-order comparison, ASCII-only case mapping
        // (`lower`, `upper`, `initcap`), as a PostgreSQL database made with C.
        ("lc_collate", "C"),
        ("lc_ctype", "C"),
        ("datestyle", "ISO, MDY"),
        ("timezone", "Etc/UTC"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
        ("transaction_isolation", "read committed"),
        ("default_transaction_isolation", "read committed"),
        ("max_identifier_length", "63"),
        ("search_path", "\"$user\", public"),
        ("statement_timeout", "0"),
        ("lock_timeout", "0"),
        ("idle_in_transaction_session_timeout", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}
impl Session {
    pub(super) fn setting_statement(&mut self, s: &str) -> SqlResult<QueryResult> {
        let lower = s.to_ascii_lowercase();
        let words: Vec<&str> = lower.split_whitespace().collect();
        match words.first().copied() {
            Some("show") => {
                let name = words.get(1).copied().unwrap_or("").trim_matches('"');
                if name == "all" {
                    let rows = self
                        .settings_view()
                        .all()
                        .iter()
                        .map(|(k, v)| vec![Datum::Text(k.clone()), Datum::Text(v.clone())])
                        .collect();
                    return Ok(QueryResult {
                        tag_only: false,
                        tag: "SHOW".into(),
                        columns: vec![
                            Column::new("name", TypeId::Text),
                            Column::new("setting", TypeId::Text),
                        ],
                        rows,
                    });
                }
                let name = if name == "transaction" {
                    "transaction_isolation"
                } else {
                    name
                };
                let v = self
                    .setting(name)
                    .ok_or_else(|| crate::guc::unrecognized(name))?;
                Ok(QueryResult {
                    tag_only: false,
                    tag: "SHOW".into(),
                    columns: vec![Column::new(name, TypeId::Text)],
                    rows: vec![vec![Datum::Text(v)]],
                })
            }
            Some("reset") => {
                let name = words.get(1).copied().unwrap_or("");
                let defaults = default_settings();
                let names: Vec<String> = if name == "all" {
                    defaults.keys().cloned().collect()
                } else {
                    vec![name.to_string()]
                };
                for n in names {
                    if n == "synchronous_commit" {
                        // Back to the server's setting (walrus.toml), as in PostgreSQL.
                        let v = self.server_synchronous_commit();
                        self.remember_for_block(&n, false);
                        self.put_setting(&n, Some(v.into()));
                    } else if let Some(v) = defaults.get(&n) {
                        self.remember_for_block(&n, false);
                        self.put_setting(&n, Some(v.clone()));
                    } else if name != "all" {
                        // A parameter with no walrus default (application_name, ...):
                        // back to unset.
                        crate::guc::check_settable(&n)?;
                        if self.settings.contains_key(&n) {
                            self.remember_for_block(&n, false);
                            self.put_setting(&n, None);
                        }
                    }
                }
                Ok(QueryResult::tag("RESET"))
            }
            _ => {
                // SET [SESSION|LOCAL] name {=|TO} value | SET TRANSACTION ISOLATION LEVEL ...
                let mut rest: Vec<&str> = s.split_whitespace().skip(1).collect();
                let scope = rest.first().map(|w| w.to_ascii_lowercase());
                let local = scope.as_deref() == Some("local");
                if matches!(scope.as_deref(), Some("session") | Some("local")) {
                    rest.remove(0);
                }
                let text = rest.join(" ");
                if text.to_ascii_lowercase().starts_with("transaction")
                    || text
                        .to_ascii_lowercase()
                        .starts_with("session characteristics")
                {
                    let l = text.to_ascii_lowercase();
                    if l.contains("serializable") {
                        return Err(SqlError::unsupported(
                            "SERIALIZABLE isolation is not supported",
                        ));
                    }
                    if l.contains("read only") || l.contains("deferrable") {
                        // SET TRANSACTION READ ONLY in a block makes it read-only; the
                        // session-wide form would be ignored, so it is refused.
                        if l.starts_with("transaction") && !l.contains("deferrable") {
                            if self.in_block {
                                self.block_read_only = true;
                            }
                        } else {
                            return Err(SqlError::unsupported(format!("SET {text}")));
                        }
                    }
                    if let Some(iso) = isolation_of(&text) {
                        self.block_isolation = Some(iso);
                    }
                    return Ok(QueryResult::tag("SET"));
                }
                // PostgreSQL's two special forms.
                let lower_text = text.to_ascii_lowercase();
                let text = if let Some(v) = lower_text.strip_prefix("time zone ") {
                    format!("timezone = {}", &text[text.len() - v.len()..])
                } else if let Some(v) = lower_text.strip_prefix("names ") {
                    format!("client_encoding = {}", &text[text.len() - v.len()..])
                } else {
                    text
                };
                let (name, value) = match text.split_once('=') {
                    Some((n, v)) => (n.trim().to_string(), v.trim().to_string()),
                    None => {
                        let mut it = text.splitn(3, ' ');
                        let n = it.next().unwrap_or("").to_string();
                        let to = it.next().unwrap_or("");
                        if !to.eq_ignore_ascii_case("to") {
                            return Err(SqlError::syntax(format!(
                                "syntax error at or near \"{to}\""
                            )));
                        }
                        (n, it.next().unwrap_or("").trim().to_string())
                    }
                };
                if name.is_empty() || value.is_empty() {
                    return Err(SqlError::syntax("syntax error at end of input"));
                }
                let value = value.trim_matches('\'').to_string();
                let name = name.trim_matches('"').to_ascii_lowercase();
                self.apply_set(&name, value, local)?;
                Ok(QueryResult::tag("SET"))
            }
        }
    }

    /// `SET [LOCAL] name = value` once the statement is read (also `set_config()` and
    /// the startup packet's options): checks the value as PostgreSQL does and stores
    /// it in the form SHOW gives back; returns that form.
    pub(crate) fn apply_set(
        &mut self,
        name: &str,
        mut value: String,
        local: bool,
    ) -> SqlResult<String> {
        let name = name.to_string();
        {
            {
                crate::guc::check_settable(&name)?;
                // Accepted but not honoured would be a silent difference: refused.
                let v = value.to_ascii_lowercase();
                let unhonoured = match name.as_str() {
                    "default_transaction_isolation" | "transaction_isolation" => {
                        v.contains("serializable")
                    }
                    "default_transaction_read_only" | "transaction_read_only" => {
                        matches!(v.as_str(), "on" | "true" | "yes" | "1")
                    }
                    _ => false,
                };
                if unhonoured {
                    return Err(SqlError::unsupported(format!(
                        "SET {name} = {value} is not supported"
                    )));
                }
                if local && !self.in_block {
                    // PostgreSQL warns and changes nothing: there is no transaction for
                    // the value to last until.
                    return Ok(value);
                }
                if self.time_setting(&name).is_some() {
                    value = crate::timeout::show_ms(crate::timeout::parse_ms(&name, &value)?);
                }
                if name == "synchronous_commit" {
                    value = synchronous_commit_value(&value)?.to_string();
                }
                if name == "datestyle" {
                    let current = self.settings.get("datestyle").cloned();
                    value = datestyle_value(current.as_deref().unwrap_or("ISO, MDY"), &value)?;
                }
                if name == "timezone" {
                    match value.to_ascii_lowercase().as_str() {
                        // SET TIME ZONE LOCAL / DEFAULT: back to the default zone.
                        "local" | "default" => value = default_settings()["timezone"].clone(),
                        v if v.starts_with("interval") => {
                            value = crate::timezone::parse_interval_setting(&value)?.1
                        }
                        _ => value = crate::timezone::parse_setting(&value)?.1,
                    }
                }
                if name == "work_mem" {
                    value = crate::memory::show_kb(crate::memory::parse_work_mem_kb(&value)?);
                }
                if name == "max_stack_depth" {
                    value = crate::memory::show_kb(crate::stack::parse_max_stack_depth_kb(&value)?);
                }
                if name == crate::exec::analyze::STATISTICS_TARGET {
                    value = crate::exec::analyze::statistics_target(&value)?.to_string();
                }
                if name == crate::exec::parallel::WORKERS_PER_GATHER {
                    value = crate::exec::parallel::workers_per_gather_setting(&value)?.to_string();
                }
                self.remember_for_block(&name, local);
                self.put_setting(&name, Some(value.clone()));
                Ok(value)
            }
        }
    }

    /// Before a SET or RESET of `name` inside a transaction block: keeps its value from
    /// before the block (once per name) for the block's end.
    pub(super) fn remember_for_block(&mut self, name: &str, local: bool) {
        if !self.in_block {
            return;
        }
        if let Some(u) = self.block_undo.iter_mut().find(|u| u.name == name) {
            u.local &= local;
            return;
        }
        let old = self.settings.get(name).cloned();
        self.block_undo.push(SettingUndo {
            name: name.to_string(),
            old,
            local,
        });
    }

    /// At the end of a transaction block, as PostgreSQL: a rollback undoes every SET and
    /// RESET made in it; a commit keeps them, except SET LOCAL, which lasts only until
    /// the block ends. (A `SET LOCAL statement_timeout` in one transaction must not
    /// cancel statements of the next.)
    pub(super) fn restore_block_settings(&mut self, committed: bool) {
        for u in std::mem::take(&mut self.block_undo) {
            if !committed || u.local {
                self.put_setting(&u.name, u.old);
            }
        }
    }

    /// Puts back every setting that differs from `saved` (a ROLLBACK TO SAVEPOINT
    /// undoing the SETs made since the savepoint).
    pub(super) fn restore_settings_to(&mut self, saved: &BTreeMap<String, String>) {
        let current = self.settings.clone();
        let names: std::collections::BTreeSet<&String> =
            current.keys().chain(saved.keys()).collect();
        for name in names {
            if current.get(name) != saved.get(name) {
                self.put_setting(name, saved.get(name).cloned());
            }
        }
    }

    /// Sets a setting (`None`: removes it), keeping the parsed value of a time setting
    /// in step with its text. The text was validated when it was first set.
    pub(super) fn put_setting(&mut self, name: &str, value: Option<String>) {
        if name == "application_name" {
            let shown = value.clone().unwrap_or_default();
            self.backend.update(|a| a.application_name = shown);
        }
        if name == "max_stack_depth" {
            // Validated when set; unset is PostgreSQL's default.
            self.max_stack_depth_kb = value
                .as_deref()
                .and_then(|v| crate::memory::parse_memory_kb(name, v, 100).ok())
                .unwrap_or(crate::stack::DEFAULT_MAX_STACK_DEPTH_KB);
            crate::stack::set_limit_kb(self.max_stack_depth_kb);
        }
        if name == "timezone" {
            // Validated when set; the default (and an unset value) is UTC.
            self.time_zone = value
                .as_deref()
                .and_then(|v| crate::timezone::parse_setting(v).ok())
                .map(|(zone, _)| zone)
                .unwrap_or_default();
            crate::timezone::install(&self.time_zone);
        }
        if let Some(slot) = self.time_setting(name) {
            *slot = value
                .as_deref()
                .and_then(|v| crate::timeout::parse_ms(name, v).ok())
                .unwrap_or(0);
        }
        let map = Arc::make_mut(&mut self.settings);
        match value {
            Some(v) => map.insert(name.to_string(), v),
            None => map.remove(name),
        };
    }

    /// Whether this session's commits wait for their WAL flush (`synchronous_commit`).
    pub(super) fn synchronous_commit(&self) -> bool {
        self.settings.get("synchronous_commit").map(String::as_str) != Some("off")
    }

    pub(super) fn server_synchronous_commit(&self) -> &'static str {
        if self.engine.settings().synchronous_commit {
            "on"
        } else {
            "off"
        }
    }

    pub(super) fn lock_timeout(&self) -> Option<Duration> {
        (self.lock_timeout_ms > 0).then(|| Duration::from_millis(self.lock_timeout_ms))
    }

    /// The parsed value behind a time setting the session enforces.
    pub(super) fn time_setting(&mut self, name: &str) -> Option<&mut u64> {
        match name {
            "statement_timeout" => Some(&mut self.statement_timeout_ms),
            "lock_timeout" => Some(&mut self.lock_timeout_ms),
            "idle_in_transaction_session_timeout" => Some(&mut self.idle_in_transaction_timeout_ms),
            _ => None,
        }
    }
}

/// A value for `synchronous_commit`, as PostgreSQL spells it back. Without replication
/// `local` is `on` (PostgreSQL's meaning too); `remote_write` and `remote_apply` promise a
/// standby walrus does not have yet, so they are refused rather than silently weakened.
fn synchronous_commit_value(v: &str) -> SqlResult<&'static str> {
    match v.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok("on"),
        "off" | "false" | "no" | "0" => Ok("off"),
        "local" => Ok("local"),
        "remote_write" | "remote_apply" => Err(SqlError::new(
            "0A000",
            format!(
                "synchronous_commit = {v} needs a synchronous standby, and walrus has no \
                 replication yet"
            ),
        )),
        _ => Err(SqlError {
            hint: Some("Available values: local, on, off.".into()),
            ..SqlError::new(
                "22023",
                format!("invalid value for parameter \"synchronous_commit\": \"{v}\""),
            )
        }),
    }
}

/// `SET datestyle`: PostgreSQL's keywords (an output style, an input field order, or
/// both, comma-separated; `default`), kept in SHOW's form (`ISO, DMY`). Only the ISO
/// output style is honoured, so SQL, Postgres and German are refused (0A000) rather
/// than accepted and ignored. The field order is kept as given: walrus refuses the
/// ambiguous date inputs that it decides (value.rs), whatever it is.
pub(crate) fn datestyle_value(current: &str, value: &str) -> SqlResult<String> {
    let (mut style, mut order) = current.split_once(", ").unwrap_or(("ISO", "MDY"));
    let (mut styles, mut orders) = (0, 0);
    let invalid = |detail: String| {
        SqlError::new(
            "22023",
            format!("invalid value for parameter \"DateStyle\": \"{value}\""),
        )
        .with_detail(detail)
    };
    for word in value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
    {
        match word.to_ascii_lowercase().as_str() {
            "iso" => (style, styles) = ("ISO", styles + 1),
            "sql" => (style, styles) = ("SQL", styles + 1),
            "postgres" => (style, styles) = ("Postgres", styles + 1),
            "german" => {
                (style, styles) = ("German", styles + 1);
                if orders == 0 {
                    order = "DMY";
                }
            }
            "ymd" => (order, orders) = ("YMD", orders + 1),
            "dmy" | "euro" | "european" => (order, orders) = ("DMY", orders + 1),
            "mdy" | "us" | "noneuro" | "noneuropean" => (order, orders) = ("MDY", orders + 1),
            "default" => {
                (style, order) = ("ISO", "MDY");
                (styles, orders) = (styles + 1, orders + 1);
            }
            _ => return Err(invalid(format!("Unrecognized key word: \"{word}\"."))),
        }
    }
    if styles > 1 || orders > 1 {
        return Err(invalid("Conflicting \"datestyle\" specifications.".into()));
    }
    if style != "ISO" {
        return Err(SqlError::unsupported(format!(
            "DateStyle \"{style}\" is not supported: walrus writes dates in the ISO style"
        )));
    }
    Ok(format!("{style}, {order}"))
}
