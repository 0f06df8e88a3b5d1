//! PostgreSQL's binary send/recv forms of values: what the extended protocol's binary
//! parameters and results and binary COPY carry. One codec for both, so a value a
//! driver sends in a Bind reads the same in a binary COPY.
//!
//! Forms (big-endian throughout): `bool` one byte; `int2/4/8` and `float4/8` their
//! bytes; `text`/`varchar`/`bpchar` and `bytea` the bytes themselves; `timestamp[tz]`
//! int8 microseconds and `date` int4 days since 2000-01-01; `uuid` 16 bytes; `numeric`
//! the base-10000 form of [`numeric`]; `timetz` int8 microseconds and int4 zone
//! seconds west of UTC; `regclass`/`regtype`/`regproc`/`regnamespace` the 4-byte OID.

pub mod numeric;

use walrus_engine::access::datum::{ArrayValue, Datum, Interval, TypeId};

use crate::error::{SqlError, SqlResult};
use crate::value::{array_elem_oid, parse_text, type_from_oid};

/// The `float4` type's OID: walrus keeps float4 values as float8, but reads and writes
/// a value declared `float4` as the 4 bytes it is on the wire.
pub const FLOAT4_OID: u32 = 700;

/// The `oid` type's OID: its values are kept as int8, read from its 4 unsigned bytes.
pub const OID_OID: u32 = 26;
/// `xid`: kept as int8 (the 32-bit id), 4 unsigned bytes on the wire.
pub const XID_OID: u32 = 28;
/// The one-byte `"char"`: kept as a text of at most one character, one byte on the wire.
pub const CHAR_OID: u32 = 18;
/// `oidvector`: kept as its text form, sent as a one-dimensional `oid` array.
pub const OIDVECTOR_OID: u32 = 30;
/// `pg_lsn`: kept as its text form (`16/B374D848`), 8 bytes on the wire.
pub const PG_LSN_OID: u32 = 3220;

/// The binary send form of `d` (`None` for NULL).
pub fn encode(d: &Datum) -> SqlResult<Option<Vec<u8>>> {
    encode_as(d, 0)
}

