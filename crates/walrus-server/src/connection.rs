//! One client connection: startup, then the simple and extended query protocols and
//! COPY FROM STDIN, until Terminate or an error.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::Duration;

use walrus_engine::access::datum::{ArrayValue, Interval};
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::Engine;
use walrus_sql::value::{array_elem_oid, format_text, parse_text, type_from_oid};
use walrus_sql::{Column, Outcome, QueryResult, Session, SqlError};

use crate::protocol::{
    read_message, read_startup, FieldDescription, Message, Out, Reader, StartupPacket,
};
use crate::CancelRegistry;

struct Prepared {
    sql: String,
    /// Parameter type OIDs: as the client declared them in Parse (0: unspecified), then
    /// as Describe reported them (which Bind then reads values as).
    oids: Vec<u32>,
}

struct Portal {
    sql: String,
    /// The statement's parameter type OIDs (for describing it without running it).
    oids: Vec<u32>,
    params: Vec<Datum>,
    result_formats: Vec<i16>,
    /// Result computed at Describe time (Describe must report the row shape, which
    /// walrus learns by running the statement), sent by the following Execute. A
    /// run-time error of that run is kept here too: PostgreSQL reports it at Execute.
    done: Option<Result<QueryResult, SqlError>>,
}

/// The `float4` type's OID: walrus computes in float8, but reads a declared `float4`
/// binary parameter as the 4 bytes it is.
const FLOAT4_OID: u32 = 700;
/// The `oid` type's OID: its values are kept as int8, read from its 4 unsigned bytes.
const OID_OID: u32 = 26;

/// Parse's declared parameter types: each must be unspecified (0), `unknown` (705) or
/// a type walrus has; anything else is refused (0A000) rather than read as text.
fn check_declared(oids: &[u32]) -> Result<(), SqlError> {
    for (i, &o) in oids.iter().enumerate() {
        if o != 0 && o != 705 && type_from_oid(o).is_none() {
            return Err(SqlError::unsupported(format!(
                "parameter ${} has type OID {o}, a type walrus does not support",
                i + 1
            )));
        }
    }
    Ok(())
}

/// A value in the text or binary result format. `type_oid` is the column's type as
/// described (an array's binary form names its element type: 1043 for `varchar[]`).
fn encode(d: &Datum, binary: bool, type_oid: u32) -> Result<Option<Vec<u8>>, SqlError> {
    if !binary {
        return Ok(format_text(d).map(String::into_bytes));
    }
    Ok(Some(match d {
        Datum::Time(v) => v.to_be_bytes().to_vec(),
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
                match encode(item, true, elem_oid)? {
                    None => b.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(v) => {
                        b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                        b.extend_from_slice(&v);
                    }
                }
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
        Datum::Numeric(n) => crate::numeric::encode(n).ok_or_else(|| {
            SqlError::new("22P03", format!("numeric value \"{n}\" has no binary form"))
        })?,
    }))
}

fn array<const N: usize>(b: &[u8]) -> Result<[u8; N], SqlError> {
    b.try_into()
        .map_err(|_| SqlError::new("22P03", "incorrect binary data format"))
}

