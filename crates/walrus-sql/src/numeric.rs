//! Exact NUMERIC arithmetic with PostgreSQL's scale rules, over the engine's stored form
//! (`Datum::Numeric` holds decimal text; its on-disk encoding is unchanged).
//!
//! A value is a [`BigDecimal`] whose scale is the display scale (`dscale`): the number
//! of digits after the point, never negative, trailing zeros kept (`2.10` stays `2.10`).
//! - `+ -`: scale = max of the operands' scales; `*`: sum of the scales;
//! - `/`: PostgreSQL's `select_div_scale` (at least 16 significant digits, not less than
//!   either operand's scale, at most 1000), rounded half away from zero;
//! - `%`: truncated quotient, scale = max of the scales;
//! - `numeric(p,s)`: rounded to `s`, `22003 numeric field overflow` past `p - s` integer
//!   digits.

use std::cmp::Ordering;

use bigdecimal::num_bigint::{BigInt, Sign};
use bigdecimal::{BigDecimal, RoundingMode, Signed, Zero};

use crate::error::{SqlError, SqlResult};

/// PostgreSQL's limits: digits before the point, display scale.
const MAX_WEIGHT_DIGITS: i64 = 131_072;
const MAX_DSCALE: i64 = 16_383;
const MAX_DISPLAY_SCALE: i64 = 1000;
const MIN_SIG_DIGITS: i64 = 16;

fn bad(s: &str) -> SqlError {
    SqlError::new(
        "22P02",
        format!("invalid input syntax for type numeric: \"{s}\""),
    )
}

fn overflow() -> SqlError {
    SqlError::new("22003", "value overflows numeric format")
}

/// Parses numeric text input (`' 12.50 '`, `-1e3`, `.5`); NaN and infinities are not
/// supported (0A000).
pub fn parse(s: &str) -> SqlResult<BigDecimal> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    if matches!(
        lower.trim_start_matches(['+', '-']),
        "nan" | "infinity" | "inf"
    ) {
        return Err(SqlError::unsupported(
            "numeric NaN and Infinity are not supported",
        ));
    }
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return Err(bad(s));
    }
    let exp: i64 = match exp {
        Some(e) => e.parse().map_err(|_| bad(s))?,
        None => 0,
    };
    if exp.abs() > 2 * MAX_WEIGHT_DIGITS {
        return Err(overflow());
    }
    let scale = frac.len() as i64 - exp;
    if int.trim_start_matches('0').len() as i64 + exp > MAX_WEIGHT_DIGITS || scale > MAX_DSCALE {
        return Err(overflow());
    }
    let v: BigDecimal = t.parse().map_err(|_| bad(s))?;
    Ok(if v.fractional_digit_count() < 0 {
        v.with_scale(0)
    } else {
        v
    })
}

/// PostgreSQL's text form: plain notation with exactly the value's scale.
pub fn format(v: &BigDecimal) -> String {
    let (int, scale) = v.as_bigint_and_exponent();
    let (int, scale) = if scale < 0 {
        (int * BigInt::from(10).pow((-scale) as u32), 0)
    } else {
        (int, scale as usize)
    };
    let digits = int.magnitude().to_string();
    let neg = int.sign() == Sign::Minus;
    let mut out = String::with_capacity(digits.len() + 3);
    if neg {
        out.push('-');
    }
    if scale == 0 {
        out.push_str(&digits);
    } else {
        let padded = if digits.len() <= scale {
            format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
        } else {
            digits
        };
        let (a, b) = padded.split_at(padded.len() - scale);
        out.push_str(a);
        out.push('.');
        out.push_str(b);
    }
    out
}

/// Canonical text of numeric input text.
pub fn canonical(s: &str) -> SqlResult<String> {
    if let Some(text) = plain_canonical(s, None) {
        return Ok(text);
    }
    Ok(format(&parse(s)?))
}

/// `numeric(p,s)` applied to numeric text: [`apply_typmod`] between [`parse`] and
/// [`format`], without the big-number detour when the text is plain.
pub fn apply_typmod_text(t: &str, p: u64, s: u64) -> SqlResult<String> {
    if let Some(text) = plain_canonical(t, Some((p, s))) {
        return Ok(text);
    }
    Ok(format(&apply_typmod(&parse(t)?, p, s)?))
}

