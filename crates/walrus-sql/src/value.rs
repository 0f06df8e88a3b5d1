//! Text input and output of values in PostgreSQL's formats (COPY text, literals, the
//! text result format): integers, booleans `t`/`f`, timestamps `YYYY-MM-DD HH:MM:SS[.f]`
//! counted in microseconds from 2000-01-01 as PostgreSQL stores them.

use walrus_engine::access::datum::{Datum, TypeId};

use crate::error::SqlError;

const USECS_PER_DAY: i64 = 86_400_000_000;

/// Days from 1970-01-01 to y-m-d (proleptic Gregorian; Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Days from 1970-01-01 to 2000-01-01.
const PG_EPOCH_DAYS: i64 = 10_957;

pub fn unix_micros_to_pg(us: i64) -> i64 {
    us - PG_EPOCH_DAYS * USECS_PER_DAY
}

/// A wall-clock time as a PostgreSQL timestamp (microseconds since 2000-01-01 UTC).
pub fn system_time_to_pg(t: std::time::SystemTime) -> i64 {
    let us = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    unix_micros_to_pg(us)
}

fn parse_date_part(s: &str) -> Option<i64> {
    let mut it = s.splitn(3, '-');
    let (y, m, d) = (
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    Some(days_from_civil(y, m, d) - PG_EPOCH_DAYS)
}

fn parse_timestamp(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, time) = match s.split_once([' ', 'T']) {
        Some((d, t)) => (d, t),
        None => (s, "00:00:00"),
    };
    let days = parse_date_part(date)?;
    // Ignore a trailing zone offset ("+00", "Z"): walrus runs in UTC.
    let time = time.trim_end_matches('Z');
    let time = time.split(['+']).next()?;
    let mut parts = time.split(':');
    let h: i64 = parts.next()?.parse().ok()?;
    let mi: i64 = parts.next().unwrap_or("0").parse().ok()?;
    let sec = parts.next().unwrap_or("0");
    let (whole, frac) = sec.split_once('.').unwrap_or((sec, ""));
    let sec: i64 = whole.parse().ok()?;
    let mut micros: i64 = 0;
    for (i, c) in frac.chars().take(6).enumerate() {
        micros += (c.to_digit(10)? as i64) * 10i64.pow(5 - i as u32);
    }
    Some(days * USECS_PER_DAY + ((h * 60 + mi) * 60 + sec) * 1_000_000 + micros)
}

fn format_timestamp(us: i64) -> String {
    let days = us.div_euclid(USECS_PER_DAY);
    let rem = us.rem_euclid(USECS_PER_DAY);
    let (y, m, d) = civil_from_days(days + PG_EPOCH_DAYS);
    let secs = rem / 1_000_000;
    let micros = rem % 1_000_000;
    let base = format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
    if micros == 0 {
        base
    } else {
        let f = format!("{micros:06}");
        format!("{base}.{}", f.trim_end_matches('0'))
    }
}

fn bad(ty: TypeId, s: &str) -> SqlError {
    SqlError::new(
        "22P02",
        format!("invalid input syntax for type {}: \"{s}\"", ty.name()),
    )
}

/// Parses PostgreSQL text input for `ty`.
pub fn parse_text(ty: TypeId, s: &str) -> Result<Datum, SqlError> {
    let t = s.trim();
    Ok(match ty {
        TypeId::Bool => Datum::Bool(parse_bool(t).ok_or_else(|| bad(ty, s))?),
        TypeId::Int2 => Datum::Int2(t.parse().map_err(|_| out_of_range_or_bad(ty, t))?),
        TypeId::Int4 => Datum::Int4(t.parse().map_err(|_| out_of_range_or_bad(ty, t))?),
        TypeId::Int8 => Datum::Int8(t.parse().map_err(|_| out_of_range_or_bad(ty, t))?),
        TypeId::Float8 => Datum::Float8(t.parse().map_err(|_| bad(ty, s))?),
        TypeId::Numeric => Datum::Numeric(crate::numeric::canonical(t)?),
        TypeId::Text => Datum::Text(s.to_string()),
        TypeId::Timestamp => Datum::Timestamp(parse_timestamp(t).ok_or_else(|| bad(ty, s))?),
        TypeId::TimestampTz => Datum::TimestampTz(parse_timestamp(t).ok_or_else(|| bad(ty, s))?),
        TypeId::Date => Datum::Date(parse_date_part(t).ok_or_else(|| bad(ty, s))? as i32),
    })
}

fn out_of_range_or_bad(ty: TypeId, t: &str) -> SqlError {
    if !t.is_empty()
        && t.trim_start_matches('-')
            .chars()
            .all(|c| c.is_ascii_digit())
    {
        SqlError::new(
            "22003",
            format!("value \"{t}\" is out of range for type {}", ty.name()),
        )
    } else {
        bad(ty, t)
    }
}