/// [`encode`] for a column of PostgreSQL type `type_oid` (0: unknown): an array's
/// element OID is the column's (a `varchar[]` column's elements are 1043, not 25).
pub fn encode_as(d: &Datum, type_oid: u32) -> SqlResult<Option<Vec<u8>>> {
    // Types walrus keeps under a nearer engine type (the catalog views' `oid`, `xid`,
    // `real`, `"char"`, `oidvector`, `pg_lsn` columns) are sent in their own form.
    match (type_oid, d) {
        (OID_OID | XID_OID, Datum::Int8(v)) => {
            let v = u32::try_from(*v).map_err(|_| {
                SqlError::new("22003", format!("value {v} is out of range for type oid"))
            })?;
            return Ok(Some(v.to_be_bytes().to_vec()));
        }
        (FLOAT4_OID, Datum::Float8(v)) => return Ok(Some((*v as f32).to_be_bytes().to_vec())),
        // charsend: the one byte (the empty value is the byte 0).
        (CHAR_OID, Datum::Text(s)) => {
            return Ok(Some(vec![s.as_bytes().first().copied().unwrap_or(0)]))
        }
        (OIDVECTOR_OID, Datum::Text(s)) => return Ok(Some(oidvector_send(s)?)),
        (PG_LSN_OID, Datum::Text(s)) => {
            let lsn = s
                .split_once('/')
                .and_then(|(hi, lo)| {
                    Some(
                        (u64::from_str_radix(hi, 16).ok()? << 32)
                            | u64::from_str_radix(lo, 16).ok()?,
                    )
                })
                .ok_or_else(|| {
                    SqlError::new(
                        "22P02",
                        format!("invalid input syntax for type pg_lsn: \"{s}\""),
                    )
                })?;
            return Ok(Some(lsn.to_be_bytes().to_vec()));
        }
        _ => {}
    }
    Ok(Some(match d {
        Datum::Time(v) => v.to_be_bytes().to_vec(),
        Datum::TimeTz(us, zone) => crate::timetz::send(*us, *zone),
        // An object identifier is sent as its OID (4 bytes), as `oid` is.
        Datum::Reg(r) => r.oid.to_be_bytes().to_vec(),
        Datum::Interval(iv) => {
            let mut b = iv.micros.to_be_bytes().to_vec();
            b.extend_from_slice(&iv.days.to_be_bytes());
            b.extend_from_slice(&iv.months.to_be_bytes());
            b
        }
        Datum::Json(s) => s.as_bytes().to_vec(),
        // jsonb's binary form: version 1, then the text.
        Datum::Jsonb(s) => {
            let mut b = vec![1u8];
            b.extend_from_slice(s.as_bytes());
            b
        }
        // PostgreSQL's array_send: dimensions (0 for an empty array), a has-NULLs flag,
        // the element type, per dimension its length and lower bound (1), then each
        // element as a length (-1 for NULL) and its binary form.
        Datum::Array(a) => {
            let elem_oid = array_elem_oid(type_oid).unwrap_or(a.elem.pg_oid());
            let mut b = Vec::new();
            let ndim: i32 = if a.items.is_empty() { 0 } else { 1 };
            b.extend_from_slice(&ndim.to_be_bytes());
            b.extend_from_slice(&(a.items.iter().any(Datum::is_null) as i32).to_be_bytes());
            b.extend_from_slice(&elem_oid.to_be_bytes());
            if ndim == 1 {
                b.extend_from_slice(&(a.items.len() as i32).to_be_bytes());
                b.extend_from_slice(&1i32.to_be_bytes());
            }
            for item in &a.items {
                match encode_as(item, elem_oid)? {
                    None => b.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(v) => {
                        b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                        b.extend_from_slice(&v);
                    }
                }
            }
            b
        }
        // int2vectorsend is array_send of PostgreSQL's int2vector: always one
        // dimension (even with no items), lower bound 0, int2 elements, no NULLs.
        Datum::Int2Vector(items) => {
            let mut b = Vec::new();
            b.extend_from_slice(&1i32.to_be_bytes());
            b.extend_from_slice(&0i32.to_be_bytes());
            b.extend_from_slice(&TypeId::Int2.pg_oid().to_be_bytes());
            b.extend_from_slice(&(items.len() as i32).to_be_bytes());
            b.extend_from_slice(&0i32.to_be_bytes());
            for x in items {
                b.extend_from_slice(&2i32.to_be_bytes());
                b.extend_from_slice(&x.to_be_bytes());
            }
            b
        }
        Datum::Null => return Ok(None),
        Datum::Bool(b) => vec![*b as u8],
        Datum::Int2(v) => v.to_be_bytes().to_vec(),
        Datum::Int4(v) => v.to_be_bytes().to_vec(),
        Datum::Int8(v) => v.to_be_bytes().to_vec(),
        Datum::Float8(v) => v.to_be_bytes().to_vec(),
        Datum::Text(s) => s.as_bytes().to_vec(),
        Datum::Timestamp(v) | Datum::TimestampTz(v) => v.to_be_bytes().to_vec(),
        Datum::Date(v) => v.to_be_bytes().to_vec(),
        Datum::Bytea(b) => b.clone(),
        Datum::Uuid(u) => u.to_vec(),
        Datum::Numeric(n) => numeric::encode(n).ok_or_else(|| {
            SqlError::new("22P03", format!("numeric value \"{n}\" has no binary form"))
        })?,
    }))
}

/// oidvectorsend: array_send of a one-dimensional `oid` array with lower bound 0 (also
/// when empty), from oidvector's text form (the OIDs separated by spaces).
fn oidvector_send(text: &str) -> SqlResult<Vec<u8>> {
    let oids = text
        .split_whitespace()
        .map(|o| {
            o.parse::<u32>().map_err(|_| {
                SqlError::new(
                    "22P02",
                    format!("invalid input syntax for type oid: \"{o}\""),
                )
            })
        })
        .collect::<SqlResult<Vec<u32>>>()?;
    let mut b = Vec::with_capacity(20 + 8 * oids.len());
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes());
    b.extend_from_slice(&OID_OID.to_be_bytes());
    b.extend_from_slice(&(oids.len() as i32).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes());
    for o in oids {
        b.extend_from_slice(&4i32.to_be_bytes());
        b.extend_from_slice(&o.to_be_bytes());
    }
    Ok(b)
}