fn decode_param(bytes: &[u8], binary: bool, oid: u32) -> Result<Datum, SqlError> {
    let ty = type_from_oid(oid);
    let proto = |m: &str| SqlError::new("08P01", m.to_string());
    if !binary {
        let s = std::str::from_utf8(bytes)
            .map_err(|_| SqlError::new("22021", "invalid UTF-8 in parameter"))?;
        return match ty {
            Some(t) => parse_text(t, s),
            None => Ok(Datum::Text(s.to_string())),
        };
    }
    let ty = ty.ok_or_else(|| proto("binary parameter of unknown type"))?;
    let fixed = |n: usize| -> Result<&[u8], SqlError> {
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
    if oid == OID_OID {
        return Ok(Datum::Int8(
            u32::from_be_bytes(array::<4>(fixed(4)?)?) as i64
        ));
    }
    if oid == FLOAT4_OID {
        return Ok(Datum::Float8(
            f32::from_be_bytes(array::<4>(fixed(4)?)?) as f64
        ));
    }
    Ok(match ty {
        TypeId::Bool => Datum::Bool(fixed(1)?[0] != 0),
        TypeId::Int2 => Datum::Int2(i16::from_be_bytes(array::<2>(fixed(2)?)?)),
        TypeId::Int4 => Datum::Int4(i32::from_be_bytes(array::<4>(fixed(4)?)?)),
        TypeId::Int8 => Datum::Int8(i64::from_be_bytes(array::<8>(fixed(8)?)?)),
        TypeId::Float8 => Datum::Float8(f64::from_be_bytes(array::<8>(fixed(8)?)?)),
        TypeId::Text => Datum::Text(
            String::from_utf8(bytes.to_vec())
                .map_err(|_| SqlError::new("22021", "invalid UTF-8 in parameter"))?,
        ),
        TypeId::Timestamp => Datum::Timestamp(i64::from_be_bytes(array::<8>(fixed(8)?)?)),
        TypeId::TimestampTz => Datum::TimestampTz(i64::from_be_bytes(array::<8>(fixed(8)?)?)),
        TypeId::Date => Datum::Date(i32::from_be_bytes(array::<4>(fixed(4)?)?)),
        TypeId::Bytea => Datum::Bytea(bytes.to_vec()),
        TypeId::Uuid => Datum::Uuid(array::<16>(fixed(16)?)?),
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
        TypeId::Array(elem) => decode_array(bytes, *elem, oid)?,
        TypeId::Numeric => parse_text(
            TypeId::Numeric,
            &crate::numeric::decode(bytes)
                .ok_or_else(|| SqlError::new("22P03", "incorrect binary data format"))?,
        )?,
    })
}

fn utf8(b: &[u8]) -> Result<&str, SqlError> {
    std::str::from_utf8(b).map_err(|_| SqlError::new("22021", "invalid UTF-8 in parameter"))
}

/// PostgreSQL's array_recv for a one-dimensional array (lower bound 1) or an empty one;
/// the element type written must be the array's (`varchar[]` may name 1043 or 25).
fn decode_array(bytes: &[u8], elem: TypeId, array_oid: u32) -> Result<Datum, SqlError> {
    let short = || SqlError::new("22P03", "insufficient data left in message");
    let mut at = 0usize;
    let int = |at: &mut usize| -> Result<i32, SqlError> {
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
        items.push(decode_param(v, true, expected)?);
    }
    if at != bytes.len() {
        return Err(SqlError::new(
            "22P03",
            "incorrect binary data format in array element",
        ));
    }
    Ok(Datum::Array(Box::new(ArrayValue { elem, items })))
}

fn send_error(out: &mut Out, e: &SqlError) {
    out.error(
        b'E',
        "ERROR",
        e.sqlstate,
        &e.message,
        e.detail.as_deref(),
        e.hint.as_deref(),
    );
}

fn row_description(out: &mut Out, cols: &[Column], formats: &[i16]) {
    let fmt = |i: usize| match formats {
        [] => 0,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(0),
    };
    let desc: Vec<FieldDescription> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| FieldDescription {
            name: c.name.clone(),
            table_oid: c.table_oid,
            attnum: c.attnum,
            type_oid: c.type_oid,
            typmod: c.typmod,
            format: fmt(i),
        })
        .collect();
    out.row_description(&desc);
}

/// An error of the extended protocol: sent at once (PostgreSQL flushes an error as soon
/// as it is raised, so a client waiting after Flush hears it), the statement ends as
/// failed (an explicit block becomes aborted), and messages are skipped until Sync.
fn fail(
    stream: &mut TcpStream,
    out: &mut Out,
    s: &mut Session,
    e: &SqlError,
    skip_until_sync: &mut bool,
) -> io::Result<()> {
    send_error(out, e);
    s.protocol_error();
    *skip_until_sync = true;
    stream.write_all(&out.buf)?;
    out.buf.clear();
    Ok(())
}

fn send_rows(out: &mut Out, q: &QueryResult, formats: &[i16]) -> Result<(), SqlError> {
    for r in &q.rows {
        let mut vals = Vec::with_capacity(r.len());
        for (i, d) in r.iter().enumerate() {
            let binary = match formats {
                [] => false,
                [one] => *one == 1,
                many => many.get(i).copied().unwrap_or(0) == 1,
            };
            let oid = q.columns.get(i).map_or(0, |c| c.type_oid);
            vals.push(encode(d, binary, oid)?);
        }
        out.data_row(&vals);
    }
    Ok(())
}

