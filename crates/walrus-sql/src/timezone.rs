//! The session `TimeZone`: which zones `SET TimeZone` accepts (as PostgreSQL 15 does),
//! and the UTC offset it gives an instant or a wall-clock time, with the IANA rules of
//! the `jiff` crate's bundled time zone database.
//!
//! timestamptz values are UTC microseconds; the zone matters only where PostgreSQL
//! applies it: text output, text input without an offset, and the casts between
//! timestamptz and timestamp/date/time. Those run deep inside value I/O
//! (`value::parse_text` / `value::format_text`, called from dozens of places), so the
//! session's zone is kept in a thread-local that the session installs whenever the
//! zone changes and whenever it starts work. Invariant this relies on: a session runs
//! on one thread at a time, and a server thread serves one session (walrus-server:
//! one OS thread per connection).

use std::cell::RefCell;

use jiff::tz::{AmbiguousOffset, TimeZone};

use crate::error::{SqlError, SqlResult};

const USECS_PER_SEC: i64 = 1_000_000;
/// Seconds from 1970-01-01 to 2000-01-01 (PostgreSQL's epoch).
const PG_EPOCH_UNIX_SECS: i64 = 946_684_800;
/// The largest offset PostgreSQL accepts for a zone (15:59:59), in seconds.
const MAX_OFFSET_SECS: i64 = 15 * 3600 + 59 * 60 + 59;

/// A session time zone.
#[derive(Clone, Debug)]
pub enum SessionZone {
    /// A fixed offset, seconds east of UTC (UTC itself is `Fixed(0)`).
    Fixed(i32),
    /// A zone of the IANA database.
    Named(TimeZone),
}

impl Default for SessionZone {
    fn default() -> Self {
        SessionZone::Fixed(0)
    }
}

thread_local! {
    static CURRENT: RefCell<SessionZone> = RefCell::new(SessionZone::default());
}

/// Makes `zone` the zone value I/O on this thread uses (see the module doc).
pub fn install(zone: &SessionZone) {
    CURRENT.with(|c| *c.borrow_mut() = zone.clone());
}

/// The offset (seconds east of UTC) of the installed zone at an instant (PostgreSQL
/// microseconds since 2000-01-01 UTC).
pub fn offset_at(utc_us: i64) -> i32 {
    CURRENT.with(|c| c.borrow().offset_at(utc_us))
}

/// The offset (seconds east of UTC) the installed zone gives a wall-clock time
/// (microseconds since 2000-01-01, local).
pub fn offset_for_local(local_us: i64) -> i32 {
    CURRENT.with(|c| c.borrow().offset_for_local(local_us))
}

/// The instant of a wall-clock time in the installed zone.
pub fn local_to_utc(local_us: i64) -> i64 {
    local_us.saturating_sub(offset_for_local(local_us) as i64 * USECS_PER_SEC)
}

/// The wall-clock time of an instant in the installed zone.
pub fn utc_to_local(utc_us: i64) -> i64 {
    utc_us.saturating_add(offset_at(utc_us) as i64 * USECS_PER_SEC)
}

/// jiff covers years -9999..=9999; PostgreSQL's timestamps reach further. Beyond that
/// range the offset of the range's end is used (the zone's rule there is a fixed yearly
/// one, as it is for PostgreSQL past its data).
fn jiff_timestamp(utc_us: i64) -> jiff::Timestamp {
    let unix_us = utc_us.saturating_add(PG_EPOCH_UNIX_SECS * USECS_PER_SEC);
    let min = jiff::Timestamp::MIN.as_microsecond();
    let max = jiff::Timestamp::MAX.as_microsecond();
    jiff::Timestamp::from_microsecond(unix_us.clamp(min, max)).unwrap_or(jiff::Timestamp::MAX)
}

