//! PostgreSQL's binary send/recv forms of values: what the extended protocol's binary
//! parameters and results and binary COPY carry. One codec for both, so a value a
//! driver sends in a Bind reads the same in a binary COPY.
//!
//! Forms (big-endian throughout): `bool` one byte; `int2/4/8` and `float4/8` their
//! bytes; `text`/`varchar`/`bpchar` and `bytea` the bytes themselves; `timestamp[tz]`
//! int8 microseconds and `date` int4 days since 2000-01-01; `uuid` 16 bytes; `numeric`
//! the base-10000 form of [`numeric`].

pub mod numeric;

use walrus_engine::access::datum::{Datum, TypeId};

use crate::error::{SqlError, SqlResult};
use crate::value::{parse_text, type_from_oid};

/// The `float4` type's OID: walrus keeps float4 values as float8, but reads and writes
/// a value declared `float4` as the 4 bytes it is on the wire.
pub const FLOAT4_OID: u32 = 700;

/// The binary send form of `d` (`None` for NULL).
pub fn encode(d: &Datum) -> SqlResult<Option<Vec<u8>>> {
    Ok(Some(match d {
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
    decode_type(bytes, ty)
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
        TypeId::Text => {
            Datum::Text(String::from_utf8(bytes.to_vec()).map_err(|_| {
                SqlError::new("22021", "invalid byte sequence for encoding \"UTF8\"")
            })?)
        }
        TypeId::Timestamp => Datum::Timestamp(i64::from_be_bytes(array::<8>(fixed(8)?)?)),
        TypeId::TimestampTz => Datum::TimestampTz(i64::from_be_bytes(array::<8>(fixed(8)?)?)),
        TypeId::Date => Datum::Date(i32::from_be_bytes(array::<4>(fixed(4)?)?)),
        TypeId::Bytea => Datum::Bytea(bytes.to_vec()),
        TypeId::Uuid => Datum::Uuid(array::<16>(fixed(16)?)?),
        TypeId::Numeric => parse_text(
            TypeId::Numeric,
            &numeric::decode(bytes).ok_or_else(incorrect)?,
        )?,
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
}