fn incorrect() -> SqlError {
    SqlError::new("22P03", "incorrect binary data format")
}

fn array<const N: usize>(b: &[u8]) -> SqlResult<[u8; N]> {
    b.try_into().map_err(|_| incorrect())
}

/// Reads the binary recv form of a value of the PostgreSQL type `oid` (which must be
/// one walrus has: [`type_from_oid`]).
pub fn decode(bytes: &[u8], oid: u32) -> SqlResult<Datum> {
    let ty = type_from_oid(oid).ok_or_else(|| {
        SqlError::unsupported(format!("binary values of type OID {oid} are not supported"))
    })?;
    if oid == FLOAT4_OID {
        return Ok(Datum::Float8(f32::from_be_bytes(array::<4>(bytes)?) as f64));
    }
    if oid == OID_OID || oid == XID_OID {
        return Ok(Datum::Int8(u32::from_be_bytes(array::<4>(bytes)?) as i64));
    }
    if oid == CHAR_OID {
        let [b] = array::<1>(bytes)?;
        return Ok(Datum::Text(if b == 0 {
            String::new()
        } else {
            char::from(b).to_string()
        }));
    }
    if let TypeId::Array(elem) = ty {
        return decode_array(bytes, *elem, oid);
    }
    decode_type(bytes, ty)
}

fn utf8(b: &[u8]) -> SqlResult<&str> {
    crate::value::check_utf8(b)
}

/// PostgreSQL's array_recv for a one-dimensional array (lower bound 1) or an empty one;
/// the element type written must be the array's (`varchar[]` may name 1043 or 25).
fn decode_array(bytes: &[u8], elem: TypeId, array_oid: u32) -> SqlResult<Datum> {
    let short = || SqlError::new("22P03", "insufficient data left in message");
    let mut at = 0usize;
    let int = |at: &mut usize| -> SqlResult<i32> {
        let v = bytes.get(*at..*at + 4).ok_or_else(short)?;
        *at += 4;
        Ok(i32::from_be_bytes(array::<4>(v)?))
    };
    let ndim = int(&mut at)?;
    let _has_nulls = int(&mut at)?;
    let elem_oid = int(&mut at)? as u32;
    let expected = array_elem_oid(array_oid).unwrap_or(elem.pg_oid());
    if elem_oid != expected && type_from_oid(elem_oid) != Some(elem) {
        return Err(SqlError::new(
            "42804",
            format!("binary data has array element type {elem_oid} instead of expected {expected}"),
        ));
    }
    let n = match ndim {
        0 => 0,
        1 => {
            let n = int(&mut at)?;
            let lower = int(&mut at)?;
            if lower != 1 {
                return Err(SqlError::unsupported(
                    "arrays with a lower bound other than 1 are not supported",
                ));
            }
            if n < 0 {
                return Err(SqlError::new("22P03", "invalid array length"));
            }
            n as usize
        }
        d if d > 1 && d <= 6 => {
            return Err(SqlError::unsupported(
                "multidimensional arrays are not supported",
            ))
        }
        d => {
            return Err(SqlError::new(
                "22P03",
                format!("invalid number of dimensions: {d}"),
            ))
        }
    };
    let mut items = Vec::with_capacity(n.min(bytes.len() / 4));
    for _ in 0..n {
        let len = int(&mut at)?;
        if len == -1 {
            items.push(Datum::Null);
            continue;
        }
        let len = usize::try_from(len).map_err(|_| short())?;
        let v = bytes.get(at..at + len).ok_or_else(short)?;
        at += len;
        items.push(decode(v, expected)?);
    }
    if at != bytes.len() {
        return Err(SqlError::new(
            "22P03",
            "incorrect binary data format in array element",
        ));
    }
    Ok(Datum::Array(Box::new(ArrayValue { elem, items })))
}

