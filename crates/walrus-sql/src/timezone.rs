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
use walrus_engine::access::datum::{Datum, TypeId};

use crate::error::{SqlError, SqlResult};

const USECS_PER_SEC: i64 = 1_000_000;
const USECS_PER_DAY: i64 = 86_400_000_000;
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

/// The fixed-offset abbreviations of PostgreSQL 15's default `timezone_abbreviations`
/// set (`timezonesets/Default`) that walrus reads, lower-case, with their offset in
/// seconds east of UTC (a daylight-saving one, `PDT`, carries its whole offset).
/// Abbreviations PostgreSQL resolves through a zone's rules (`MSK`, `SGT`) and any
/// others are not here: refused by the callers, never guessed.
const ABBREVIATIONS: &[(&str, i32)] = &[
    ("acst", 34200),
    ("aedt", 39600),
    ("aest", 36000),
    ("akdt", -28800),
    ("akst", -32400),
    ("adt", -10800),
    ("ast", -14400),
    ("awst", 28800),
    ("bst", 3600),
    ("cdt", -18000),
    ("cest", 7200),
    ("cet", 3600),
    ("cst", -21600),
    ("edt", -14400),
    ("eest", 10800),
    ("eet", 7200),
    ("est", -18000),
    ("gmt", 0),
    ("hkt", 28800),
    ("hst", -36000),
    ("ist", 7200),
    ("jst", 32400),
    ("kst", 32400),
    ("mdt", -21600),
    ("mest", 7200),
    ("mesz", 7200),
    ("met", 3600),
    ("mez", 3600),
    ("mst", -25200),
    ("ndt", -9000),
    ("nst", -12600),
    ("nzdt", 46800),
    ("nzst", 43200),
    ("pdt", -25200),
    ("pst", -28800),
    ("ut", 0),
    ("utc", 0),
    ("wet", 0),
    ("z", 0),
    ("zulu", 0),
];

/// The offset (seconds east of UTC) of a fixed abbreviation of PostgreSQL's default
/// set, any case (`EST` is -18000).
pub fn abbreviation_offset(name: &str) -> Option<i32> {
    let lower = name.to_ascii_lowercase();
    ABBREVIATIONS
        .iter()
        .find(|(a, _)| *a == lower)
        .map(|(_, east)| *east)
}

/// The zone `AT TIME ZONE` and `timezone(zone, ts)` read from text, as PostgreSQL 15's
/// `timestamptz_zone`: an abbreviation first (`EST` is always -05), then an IANA name
/// or a POSIX offset (`+05:30` is 5½ hours *west*, POSIX's sign). Unknown: 22023.
pub fn parse_at_zone(name: &str) -> SqlResult<SessionZone> {
    if let Some(east) = abbreviation_offset(name.trim()) {
        return Ok(SessionZone::Fixed(east));
    }
    if let Some((tz, _)) = named_zone(name) {
        return Ok(if tz == TimeZone::UTC {
            SessionZone::Fixed(0)
        } else {
            SessionZone::Named(tz)
        });
    }
    if let Some(west) = posix_offset(name).or_else(|| posix_std_offset(name)) {
        return Ok(SessionZone::Fixed(-west));
    }
    if name.bytes().any(|b| b.is_ascii_digit()) || name.bytes().all(|b| b.is_ascii_alphabetic()) {
        // A POSIX specification with rules, a bare number, or an abbreviation
        // PostgreSQL may resolve through a zone: not built.
        return Err(SqlError::unsupported(format!(
            "time zone \"{name}\" is not supported by walrus: use an IANA zone name, a \
             fixed abbreviation such as EST, or an offset such as +05:30"
        )));
    }
    Err(SqlError::new(
        "22023",
        format!("time zone \"{name}\" not recognized"),
    ))
}

/// `AT TIME ZONE INTERVAL '...'` (PostgreSQL's `timestamptz_izone`): the interval is
/// the offset east of UTC; months or days are 22023.
pub fn interval_zone(iv: walrus_engine::access::datum::Interval) -> SqlResult<SessionZone> {
    if iv.months != 0 || iv.days != 0 {
        return Err(SqlError::new(
            "22023",
            format!(
                "interval time zone \"{}\" must not include months or days",
                crate::interval::format_interval(iv)
            ),
        ));
    }
    Ok(SessionZone::Fixed((iv.micros / USECS_PER_SEC) as i32))
}

