//! COPY's binary format, framed as PostgreSQL's: the 11-byte signature
//! `PGCOPY\n\377\r\n\0`, an int32 flags word (bit 16: OIDs, refused; bits 17-31:
//! critical, refused), an int32 header-extension length and that many bytes (skipped);
//! then per tuple an int16 field count and per field an int32 length (-1: NULL) and
//! the value's binary send form (`crate::binary`); an int16 -1 ends the data. Values
//! are read by the column's type, as PostgreSQL's recv functions.

use crate::error::{SqlError, SqlResult};

pub(super) const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// Signature, flags and extension length.
const HEADER_BYTES: usize = 19;

fn bad_format(msg: impl Into<String>) -> SqlError {
    SqlError::new("22P04", msg)
}

fn int32(b: &[u8], at: usize) -> Option<i32> {
    b.get(at..at + 4)
        .map(|s| i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// The header at the start of `buf`: `Some(bytes)` once it is all there.
pub(super) fn read_header(buf: &[u8], at_end: bool) -> SqlResult<Option<usize>> {
    let have = |n: usize| buf.len() >= n;
    if !have(SIGNATURE.len()) || !have(HEADER_BYTES) {
        if buf.len() >= SIGNATURE.len() && &buf[..SIGNATURE.len()] != SIGNATURE
            || buf.len() < SIGNATURE.len() && !SIGNATURE.starts_with(buf)
        {
            return Err(bad_format("COPY file signature not recognized"));
        }
        if !at_end {
            return Ok(None);
        }
        return Err(bad_format(if !have(SIGNATURE.len()) {
            "COPY file signature not recognized"
        } else if !have(15) {
            "invalid COPY file header (missing flags)"
        } else {
            "invalid COPY file header (missing length)"
        }));
    }
    if &buf[..SIGNATURE.len()] != SIGNATURE {
        return Err(bad_format("COPY file signature not recognized"));
    }
    let flags =
        int32(buf, 11).ok_or_else(|| bad_format("invalid COPY file header (missing flags)"))?;
    if flags & (1 << 16) != 0 {
        return Err(bad_format("invalid COPY file header (WITH OIDS)"));
    }
    if (flags & !(1 << 16)) >> 16 != 0 {
        return Err(bad_format(
            "unrecognized critical flags in COPY file header",
        ));
    }
    let extension =
        int32(buf, 15).ok_or_else(|| bad_format("invalid COPY file header (missing length)"))?;
    if extension < 0 {
        return Err(bad_format("invalid COPY file header (missing length)"));
    }
    let total = HEADER_BYTES + extension as usize;
    if buf.len() < total {
        if at_end {
            return Err(bad_format("invalid COPY file header (wrong length)"));
        }
        return Ok(None);
    }
    Ok(Some(total))
}

/// What [`next_tuple`] found at the start of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum BinaryNext<'a> {
    /// A tuple's fields (`None`: NULL); the next tuple starts at `next`.
    Tuple {
        fields: Vec<Option<&'a [u8]>>,
        next: usize,
    },
    /// The trailer, or the data's end at a tuple boundary (PostgreSQL takes both).
    End,
    NeedMore,
}

/// The tuple at the start of `buf`, which must have `ncols` fields.
pub(super) fn next_tuple(buf: &[u8], at_end: bool, ncols: usize) -> SqlResult<BinaryNext<'_>> {
    let eof = || bad_format("unexpected EOF in COPY data");
    if buf.len() < 2 {
        return match (buf.len(), at_end) {
            (0, true) => Ok(BinaryNext::End),
            (_, true) => Err(eof()),
            _ => Ok(BinaryNext::NeedMore),
        };
    }
    let count = i16::from_be_bytes([buf[0], buf[1]]);
    if count == -1 {
        if buf.len() > 2 {
            return Err(bad_format("received copy data after EOF marker"));
        }
        return Ok(BinaryNext::End);
    }
    if count as i64 != ncols as i64 {
        return Err(bad_format(format!(
            "row field count is {count}, expected {ncols}"
        )));
    }
    let mut at = 2;
    let mut fields = Vec::with_capacity(ncols);
    for _ in 0..ncols {
        let Some(len) = int32(buf, at) else {
            return if at_end {
                Err(eof())
            } else {
                Ok(BinaryNext::NeedMore)
            };
        };
        at += 4;
        if len == -1 {
            fields.push(None);
            continue;
        }
        if len < 0 {
            return Err(bad_format("invalid field size"));
        }
        let Some(value) = buf.get(at..at + len as usize) else {
            return if at_end {
                Err(eof())
            } else {
                Ok(BinaryNext::NeedMore)
            };
        };
        at += len as usize;
        fields.push(Some(value));
    }
    Ok(BinaryNext::Tuple { fields, next: at })
}