/// [`decode`] for a value of the engine type `ty` (a `float4` is [`decode`]'s).
pub fn decode_type(bytes: &[u8], ty: TypeId) -> SqlResult<Datum> {
    let fixed = |n: usize| -> SqlResult<&[u8]> {
        if bytes.len() == n {
            Ok(bytes)
        } else {
            Err(SqlError::new(
                "22P03",
                format!(
                    "incorrect binary data format: {} bytes for {}",
                    bytes.len(),
                    ty.name()
                ),
            ))
        }
    };
    Ok(match ty {
        TypeId::Bool => Datum::Bool(fixed(1)?[0] != 0),
        TypeId::Int2 => Datum::Int2(i16::from_be_bytes(array::<2>(fixed(2)?)?)),
        TypeId::Int4 => Datum::Int4(i32::from_be_bytes(array::<4>(fixed(4)?)?)),
        TypeId::Int8 => Datum::Int8(i64::from_be_bytes(array::<8>(fixed(8)?)?)),
        TypeId::Float8 => Datum::Float8(f64::from_be_bytes(array::<8>(fixed(8)?)?)),
        TypeId::Text => Datum::Text(crate::value::check_utf8(bytes)?.to_string()),
        TypeId::Timestamp => Datum::Timestamp(i64::from_be_bytes(array::<8>(fixed(8)?)?)),
        TypeId::TimestampTz => Datum::TimestampTz(i64::from_be_bytes(array::<8>(fixed(8)?)?)),
        TypeId::Date => Datum::Date(i32::from_be_bytes(array::<4>(fixed(4)?)?)),
        TypeId::Bytea => Datum::Bytea(bytes.to_vec()),
        TypeId::Uuid => Datum::Uuid(array::<16>(fixed(16)?)?),
        TypeId::Numeric => parse_text(
            TypeId::Numeric,
            &numeric::decode(bytes).ok_or_else(incorrect)?,
        )?,
        TypeId::Time => {
            let v = i64::from_be_bytes(array::<8>(fixed(8)?)?);
            if !(0..=86_400_000_000).contains(&v) {
                return Err(SqlError::new("22008", "time out of range"));
            }
            Datum::Time(v)
        }
        TypeId::Interval => {
            let b = fixed(16)?;
            Datum::Interval(Interval {
                micros: i64::from_be_bytes(array::<8>(&b[..8])?),
                days: i32::from_be_bytes(array::<4>(&b[8..12])?),
                months: i32::from_be_bytes(array::<4>(&b[12..])?),
            })
        }
        TypeId::Json => parse_text(TypeId::Json, utf8(bytes)?)?,
        TypeId::Jsonb => match bytes.split_first() {
            Some((1, text)) => parse_text(TypeId::Jsonb, utf8(text)?)?,
            _ => return Err(SqlError::new("22P03", "unsupported jsonb version number")),
        },
        TypeId::TimeTz => crate::timetz::recv(bytes)?,
        // An OID alone has no name to print; a cast (`$1::oid::regclass`) finds it.
        TypeId::RegProc | TypeId::RegClass | TypeId::RegType | TypeId::RegNamespace => {
            return Err(SqlError::unsupported(format!(
                "binary {} parameters are not supported: send an oid and cast it",
                ty.name()
            )))
        }
        TypeId::Int2Vector => {
            return Err(SqlError::unsupported(
                "binary int2vector parameters are not supported",
            ))
        }
        TypeId::Array(elem) => decode_array(bytes, *elem, ty.pg_oid())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips() {
        for d in [
            Datum::Bool(true),
            Datum::Int2(-2),
            Datum::Int4(1 << 20),
            Datum::Int8(-(1 << 40)),
            Datum::Float8(2.5),
            Datum::Text("héllo".into()),
            Datum::Timestamp(1_000_000),
            Datum::TimestampTz(-5),
            Datum::Date(-1),
            Datum::Bytea(vec![0, 255]),
            Datum::Uuid([7; 16]),
            Datum::Numeric("-12.340".into()),
            Datum::TimeTz(36_000_000_000, -19_800),
        ] {
            let ty = d.type_id().unwrap();
            let wire = encode(&d).unwrap().unwrap();
            assert_eq!(decode(&wire, ty.pg_oid()).unwrap(), d);
        }
        assert_eq!(encode(&Datum::Null).unwrap(), None);
        assert_eq!(
            decode(&1.5f32.to_be_bytes(), FLOAT4_OID).unwrap(),
            Datum::Float8(1.5)
        );
        assert_eq!(decode(&[0, 1], 23).unwrap_err().sqlstate, "22P03");
        assert_eq!(decode(&[0xff], 25).unwrap_err().sqlstate, "22021");
    }

    /// int2vector is sent as PostgreSQL's int2vectorsend sends it (array_send of a
    /// one-dimensional int2 array with lower bound 0, even when empty); not received.
    #[test]
    fn int2vector_is_sent_as_postgresql_sends_it() {
        let be = |v: &[i32]| v.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
        let mut want = be(&[1, 0, 21, 2, 0, 2]);
        want.extend_from_slice(&3i16.to_be_bytes());
        want.extend_from_slice(&be(&[2]));
        want.extend_from_slice(&1i16.to_be_bytes());
        assert_eq!(encode(&Datum::Int2Vector(vec![3, 1])).unwrap(), Some(want));
        assert_eq!(
            encode(&Datum::Int2Vector(vec![])).unwrap(),
            Some(be(&[1, 0, 21, 0, 0]))
        );
        assert_eq!(
            decode(&be(&[1, 0, 21, 0, 0]), 22).unwrap_err().sqlstate,
            "0A000"
        );
    }

    /// Catalog column types kept under nearer engine types go out in their own binary
    /// form (PostgreSQL's oidsend, xidsend, charsend, float4send, oidvectorsend,
    /// pg_lsn_send), and the 4-byte and 1-byte ones read back.
    #[test]
    fn kept_types_are_sent_in_their_own_form() {
        let be = |v: &[i32]| v.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
        let sent = |d: Datum, oid: u32| encode_as(&d, oid).unwrap().unwrap();
        assert_eq!(
            sent(Datum::Int8(4_000_000_000), OID_OID),
            4_000_000_000u32.to_be_bytes()
        );
        assert_eq!(sent(Datum::Int8(7), XID_OID), 7u32.to_be_bytes());
        assert_eq!(
            encode_as(&Datum::Int8(-1), OID_OID).unwrap_err().sqlstate,
            "22003"
        );
        assert_eq!(sent(Datum::Int8(7), 20), 7i64.to_be_bytes());
        assert_eq!(sent(Datum::Text("r".into()), CHAR_OID), b"r");
        assert_eq!(sent(Datum::Text(String::new()), CHAR_OID), [0]);
        assert_eq!(sent(Datum::Float8(0.5), FLOAT4_OID), 0.5f32.to_be_bytes());
        assert_eq!(
            sent(Datum::Text("1/10".into()), PG_LSN_OID),
            ((1u64 << 32) | 16).to_be_bytes()
        );
        let mut want = be(&[1, 0, 26, 2, 0, 4]);
        want.extend_from_slice(&1978u32.to_be_bytes());
        want.extend_from_slice(&be(&[4]));
        want.extend_from_slice(&3u32.to_be_bytes());
        assert_eq!(sent(Datum::Text("1978 3".into()), OIDVECTOR_OID), want);
        assert_eq!(
            sent(Datum::Text(String::new()), OIDVECTOR_OID),
            be(&[1, 0, 26, 0, 0])
        );
        // oid[]: the elements are 4-byte oids under element type 26.
        let arr = Datum::Array(Box::new(ArrayValue {
            elem: TypeId::Int8,
            items: vec![Datum::Int8(5)],
        }));
        let mut want = be(&[1, 0, 26, 1, 1, 4]);
        want.extend_from_slice(&5u32.to_be_bytes());
        assert_eq!(sent(arr.clone(), 1028), want);
        assert_eq!(decode(&want, 1028).unwrap(), arr);
        assert_eq!(decode(&[0, 0, 0, 9], XID_OID).unwrap(), Datum::Int8(9));
        assert_eq!(decode(b"b", CHAR_OID).unwrap(), Datum::Text("b".into()));
        assert_eq!(decode(&[0], CHAR_OID).unwrap(), Datum::Text(String::new()));
    }
}
