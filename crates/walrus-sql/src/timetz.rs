//! `timetz` (time with time zone): text input and output in PostgreSQL's form
//! (`10:11:12.123+05:30`) and the conversions from `time` and `timestamptz`.
//!
//! A value is a time of day in microseconds and the zone's offset in seconds *west* of
//! UTC, as PostgreSQL's `TimeTzADT` keeps it (so `+05:30` is -19800). Ordering (UTC
//! time first, then the zone) is the engine's `compare_datums`.

use walrus_engine::access::datum::{Datum, TypeId};

use crate::error::{SqlError, SqlResult};
use crate::timezone::SessionZone;
use crate::value::{parse_date_part, split_zone, timestamp_error, TimestampInput};

const USECS_PER_DAY: i64 = 86_400_000_000;
/// PostgreSQL's limit on a timetz zone (exclusive): 15:59:59 plus one second.
const ZONE_LIMIT_SECS: i32 = 15 * 3600 + 59 * 60 + 60;

/// Today's date in the session's zone, as days since 2000-01-01: where PostgreSQL takes
/// the date a zone's offset is read at when the input has none.
fn today() -> i64 {
    let now = crate::value::system_time_to_pg(std::time::SystemTime::now());
    crate::timezone::utc_to_local(now).div_euclid(USECS_PER_DAY)
}

/// PostgreSQL's error for timetz text it cannot read: 22007 (invalid datetime format),
/// where `time` and `timestamp` inputs say 22P02.
fn bad_input(s: &str) -> SqlError {
    let e = timestamp_error(TypeId::TimeTz, s, TimestampInput::Bad);
    SqlError::new("22007", e.message)
}

/// Reads PostgreSQL's timetz input: an optional date (used only to choose a named
/// zone's offset), a time of day, and a zone: a numeric offset, `Z`/`UTC`, a fixed
/// abbreviation, an IANA name, or none (the session's zone). Without a date, a named or
/// session zone gives its offset on today's date, as PostgreSQL does.
pub fn parse_timetz(s: &str) -> SqlResult<Datum> {
    let t = s.trim();
    let (date, rest) = match t.split_once([' ', 'T']) {
        Some((d, rest)) if d.contains('-') && d.len() >= 8 => (Some(d), rest.trim_start()),
        _ => (None, t),
    };
    let days = match date {
        Some(d) => parse_date_part(d).map_err(|why| match why {
            TimestampInput::Bad => bad_input(s),
            other => timestamp_error(TypeId::TimeTz, s, other),
        })?,
        None => today(),
    };
    if !rest.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(bad_input(s));
    }
    let (clock, zone) = split_zone(rest).map_err(|why| match why {
        TimestampInput::Bad => bad_input(s),
        other => timestamp_error(TypeId::TimeTz, s, other),
    })?;
    let micros = crate::interval::parse_time(clock).map_err(|e| {
        if e.sqlstate == "22P02" {
            bad_input(s)
        } else {
            e
        }
    })?;
    let local = days * USECS_PER_DAY + micros;
    let east = match zone {
        Some(SessionZone::Fixed(east)) => east,
        Some(named) => named.offset_for_local(local),
        None => crate::timezone::offset_for_local(local),
    };
    Ok(Datum::TimeTz(micros, -east))
}

/// PostgreSQL's output: the time as `time` prints it, then the offset east of UTC as
/// timestamptz prints it (`+05:30`, `-08`, `+00`).
pub fn format_timetz(micros: i64, zone_west: i32) -> String {
    format!(
        "{}{}",
        crate::interval::format_time(micros),
        crate::timezone::format_offset(-zone_west)
    )
}

/// `time` → `timetz`: the session zone's offset on today's date at that time.
pub fn from_time(micros: i64) -> Datum {
    let east = crate::timezone::offset_for_local(today() * USECS_PER_DAY + micros);
    Datum::TimeTz(micros, -east)
}

/// `timestamptz` → `timetz`: the wall-clock time in the session's zone and its offset at
/// that instant.
pub fn from_timestamptz(utc_us: i64) -> Datum {
    let east = crate::timezone::offset_at(utc_us);
    let local = utc_us.saturating_add(east as i64 * 1_000_000);
    Datum::TimeTz(local.rem_euclid(USECS_PER_DAY), -east)
}

/// Reads a timetz's binary form (PostgreSQL's `timetz_recv`): int8 microseconds, int4
/// zone seconds west of UTC, both range-checked.
pub fn recv(bytes: &[u8]) -> SqlResult<Datum> {
    let (time, zone) = match bytes {
        [t @ .., z0, z1, z2, z3] if t.len() == 8 => (
            i64::from_be_bytes(t.try_into().map_err(|_| incorrect())?),
            i32::from_be_bytes([*z0, *z1, *z2, *z3]),
        ),
        _ => return Err(incorrect()),
    };
    if !(0..=USECS_PER_DAY).contains(&time) {
        return Err(SqlError::new("22008", "time out of range"));
    }
    if zone <= -ZONE_LIMIT_SECS || zone >= ZONE_LIMIT_SECS {
        return Err(SqlError::new(
            "22009",
            "time zone displacement out of range",
        ));
    }
    Ok(Datum::TimeTz(time, zone))
}

/// The binary send form: int8 microseconds, int4 zone seconds west of UTC.
pub fn send(micros: i64, zone_west: i32) -> Vec<u8> {
    let mut b = micros.to_be_bytes().to_vec();
    b.extend_from_slice(&zone_west.to_be_bytes());
    b
}

fn incorrect() -> SqlError {
    SqlError::new("22P03", "incorrect binary data format")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_is_postgresqls() {
        // Checked against PostgreSQL 15 (session TimeZone UTC).
        for (input, want) in [
            ("10:11:12.123+05:30", "10:11:12.123+05:30"),
            ("10:11:12-08", "10:11:12-08"),
            ("23:59:59.999999+00", "23:59:59.999999+00"),
            ("04:05:06 PST", "04:05:06-08"),
            ("2024-07-01 10:00 Europe/Berlin", "10:00:00+02"),
            ("2024-01-01 10:00 Europe/Berlin", "10:00:00+01"),
            ("10:00", "10:00:00+00"),
            ("10:00Z", "10:00:00+00"),
            ("24:00:00+01", "24:00:00+01"),
        ] {
            let Datum::TimeTz(us, zone) = parse_timetz(input).unwrap() else {
                panic!("{input}: not a timetz");
            };
            assert_eq!(format_timetz(us, zone), want, "{input}");
        }
        assert_eq!(parse_timetz("25:00+01").unwrap_err().sqlstate, "22008");
        assert_eq!(parse_timetz("10:00+16").unwrap_err().sqlstate, "22009");
        assert_eq!(parse_timetz("nonsense").unwrap_err().sqlstate, "22007");
    }

    #[test]
    fn binary_form_round_trips_and_is_checked() {
        let wire = send(36_000_000_000, -19_800);
        assert_eq!(wire.len(), 12);
        assert_eq!(recv(&wire).unwrap(), Datum::TimeTz(36_000_000_000, -19_800));
        assert_eq!(recv(&wire[..8]).unwrap_err().sqlstate, "22P03");
        assert_eq!(recv(&send(0, 57_600)).unwrap_err().sqlstate, "22009");
        assert_eq!(recv(&send(-1, 0)).unwrap_err().sqlstate, "22008");
    }
}