/// The header: signature, no flags, no extension.
pub(super) fn write_header(out: &mut Vec<u8>) {
    out.extend_from_slice(SIGNATURE);
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
}

pub(super) fn write_tuple(values: &[Option<Vec<u8>>], out: &mut Vec<u8>) {
    out.extend_from_slice(&(values.len() as i16).to_be_bytes());
    for v in values {
        match v {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(b) => {
                out.extend_from_slice(&(b.len() as i32).to_be_bytes());
                out.extend_from_slice(b);
            }
        }
    }
}

pub(super) fn write_trailer(out: &mut Vec<u8>) {
    out.extend_from_slice(&(-1i16).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_pieces() {
        let mut data = Vec::new();
        write_header(&mut data);
        write_tuple(&[Some(vec![0, 0, 0, 7]), None], &mut data);
        write_tuple(&[Some(b"ab".to_vec()), Some(vec![])], &mut data);
        write_trailer(&mut data);
        // Byte by byte, as a client may split CopyData messages anywhere.
        let mut buf: Vec<u8> = Vec::new();
        let mut header_done = false;
        let mut tuples = Vec::new();
        let mut ended = false;
        for (i, &b) in data.iter().enumerate() {
            buf.push(b);
            let at_end = i + 1 == data.len();
            if !header_done {
                if let Some(n) = read_header(&buf, at_end).unwrap() {
                    buf.drain(..n);
                    header_done = true;
                }
                continue;
            }
            loop {
                match next_tuple(&buf, at_end, 2).unwrap() {
                    BinaryNext::Tuple { fields, next } => {
                        tuples.push(
                            fields
                                .iter()
                                .map(|f| f.map(<[u8]>::to_vec))
                                .collect::<Vec<_>>(),
                        );
                        buf.drain(..next);
                    }
                    BinaryNext::End => {
                        ended = true;
                        break;
                    }
                    BinaryNext::NeedMore => break,
                }
            }
        }
        assert!(ended);
        assert_eq!(
            tuples,
            vec![
                vec![Some(vec![0, 0, 0, 7]), None],
                vec![Some(b"ab".to_vec()), Some(vec![])]
            ]
        );
    }

    #[test]
    fn malformed_data_is_22p04_with_postgresql_messages() {
        let msg = |r: SqlResult<Option<usize>>| r.unwrap_err().message;
        assert_eq!(
            msg(read_header(b"PGCOPX", false)),
            "COPY file signature not recognized"
        );
        assert_eq!(
            msg(read_header(b"", true)),
            "COPY file signature not recognized"
        );
        let mut h = SIGNATURE.to_vec();
        h.extend_from_slice(&(1i32 << 16).to_be_bytes());
        h.extend_from_slice(&0i32.to_be_bytes());
        assert_eq!(
            msg(read_header(&h, true)),
            "invalid COPY file header (WITH OIDS)"
        );
        let t = |b: &[u8]| next_tuple(b, true, 2).unwrap_err().message;
        assert_eq!(t(&[0, 3]), "row field count is 3, expected 2");
        assert_eq!(t(&[0, 2, 0xff, 0xff, 0xff, 0xfe]), "invalid field size");
        assert_eq!(t(&[0, 2, 0, 0, 0, 9, 1]), "unexpected EOF in COPY data");
        assert_eq!(t(&[0xff, 0xff, 0]), "received copy data after EOF marker");
        assert_eq!(next_tuple(&[0xff, 0xff], true, 2).unwrap(), BinaryNext::End);
    }
}