/// PostgreSQL's boolean input: any prefix of `true`, `false`, `yes`, `no`; `on`, `off`
/// from two letters (`of`); `1`, `0`; case-insensitive.
fn parse_bool(t: &str) -> Option<bool> {
    let l = t.to_ascii_lowercase();
    let prefix = |word: &str, min: usize| l.len() >= min && word.starts_with(l.as_str());
    if prefix("true", 1) || prefix("yes", 1) || prefix("on", 2) || l == "1" {
        Some(true)
    } else if prefix("false", 1) || prefix("no", 1) || prefix("off", 2) || l == "0" {
        Some(false)
    } else {
        None
    }
}

/// A finite float8 as PostgreSQL prints it (`extra_float_digits` 1, its default): the
/// shortest digits that read back exactly, positional when the decimal exponent is in
/// -4..15, else `d.ddde+XX` with at least two exponent digits (`1e+20`, `1e-07`).
pub fn float8_text(v: f64) -> String {
    // `{:e}` gives the shortest round-trip digits: "1.5e300", "-1e-7".
    let sci = format!("{v:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return v.to_string();
    };
    let Ok(exp) = exp.parse::<i32>() else {
        return v.to_string();
    };
    if (-4..15).contains(&exp) {
        return v.to_string();
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

/// PostgreSQL text output of a value (`None` for NULL).
pub fn format_text(d: &Datum) -> Option<String> {
    Some(match d {
        Datum::Null => return None,
        Datum::Bool(b) => if *b { "t" } else { "f" }.to_string(),
        Datum::Int2(v) => v.to_string(),
        Datum::Int4(v) => v.to_string(),
        Datum::Int8(v) => v.to_string(),
        Datum::Float8(v) => {
            if v.is_infinite() {
                if *v > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
            } else if v.is_nan() {
                "NaN".to_string()
            } else {
                float8_text(*v)
            }
        }
        Datum::Numeric(s) | Datum::Text(s) => s.clone(),
        Datum::Timestamp(us) => format_timestamp(*us),
        Datum::TimestampTz(us) => format!("{}+00", format_timestamp(*us)),
        Datum::Date(d) => {
            let (y, m, dd) = civil_from_days(*d as i64 + PG_EPOCH_DAYS);
            format!("{y:04}-{m:02}-{dd:02}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boolean_input_takes_postgresql_prefixes() {
        for (t, want) in [
            ("tru", Some(true)),
            ("Y", Some(true)),
            ("on", Some(true)),
            ("of", Some(false)),
            ("o", None),
            ("fa", Some(false)),
            ("truex", None),
            ("", None),
            ("10", None),
        ] {
            assert_eq!(parse_bool(t), want, "{t:?}");
        }
    }

    #[test]
    fn float8_text_is_postgresql_form() {
        for (v, want) in [
            (1e20, "1e+20"),
            (1e-7, "1e-07"),
            (1.5e300, "1.5e+300"),
            (123456789012345.0, "123456789012345"),
            (1e15, "1e+15"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (-2.5, "-2.5"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(float8_text(v), want, "{v}");
        }
    }

    #[test]
    fn timestamps_roundtrip_in_postgres_format() {
        for s in [
            "2000-01-01 00:00:00",
            "2026-11-22 12:34:56.789",
            "1999-12-31 23:59:59",
            "1970-01-01 00:00:00",
        ] {
            let Datum::Timestamp(us) = parse_text(TypeId::Timestamp, s).unwrap() else {
                panic!()
            };
            assert_eq!(format_text(&Datum::Timestamp(us)).unwrap(), s);
        }
        assert_eq!(
            parse_text(TypeId::Timestamp, "2000-01-01 00:00:00").unwrap(),
            Datum::Timestamp(0)
        );
        assert_eq!(
            format_text(&parse_text(TypeId::Date, "2024-02-29").unwrap()).unwrap(),
            "2024-02-29"
        );
    }

    #[test]
    fn bad_input_has_postgres_sqlstates() {
        assert_eq!(
            parse_text(TypeId::Int4, "abc").unwrap_err().sqlstate,
            "22P02"
        );
        assert_eq!(
            parse_text(TypeId::Int4, "99999999999")
                .unwrap_err()
                .sqlstate,
            "22003"
        );
        assert_eq!(
            parse_text(TypeId::Bool, "maybe").unwrap_err().sqlstate,
            "22P02"
        );
        assert_eq!(parse_text(TypeId::Int8, " 42 ").unwrap(), Datum::Int8(42));
    }
}
