//! Text input and output of `time` and `interval` in PostgreSQL 15's formats
//! (`IntervalStyle = postgres`: `1 year 2 mons 3 days 04:05:06`).

use walrus_engine::access::datum::Interval;

use crate::error::SqlError;

const USECS_PER_SEC: i64 = 1_000_000;
const USECS_PER_DAY: i64 = 86_400 * USECS_PER_SEC;

fn bad(ty: &str, s: &str) -> SqlError {
    SqlError::new(
        "22007",
        format!("invalid input syntax for type {ty}: \"{s}\""),
    )
}

fn out_of_range(ty: &str, s: &str) -> SqlError {
    SqlError::new(
        "22008",
        format!("date/time field value out of range: \"{s}\"").replace(
            "date/time",
            if ty == "interval" {
                "interval"
            } else {
                "date/time"
            },
        ),
    )
}

/// A fraction's digits (after the point) as microseconds, rounded as PostgreSQL's rint
/// of a double.
fn fraction_micros(frac: &str) -> Option<i64> {
    if frac.is_empty() {
        return Some(0);
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let f: f64 = format!("0.{frac}").parse().ok()?;
    Some((f * 1_000_000.0).round_ties_even() as i64)
}

/// `H:M[:S[.f]]` as microseconds (unsigned; hours may exceed 24); `None` if malformed.
fn clock_micros(t: &str, max_hour: i64) -> Option<Result<i64, ()>> {
    let mut parts = t.split(':');
    let num = |p: &str| -> Option<i64> {
        (!p.is_empty() && p.len() <= 18 && p.bytes().all(|b| b.is_ascii_digit()))
            .then(|| p.parse().ok())
            .flatten()
    };
    let h = num(parts.next()?)?;
    let m = num(parts.next()?)?;
    let (s, frac) = match parts.next() {
        Some(sec) => {
            let (w, f) = sec.split_once('.').unwrap_or((sec, ""));
            (num(w)?, fraction_micros(f)?)
        }
        None => (0, 0),
    };
    if parts.next().is_some() {
        return None;
    }
    if h > max_hour || m > 59 || s > 60 {
        return Some(Err(()));
    }
    Some(Ok(((h * 60 + m) * 60 + s) * USECS_PER_SEC + frac))
}

/// `time` input: `HH:MM[:SS[.f]]`, optionally after a date and before `AM`/`PM` or a
/// zone (a zone is ignored, as PostgreSQL does for `time`).
pub fn parse_time(s: &str) -> Result<i64, SqlError> {
    let t = s.trim();
    // A leading date (`2024-01-02 10:00`) is ignored.
    let t = match t.split_once([' ', 'T']) {
        Some((d, rest)) if d.contains('-') && d.len() >= 8 => rest.trim_start(),
        _ => t,
    };
    let lower = t.to_ascii_lowercase();
    let (clock, pm) = if let Some(c) = lower.strip_suffix("pm") {
        (c.trim_end(), Some(true))
    } else if let Some(c) = lower.strip_suffix("am") {
        (c.trim_end(), Some(false))
    } else {
        (lower.as_str(), None)
    };
    let clock = match clock.find(['+', '-', 'z', 'u', 'g']) {
        Some(at) => {
            let zone = clock[at..].trim();
            let numeric = zone[1..].bytes().all(|b| b.is_ascii_digit() || b == b':');
            if !(numeric && zone.len() > 1 && (zone.starts_with('+') || zone.starts_with('-'))
                || matches!(zone, "z" | "utc" | "gmt" | "zulu" | "ut"))
            {
                return Err(SqlError::unsupported(format!(
                    "time zone names in time input are not supported (\"{s}\")"
                )));
            }
            clock[..at].trim_end()
        }
        None => clock,
    };
    let mut us = match clock_micros(clock, 24) {
        None => return Err(bad("time without time zone", s)),
        Some(Err(())) => return Err(out_of_range("time", s)),
        Some(Ok(us)) => us,
    };
    if let Some(pm) = pm {
        let h = us / (3600 * USECS_PER_SEC);
        if !(1..=12).contains(&h) {
            return Err(out_of_range("time", s));
        }
        if h == 12 {
            us -= 12 * 3600 * USECS_PER_SEC;
        }
        if pm {
            us += 12 * 3600 * USECS_PER_SEC;
        }
    }
    if us > USECS_PER_DAY {
        return Err(out_of_range("time", s));
    }
    Ok(us)
}

/// `time` output: `HH:MM:SS` and a fraction without trailing zeros.
pub fn format_time(us: i64) -> String {
    let secs = us / USECS_PER_SEC;
    let mut out = format!("{:02}:{:02}:", secs / 3600, secs / 60 % 60);
    push_seconds(&mut out, secs % 60, us % USECS_PER_SEC);
    out
}

/// `SS` or `SS.ffffff` with trailing zeros dropped (both non-negative).
fn push_seconds(out: &mut String, sec: i64, frac: i64) {
    if frac == 0 {
        out.push_str(&format!("{sec:02}"));
    } else {
        let f = format!("{frac:06}");
        out.push_str(&format!("{sec:02}.{}", f.trim_end_matches('0')));
    }
}

/// One interval unit: how a number of it adds to the interval.
#[derive(Clone, Copy, PartialEq)]
enum Unit {
    Micro,
    Milli,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
    Decade,
    Century,
    Millennium,
}

fn unit(word: &str) -> Option<Unit> {
    use Unit::*;
    Some(match word {
        "microsecond" | "microseconds" | "usec" | "usecs" | "us" | "microsecon" => Micro,
        "millisecond" | "milliseconds" | "msec" | "msecs" | "ms" | "millisecon" => Milli,
        "second" | "seconds" | "sec" | "secs" | "s" => Second,
        "minute" | "minutes" | "min" | "mins" | "m" => Minute,
        "hour" | "hours" | "hr" | "hrs" | "h" => Hour,
        "day" | "days" | "d" => Day,
        "week" | "weeks" | "w" => Week,
        "month" | "months" | "mon" | "mons" => Month,
        "year" | "years" | "yr" | "yrs" | "y" => Year,
        "decade" | "decades" | "dec" | "decs" => Decade,
        "century" | "centuries" | "cent" | "c" => Century,
        "millennium" | "millennia" | "mil" | "mils" => Millennium,
        _ => return None,
    })
}

/// Interval fields while reading, kept apart as PostgreSQL's `pg_itm_in`.
#[derive(Default)]
struct Fields {
    months: i64,
    days: i64,
    micros: i64,
}

impl Fields {
    /// Adds `frac` of `scale` seconds (PostgreSQL's AdjustFractSeconds).
    fn fract_seconds(&mut self, frac: f64, scale: f64) {
        let f = frac * scale;
        let whole = f.trunc();
        self.micros += whole as i64 * USECS_PER_SEC + ((f - whole) * 1e6).round_ties_even() as i64;
    }
    /// Adds `frac` of `scale` days (PostgreSQL's AdjustFractDays).
    fn fract_days(&mut self, frac: f64, scale: f64) {
        let f = frac * scale;
        let whole = f.trunc();
        self.days += whole as i64;
        self.fract_seconds(f - whole, 86_400.0);
    }
    fn add(&mut self, u: Unit, val: i64, frac: f64) -> Option<()> {
        let us = |n: i64| val.checked_mul(n);
        match u {
            Unit::Micro => {
                self.micros += val;
                self.micros += frac.round_ties_even() as i64;
            }
            Unit::Milli => {
                self.micros += us(1000)?;
                self.micros += (frac * 1000.0).round_ties_even() as i64;
            }
            Unit::Second => {
                self.micros += us(USECS_PER_SEC)?;
                self.micros += (frac * 1e6).round_ties_even() as i64;
            }
            Unit::Minute => {
                self.micros += us(60 * USECS_PER_SEC)?;
                self.fract_seconds(frac, 60.0);
            }
            Unit::Hour => {
                self.micros += us(3600 * USECS_PER_SEC)?;
                self.fract_seconds(frac, 3600.0);
            }
            Unit::Day => {
                self.days += val;
                self.fract_seconds(frac, 86_400.0);
            }
            Unit::Week => {
                self.days += val.checked_mul(7)?;
                self.fract_days(frac, 7.0);
            }
            Unit::Month => {
                self.months += val;
                self.fract_days(frac, 30.0);
            }
            Unit::Year | Unit::Decade | Unit::Century | Unit::Millennium => {
                let per = match u {
                    Unit::Year => 12,
                    Unit::Decade => 120,
                    Unit::Century => 1200,
                    _ => 12000,
                };
                self.months += val.checked_mul(per)?;
                self.months += (frac * per as f64).round_ties_even() as i64;
            }
        }
        Some(())
    }
}

/// Splits interval text into tokens: numbers (with a sign and a fraction), clock
/// times, words; `1day` is two tokens, as PostgreSQL's ParseDateTime splits it.
fn tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || c == '+' || c == '-' || c == '.' {
            let start = i;
            i += 1;
            while i < b.len()
                && (b[i].is_ascii_digit() || b[i] == '.' || b[i] == ':' || b[i] == '-')
            {
                i += 1;
            }
            out.push(b[start..i].iter().collect());
        } else if c.is_alphabetic() || c == '@' {
            let start = i;
            i += 1;
            while i < b.len() && b[i].is_alphabetic() {
                i += 1;
            }
            out.push(b[start..i].iter().collect::<String>().to_lowercase());
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

/// `interval` input in PostgreSQL's postgres style (`1 year 2 mons -3 days 04:05:06`,
/// `@ 1 hour ago`, `1.5 weeks`, a trailing bare number is seconds, a number before a
/// clock time is days, `Y-M` years and months) and ISO 8601's `P1Y2M3DT4H5M6S`.
pub fn parse_interval(s: &str) -> Result<Interval, SqlError> {
    let t = s.trim();
    let badi = || bad("interval", s);
    if let Some(iso) = t.strip_prefix('P') {
        return iso_interval(iso)
            .ok_or_else(badi)
            .and_then(|f| finish(f, s));
    }
    let mut toks = tokens(t);
    if toks.first().map(String::as_str) == Some("@") {
        toks.remove(0);
    }
    let ago = toks.last().map(String::as_str) == Some("ago");
    if ago {
        toks.pop();
    }
    if toks.is_empty() {
        return Err(badi());
    }
    let mut f = Fields::default();
    let mut seen: Vec<&'static str> = Vec::new();
    let mut mark = |what: &'static str| -> Result<(), SqlError> {
        if seen.contains(&what) {
            return Err(bad("interval", s));
        }
        seen.push(what);
        Ok(())
    };
    // Read right to left, as PostgreSQL: a unit word applies to the number before it,
    // a clock time makes the number before it days, a bare last number is seconds.
    // The unit waiting for its number, and whether a word (not a clock time) set it.
    let mut pending: Option<(Unit, bool)> = None;
    let mut i = toks.len();
    while i > 0 {
        i -= 1;
        let tok = toks[i].as_str();
        if let Some(u) = unit(tok) {
            if pending.is_some_and(|(_, word)| word) {
                return Err(badi());
            }
            pending = Some((u, true));
            continue;
        }
        if tok.contains(':') {
            if pending.is_some_and(|(_, word)| word) {
                return Err(badi());
            }
            mark("time")?;
            let (neg, body) = match tok.as_bytes()[0] {
                b'-' => (true, &tok[1..]),
                b'+' => (false, &tok[1..]),
                _ => (false, tok),
            };
            // `H:M` or `H:M:S[.f]`; PostgreSQL also reads `M:S.f` when a fraction
            // follows the second field.
            let us = match clock_micros(body, i64::MAX / 3_600_000_000) {
                Some(Ok(us)) => us,
                Some(Err(())) => return Err(out_of_range("interval", s)),
                None => {
                    let (m, sec) = body.split_once(':').ok_or_else(badi)?;
                    if !sec.contains('.') || sec.contains(':') {
                        return Err(badi());
                    }
                    match clock_micros(&format!("0:{m}:{sec}"), 0) {
                        Some(Ok(us)) => us,
                        _ => return Err(badi()),
                    }
                }
            };
            f.micros += if neg { -us } else { us };
            pending = Some((Unit::Day, false));
            continue;
        }
        if tok.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c)) {
            let u = pending.take().map_or(Unit::Second, |(u, _)| u);
            let (neg, body) = match tok.as_bytes()[0] {
                b'-' => (true, &tok[1..]),
                b'+' => (false, &tok[1..]),
                _ => (false, tok),
            };
            if let Some((y, m)) = body.split_once('-') {
                // SQL's `years-months`.
                let (y, m): (i64, i64) = (
                    y.parse().map_err(|_| badi())?,
                    m.parse().map_err(|_| badi())?,
                );
                if m > 11 {
                    return Err(out_of_range("interval", s));
                }
                mark("month")?;
                mark("year")?;
                let months = y * 12 + m;
                f.months += if neg { -months } else { months };
                continue;
            }
            let (whole, frac) = body.split_once('.').unwrap_or((body, ""));
            if whole.is_empty() && frac.is_empty()
                || !whole.bytes().all(|b| b.is_ascii_digit())
                || !frac.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(badi());
            }
            let mut val: i64 = if whole.is_empty() {
                0
            } else {
                whole.parse().map_err(|_| out_of_range("interval", s))?
            };
            let mut fval: f64 = if frac.is_empty() {
                0.0
            } else {
                format!("0.{frac}").parse().map_err(|_| badi())?
            };
            if neg {
                val = -val;
                fval = -fval;
            }
            mark(match u {
                Unit::Micro => "micro",
                Unit::Milli => "milli",
                Unit::Second => "second",
                Unit::Minute => "minute",
                Unit::Hour => "hour",
                Unit::Day => "day",
                Unit::Week => "week",
                Unit::Month => "month",
                Unit::Year => "year",
                Unit::Decade => "decade",
                Unit::Century => "century",
                Unit::Millennium => "millennium",
            })?;
            f.add(u, val, fval)
                .ok_or_else(|| out_of_range("interval", s))?;
            continue;
        }
        return Err(badi());
    }
    if pending.is_some_and(|(_, word)| word) {
        // A unit word with no number before it.
        return Err(badi());
    }
    if ago {
        f.months = -f.months;
        f.days = -f.days;
        f.micros = -f.micros;
    }
    finish(f, s)
}

