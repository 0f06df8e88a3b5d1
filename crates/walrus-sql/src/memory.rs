//! `statement_memory_limit`: the per-statement budget for materialised rows.
//!
//! The executor materialises every intermediate and final result (`Rel.rows`), so one
//! statement could otherwise allocate without bound (a cross join of two large tables,
//! a huge `generate_series`) and take the whole server down. Each row a statement
//! materialises is charged an estimate of its size ([`row_bytes`]) against a budget
//! that is reset when the statement starts and shared by its subqueries; when the
//! total passes the limit the statement fails with 53200 (`out of memory`) and rolls
//! back like any error. Charges are not returned when rows are freed, except for the
//! transient results of per-row work (a subquery evaluated inside an expression, a
//! LATERAL item, an aggregate's argument values), so the count is an upper bound on
//! what the statement holds at once.
//!
//! The setting is server-wide, read from `walrus.toml` (the engine keeps names it does
//! not know in `Settings::extra`); PostgreSQL has no equivalent because it streams and
//! spills to disk.

use std::sync::atomic::{AtomicU64, Ordering};

use walrus_engine::access::datum::Datum;
use walrus_engine::settings::{format_size, parse_size, Settings};

use crate::error::{SqlError, SqlResult};

/// The setting's name in `walrus.toml`, `SHOW` and `pg_settings`.
pub const SETTING: &str = "statement_memory_limit";
/// Its default: 1 GB.
pub const DEFAULT_LIMIT: u64 = 1 << 30;
const MIN_LIMIT: u64 = 1 << 20;
const MAX_LIMIT: u64 = 1 << 40;

/// `statement_memory_limit` in bytes from the server's settings (the default when
/// absent); an unparsable or out-of-range value is a 22023 error naming the setting.
pub fn statement_memory_limit(settings: &Settings) -> SqlResult<u64> {
    match settings.extra.iter().rev().find(|(k, _)| k == SETTING) {
        None => Ok(DEFAULT_LIMIT),
        Some((_, v)) => parse_limit(v),
    }
}

fn parse_limit(value: &str) -> SqlResult<u64> {
    parse_size(value)
        .filter(|n| (MIN_LIMIT..=MAX_LIMIT).contains(n))
        .ok_or_else(|| {
            SqlError::new(
                "22023",
                format!(
                    "invalid value for parameter \"{SETTING}\": \"{value}\" \
                     (expected a size between 1MB and 1TB, such as \"64MB\" or \"1GB\")"
                ),
            )
        })
}

/// PostgreSQL's `MaxAllocSize` (1 GB − 1): no single value, array or string buffer may
/// be larger, its 4-byte varlena header included. Every function that can make a value
/// of a caller-chosen size (`repeat`, `lpad`, `rpad`, `||`, `string_agg`, `array_agg`)
/// computes the result's length first and refuses with PostgreSQL's error before
/// allocating, so one statement cannot drive the server out of memory or hand a client a
/// value PostgreSQL would never produce (the statement budget above counts rows, not one
/// value's construction).
pub(crate) const MAX_ALLOC_SIZE: usize = (1 << 30) - 1;

/// PostgreSQL's `VARHDRSZ`: the length word every text, bytea and array value carries.
const VARHDRSZ: usize = 4;

/// Whether a text or bytea value of `data` bytes may exist (PostgreSQL's
/// `AllocSizeIsValid(data + VARHDRSZ)`).
pub(crate) fn value_size_ok(data: usize) -> bool {
    data.checked_add(VARHDRSZ)
        .is_some_and(|n| n <= MAX_ALLOC_SIZE)
}

/// `repeat`, `lpad` and `rpad` past the limit: PostgreSQL's 54000, raised from the
/// requested length before anything is built.
pub(crate) fn requested_length_too_large() -> SqlError {
    SqlError::new("54000", "requested length too large")
}

/// `repeat(s, count)` of a `len`-byte `s`: checks the result's size (count ≤ 0 is '').
pub(crate) fn check_repeat(len: usize, count: i64) -> SqlResult<()> {
    let count = usize::try_from(count.max(0)).unwrap_or(usize::MAX);
    match len.checked_mul(count) {
        Some(n) if value_size_ok(n) => Ok(()),
        _ => Err(requested_length_too_large()),
    }
}

