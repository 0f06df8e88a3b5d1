//! PostgreSQL frontend/backend protocol v3: reading frontend messages and building
//! backend messages into an output buffer. Replies are buffered and written once per
//! Sync (or per simple Query), so the extended protocol costs one `write` per
//! round trip (measured: pgwire needed four).
//!
//! Every length read from the network is checked against `MESSAGE_BYTES_MAX` before
//! any allocation; a bad frame closes only its own connection, a bad field inside a
//! frame is a [`MessageError`], answered with an ERROR as PostgreSQL does.

use std::io::{self, Read};

/// Largest frontend message accepted (COPY data arrives in many messages).
pub const MESSAGE_BYTES_MAX: usize = 64 << 20;

/// Largest message accepted before authentication (startup packet, SASL messages), as
/// PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`: an unauthenticated client cannot make the
/// server allocate more than this.
pub const PRE_AUTH_MESSAGE_BYTES_MAX: usize = 10_000;

pub const SSL_REQUEST: i32 = 80_877_103;
pub const GSSENC_REQUEST: i32 = 80_877_104;
pub const CANCEL_REQUEST: i32 = 80_877_102;
pub const PROTOCOL_3_0: i32 = 196_608;

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// The first packet of a connection (no type byte).
pub enum StartupPacket {
    Ssl,
    GssEnc,
    Cancel { pid: i32, secret: i32 },
    Startup { params: Vec<(String, String)> },
}

pub fn read_startup(r: &mut impl Read) -> io::Result<StartupPacket> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = i32::from_be_bytes(len);
    if !(8..=PRE_AUTH_MESSAGE_BYTES_MAX as i32).contains(&len) {
        return Err(bad(format!("invalid startup packet length {len}")));
    }
    let mut body = vec![0u8; len as usize - 4];
    r.read_exact(&mut body)?;
    let code = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    match code {
        SSL_REQUEST => Ok(StartupPacket::Ssl),
        GSSENC_REQUEST => Ok(StartupPacket::GssEnc),
        CANCEL_REQUEST if body.len() >= 12 => Ok(StartupPacket::Cancel {
            pid: i32::from_be_bytes([body[4], body[5], body[6], body[7]]),
            secret: i32::from_be_bytes([body[8], body[9], body[10], body[11]]),
        }),
        PROTOCOL_3_0 => {
            let mut params = Vec::new();
            let mut parts = body[4..].split(|&b| b == 0);
            while let Some(k) = parts.next() {
                if k.is_empty() {
                    break;
                }
                let v = parts
                    .next()
                    .ok_or_else(|| bad("startup parameter without value"))?;
                params.push((
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                ));
            }
            Ok(StartupPacket::Startup { params })
        }
        other => Err(bad(format!(
            "unsupported frontend protocol {}.{}",
            other >> 16,
            other & 0xFFFF
        ))),
    }
}

/// One frontend message: its type byte and body.
pub struct Message {
    pub kind: u8,
    pub body: Vec<u8>,
}

pub fn read_message(r: &mut impl Read) -> io::Result<Message> {
    read_message_upto(r, MESSAGE_BYTES_MAX)
}

/// Reads one message of at most `max` bytes (length word included).
pub fn read_message_upto(r: &mut impl Read, max: usize) -> io::Result<Message> {
    let mut hdr = [0u8; 5];
    r.read_exact(&mut hdr)?;
    let len = i32::from_be_bytes([hdr[1], hdr[2], hdr[3], hdr[4]]);
    if len < 4 || len as usize > max {
        return Err(bad(format!("invalid message length {len}")));
    }
    let mut body = vec![0u8; len as usize - 4];
    r.read_exact(&mut body)?;
    Ok(Message { kind: hdr[0], body })
}

/// What is wrong inside a well-framed message. PostgreSQL answers these with an ERROR,
/// not FATAL: the message is dropped (in the extended protocol, with everything up to
/// Sync) and the session goes on. Only a bad frame (length word) ends the connection.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    /// A field runs past the message's end (`pq_getmsgbytes`), a negative length included.
    #[error("insufficient data left in message")]
    Short,
    /// A string without its terminating zero byte (`pq_getmsgstring`).
    #[error("invalid string in message")]
    Unterminated,
    /// Bytes left over after the last field (`pq_getmsgend`).
    #[error("invalid message format")]
    Trailing,
    /// Text that is not valid UTF-8 (22021, PostgreSQL's message with the bytes).
    #[error("{0}")]
    Encoding(String),
}