fn finish(f: Fields, s: &str) -> Result<Interval, SqlError> {
    Ok(Interval {
        months: i32::try_from(f.months).map_err(|_| out_of_range("interval", s))?,
        days: i32::try_from(f.days).map_err(|_| out_of_range("interval", s))?,
        micros: f.micros,
    })
}

/// ISO 8601 designators after `P`: `nY nM nW nD` then `T nH nM nS` (numbers may carry a
/// fraction, which spills as in the postgres style).
fn iso_interval(iso: &str) -> Option<Fields> {
    let mut f = Fields::default();
    let mut time = false;
    let mut num = String::new();
    let mut any = false;
    for c in iso.chars() {
        if c == 'T' && num.is_empty() {
            time = true;
            continue;
        }
        if c.is_ascii_digit() || c == '.' || c == '-' || c == '+' {
            num.push(c);
            continue;
        }
        let u = match (time, c) {
            (false, 'Y') => Unit::Year,
            (false, 'M') => Unit::Month,
            (false, 'W') => Unit::Week,
            (false, 'D') => Unit::Day,
            (true, 'H') => Unit::Hour,
            (true, 'M') => Unit::Minute,
            (true, 'S') => Unit::Second,
            _ => return None,
        };
        let v: f64 = num.parse().ok()?;
        let whole = v.trunc();
        f.add(u, whole as i64, v - whole)?;
        num.clear();
        any = true;
    }
    (num.is_empty() && any).then_some(f)
}