/// `SET TIME ZONE INTERVAL '+05:30' HOUR TO MINUTE` (the words after `TIME ZONE`): the
/// interval is the offset *east* of UTC, shown as PostgreSQL shows a numeric zone
/// (`<+05:30>-05:30`). The qualifier may be absent, `HOUR` or `HOUR TO MINUTE` (fields
/// below it are dropped, as the interval type modifier does); other qualifiers are a
/// syntax error in PostgreSQL (42601), months or days 22023.
pub fn parse_interval_setting(value: &str) -> SqlResult<(SessionZone, String)> {
    let syntax = || SqlError::syntax(format!("syntax error at or near \"{value}\""));
    let rest = value
        .get(..8)
        .filter(|w| w.eq_ignore_ascii_case("interval"))
        .map(|_| value[8..].trim_start())
        .ok_or_else(syntax)?;
    let body = rest.strip_prefix('\'').ok_or_else(syntax)?;
    // The caller may have trimmed the closing quote of `INTERVAL '+05:30'`.
    let end = body.find('\'').unwrap_or(body.len());
    let (literal, qualifier) = (&body[..end], body.get(end + 1..).unwrap_or("").trim());
    let words: Vec<String> = qualifier
        .split_whitespace()
        .map(|w| w.to_ascii_lowercase())
        .collect();
    let unit_micros = match words
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] => 1,
        ["hour"] => 3600 * USECS_PER_SEC,
        ["hour", "to", "minute"] => 60 * USECS_PER_SEC,
        _ => {
            return Err(SqlError::syntax(
                "time zone interval must be HOUR or HOUR TO MINUTE",
            ))
        }
    };
    let bare_number = literal
        .trim()
        .trim_start_matches(['+', '-'])
        .bytes()
        .all(|b| b.is_ascii_digit());
    if bare_number && unit_micros != 3600 * USECS_PER_SEC {
        // A bare number counts the qualifier's last field: not built.
        return Err(SqlError::unsupported(format!(
            "SET TIME ZONE INTERVAL '{literal}' {qualifier} is not supported: write the offset as '+HH:MM'"
        )));
    }
    let iv = if bare_number {
        let hours: i64 = literal.trim().parse().map_err(|_| syntax())?;
        walrus_engine::access::datum::Interval {
            months: 0,
            days: 0,
            micros: hours * 3600 * USECS_PER_SEC,
        }
    } else {
        crate::interval::parse_interval(literal)?
    };
    if iv.months != 0 || iv.days != 0 {
        return Err(invalid(value).with_detail(if iv.months != 0 {
            "Cannot specify months in time zone interval."
        } else {
            "Cannot specify days in time zone interval."
        }));
    }
    let micros = iv.micros - iv.micros % unit_micros;
    let east = micros / USECS_PER_SEC;
    if east.abs() > MAX_OFFSET_SECS {
        return Err(invalid(value));
    }
    let east = east as i32;
    let shown = format!("<{}>{}", format_offset(east), format_offset(-east));
    Ok((SessionZone::Fixed(east), shown))
}

/// `ts AT TIME ZONE zone` and `timezone(zone, ts)`, as PostgreSQL 15: a timestamptz
/// gives the wall-clock timestamp in `zone`; a timestamp is read as wall-clock time in
/// `zone` and gives the instant; a timetz is moved to `zone` (a named zone's offset
/// now). `zone` is text ([`parse_at_zone`]) or an interval ([`interval_zone`]). An
/// untyped literal is read as timestamptz, PostgreSQL's preferred type; `date` and
/// `time` (implicitly cast there) are not built (0A000).
pub fn at_time_zone(value: Datum, zone: Datum) -> SqlResult<Datum> {
    let zone = match zone {
        Datum::Null => return Ok(Datum::Null),
        Datum::Text(name) => parse_at_zone(&name)?,
        Datum::Interval(iv) => interval_zone(iv)?,
        other => {
            return Err(SqlError::new(
                "42883",
                format!(
                    "function timezone({}, {}) does not exist",
                    other.type_id().map(|t| t.name()).unwrap_or("unknown"),
                    value.type_id().map(|t| t.name()).unwrap_or("unknown")
                ),
            ))
        }
    };
    shift_to_zone(value, &zone)
}

fn shift_to_zone(value: Datum, zone: &SessionZone) -> SqlResult<Datum> {
    Ok(match value {
        Datum::Null => Datum::Null,
        Datum::TimestampTz(utc) => {
            Datum::Timestamp(utc.saturating_add(zone.offset_at(utc) as i64 * USECS_PER_SEC))
        }
        Datum::Timestamp(local) => Datum::TimestampTz(
            local.saturating_sub(zone.offset_for_local(local) as i64 * USECS_PER_SEC),
        ),
        Datum::Text(t) => {
            return shift_to_zone(crate::value::parse_text(TypeId::TimestampTz, &t)?, zone)
        }
        Datum::TimeTz(micros, zone_west) => {
            let utc_time = micros + zone_west as i64 * USECS_PER_SEC;
            let now = crate::value::system_time_to_pg(std::time::SystemTime::now());
            let east = zone.offset_at(now);
            Datum::TimeTz(
                (utc_time + east as i64 * USECS_PER_SEC).rem_euclid(USECS_PER_DAY),
                -east,
            )
        }
        other @ (Datum::Date(_) | Datum::Time(_)) => {
            return Err(SqlError::unsupported(format!(
                "{} AT TIME ZONE is not supported",
                other.type_id().map(|t| t.name()).unwrap_or("unknown")
            )))
        }
        other => {
            return Err(SqlError::new(
                "42883",
                format!(
                    "function timezone(text, {}) does not exist",
                    other.type_id().map(|t| t.name()).unwrap_or("unknown")
                ),
            ))
        }
    })
}

/// A POSIX offset without a zone name, `[+-]H[H][:MM[:SS]]` (`-02`, `+05:30`): seconds
/// west of UTC, POSIX's sign, as PostgreSQL's `pg_tzset` reads it (it allows an empty
/// standard-time name). `SET TimeZone` reads a bare number as hours *east* before it
/// gets here; `AT TIME ZONE '-02'` does not, so there it is two hours east.
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
    let (m, s) = match rest.matches(':').count() {
        0 => (0, 0),
        1 => (field(59)?, 0),
        2 => (field(59)?, field(59)?),
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