impl MessageError {
    /// PostgreSQL's SQLSTATE: 22021 for the encoding, 08P01 (protocol violation) else.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            MessageError::Encoding(_) => "22021",
            _ => "08P01",
        }
    }
}

impl From<MessageError> for io::Error {
    fn from(e: MessageError) -> io::Error {
        bad(e.to_string())
    }
}

/// A cursor over a message body; every read is bounds-checked.
pub struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, at: 0 }
    }
    /// A zero-terminated string, checked as UTF-8 (query text and object names).
    pub fn cstr(&mut self) -> Result<String, MessageError> {
        let rest = &self.b[self.at..];
        let end = rest
            .iter()
            .position(|&c| c == 0)
            .ok_or(MessageError::Unterminated)?;
        let s = walrus_sql::value::check_utf8(&rest[..end])
            .map_err(|e| MessageError::Encoding(e.message))?
            .to_string();
        self.at += end + 1;
        Ok(s)
    }
    pub fn i16(&mut self) -> Result<i16, MessageError> {
        let s = self.bytes(2)?;
        Ok(i16::from_be_bytes([s[0], s[1]]))
    }
    pub fn i32(&mut self) -> Result<i32, MessageError> {
        let s = self.bytes(4)?;
        Ok(i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    pub fn u8(&mut self) -> Result<u8, MessageError> {
        Ok(self.bytes(1)?[0])
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], MessageError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or(MessageError::Short)?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    /// The message must end here (`pq_getmsgend`).
    pub fn end(&self) -> Result<(), MessageError> {
        if self.at == self.b.len() {
            Ok(())
        } else {
            Err(MessageError::Trailing)
        }
    }
}

/// One column of a RowDescription.
pub struct FieldDescription {
    pub name: String,
    /// The column's table and attribute number, when it is a plain table column (else 0).
    pub table_oid: u32,
    pub attnum: i16,
    pub type_oid: u32,
    /// `atttypmod`: -1 for none.
    pub typmod: i32,
    /// 0 text, 1 binary.
    pub format: i16,
}

/// Builds backend messages into one buffer.
#[derive(Default)]
pub struct Out {
    pub buf: Vec<u8>,
}

impl Out {
    fn begin(&mut self, kind: u8) -> usize {
        self.buf.push(kind);
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0, 0, 0, 0]);
        at
    }
    fn end(&mut self, at: usize) {
        let len = (self.buf.len() - at) as i32;
        self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }
    fn cstr(&mut self, s: &str) {
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }
    pub fn simple(&mut self, kind: u8) {
        let at = self.begin(kind);
        self.end(at);
    }
    pub fn auth_ok(&mut self) {
        let at = self.begin(b'R');
        self.buf.extend_from_slice(&0i32.to_be_bytes());
        self.end(at);
    }
    /// AuthenticationSASL: the mechanisms offered.
    pub fn auth_sasl(&mut self, mechanisms: &[&str]) {
        let at = self.begin(b'R');
        self.buf.extend_from_slice(&10i32.to_be_bytes());
        for m in mechanisms {
            self.cstr(m);
        }
        self.buf.push(0);
        self.end(at);
    }
    pub fn auth_sasl_continue(&mut self, data: &[u8]) {
        let at = self.begin(b'R');
        self.buf.extend_from_slice(&11i32.to_be_bytes());
        self.buf.extend_from_slice(data);
        self.end(at);
    }
    pub fn auth_sasl_final(&mut self, data: &[u8]) {
        let at = self.begin(b'R');
        self.buf.extend_from_slice(&12i32.to_be_bytes());
        self.buf.extend_from_slice(data);
        self.end(at);
    }
    pub fn parameter_status(&mut self, k: &str, v: &str) {
        let at = self.begin(b'S');
        self.cstr(k);
        self.cstr(v);
        self.end(at);
    }
    pub fn backend_key(&mut self, pid: i32, secret: i32) {
        let at = self.begin(b'K');
        self.buf.extend_from_slice(&pid.to_be_bytes());
        self.buf.extend_from_slice(&secret.to_be_bytes());
        self.end(at);
    }
    pub fn ready(&mut self, status: u8) {
        let at = self.begin(b'Z');
        self.buf.push(status);
        self.end(at);
    }
    pub fn command_complete(&mut self, tag: &str) {
        let at = self.begin(b'C');
        self.cstr(tag);
        self.end(at);
    }
    /// RowDescription.
    pub fn row_description(&mut self, fields: &[FieldDescription]) {
        let at = self.begin(b'T');
        self.buf
            .extend_from_slice(&(fields.len() as i16).to_be_bytes());
        for f in fields {
            self.cstr(&f.name);
            self.buf.extend_from_slice(&f.table_oid.to_be_bytes());
            self.buf.extend_from_slice(&f.attnum.to_be_bytes());
            self.buf.extend_from_slice(&f.type_oid.to_be_bytes());
            let size: i16 = match f.type_oid {
                16 => 1,
                21 => 2,
                23 | 700 | 1082 | 26 | 24 | 2205 | 2206 | 4089 => 4,
                20 | 701 | 1114 | 1184 | 1083 => 8,
                1266 => 12,
                2950 | 1186 => 16,
                _ => -1,
            };
            self.buf.extend_from_slice(&size.to_be_bytes());
            self.buf.extend_from_slice(&f.typmod.to_be_bytes());
            self.buf.extend_from_slice(&f.format.to_be_bytes());
        }
        self.end(at);
    }
    pub fn data_row(&mut self, values: &[Option<Vec<u8>>]) {
        let at = self.begin(b'D');
        self.buf
            .extend_from_slice(&(values.len() as i16).to_be_bytes());
        for v in values {
            match v {
                None => self.buf.extend_from_slice(&(-1i32).to_be_bytes()),
                Some(b) => {
                    self.buf.extend_from_slice(&(b.len() as i32).to_be_bytes());
                    self.buf.extend_from_slice(b);
                }
            }
        }
        self.end(at);
    }
    pub fn parameter_description(&mut self, oids: &[u32]) {
        let at = self.begin(b't');
        self.buf
            .extend_from_slice(&(oids.len() as i16).to_be_bytes());
        for o in oids {
            self.buf.extend_from_slice(&o.to_be_bytes());
        }
        self.end(at);
    }
    /// CopyInResponse (`G`) or CopyOutResponse (`H`): the overall format (0 text, 1
    /// binary) and the same format for each of `ncols` columns.
    pub fn copy_response(&mut self, kind: u8, binary: bool, ncols: usize) {
        let at = self.begin(kind);
        self.buf.push(binary as u8);
        self.buf.extend_from_slice(&(ncols as i16).to_be_bytes());
        for _ in 0..ncols {
            self.buf.extend_from_slice(&(binary as i16).to_be_bytes());
        }
        self.end(at);
    }
    /// CopyData (`d`).
    pub fn copy_data(&mut self, data: &[u8]) {
        let at = self.begin(b'd');
        self.buf.extend_from_slice(data);
        self.end(at);
    }
    /// ErrorResponse (`E`) or NoticeResponse (`N`) with severity, SQLSTATE, message.
    pub fn error(
        &mut self,
        kind: u8,
        severity: &str,
        code: &str,
        message: &str,
        detail: Option<&str>,
        hint: Option<&str>,
    ) {
        self.error_with_context(kind, severity, code, message, detail, hint, None)
    }

    /// [`Out::error`] with PostgreSQL's CONTEXT field (`W`) when there is one.
    #[allow(clippy::too_many_arguments)]
    pub fn error_with_context(
        &mut self,
        kind: u8,
        severity: &str,
        code: &str,
        message: &str,
        detail: Option<&str>,
        hint: Option<&str>,
        context: Option<&str>,
    ) {
        let at = self.begin(kind);
        for (f, v) in [
            (b'S', severity),
            (b'V', severity),
            (b'C', code),
            (b'M', message),
        ] {
            self.buf.push(f);
            self.cstr(v);
        }
        for (f, v) in [(b'D', detail), (b'H', hint), (b'W', context)] {
            if let Some(v) = v {
                self.buf.push(f);
                self.cstr(v);
            }
        }
        self.buf.push(0);
        self.end(at);
    }
}