/// `interval` output in PostgreSQL's default style (`IntervalStyle = postgres`).
pub fn format_interval(iv: Interval) -> String {
    let mut out = String::new();
    let mut is_zero = true;
    let mut is_before = false;
    let mut part = |out: &mut String, value: i64, unit: &str| {
        if value == 0 {
            return;
        }
        if !is_zero {
            out.push(' ');
        }
        if is_before && value > 0 {
            out.push('+');
        }
        out.push_str(&format!(
            "{value} {unit}{}",
            if value != 1 { "s" } else { "" }
        ));
        is_before = value < 0;
        is_zero = false;
    };
    let months = iv.months as i64;
    part(&mut out, months / 12, "year");
    part(&mut out, months % 12, "mon");
    part(&mut out, iv.days as i64, "day");
    let us = iv.micros;
    if is_zero || us != 0 {
        let hours = us / (3600 * USECS_PER_SEC);
        let mins = us / (60 * USECS_PER_SEC) % 60;
        let secs = us / USECS_PER_SEC % 60;
        let frac = us % USECS_PER_SEC;
        let minus = us < 0;
        if !is_zero {
            out.push(' ');
        }
        out.push_str(if minus {
            "-"
        } else if is_before {
            "+"
        } else {
            ""
        });
        out.push_str(&format!(
            "{:02}:{:02}:",
            hours.unsigned_abs(),
            mins.unsigned_abs()
        ));
        push_seconds(&mut out, secs.abs(), frac.abs());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each pair was printed by PostgreSQL 15 for `select '<input>'::interval`.
    #[test]
    fn interval_text_is_postgresql_15s() {
        for (input, want) in [
            ("-1 day 2 hours", "-1 days +02:00:00"),
            ("3 4:05:06", "3 days 04:05:06"),
            ("1.5 years", "1 year 6 mons"),
            ("5", "00:00:05"),
            ("1 day 5", "1 day 00:00:05"),
            ("-1:30", "-01:30:00"),
            ("1 week 1 day", "8 days"),
            ("1.5 weeks", "10 days 12:00:00"),
            ("@ 1 hour ago", "-01:00:00"),
            ("1 mon -1 day", "1 mon -1 days"),
            (
                "-1 year -2 mons +3 days -04:05:06.5",
                "-1 years -2 mons +3 days -04:05:06.5",
            ),
            ("100:00:00.000001", "100:00:00.000001"),
            ("1-2", "1 year 2 mons"),
            ("0.000001 sec", "00:00:00.000001"),
            ("P1Y2M3DT4H5M6S", "1 year 2 mons 3 days 04:05:06"),
            ("2 h 3 m", "02:03:00"),
            ("1day", "1 day"),
            ("-1.5 days", "-1 days -12:00:00"),
            ("0", "00:00:00"),
            (
                "1 year 2 months 3 days 4 hours 5 minutes 6 seconds",
                "1 year 2 mons 3 days 04:05:06",
            ),
        ] {
            let iv = parse_interval(input).unwrap_or_else(|e| panic!("{input}: {e:?}"));
            assert_eq!(format_interval(iv), want, "{input}");
        }
        for bad in ["1 2", "", "day", "1 day 2 days", "abc", "1 fortnight"] {
            assert!(parse_interval(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn time_text_is_postgresql_15s() {
        for (input, want) in [
            ("04:05:06.789", "04:05:06.789"),
            ("04:05", "04:05:00"),
            ("24:00:00", "24:00:00"),
            ("10:00:00+05:30", "10:00:00"),
            ("2024-01-02 10:11:12", "10:11:12"),
            ("12:30 AM", "00:30:00"),
            ("1:30 pm", "13:30:00"),
            ("23:59:59.9999995", "24:00:00"),
        ] {
            assert_eq!(format_time(parse_time(input).unwrap()), want, "{input}");
        }
        assert_eq!(parse_time("25:00").unwrap_err().sqlstate, "22008");
        assert_eq!(parse_time("x").unwrap_err().sqlstate, "22007");
    }
}
