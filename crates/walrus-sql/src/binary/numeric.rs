//! PostgreSQL's binary wire format for `numeric`: `ndigits`, `weight`, `sign`, `dscale`
//! (int16 each), then `ndigits` base-10000 digits, most significant first. The value is
//! `sum(digit[i] * 10000^(weight - i))`; `dscale` is the number of decimal digits after
//! the point. walrus keeps numerics as canonical decimal text, so this converts between
//! that text and the wire form.

const POS: u16 = 0x0000;
const NEG: u16 = 0x4000;
const NAN: u16 = 0xC000;

/// Encodes decimal text (`-12.3400`, `NaN`); `None` if it is not a plain decimal.
pub fn encode(text: &str) -> Option<Vec<u8>> {
    let t = text.trim();
    let mut out = Vec::new();
    let mut put = |v: u16| out.extend_from_slice(&v.to_be_bytes());
    if t.eq_ignore_ascii_case("nan") {
        for v in [0, 0, NAN, 0] {
            put(v);
        }
        return Some(out);
    }
    let (neg, body) = match t.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        || frac.len() > i16::MAX as usize
    {
        return None;
    }
    let int = int.trim_start_matches('0');
    let dscale = frac.len() as u16;
    // Left-pad the integer part and right-pad the fraction to whole base-10000 digits.
    let int_pad = (4 - int.len() % 4) % 4;
    let frac_pad = (4 - frac.len() % 4) % 4;
    let digits_text = format!("{}{int}{frac}{}", "0".repeat(int_pad), "0".repeat(frac_pad));
    let mut digits: Vec<u16> = digits_text
        .as_bytes()
        .chunks(4)
        .map(|c| c.iter().fold(0u16, |acc, b| acc * 10 + (b - b'0') as u16))
        .collect();
    let mut weight = ((int.len() + int_pad) / 4) as i32 - 1;
    while digits.first() == Some(&0) {
        digits.remove(0);
        weight -= 1;
    }
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.is_empty() {
        weight = 0;
    }
    let weight = i16::try_from(weight).ok()?;
    put(digits.len() as u16);
    put(weight as u16);
    put(if neg && !digits.is_empty() { NEG } else { POS });
    put(dscale);
    for d in digits {
        put(d);
    }
    Some(out)
}

/// Decodes the wire form to canonical decimal text; `None` if malformed.
pub fn decode(b: &[u8]) -> Option<String> {
    let word = |i: usize| -> Option<u16> {
        b.get(i * 2..i * 2 + 2)
            .map(|s| u16::from_be_bytes([s[0], s[1]]))
    };
    let ndigits = word(0)? as usize;
    let weight = word(1)? as i16 as i32;
    let sign = word(2)?;
    let dscale = word(3)? as usize;
    if b.len() != 8 + ndigits * 2 {
        return None;
    }
    if sign == NAN {
        return Some("NaN".into());
    }
    if sign != POS && sign != NEG {
        return None;
    }
    let digits: Vec<u16> = (0..ndigits).map(|i| word(4 + i)).collect::<Option<_>>()?;
    if digits.iter().any(|&d| d > 9999) {
        return None;
    }
    let at = |pos: i32| -> u16 {
        // The base-10000 digit whose place value is 10000^pos.
        let i = weight - pos;
        if i >= 0 && (i as usize) < ndigits {
            digits[i as usize]
        } else {
            0
        }
    };
    let mut int = String::new();
    for pos in (0..=weight.max(0)).rev() {
        if int.is_empty() {
            if at(pos) != 0 || pos == 0 {
                int = at(pos).to_string();
            }
        } else {
            int.push_str(&format!("{:04}", at(pos)));
        }
    }
    let mut frac = String::new();
    let mut pos = -1;
    while frac.len() < dscale {
        frac.push_str(&format!("{:04}", at(pos)));
        pos -= 1;
    }
    frac.truncate(dscale);
    let neg = sign == NEG && digits.iter().any(|&d| d != 0);
    Some(format!(
        "{}{int}{}{frac}",
        if neg { "-" } else { "" },
        if dscale > 0 { "." } else { "" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_matches_postgres_layout() {
        for v in [
            "0",
            "1",
            "-1",
            "12345",
            "10000",
            "0.5",
            "-0.0001",
            "123456789.987654321",
            "1.5000",
            "0.000",
            "99999999999999999999.01",
            "NaN",
            "-42.10",
        ] {
            let wire = encode(v).unwrap_or_else(|| panic!("{v}"));
            assert_eq!(decode(&wire).as_deref(), Some(v), "{v}");
        }
        // 12345.678: digits [1, 2345, 6780], weight 1, dscale 3 (PostgreSQL's layout).
        let w = encode("12345.678").unwrap();
        assert_eq!(
            w,
            [0, 3, 0, 1, 0, 0, 0, 3, 0, 1, 0x09, 0x29, 0x1a, 0x7c].to_vec()
        );
        assert!(encode("1e5").is_none());
        assert!(encode("").is_none());
        assert!(decode(&[0, 1, 0, 0, 0, 0, 0]).is_none());
        assert!(decode(&[0, 1, 0, 0, 0, 0, 0, 0, 0x27, 0x10]).is_none()); // digit 10000
    }
}