impl SessionZone {
    pub fn offset_at(&self, utc_us: i64) -> i32 {
        match self {
            SessionZone::Fixed(secs) => *secs,
            SessionZone::Named(tz) => tz.to_offset(jiff_timestamp(utc_us)).seconds(),
        }
    }

    /// PostgreSQL's choice for a wall-clock time a transition makes ambiguous: in a gap
    /// (spring forward) the offset from before it, in a fold (fall back) the offset from
    /// after it (`2024-03-10 02:30` in New York is 03:30-04; `2024-11-03 01:30` is -05).
    pub fn offset_for_local(&self, local_us: i64) -> i32 {
        let tz = match self {
            SessionZone::Fixed(secs) => return *secs,
            SessionZone::Named(tz) => tz,
        };
        // The wall clock read as if it were UTC, as a civil date-time for jiff.
        let civil = jiff_timestamp(local_us).to_zoned(TimeZone::UTC).datetime();
        match tz.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => offset.seconds(),
            AmbiguousOffset::Gap { before, .. } => before.seconds(),
            AmbiguousOffset::Fold { after, .. } => after.seconds(),
        }
    }
}

/// An offset as PostgreSQL prints it after a timestamptz: `+01`, `-05:30`, `+00:19:32`.
pub fn format_offset(secs: i32) -> String {
    let sign = if secs < 0 { '-' } else { '+' };
    let a = secs.unsigned_abs();
    let (h, m, s) = (a / 3600, a / 60 % 60, a % 60);
    match (m, s) {
        (0, 0) => format!("{sign}{h:02}"),
        (_, 0) => format!("{sign}{h:02}:{m:02}"),
        _ => format!("{sign}{h:02}:{m:02}:{s:02}"),
    }
}

fn invalid(value: &str) -> SqlError {
    SqlError::new(
        "22023",
        format!("invalid value for parameter \"TimeZone\": \"{value}\""),
    )
}

/// A zone name of the IANA database, any case (`europe/berlin`), as the zone and its
/// canonical spelling. `Etc/Unknown` is jiff's marker, not a zone PostgreSQL has.
pub fn named_zone(name: &str) -> Option<(TimeZone, String)> {
    if name.eq_ignore_ascii_case("etc/unknown") || name.is_empty() {
        return None;
    }
    let tz = jiff::tz::db().get(name).ok()?;
    let canonical = tz.iana_name()?.to_string();
    Some((tz, canonical))
}

/// Reads a `SET TimeZone` value as PostgreSQL 15 does, giving the zone and the text
/// `SHOW TimeZone` prints:
/// - an IANA name, any case (`Europe/Berlin`, `utc`, `EST5EDT`): shown canonically;
/// - a plain number (`5`, `-3.5`, quoted or not): hours *east* of UTC, shown as
///   PostgreSQL's `<+05>-05`;
/// - a POSIX-style offset `[+-]HH[:MM[:SS]]` (`+05:30`): hours *west* of UTC (POSIX's
///   sign), shown as written.
///
/// - a POSIX specification without DST (`UTC+3`, `GMT-03:00`): west of UTC, shown
///   upper-cased.
///
/// Other POSIX time zone specifications (with DST rules or seconds) are valid in
/// PostgreSQL but not built here: 0A000. Anything else: 22023, as PostgreSQL.
pub fn parse_setting(value: &str) -> SqlResult<(SessionZone, String)> {
    let v = value.trim();
    if let Some((tz, canonical)) = named_zone(v) {
        if tz == TimeZone::UTC {
            return Ok((SessionZone::Fixed(0), canonical));
        }
        return Ok((SessionZone::Named(tz), canonical));
    }
    if let Ok(hours) = v.parse::<f64>() {
        // PostgreSQL reads the number as an interval of hours, to the second.
        if !hours.is_finite() {
            return Err(invalid(value));
        }
        let secs = (hours * 3600.0).round() as i64;
        if secs.abs() > MAX_OFFSET_SECS {
            return Err(invalid(value));
        }
        let secs = secs as i32;
        let shown = format!("<{}>{}", format_offset(secs), format_offset(-secs));
        return Ok((SessionZone::Fixed(secs), shown));
    }
    if let Some(east) = numeric_zone_name(v) {
        return Ok((SessionZone::Fixed(east), v.to_string()));
    }
    if let Some(west) = posix_offset(v) {
        return Ok((SessionZone::Fixed(-west), v.to_string()));
    }
    if let Some(west) = posix_std_offset(v) {
        // PostgreSQL shows a POSIX specification upper-cased.
        return Ok((SessionZone::Fixed(-west), v.to_ascii_uppercase()));
    }
    if v.bytes().any(|b| b.is_ascii_digit()) {
        return Err(SqlError::unsupported(format!(
            "time zone \"{v}\" is a POSIX time zone specification, which walrus does not \
             support: use an IANA zone name or an offset such as +05:30"
        )));
    }
    Err(invalid(value))
}