/// Reads startup packets until a real one arrives (answering SSL/GSS requests "no" and
/// acting on a cancel request). `None`: the connection was a cancel request.
pub fn read_startup_params(
    stream: &mut TcpStream,
    cancel: &CancelRegistry,
) -> io::Result<Option<Vec<(String, String)>>> {
    loop {
        match read_startup(stream)? {
            StartupPacket::Ssl | StartupPacket::GssEnc => stream.write_all(b"N")?,
            StartupPacket::Cancel { pid, secret } => {
                cancel.cancel((pid, secret));
                return Ok(None);
            }
            StartupPacket::Startup { params } => return Ok(Some(params)),
        }
    }
}

/// A connection over `max_connections`: read its startup packet (a cancel request is
/// still honoured) and refuse it with PostgreSQL's 53300, within `limit`. Runs on the
/// server's one rejecting thread, never on a thread of its own.
pub fn refuse(mut stream: TcpStream, cancel: &CancelRegistry, limit: Duration) -> io::Result<()> {
    stream.set_read_timeout(Some(limit))?;
    stream.set_write_timeout(Some(limit))?;
    if read_startup_params(&mut stream, cancel)?.is_none() {
        return Ok(());
    }
    let mut out = Out::default();
    send_fatal(
        &mut stream,
        &mut out,
        "53300",
        "sorry, too many clients already",
    )
}