/// The canonical text of a plain decimal (`[+-]digits[.digits]`, nothing else) when it
/// needs no rounding, without a big-number parse: what COPY and INSERT of ordinary
/// numbers spend their time on otherwise. With `typmod`, the fraction is padded to its
/// scale. `None` for anything else (exponents, spaces, a fraction longer than the
/// scale, an integer part too long, a bare point), which the general path handles and
/// reports; the answers are the general path's (`plain_matches_the_general_path`).
fn plain_canonical(t: &str, typmod: Option<(u64, u64)>) -> Option<String> {
    let (neg, body) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let (int, frac) = match body.split_once('.') {
        Some((i, f)) if !i.is_empty() && !f.is_empty() => (i, Some(f)),
        Some(_) => return None,
        None => (body, None),
    };
    if int.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.is_none_or(|f| f.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let int = int.trim_start_matches('0');
    let frac = frac.unwrap_or("");
    let scale = match typmod {
        Some((p, s)) => {
            if s > p || frac.len() as u64 > s || int.len() as u64 > p - s {
                return None;
            }
            s as usize
        }
        None => {
            if int.len() as i64 > MAX_WEIGHT_DIGITS || frac.len() as i64 > MAX_DSCALE {
                return None;
            }
            frac.len()
        }
    };
    let zero = int.is_empty() && frac.bytes().all(|b| b == b'0');
    let mut out = String::with_capacity(int.len() + scale + 3);
    if neg && !zero {
        out.push('-');
    }
    out.push_str(if int.is_empty() { "0" } else { int });
    if scale > 0 {
        out.push('.');
        out.push_str(frac);
        out.extend(std::iter::repeat_n('0', scale - frac.len()));
    }
    Some(out)
}

fn scale(v: &BigDecimal) -> i64 {
    v.fractional_digit_count().max(0)
}

/// Rounds half away from zero to `s` digits after the point.
pub fn round(v: &BigDecimal, s: i64) -> BigDecimal {
    v.with_scale_round(s, RoundingMode::HalfUp)
}

/// Base-10000 weight and first base-10000 digit of a non-zero value (PostgreSQL's
/// internal form, which its division scale rule reads).
fn weight_and_first_digit(v: &BigDecimal) -> (i64, i64) {
    if v.is_zero() {
        return (0, 0);
    }
    let (int, sc) = v.as_bigint_and_exponent();
    let m = int.magnitude().clone();
    let ndigits = m.to_string().len() as i64;
    let e10 = ndigits - 1 - sc; // the leading digit is at 10^e10
    let w = e10.div_euclid(4);
    let shift = -sc - 4 * w; // |v| / 10000^w = m * 10^shift
    let first = if shift >= 0 {
        m * bigdecimal::num_bigint::BigUint::from(10u32).pow(shift as u32)
    } else {
        m / bigdecimal::num_bigint::BigUint::from(10u32).pow((-shift) as u32)
    };
    (w, first.to_string().parse().unwrap_or(0))
}

/// PostgreSQL's `select_div_scale`.
fn div_scale(a: &BigDecimal, b: &BigDecimal) -> i64 {
    let (w1, f1) = weight_and_first_digit(a);
    let (w2, f2) = weight_and_first_digit(b);
    let mut qweight = w1 - w2;
    if f1 <= f2 {
        qweight -= 1;
    }
    (MIN_SIG_DIGITS - qweight * 4)
        .max(scale(a))
        .max(scale(b))
        .clamp(0, MAX_DISPLAY_SCALE)
}

/// `a / b` rounded half away from zero to `s` digits after the point.
fn div_to_scale(a: &BigDecimal, b: &BigDecimal, s: i64) -> BigDecimal {
    let (ai, asc) = a.as_bigint_and_exponent();
    let (bi, bsc) = b.as_bigint_and_exponent();
    // a/b = ai/bi * 10^(bsc - asc); result integer q with scale s: q = a/b * 10^s.
    let e = s + bsc - asc;
    let ten = BigInt::from(10);
    let (num, den) = if e >= 0 {
        (ai * ten.pow(e as u32), bi)
    } else {
        (ai, bi * ten.pow((-e) as u32))
    };
    let q = &num / &den;
    let r = &num - &q * &den;
    let q = if (r.abs() * 2) >= den.abs() {
        if (num.sign() == Sign::Minus) != (den.sign() == Sign::Minus) {
            q - 1
        } else {
            q + 1
        }
    } else {
        q
    };
    BigDecimal::new(q, s)
}

/// Exact `a op b` with PostgreSQL's result scale.
pub fn arith(a: &BigDecimal, op: char, b: &BigDecimal) -> SqlResult<BigDecimal> {
    let r = match op {
        // The result's scale is the larger operand scale (PostgreSQL's add_var): set
        // explicitly, as bigdecimal's sum with a zero operand does not keep it.
        '+' => (a + b).with_scale(scale(a).max(scale(b))),
        '-' => (a - b).with_scale(scale(a).max(scale(b))),
        '*' => {
            let s = scale(a) + scale(b);
            let p = a * b;
            if s > MAX_DSCALE {
                round(&p, MAX_DSCALE)
            } else {
                p.with_scale(s)
            }
        }
        '/' | '%' => {
            if b.is_zero() {
                return Err(SqlError::new("22012", "division by zero"));
            }
            if op == '/' {
                div_to_scale(a, b, div_scale(a, b))
            } else {
                let s = scale(a).max(scale(b));
                let (ai, bi) = (
                    a.with_scale(s).into_bigint_and_exponent().0,
                    b.with_scale(s).into_bigint_and_exponent().0,
                );
                BigDecimal::new(&ai - (&ai / &bi) * &bi, s)
            }
        }
        _ => return Err(SqlError::unsupported(format!("numeric operator {op}"))),
    };
    let r = if r.fractional_digit_count() < 0 {
        r.with_scale(0)
    } else {
        r
    };
    check_size(&r)?;
    Ok(r)
}

fn int_digits(v: &BigDecimal) -> i64 {
    if v.is_zero() {
        return 0;
    }
    let (int, sc) = v.as_bigint_and_exponent();
    (int.magnitude().to_string().len() as i64 - sc).max(0)
}

fn check_size(v: &BigDecimal) -> SqlResult<()> {
    if int_digits(v) > MAX_WEIGHT_DIGITS {
        return Err(overflow());
    }
    Ok(())
}

/// The average of a sum over `n` values (`avg`): numeric division.
pub fn avg(sum: &BigDecimal, n: usize) -> SqlResult<BigDecimal> {
    arith(sum, '/', &BigDecimal::from(n as u64))
}

/// `numeric(p,s)`: rounds to `s` and refuses values with more than `p - s` integer digits.
pub fn apply_typmod(v: &BigDecimal, p: u64, s: u64) -> SqlResult<BigDecimal> {
    let r = round(v, s as i64);
    let max_int = p as i64 - s as i64;
    if int_digits(&r) > max_int {
        let limit = if max_int > 0 {
            format!("10^{max_int}")
        } else {
            "1".to_string()
        };
        return Err(SqlError::new("22003", "numeric field overflow").with_detail(format!(
            "A field with precision {p}, scale {s} must round to an absolute value less than {limit}."
        )));
    }
    Ok(r)
}

/// Rounds half away from zero to an integer (numeric → int casts).
pub fn to_i64(v: &BigDecimal) -> Option<i64> {
    use bigdecimal::ToPrimitive;
    round(v, 0).to_i64()
}

/// numeric → float8.
pub fn to_f64(v: &BigDecimal) -> f64 {
    format(v).parse().unwrap_or(f64::NAN)
}

/// float8 → numeric as PostgreSQL: 15 significant digits (`%.15g`).
pub fn from_f64(f: f64) -> SqlResult<BigDecimal> {
    if !f.is_finite() {
        return Err(SqlError::unsupported(
            "numeric NaN and Infinity are not supported",
        ));
    }
    let v: BigDecimal = format!("{f:.14e}").parse().map_err(|_| overflow())?;
    let v = v.normalized();
    Ok(if v.fractional_digit_count() < 0 {
        v.with_scale(0)
    } else {
        v
    })
}

pub fn compare(a: &BigDecimal, b: &BigDecimal) -> Ordering {
    a.cmp(b)
}

pub fn is_negative(v: &BigDecimal) -> bool {
    v.is_negative()
}

#[cfg(test)]
mod tests {
    #[test]
    fn plain_matches_the_general_path() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut plain = 0;
        for _ in 0..20_000 {
            let mut t = String::new();
            match next(4) {
                0 => t.push('-'),
                1 => t.push('+'),
                _ => {}
            }
            for _ in 0..next(6) {
                t.push(if next(3) == 0 {
                    '0'
                } else {
                    (b'0' + next(10) as u8) as char
                });
            }
            if next(3) > 0 {
                t.push('.');
                for _ in 0..next(5) {
                    t.push((b'0' + next(10) as u8) as char);
                }
            }
            if next(20) == 0 {
                t.push(['e', ' ', 'x'][next(3) as usize]);
            }
            let general = parse(&t).map(|v| format(&v));
            if let Some(fast) = plain_canonical(&t, None) {
                plain += 1;
                assert_eq!(Ok(&fast), general.as_ref(), "{t:?}");
            }
            assert_eq!(canonical(&t), general, "{t:?}");
            let (p, s) = (next(8) + 1, next(5));
            let general = parse(&t)
                .and_then(|v| apply_typmod(&v, p, s))
                .map(|v| format(&v));
            assert_eq!(
                apply_typmod_text(&t, p, s),
                general,
                "{t:?} as numeric({p},{s})"
            );
        }
        assert!(plain > 5_000, "the plain path ran {plain} times");
    }

    use super::*;

    fn op(a: &str, o: char, b: &str) -> String {
        format(&arith(&parse(a).unwrap(), o, &parse(b).unwrap()).unwrap())
    }

    #[test]
    fn postgres_scales() {
        assert_eq!(op("0.1", '+', "0.2"), "0.3");
        assert_eq!(op("1.10", '+', "2.20"), "3.30");
        assert_eq!(op("1.0", '/', "3.0"), "0.33333333333333333333");
        assert_eq!(op("10.0", '/', "3"), "3.3333333333333333");
        assert_eq!(op("100", '/', "7"), "14.2857142857142857");
        assert_eq!(op("1e20", '/', "7"), "14285714285714285714");
        assert_eq!(op("7.0", '/', "2.00000"), "3.5000000000000000");
        assert_eq!(op("-2", '/', "3"), "-0.66666666666666666667");
        assert_eq!(op("1.5", '*', "2.25"), "3.375");
        assert_eq!(op("7.5", '%', "2"), "1.5");
        assert_eq!(op("-7.5", '%', "2"), "-1.5");
        assert_eq!(format(&parse("2.10").unwrap()), "2.10");
        assert_eq!(format(&parse("1e3").unwrap()), "1000");
        assert_eq!(format(&parse(" -.5 ").unwrap()), "-0.5");
        assert_eq!(format(&parse("1.5e-3").unwrap()), "0.0015");
        assert!(parse("1x").is_err());
        assert!(parse("1e999999999").is_err());
    }

    #[test]
    fn typmod_rounds_and_overflows() {
        let t = |s: &str| apply_typmod(&parse(s).unwrap(), 10, 2).map(|v| format(&v));
        assert_eq!(t("2.1").unwrap(), "2.10");
        assert_eq!(t("1.005").unwrap(), "1.01");
        assert_eq!(t("-1.005").unwrap(), "-1.01");
        assert_eq!(t("12345678.994").unwrap(), "12345678.99");
        assert_eq!(t("123456789.123").unwrap_err().sqlstate, "22003");
        assert_eq!(t("99999999.995").unwrap_err().sqlstate, "22003");
        assert_eq!(to_i64(&parse("2.5").unwrap()), Some(3));
        assert_eq!(to_i64(&parse("-2.5").unwrap()), Some(-3));
        assert_eq!(format(&from_f64(0.1).unwrap()), "0.1");
        assert_eq!(format(&from_f64(1.0 / 3.0).unwrap()), "0.333333333333333");
    }
}