/// The name PostgreSQL gives a zone set as a number of hours, `<+05>-05`, read back
/// (the session stores what SHOW prints): seconds east of UTC. The POSIX offset after
/// the `>` is west of UTC and must agree with the name.
fn numeric_zone_name(v: &str) -> Option<i32> {
    let (name, west) = v.strip_prefix('<')?.split_once('>')?;
    let signed = |t: &str| -> Option<i32> {
        let (sign, hms) = match t.as_bytes().first()? {
            b'+' => (1, &t[1..]),
            b'-' => (-1, &t[1..]),
            _ => return None,
        };
        let mut secs = 0;
        let mut fields = 0;
        for part in hms.split(':') {
            if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_digit()) || fields == 3 {
                return None;
            }
            secs = secs * 60 + part.parse::<i32>().ok()?;
            fields += 1;
        }
        // HH is hours, HH:MM adds minutes, HH:MM:SS seconds.
        Some(sign * secs * [3600, 60, 1][fields - 1])
    };
    let east = signed(name)?;
    (signed(west)? == -east && format_offset(east) == name).then_some(east)
}

/// A POSIX specification without daylight saving: a name of three or more letters and
/// an offset west of UTC, `[+-]H[H][:MM]` (`UTC+3`, `GMT-03:00`: pgjdbc sends a JVM's
/// fixed-offset zone this way). Seconds, offsets past 15:59 and DST rules are left to
/// the caller's refusal.
fn posix_std_offset(v: &str) -> Option<i32> {
    let at = v.find(|c: char| !c.is_ascii_alphabetic())?;
    if at < 3 {
        return None;
    }
    let rest = &v[at..];
    let (sign, digits) = match rest.as_bytes()[0] {
        b'+' => (1, &rest[1..]),
        b'-' => (-1, &rest[1..]),
        _ => (1, rest),
    };
    let (h, m) = digits.split_once(':').unwrap_or((digits, "00"));
    let ok = |t: &str, len: std::ops::RangeInclusive<usize>| {
        len.contains(&t.len()) && t.bytes().all(|b| b.is_ascii_digit())
    };
    if !ok(h, 1..=2) || !ok(m, 2..=2) {
        return None;
    }
    let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
    let secs = h * 3600 + m * 60;
    (m < 60 && secs <= MAX_OFFSET_SECS).then_some(sign * secs as i32)
}