pub fn serve(
    mut stream: TcpStream,
    engine: Engine,
    pid: i32,
    cancel: &CancelRegistry,
    authentication_timeout: Duration,
    password: Option<&crate::auth::ScramVerifier>,
) -> io::Result<()> {
    let mut out = Out::default();
    // Startup and authentication must finish within authentication_timeout (PostgreSQL's
    // setting and default, 1 min): a client that connects and says nothing would
    // otherwise hold a connection slot for ever.
    stream.set_read_timeout(Some(authentication_timeout))?;
    let Some(params) = read_startup_params(&mut stream, cancel)? else {
        return Ok(());
    };
    let get = |k: &str| {
        params
            .iter()
            .find(|(pk, _)| pk == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let user = get("user");
    if let Some(v) = password {
        match crate::auth::scram_exchange(&mut stream, v) {
            Ok(()) => {}
            Err(crate::auth::AuthError::Failed(why)) => {
                tracing::info!("authentication failed for user \"{user}\": {why}");
                return send_fatal(
                    &mut stream,
                    &mut out,
                    "28P01",
                    &format!("password authentication failed for user \"{user}\""),
                );
            }
            Err(crate::auth::AuthError::Io(e)) => return Err(e),
        }
    }
    stream.set_read_timeout(None)?;
    // The cancel key's secret is random (a CSPRNG), so another client cannot guess it
    // and cancel this session's queries.
    let secret: i32 = rand::random();
    let mut session = Session::new(engine);
    let database = match get("database") {
        d if d.is_empty() => user.clone(),
        d => d,
    };
    session.set_identity(&user, &database);
    cancel.register((pid, secret), session.interrupt_flag());
    let result = (|| {
        out.auth_ok();
        for (k, v) in [
            ("application_name", get("application_name").as_str()),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
            ("default_transaction_read_only", "off"),
            ("in_hot_standby", "off"),
            ("integer_datetimes", "on"),
            ("IntervalStyle", "postgres"),
            ("is_superuser", "on"),
            ("server_encoding", "UTF8"),
            ("server_version", walrus_sql::SERVER_VERSION),
            ("session_authorization", user.as_str()),
            ("standard_conforming_strings", "on"),
            ("TimeZone", "Etc/UTC"),
        ] {
            out.parameter_status(k, v);
        }
        out.backend_key(pid, secret);
        out.ready(b'I');
        stream.write_all(&out.buf)?;
        out.buf.clear();
        run(&mut stream, &mut session, &mut out)
    })();
    cancel.remove((pid, secret));
    result
}

/// Sends a FATAL error and ends the session (the caller returns what this returns).
fn send_fatal(stream: &mut TcpStream, out: &mut Out, code: &str, message: &str) -> io::Result<()> {
    out.error(b'E', "FATAL", code, message, None, None);
    stream.write_all(&out.buf)
}

/// Waits up to `limit` for the client to send something; false when it sent nothing.
fn wait_for_input(stream: &TcpStream, limit: Duration) -> io::Result<bool> {
    stream.set_read_timeout(Some(limit))?;
    let got = match stream.peek(&mut [0u8; 1]) {
        Ok(_) => true,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            false
        }
        Err(e) => return Err(e),
    };
    stream.set_read_timeout(None)?;
    Ok(got)
}

fn run(stream: &mut TcpStream, s: &mut Session, out: &mut Out) -> io::Result<()> {
    let mut prepared: HashMap<String, Prepared> = HashMap::new();
    let mut portals: HashMap<String, Portal> = HashMap::new();
    let mut skip_until_sync = false;
    // Whether the last thing sent was ReadyForQuery: only then is the client "idle".
    let mut ready_sent = true;
    loop {
        if let Some(limit) = s.idle_in_transaction_timeout().filter(|_| ready_sent) {
            if !wait_for_input(stream, limit)? {
                return send_fatal(
                    stream,
                    out,
                    "25P03",
                    "terminating connection due to idle-in-transaction timeout",
                );
            }
        }
        let msg = read_message(stream)?;
        ready_sent = matches!(msg.kind, b'Q' | b'S');
        if skip_until_sync && msg.kind != b'S' && msg.kind != b'X' {
            continue;
        }
        s.interrupt_flag().store(false, Ordering::Release);
        match msg.kind {
            b'Q' => {
                let sql = Reader::new(&msg.body).cstr()?;
                simple_query(stream, s, out, &sql)?;
                out.ready(s.transaction_status());
                stream.write_all(&out.buf)?;
                out.buf.clear();
            }
            b'P' => {
                let mut r = Reader::new(&msg.body);
                let name = r.cstr()?;
                let sql = r.cstr()?;
                let n = r.i16()?.max(0) as usize;
                let mut oids = Vec::with_capacity(n);
                for _ in 0..n {
                    oids.push(r.i32()? as u32);
                }
                let checked = check_declared(&oids).and_then(|()| {
                    if !name.is_empty() && prepared.contains_key(&name) {
                        return Err(SqlError::new(
                            "42P05",
                            format!("prepared statement \"{name}\" already exists"),
                        ));
                    }
                    s.check_parse(&sql)
                });
                match checked {
                    Ok(()) => {
                        s.remember_protocol_statement(&name, &sql);
                        prepared.insert(name, Prepared { sql, oids });
                        out.simple(b'1');
                    }
                    Err(e) => fail(stream, out, s, &e, &mut skip_until_sync)?,
                }
            }
            b'B' => match bind(&msg, &prepared, s) {
                Ok((name, portal)) => {
                    portals.insert(name, portal);
                    out.simple(b'2');
                }
                Err(e) => fail(stream, out, s, &e, &mut skip_until_sync)?,
            },
            b'D' => {
                let mut r = Reader::new(&msg.body);
                let what = r.u8()?;
                let name = r.cstr()?;
                if what == b'S' {
                    let Some(p) = prepared.get_mut(&name) else {
                        let e = SqlError::new(
                            "26000",
                            format!("prepared statement \"{name}\" does not exist"),
                        );
                        fail(stream, out, s, &e, &mut skip_until_sync)?;
                        continue;
                    };
                    match s.describe(&p.sql, &p.oids) {
                        Ok((oids, cols)) => {
                            out.parameter_description(&oids);
                            // Bind will read values in these types (binary ones too).
                            p.oids = oids;
                            match cols {
                                Some(c) => row_description(out, &c, &[]),
                                None => out.simple(b'n'),
                            }
                        }
                        Err(e) => fail(stream, out, s, &e, &mut skip_until_sync)?,
                    }
                } else {
                    let Some(p) = portals.get_mut(&name) else {
                        let e = SqlError::new("34000", format!("portal \"{name}\" does not exist"));
                        fail(stream, out, s, &e, &mut skip_until_sync)?;
                        continue;
                    };
                    let res = run_portal(stream, s, out, &p.sql, &p.params)?;
                    match res {
                        Ok(q) => {
                            if !q.columns.is_empty()
                                || q.tag.starts_with("SELECT")
                                || q.tag == "SHOW"
                            {
                                row_description(out, &q.columns, &p.result_formats)
                            } else {
                                out.simple(b'n')
                            }
                            p.done = Some(Ok(q));
                        }
                        // A run-time error (22012 of `select 1/0`) belongs to Execute:
                        // describe the statement without running it, keep the error.
                        Err(e) if e.is_run_time() => match s.describe_static(&p.sql, &p.oids) {
                            Ok((_, cols)) => {
                                match cols {
                                    Some(c) => row_description(out, &c, &p.result_formats),
                                    None => out.simple(b'n'),
                                }
                                p.done = Some(Err(e));
                            }
                            Err(_) => fail(stream, out, s, &e, &mut skip_until_sync)?,
                        },
                        Err(e) => fail(stream, out, s, &e, &mut skip_until_sync)?,
                    }
                }
            }
            b'E' => {
                let mut r = Reader::new(&msg.body);
                let name = r.cstr()?;
                let Some(p) = portals.get_mut(&name) else {
                    let e = SqlError::new("34000", format!("portal \"{name}\" does not exist"));
                    fail(stream, out, s, &e, &mut skip_until_sync)?;
                    continue;
                };
                let res = match p.done.take() {
                    Some(r) => r,
                    None => run_portal(stream, s, out, &p.sql, &p.params)?,
                };
                let sent = res.and_then(|q| {
                    send_rows(out, &q, &p.result_formats)?;
                    if q.tag.is_empty() {
                        out.simple(b'I');
                    } else {
                        out.command_complete(&q.tag);
                    }
                    Ok(())
                });
                if let Err(e) = sent {
                    fail(stream, out, s, &e, &mut skip_until_sync)?;
                }
            }
            b'S' => {
                skip_until_sync = false;
                portals.retain(|k, _| !k.is_empty());
                out.ready(s.transaction_status());
                stream.write_all(&out.buf)?;
                out.buf.clear();
            }
            b'H' => {
                stream.write_all(&out.buf)?;
                out.buf.clear();
            }
            b'C' => {
                let mut r = Reader::new(&msg.body);
                let what = r.u8()?;
                let name = r.cstr()?;
                if what == b'S' {
                    prepared.remove(&name);
                    s.forget_protocol_statement(&name);
                } else {
                    portals.remove(&name);
                }
                out.simple(b'3');
            }
            b'X' => return Ok(()),
            b'd' | b'c' | b'f' => {} // stray COPY messages outside COPY are ignored, as PostgreSQL does
            other => {
                return send_fatal(
                    stream,
                    out,
                    "08P01",
                    &format!("invalid frontend message type {}", other as char),
                );
            }
        }
    }
}

fn bind(
    msg: &Message,
    prepared: &HashMap<String, Prepared>,
    s: &mut Session,
) -> Result<(String, Portal), SqlError> {
    let proto = |e: io::Error| SqlError::new("08P01", e.to_string());
    let mut r = Reader::new(&msg.body);
    let portal = r.cstr().map_err(proto)?;
    let stmt = r.cstr().map_err(proto)?;
    let p = prepared.get(&stmt).ok_or_else(|| {
        SqlError::new(
            "26000",
            format!("prepared statement \"{stmt}\" does not exist"),
        )
    })?;
    s.check_bind(&p.sql)?;
    let nf = r.i16().map_err(proto)?.max(0) as usize;
    let mut fmts = Vec::with_capacity(nf);
    for _ in 0..nf {
        fmts.push(r.i16().map_err(proto)?);
    }
    let binary = |i: usize| match fmts.as_slice() {
        [] => false,
        [one] => *one == 1,
        many => many.get(i).copied().unwrap_or(0) == 1,
    };
    let np = r.i16().map_err(proto)?.max(0) as usize;
    let mut oids = p.oids.clone();
    // A binary value needs its type: infer the ones the client left to the server and
    // did not ask for with Describe.
    if (0..np).any(|i| binary(i) && oids.get(i).copied().unwrap_or(0) == 0) {
        oids = s.param_types(&p.sql, &oids)?;
    }
    let mut params = Vec::with_capacity(np);
    for i in 0..np {
        let len = r.i32().map_err(proto)?;
        if len < 0 {
            params.push(Datum::Null);
            continue;
        }
        let bytes = r.bytes(len as usize).map_err(proto)?;
        params.push(decode_param(
            bytes,
            binary(i),
            oids.get(i).copied().unwrap_or(0),
        )?);
    }
    let nr = r.i16().map_err(proto)?.max(0) as usize;
    let mut result_formats = Vec::with_capacity(nr);
    for _ in 0..nr {
        result_formats.push(r.i16().map_err(proto)?);
    }
    Ok((
        portal,
        Portal {
            sql: p.sql.clone(),
            oids,
            params,
            result_formats,
            done: None,
        },
    ))
}

/// A panic the session did not catch itself: the statement's XX000, and the session
/// rolls back what it may have half applied.
fn panicked(s: &mut Session) -> Vec<Result<Outcome, SqlError>> {
    s.statement_panicked();
    vec![Err(walrus_sql::internal_error())]
}

/// Runs one extended-protocol statement (COPY is only supported via simple query).
fn run_portal(
    stream: &mut TcpStream,
    s: &mut Session,
    out: &mut Out,
    sql: &str,
    params: &[Datum],
) -> io::Result<Result<QueryResult, SqlError>> {
    // As for simple queries: a panic in the session is this statement's XX000.
    let mut results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.execute_cached(sql, params)
    }))
    .unwrap_or_else(|_| panicked(s));
    Ok(match results.pop() {
        None => Ok(QueryResult::default()),
        Some(Ok(Outcome::Done(q))) => Ok(q),
        Some(Ok(Outcome::CopyIn { table, columns })) => copy_in(stream, s, out, &table, &columns)?,
        Some(Err(e)) => Err(e),
    })
}