/// `lpad`/`rpad` to `chars` characters: PostgreSQL sizes the result for the encoding's
/// longest character (4 bytes in UTF-8) whatever the fill, so the limit is on the
/// requested length, not the bytes it would take (`chars` is already capped at the
/// string's own length when there is nothing to pad with).
pub(crate) fn check_pad(chars: usize) -> SqlResult<()> {
    match chars.checked_mul(4) {
        Some(n) if value_size_ok(n) => Ok(()),
        _ => Err(requested_length_too_large()),
    }
}

/// `a || b` (text or bytea) of `a` and `b` bytes: PostgreSQL's `textcat`/`byteacat`
/// ask palloc for the sum and its header, which refuses with XX000 naming that size.
pub(crate) fn check_concat(a: usize, b: usize) -> SqlResult<()> {
    let total = a.saturating_add(b);
    if value_size_ok(total) {
        return Ok(());
    }
    Err(SqlError::new(
        "XX000",
        format!(
            "invalid memory alloc request size {}",
            total.saturating_add(VARHDRSZ)
        ),
    ))
}

/// Appending `more` bytes to a string buffer holding `len` (string_agg's state):
/// PostgreSQL's `enlargeStringInfo` keeps room for a terminating zero byte and fails
/// with 54000 and this detail.
pub(crate) fn check_string_buffer(len: usize, more: usize) -> SqlResult<()> {
    if more < MAX_ALLOC_SIZE.saturating_sub(len) {
        return Ok(());
    }
    Err(SqlError::new("54000", "out of memory").with_detail(format!(
        "Cannot enlarge string buffer containing {len} bytes by {more} more bytes."
    )))
}

/// An array of `bytes` (PostgreSQL's `construct_md_array` total: header, null bitmap
/// and elements): 54000 past the limit.
pub(crate) fn check_array_size(bytes: usize) -> SqlResult<()> {
    if bytes <= MAX_ALLOC_SIZE {
        return Ok(());
    }
    Err(SqlError::new(
        "54000",
        format!("array size exceeds the maximum allowed ({MAX_ALLOC_SIZE})"),
    ))
}

/// The estimated size of one materialised row: its vector's header, each datum's
/// slot, and the heap bytes of text and numeric values. O(1) per datum, no allocation.
#[inline]
pub(crate) fn row_bytes(row: &[Datum]) -> u64 {
    let mut n = std::mem::size_of::<Vec<Datum>>() as u64;
    for d in row {
        n += datum_bytes(d);
    }
    n
}

/// One datum's slot plus its heap bytes.
#[inline]
pub(crate) fn datum_bytes(d: &Datum) -> u64 {
    let heap = match d {
        Datum::Text(s) | Datum::Numeric(s) => s.len(),
        _ => 0,
    };
    (std::mem::size_of::<Datum>() + heap) as u64
}

/// One statement's budget. Only the session's thread touches it; the atomic is there
/// so sessions stay `Send` (plain loads and stores, no read-modify-write).
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    used: AtomicU64,
    /// The most `used` has been since the statement began: what the statement held at
    /// once (streamed scans keep it at the group count, N or work_mem, not the table).
    peak: AtomicU64,
    limit: u64,
}

impl MemoryBudget {
    pub(crate) fn new(limit: u64) -> MemoryBudget {
        MemoryBudget {
            used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            limit,
        }
    }

    /// At each statement's start.
    pub(crate) fn reset(&self) {
        self.used.store(0, Ordering::Relaxed);
        self.peak.store(0, Ordering::Relaxed);
    }