/// `[+-]HH[:MM[:SS]]` with at least one colon (a bare number is read as hours east by
/// the caller first): seconds west of UTC, POSIX's sign.
fn posix_offset(v: &str) -> Option<i32> {
    let (sign, rest) = match v.as_bytes().first()? {
        b'+' => (1, &v[1..]),
        b'-' => (-1, &v[1..]),
        _ => (1, v),
    };
    let mut parts = rest.split(':');
    let mut field = |max: i64| -> Option<i64> {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse().ok().filter(|n| *n <= max)
    };
    let h = field(24)?;
    let m = field(59)?;
    let s = match rest.matches(':').count() {
        1 => 0,
        2 => field(59)?,
        _ => return None,
    };
    Some(sign * (h * 3600 + m * 60 + s) as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg_us(y: i16, m: i8, d: i8, h: i8, mi: i8) -> i64 {
        let ts = jiff::civil::date(y, m, d)
            .at(h, mi, 0, 0)
            .to_zoned(TimeZone::UTC)
            .unwrap()
            .timestamp();
        ts.as_microsecond() - PG_EPOCH_UNIX_SECS * USECS_PER_SEC
    }

    /// SHOW values and offsets printed by PostgreSQL 15 for the same SETs.
    #[test]
    fn set_values_read_as_postgresql_15() {
        let show = |v: &str| parse_setting(v).unwrap().1;
        assert_eq!(show("europe/berlin"), "Europe/Berlin");
        assert_eq!(show("utc"), "UTC");
        assert_eq!(show("etc/utc"), "Etc/UTC");
        assert_eq!(show("5"), "<+05>-05");
        assert_eq!(show("-3.5"), "<-03:30>+03:30");
        assert_eq!(show("+05:30"), "+05:30");
        // What SHOW printed reads back as the same zone (the session stores it).
        for v in [
            "5",
            "-3.5",
            "0.25",
            "+05:30",
            "America/New_York",
            "utc+3",
            "GMT-03:00",
        ] {
            let (zone, shown) = parse_setting(v).unwrap();
            let (again, shown_again) = parse_setting(&shown).unwrap();
            assert_eq!(shown, shown_again, "{v}");
            let at = pg_us(2024, 1, 1, 10, 0);
            assert_eq!(zone.offset_at(at), again.offset_at(at), "{v}");
        }
        let off = |v: &str| {
            parse_setting(v)
                .unwrap()
                .0
                .offset_at(pg_us(2024, 1, 1, 10, 0))
        };
        assert_eq!(off("+05:30"), -19800);
        assert_eq!(off("5"), 18000);
        assert_eq!(off("Etc/GMT+5"), -18000);
        assert_eq!(off("America/St_Johns"), -12600);
        let code = |v: &str| parse_setting(v).unwrap_err().sqlstate;
        assert_eq!(code("Nowhere/Land"), "22023");
        assert_eq!(code("PST"), "22023");
        assert_eq!(code(""), "22023");
        assert_eq!(show("gmt-03:00"), "GMT-03:00");
        assert_eq!(off("GMT-03:00"), 3 * 3600);
        assert_eq!(off("UTC+3"), -3 * 3600);
        assert_eq!(off("FOO3:30"), -(3 * 3600 + 1800));
        assert_eq!(code("UTC+3:00:30"), "0A000");
        assert_eq!(code("EST5EDT4,M3.2.0,M11.1.0"), "0A000");
        assert_eq!(code("ab3"), "0A000");
    }

    #[test]
    fn transitions_resolve_as_postgresql() {
        let (ny, _) = parse_setting("America/New_York").unwrap();
        // 02:30 on 2024-03-10 does not exist: read with the offset before (-05).
        assert_eq!(ny.offset_for_local(pg_us(2024, 3, 10, 2, 30)), -18000);
        // 01:30 on 2024-11-03 happens twice: the later one (-05).
        assert_eq!(ny.offset_for_local(pg_us(2024, 11, 3, 1, 30)), -18000);
        assert_eq!(ny.offset_for_local(pg_us(2024, 7, 1, 12, 0)), -14400);
        assert_eq!(format_offset(3600), "+01");
        assert_eq!(format_offset(-19800), "-05:30");
        assert_eq!(format_offset(1172), "+00:19:32");
        // Far outside jiff's range: no panic, the range end's offset.
        let (berlin, _) = parse_setting("Europe/Berlin").unwrap();
        berlin.offset_at(i64::MAX);
        berlin.offset_for_local(i64::MIN);
    }
}