fn simple_query(
    stream: &mut TcpStream,
    s: &mut Session,
    out: &mut Out,
    sql: &str,
) -> io::Result<()> {
    let results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.execute(sql, &[])));
    let results = results.unwrap_or_else(|_| panicked(s));
    if results.is_empty() {
        out.simple(b'I');
        return Ok(());
    }
    for r in results {
        match r {
            Ok(Outcome::Done(q)) => {
                if !q.columns.is_empty() || q.tag.starts_with("SELECT") {
                    row_description(out, &q.columns, &[]);
                }
                if let Err(e) = send_rows(out, &q, &[]) {
                    send_error(out, &e);
                    return Ok(());
                }
                out.command_complete(&q.tag);
            }
            Ok(Outcome::CopyIn { table, columns }) => {
                match copy_in(stream, s, out, &table, &columns)? {
                    Ok(q) => out.command_complete(&q.tag),
                    Err(e) => {
                        send_error(out, &e);
                        return Ok(());
                    }
                }
            }
            Err(e) => {
                send_error(out, &e);
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The COPY sub-protocol: CopyInResponse, then CopyData until CopyDone or CopyFail.
/// Complete lines are loaded as they arrive, so memory stays bounded.
fn copy_in(
    stream: &mut TcpStream,
    s: &mut Session,
    out: &mut Out,
    table: &str,
    columns: &[String],
) -> io::Result<Result<QueryResult, SqlError>> {
    out.copy_in_response(columns.len());
    stream.write_all(&out.buf)?;
    out.buf.clear();
    let mut pending: Vec<u8> = Vec::new();
    let mut loaded: Result<u64, SqlError> = Ok(0);
    loop {
        let mut m = read_message(stream)?;
        match m.kind {
            b'd' => {
                if loaded.is_err() {
                    continue;
                }
                pending.append(&mut m.body);
                if let Some(last_nl) = pending.iter().rposition(|&b| b == b'\n') {
                    let rest = pending.split_off(last_nl + 1);
                    let chunk = std::mem::replace(&mut pending, rest);
                    let r = match std::str::from_utf8(&chunk) {
                        Ok(text) => s.copy_chunk(table, columns, text),
                        Err(_) => Err(SqlError::new(
                            "22021",
                            "invalid byte sequence for encoding \"UTF8\"",
                        )),
                    };
                    loaded = match (loaded, r) {
                        (Ok(a), Ok(b)) => Ok(a + b),
                        (_, Err(e)) | (Err(e), _) => Err(e),
                    };
                }
                // A line still without its end is held whole: bounded by
                // statement_memory_limit like any statement's rows.
                if let (Ok(_), Err(e)) = (&loaded, s.check_copy_buffer(pending.len())) {
                    loaded = Err(e);
                    pending = Vec::new();
                }
            }
            b'c' => {
                if !pending.is_empty() && loaded.is_ok() {
                    let text = String::from_utf8_lossy(&pending).into_owned();
                    loaded = s
                        .copy_chunk(table, columns, &text)
                        .and_then(|b| loaded.map(|a| a + b));
                }
                return Ok(s.copy_finish(loaded));
            }
            b'f' => {
                let why = Reader::new(&m.body).cstr().unwrap_or_default();
                return Ok(s.copy_finish(Err(SqlError::new(
                    "57014",
                    format!("COPY from stdin failed: {why}"),
                ))));
            }
            b'H' | b'S' => {}
            other => {
                return Ok(s.copy_finish(Err(SqlError::new(
                    "08P01",
                    format!("unexpected message type {} during COPY", other as char),
                ))));
            }
        }
    }
}