    /// The most charged at once since the statement began.
    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Fails if `bytes` held at once would pass the limit (charges nothing).
    pub(crate) fn check(&self, bytes: u64) -> SqlResult<()> {
        if bytes > self.limit {
            return Err(self.exceeded());
        }
        Ok(())
    }

    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Charges `bytes`; fails the statement once the total passes the limit.
    #[inline]
    pub(crate) fn charge(&self, bytes: u64) -> SqlResult<()> {
        let used = self.used.load(Ordering::Relaxed).saturating_add(bytes);
        self.used.store(used, Ordering::Relaxed);
        if used > self.peak.load(Ordering::Relaxed) {
            self.peak.store(used, Ordering::Relaxed);
        }
        if used > self.limit {
            return Err(self.exceeded());
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn charge_row(&self, row: &[Datum]) -> SqlResult<()> {
        self.charge(row_bytes(row))
    }

    /// Charges every row of `rows` (rows built elsewhere, e.g. catalog views).
    pub(crate) fn charge_rows(&self, rows: &[Vec<Datum>]) -> SqlResult<()> {
        let mut n = 0;
        for r in rows {
            n += row_bytes(r);
        }
        self.charge(n)
    }

    /// Gives back what a transient result charged (freed before the statement goes on).
    pub(crate) fn release_to(&self, mark: u64) {
        if mark < self.used() {
            self.used.store(mark, Ordering::Relaxed);
        }
    }

    fn exceeded(&self) -> SqlError {
        let mut e = SqlError::new("53200", "out of memory");
        e.detail = Some(format!(
            "the statement's materialised rows need more than {SETTING} ({})",
            format_size(self.limit)
        ));
        e.hint = Some(
            "walrus materialises each query's rows in memory; add a LIMIT or a WHERE \
             clause, or raise statement_memory_limit in walrus.toml"
                .into(),
        );
        e
    }
}

/// `work_mem` as PostgreSQL 15 takes it: an integer with an optional unit (`B`, `kB`,
/// `MB`, `GB`, `TB`; none means kB), between 64kB and 2147483647kB. Returns the size in
/// kB; 22023 with PostgreSQL's messages otherwise, 0A000 for a fractional value
/// (PostgreSQL rounds those; walrus does not).
pub(crate) fn parse_work_mem_kb(value: &str) -> SqlResult<u64> {
    parse_memory_kb("work_mem", value, 64)
}

/// A memory setting `name` given in kB by default, at least `min_kb` (PostgreSQL's
/// rules and messages, as [`parse_work_mem_kb`]).
pub(crate) fn parse_memory_kb(name: &str, value: &str, min_kb: u64) -> SqlResult<u64> {
    let v = value.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let invalid = || {
        SqlError::new(
            "22023",
            format!("invalid value for parameter \"{name}\": \"{value}\""),
        )
        .with_hint("Valid units for this parameter are \"B\", \"kB\", \"MB\", \"GB\", and \"TB\".")
    };
    if unit.trim_start().starts_with('.') {
        return Err(SqlError::unsupported(format!(
            "fractional {name} values are not supported"
        )));
    }
    let n: u64 = num.parse().map_err(|_| invalid())?;
    let kb = match unit.trim() {
        "" | "kB" => Some(n),
        "B" => Some(n.div_ceil(1024)),
        "MB" => n.checked_mul(1 << 10),
        "GB" => n.checked_mul(1 << 20),
        "TB" => n.checked_mul(1 << 30),
        _ => return Err(invalid()),
    };
    match kb {
        Some(kb) if (min_kb..=2147483647).contains(&kb) => Ok(kb),
        _ => Err(SqlError::new(
            "22023",
            format!(
                "{} kB is outside the valid range for parameter \"{name}\" ({min_kb} .. 2147483647)",
                kb.map(|k| k.to_string()).unwrap_or_else(|| num.to_string())
            ),
        )),
    }
}

/// A kB count as PostgreSQL shows a memory setting: the largest unit that divides it.
pub(crate) fn show_kb(kb: u64) -> String {
    if kb.is_multiple_of(1 << 20) {
        format!("{}GB", kb >> 20)
    } else if kb.is_multiple_of(1 << 10) {
        format!("{}MB", kb >> 10)
    } else {
        format!("{kb}kB")
    }
}

/// The session's `work_mem` in bytes (PostgreSQL's 4MB when unset or unreadable).
pub(crate) fn work_mem_bytes(value: Option<&str>) -> u64 {
    value
        .and_then(|v| parse_work_mem_kb(v).ok())
        .unwrap_or(4096)
        * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The boundaries PostgreSQL 15 draws (checked on a 15.18 server): repeat up to
    /// 1 GB − 5 bytes, lpad/rpad up to (1 GB − 5) / 4 characters, `||` XX000 with the
    /// palloc size, string_agg 54000 with enlargeStringInfo's detail, arrays 54000.
    #[test]
    fn single_values_stop_at_max_alloc_size_with_postgres_errors() {
        let state = |r: SqlResult<()>| r.err().map(|e| (e.sqlstate, e.message, e.detail));
        assert!(check_repeat(1, (MAX_ALLOC_SIZE - 4) as i64).is_ok());
        assert_eq!(
            state(check_repeat(1, (MAX_ALLOC_SIZE - 3) as i64)),
            Some(("54000", "requested length too large".into(), None))
        );
        assert!(check_repeat(2, i64::MAX).is_err());
        assert!(check_repeat(0, i64::MAX).is_ok());
        assert!(check_repeat(5, -3).is_ok());
        assert!(check_pad(268_435_454).is_ok());
        assert_eq!(state(check_pad(268_435_455)).unwrap().0, "54000");
        assert_eq!(state(check_pad(usize::MAX)).unwrap().0, "54000");
        assert!(check_concat(600_000_000, 473_741_819).is_ok());
        assert_eq!(
            state(check_concat(600_000_000, 600_000_000)),
            Some((
                "XX000",
                "invalid memory alloc request size 1200000004".into(),
                None
            ))
        );
        assert_eq!(
            state(check_string_buffer(900_000_000, 300_000_000)),
            Some((
                "54000",
                "out of memory".into(),
                Some(
                    "Cannot enlarge string buffer containing 900000000 bytes by 300000000 more bytes."
                        .into()
                )
            ))
        );
        assert!(check_string_buffer(900_000_000, 173_741_822).is_ok());
        assert!(check_string_buffer(900_000_000, 173_741_823).is_err());
        assert!(check_array_size(MAX_ALLOC_SIZE).is_ok());
        assert_eq!(
            state(check_array_size(1_200_000_024)).unwrap().1,
            "array size exceeds the maximum allowed (1073741823)"
        );
    }

    #[test]
    fn limits_parse_with_postgres_size_units_and_a_range() {
        assert_eq!(parse_limit("64MB").unwrap(), 64 << 20);
        assert_eq!(parse_limit("1GB").unwrap(), 1 << 30);
        assert_eq!(parse_limit("1TB").unwrap(), 1 << 40);
        for bad in ["512kB", "2TB", "lots", "", "-1MB"] {
            let e = parse_limit(bad).unwrap_err();
            assert_eq!(e.sqlstate, "22023", "{bad}");
            assert!(e.message.contains(SETTING), "{}", e.message);
        }
        let mut s = Settings::default();
        assert_eq!(statement_memory_limit(&s).unwrap(), DEFAULT_LIMIT);
        s.set(SETTING, "2MB").unwrap();
        assert_eq!(statement_memory_limit(&s).unwrap(), 2 << 20);
    }

    #[test]
    fn the_budget_fails_past_its_limit_and_releases_transient_charges() {
        let b = MemoryBudget::new(1 << 20);
        let row = vec![Datum::Int4(1), Datum::Text("x".repeat(1000))];
        assert!(row_bytes(&row) > 1000);
        let mark = b.used();
        for _ in 0..900 {
            b.charge_row(&row).unwrap();
        }
        b.release_to(mark);
        assert_eq!(b.used(), 0);
        let e = (0..2000).try_for_each(|_| b.charge_row(&row)).unwrap_err();
        assert_eq!((e.sqlstate, e.message.as_str()), ("53200", "out of memory"));
        assert!(e.detail.unwrap().contains("statement_memory_limit (1MB)"));
        b.reset();
        b.charge_row(&row).unwrap();
    }

    #[test]
    fn work_mem_reads_postgres_units_and_shows_the_largest_exact_unit() {
        assert_eq!(parse_work_mem_kb("64").unwrap(), 64);
        assert_eq!(parse_work_mem_kb("64kB").unwrap(), 64);
        assert_eq!(parse_work_mem_kb("4MB").unwrap(), 4096);
        assert_eq!(parse_work_mem_kb(" 1 GB ").unwrap(), 1 << 20);
        assert_eq!(parse_work_mem_kb("65537B").unwrap(), 65);
        assert_eq!(parse_work_mem_kb("63").unwrap_err().sqlstate, "22023");
        assert_eq!(parse_work_mem_kb("4mb").unwrap_err().sqlstate, "22023");
        assert_eq!(parse_work_mem_kb("1.5MB").unwrap_err().sqlstate, "0A000");
        assert_eq!(show_kb(64), "64kB");
        assert_eq!(show_kb(4096), "4MB");
        assert_eq!(show_kb(1 << 20), "1GB");
        assert_eq!(work_mem_bytes(None), 4 << 20);
        assert_eq!(work_mem_bytes(Some("64kB")), 64 << 10);
    }
}
