//! One client connection: startup, then the simple and extended query protocols and
//! COPY's sub-protocols (FROM STDIN, TO STDOUT; text, CSV or binary data, decoded and
//! encoded by `walrus_sql`), until Terminate or an error.

use crate::socket::Socket;
use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use crate::client_stream::ClientStream;
use std::sync::atomic::Ordering;
use std::time::Duration;

use walrus_engine::access::datum::Datum;
use walrus_engine::Engine;
use walrus_sql::value::{check_utf8, format_text_as, parse_text, type_from_oid};
use walrus_sql::{Column, Outcome, QueryResult, RowSink, Session, SqlError};

use crate::protocol::{
    read_message, read_startup, FieldDescription, Message, MessageError, Out, Reader, StartupPacket,
};
use crate::CancelRegistry;

struct Prepared {
    sql: String,
    /// How many parameters a Bind must supply (PostgreSQL's `num_params`).
    nparams: usize,
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
    /// After an Execute stopped at its row limit (PortalSuspended): how many of the
    /// result's rows (kept in `done`) have been sent; the next Execute goes on there.
    sent: Option<usize>,
}

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
        return Ok(format_text_as(d, type_oid).map(String::into_bytes));
    }
    walrus_sql::binary::encode_as(d, type_oid)
}

fn decode_param(bytes: &[u8], binary: bool, oid: u32) -> Result<Datum, SqlError> {
    use walrus_engine::access::datum::TypeId;
    // A reg* parameter is a name (text) or an OID (binary): kept as text or an `oid`
    // value, which the statement's cast to the reg* type (`$1::regclass`) looks up.
    if matches!(
        type_from_oid(oid),
        Some(TypeId::RegProc | TypeId::RegClass | TypeId::RegType | TypeId::RegNamespace)
    ) {
        return if binary {
            walrus_sql::binary::decode(bytes, walrus_sql::binary::OID_OID)
        } else {
            check_utf8(bytes).map(|s| Datum::Text(s.to_string()))
        };
    }
    if !binary {
        let s = check_utf8(bytes)?;
        match oid {
            // charin: the first character; namein: at most 63 bytes.
            18 => return Ok(Datum::Text(s.chars().take(1).collect())),
            19 if s.len() > 63 => {
                let mut end = 63;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                return Ok(Datum::Text(s[..end].to_string()));
            }
            _ => {}
        }
        return match type_from_oid(oid) {
            Some(t) => parse_text(t, s),
            None => Ok(Datum::Text(s.to_string())),
        };
    }
    if type_from_oid(oid).is_none() {
        return Err(SqlError::new("08P01", "binary parameter of unknown type"));
    }
    walrus_sql::binary::decode(bytes, oid)
}

/// A malformed or badly encoded field of a well-framed message: an ERROR with
/// PostgreSQL's SQLSTATE (08P01 or 22021), after which the session goes on.
fn message_error(e: MessageError) -> SqlError {
    SqlError::new(e.sqlstate(), e.to_string())
}

/// A result format code: PostgreSQL knows 0 (text) and 1 (binary); any other is 22023,
/// raised when a value is to be sent in it.
fn result_binary(code: i16) -> Result<bool, SqlError> {
    match code {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(unsupported_format(other)),
    }
}

fn unsupported_format(code: i16) -> SqlError {
    SqlError::new("22023", format!("unsupported format code: {code}"))
}

fn send_error(out: &mut Out, e: &SqlError) {
    out.error_with_context(
        b'E',
        "ERROR",
        e.sqlstate,
        &e.message,
        e.detail.as_deref(),
        e.hint.as_deref(),
        e.context.as_deref(),
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
    stream: &mut ClientStream,
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

/// A command tag for the rows one Execute of a suspended portal sent: PostgreSQL counts
/// that Execute's rows only (`SELECT 2` after two suspended batches of 5).
fn tag_with_count(tag: &str, rows: usize) -> String {
    match tag.rsplit_once(' ') {
        Some((head, n)) if n.parse::<u64>().is_ok() => format!("{head} {rows}"),
        _ => tag.to_string(),
    }
}

fn send_rows(out: &mut Out, q: &QueryResult, formats: &[i16]) -> Result<(), SqlError> {
    send_row_range(out, q, 0..q.rows.len(), formats)
}

/// DataRows for `q.rows[range]`.
fn send_row_range(
    out: &mut Out,
    q: &QueryResult,
    range: std::ops::Range<usize>,
    formats: &[i16],
) -> Result<(), SqlError> {
    for r in &q.rows[range] {
        let mut vals = Vec::with_capacity(r.len());
        for (i, d) in r.iter().enumerate() {
            let binary = result_binary(match formats {
                [] => 0,
                [one] => *one,
                many => many.get(i).copied().unwrap_or(0),
            })?;
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
    stream: &mut Socket,
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
pub fn refuse(mut stream: Socket, cancel: &CancelRegistry, limit: Duration) -> io::Result<()> {
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
    mut stream: Socket,
    engine: Engine,
    cancel: &CancelRegistry,
    authentication_timeout: Duration,
    password: Option<&crate::auth::ScramVerifier>,
    server_settings: &[(String, String)],
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
    session.set_server_settings(server_settings);
    // A TimeZone in the startup packet (pgjdbc sends the JVM's zone) is the session's
    // zone from the start, as in PostgreSQL; one it does not know ends the connection.
    let startup_zone = get("TimeZone");
    if !startup_zone.is_empty() {
        let set = format!("set timezone = '{}'", startup_zone.replace('\'', "''"));
        if let Some(Err(e)) = session.execute(&set, &[]).pop() {
            return send_fatal(&mut stream, &mut out, e.sqlstate, &e.message);
        }
    }
    // `options`: command-line switches for the backend, of which PostgreSQL's clients
    // send `-c name=value` (and `--name=value`); each is a SET, and a bad one ends the
    // connection as in PostgreSQL.
    match startup_options(&get("options")) {
        Ok(options) => {
            for (name, value) in options {
                if let Err(e) = session.set_startup_option(&name, &value) {
                    return send_fatal(&mut stream, &mut out, e.sqlstate, &e.message);
                }
            }
        }
        Err(message) => return send_fatal(&mut stream, &mut out, "42601", &message),
    }
    let mut reported_zone = session.setting("timezone").unwrap_or_default();
    // The session's own pid (pg_backend_pid, pg_stat_activity) is the cancel key's.
    let pid = session.pid();
    let (addr, port) = stream.peer();
    let waker = stream.try_clone()?;
    session.set_client(
        addr,
        port,
        &get("application_name"),
        Box::new(move || {
            let _ = waker.shutdown_read();
        }),
    );
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
            ("TimeZone", reported_zone.as_str()),
        ] {
            out.parameter_status(k, v);
        }
        out.backend_key(pid, secret);
        out.ready(b'I');
        stream.write_all(&out.buf)?;
        out.buf.clear();
        let mut client = ClientStream::new(stream);
        run(&mut client, &mut session, &mut out, &mut reported_zone)
    })();
    cancel.remove((pid, secret));
    result
}

/// The `name=value` settings of a startup packet's `options`: words split at
/// whitespace (a backslash keeps the next character, so `\ ` is a space in a value),
/// each `-c name=value`, `-cname=value` or `--name=value`.
fn startup_options(options: &str) -> Result<Vec<(String, String)>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            c if c.is_whitespace() => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    let mut out = Vec::new();
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        let setting = if w == "-c" {
            it.next()
                .ok_or_else(|| "invalid command-line argument for server process: -c".to_string())?
        } else if let Some(s) = w.strip_prefix("--").or_else(|| w.strip_prefix("-c")) {
            s.to_string()
        } else {
            return Err(format!(
                "invalid command-line argument for server process: {w}"
            ));
        };
        match setting.split_once('=') {
            Some((n, v)) if !n.is_empty() => out.push((n.to_string(), v.to_string())),
            _ => {
                return Err(format!(
                    "invalid command-line argument for server process: {setting}"
                ))
            }
        }
    }
    Ok(out)
}

/// Sends a FATAL error and ends the session (the caller returns what this returns).
fn send_fatal(stream: &mut impl Write, out: &mut Out, code: &str, message: &str) -> io::Result<()> {
    out.error(b'E', "FATAL", code, message, None, None);
    stream.write_all(&out.buf)
}

/// ReadyForQuery, preceded (as PostgreSQL does since 14) by a ParameterStatus for
/// TimeZone if a SET, RESET or rollback changed it since it was last reported.
fn ready(s: &Session, out: &mut Out, reported_zone: &mut String) {
    let zone = s.setting("timezone").unwrap_or_default();
    if zone != *reported_zone {
        out.parameter_status("TimeZone", &zone);
        *reported_zone = zone;
    }
    out.ready(s.transaction_status());
}

/// `pg_terminate_backend` ended this session: PostgreSQL's FATAL 57P01.
fn terminated(stream: &mut ClientStream, out: &mut Out) -> io::Result<()> {
    send_fatal(
        stream,
        out,
        "57P01",
        "terminating connection due to administrator command",
    )
}

fn run(
    stream: &mut ClientStream,
    s: &mut Session,
    out: &mut Out,
    reported_zone: &mut String,
) -> io::Result<()> {
    let mut prepared: HashMap<String, Prepared> = HashMap::new();
    let mut portals: HashMap<String, Portal> = HashMap::new();
    let mut skip_until_sync = false;
    // Whether the last thing sent was ReadyForQuery: only then is the client "idle".
    let mut ready_sent = true;
    loop {
        if let Some(limit) = s.idle_in_transaction_timeout().filter(|_| ready_sent) {
            if !stream.wait_for_input(limit)? {
                return send_fatal(
                    stream,
                    out,
                    "25P03",
                    "terminating connection due to idle-in-transaction timeout",
                );
            }
        }
        // Idle after a reply: the next statement may come at once (a client running
        // one statement after another, in a transaction or not), so wait for it
        // awake. On this project's 2-vCPU virtual machine a blocked session's wake-up
        // was most of a short statement's round trip: polling after writes too took a
        // one-client TPC-B run from 1.21 to 0.79 ms (BENCHMARKS.md, 2026-11-27 08:00);
        // 16 clients unchanged (only a lone running session polls).
        stream.poll_when_dry = ready_sent;
        if s.terminate_requested() {
            return terminated(stream, out);
        }
        let msg = match read_message(stream) {
            Err(_) if s.terminate_requested() => return terminated(stream, out),
            other => other?,
        };
        ready_sent = matches!(msg.kind, b'Q' | b'S');
        if skip_until_sync && msg.kind != b'S' && msg.kind != b'X' {
            continue;
        }
        s.interrupt_flag().store(false, Ordering::Release);
        match msg.kind {
            b'Q' => {
                let mut r = Reader::new(&msg.body);
                match r.cstr().and_then(|sql| r.end().map(|()| sql)) {
                    Ok(sql) => simple_query(stream, s, out, &sql)?,
                    Err(e) => {
                        send_error(out, &message_error(e));
                        s.protocol_error();
                    }
                }
                ready(s, out, reported_zone);
                stream.write_all(&out.buf)?;
                out.buf.clear();
            }
            b'P' => {
                let decoded = (|| {
                    let mut r = Reader::new(&msg.body);
                    let name = r.cstr()?;
                    let sql = r.cstr()?;
                    let n = r.i16()?.max(0) as usize;
                    let mut oids = Vec::with_capacity(n);
                    for _ in 0..n {
                        oids.push(r.i32()? as u32);
                    }
                    r.end()?;
                    Ok((name, sql, oids))
                })();
                let (name, sql, oids) = match decoded {
                    Ok(d) => d,
                    Err(e) => {
                        fail(stream, out, s, &message_error(e), &mut skip_until_sync)?;
                        continue;
                    }
                };
                let checked = check_declared(&oids).and_then(|()| {
                    if !name.is_empty() && prepared.contains_key(&name) {
                        return Err(SqlError::new(
                            "42P05",
                            format!("prepared statement \"{name}\" already exists"),
                        ));
                    }
                    s.check_parse(&sql)?;
                    s.param_count(&sql, oids.len())
                });
                match checked {
                    Ok(nparams) => {
                        s.remember_protocol_statement(&name, &sql);
                        prepared.insert(name, Prepared { sql, nparams, oids });
                        out.simple(b'1');
                    }
                    Err(e) => fail(stream, out, s, &e, &mut skip_until_sync)?,
                }
            }
            b'B' => match bind(&msg, &prepared, &portals, s) {
                Ok((name, portal)) => {
                    portals.insert(name, portal);
                    out.simple(b'2');
                }
                Err(e) => fail(stream, out, s, &e, &mut skip_until_sync)?,
            },
            b'D' => {
                let (what, name) = match kind_and_name(&msg, "DESCRIBE") {
                    Ok(d) => d,
                    Err(e) => {
                        fail(stream, out, s, &e, &mut skip_until_sync)?;
                        continue;
                    }
                };
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
                    if s.is_copy(&p.sql) {
                        out.simple(b'n');
                        continue;
                    }
                    // A suspended portal is described from its result, not run again.
                    if let (Some(_), Some(Ok(q))) = (p.sent, &p.done) {
                        row_description(out, &q.columns, &p.result_formats);
                        continue;
                    }
                    let res = run_portal(stream, s, out, &p.sql, &p.params)?;
                    match res {
                        Ok(q) => {
                            if q.returns_rows() {
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
                let decoded = (|| {
                    let mut r = Reader::new(&msg.body);
                    let name = r.cstr()?;
                    let max_rows = r.i32()?;
                    r.end()?;
                    Ok((name, max_rows))
                })();
                let (name, max_rows) = match decoded {
                    Ok(d) => d,
                    Err(e) => {
                        fail(stream, out, s, &message_error(e), &mut skip_until_sync)?;
                        continue;
                    }
                };
                // The row limit: 0 (or less) for all rows.
                let max_rows = usize::try_from(max_rows).unwrap_or(0);
                let Some(p) = portals.get_mut(&name) else {
                    let e = SqlError::new("34000", format!("portal \"{name}\" does not exist"));
                    fail(stream, out, s, &e, &mut skip_until_sync)?;
                    continue;
                };
                let start = p.sent.take().unwrap_or(0);
                let res = match p.done.take() {
                    Some(r) => r,
                    None => run_portal(stream, s, out, &p.sql, &p.params)?,
                };
                let sent = res.and_then(|q| {
                    let total = q.rows.len();
                    let start = start.min(total);
                    let end = match max_rows {
                        0 => total,
                        n => total.min(start.saturating_add(n)),
                    };
                    send_row_range(out, &q, start..end, &p.result_formats)?;
                    if max_rows > 0 && end - start == max_rows {
                        // PostgreSQL suspends whenever the limit was reached, even with
                        // no row left (the next Execute then completes with 0 rows).
                        out.simple(b's');
                        p.sent = Some(end);
                        p.done = Some(Ok(q));
                    } else if q.tag.is_empty() {
                        out.simple(b'I');
                    } else if start > 0 {
                        out.command_complete(&tag_with_count(&q.tag, end - start));
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
                ready(s, out, reported_zone);
                stream.write_all(&out.buf)?;
                out.buf.clear();
            }
            b'H' => {
                stream.write_all(&out.buf)?;
                out.buf.clear();
            }
            b'C' => {
                let (what, name) = match kind_and_name(&msg, "CLOSE") {
                    Ok(d) => d,
                    Err(e) => {
                        fail(stream, out, s, &e, &mut skip_until_sync)?;
                        continue;
                    }
                };
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

/// Describe's and Close's body: `S` (statement) or `P` (portal) and a name; any other
/// kind is PostgreSQL's 08P01 naming the message.
fn kind_and_name(msg: &Message, message: &str) -> Result<(u8, String), SqlError> {
    let mut r = Reader::new(&msg.body);
    let what = r.u8().map_err(message_error)?;
    let name = r.cstr().map_err(message_error)?;
    r.end().map_err(message_error)?;
    if !matches!(what, b'S' | b'P') {
        return Err(SqlError::new(
            "08P01",
            format!("invalid {message} message subtype {what}"),
        ));
    }
    Ok((what, name))
}

/// Bind, checked in the order PostgreSQL 15's `exec_bind_message` checks it: the
/// statement exists, the parameter-format count is 0, 1 or the parameter count, the
/// parameter count is the statement's, the block is not aborted, a named portal is new,
/// each value's format code is 0 or 1 and its length fits the message, nothing trails,
/// and several result formats match the result's columns. Every failure is an ERROR
/// (the connection stays); the caller skips to Sync.
fn bind(
    msg: &Message,
    prepared: &HashMap<String, Prepared>,
    portals: &HashMap<String, Portal>,
    s: &mut Session,
) -> Result<(String, Portal), SqlError> {
    let mut r = Reader::new(&msg.body);
    let portal = r.cstr().map_err(message_error)?;
    let stmt = r.cstr().map_err(message_error)?;
    let p = prepared.get(&stmt).ok_or_else(|| {
        SqlError::new(
            "26000",
            format!("prepared statement \"{stmt}\" does not exist"),
        )
    })?;
    let nf = r.i16().map_err(message_error)?.max(0) as usize;
    let mut fmts = Vec::with_capacity(nf);
    for _ in 0..nf {
        fmts.push(r.i16().map_err(message_error)?);
    }
    let np = r.i16().map_err(message_error)?.max(0) as usize;
    if nf > 1 && nf != np {
        return Err(SqlError::new(
            "08P01",
            format!("bind message has {nf} parameter formats but {np} parameters"),
        ));
    }
    if np != p.nparams {
        return Err(SqlError::new(
            "08P01",
            format!(
                "bind message supplies {np} parameters, but prepared statement \"{stmt}\" requires {}",
                p.nparams
            ),
        ));
    }
    s.check_bind(&p.sql)?;
    if !portal.is_empty() && portals.contains_key(&portal) {
        return Err(SqlError::new(
            "42P03",
            format!("cursor \"{portal}\" already exists"),
        ));
    }
    let format = |i: usize| match fmts.as_slice() {
        [] => 0,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(0),
    };
    let mut oids = p.oids.clone();
    // A binary value needs its type: infer the ones the client left to the server and
    // did not ask for with Describe.
    if (0..np).any(|i| format(i) == 1 && oids.get(i).copied().unwrap_or(0) == 0) {
        oids = s.param_types(&p.sql, &oids)?;
    }
    let mut params = Vec::with_capacity(np);
    for i in 0..np {
        // -1 is NULL; any other negative length runs past the message (08P01).
        let len = r.i32().map_err(message_error)?;
        let bytes = match len {
            -1 => None,
            n => Some(r.bytes(n as u32 as usize).map_err(message_error)?),
        };
        let binary = match format(i) {
            0 => false,
            1 => true,
            other => return Err(unsupported_format(other)),
        };
        params.push(match bytes {
            None => Datum::Null,
            Some(b) => decode_param(b, binary, oids.get(i).copied().unwrap_or(0))?,
        });
    }
    let nr = r.i16().map_err(message_error)?.max(0) as usize;
    let mut result_formats = Vec::with_capacity(nr);
    for _ in 0..nr {
        result_formats.push(r.i16().map_err(message_error)?);
    }
    r.end().map_err(message_error)?;
    // Several result formats must be one per column; only then is the result's shape
    // needed (a statement whose columns cannot be told beforehand is not checked).
    if nr > 1 {
        if let Ok((_, Some(cols))) = s.describe_static(&p.sql, &oids) {
            if cols.len() != nr {
                return Err(SqlError::new(
                    "08P01",
                    format!(
                        "bind message has {nr} result formats but query has {} columns",
                        cols.len()
                    ),
                ));
            }
        }
    }
    Ok((
        portal,
        Portal {
            sql: p.sql.clone(),
            oids,
            params,
            result_formats,
            done: None,
            sent: None,
        },
    ))
}

/// A panic the session did not catch itself: the statement's XX000, and the session
/// rolls back what it may have half applied.
fn panicked(s: &mut Session) -> Vec<Result<Outcome, SqlError>> {
    s.statement_panicked();
    vec![Err(walrus_sql::internal_error())]
}

/// Runs one extended-protocol statement (a COPY runs its sub-protocol here, at Execute).
fn run_portal(
    stream: &mut ClientStream,
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
        Some(Ok(Outcome::CopyIn(copy))) => copy_in(stream, s, out, *copy)?,
        Some(Ok(Outcome::CopyOut(copy))) => copy_out(stream, out, &copy)?,
        Some(Err(e)) => Err(e),
    })
}

/// Past this many bytes of DataRows a streamed SELECT's buffer goes to the client.
const STREAM_FLUSH_BYTES: usize = 64 << 10;

/// A lone SELECT's result written to the client as the session produces it
/// (`Session::execute_streaming`): RowDescription, then DataRows in text format, sent
/// whenever [`STREAM_FLUSH_BYTES`] have gathered and once more when the statement ends.
struct RowStream {
    writer: Arc<Socket>,
    out: Out,
    oids: Vec<u32>,
    /// Whether RowDescription went out (the statement's result is then in the stream).
    described: bool,
}

impl RowStream {
    fn send(&mut self) -> io::Result<()> {
        if !self.out.buf.is_empty() {
            (&*self.writer).write_all(&self.out.buf)?;
            self.out.buf.clear();
        }
        Ok(())
    }
}

/// The session's handle on a [`RowStream`]; the connection keeps another.
struct SharedRowStream(Arc<Mutex<RowStream>>);

fn lock(r: &Mutex<RowStream>) -> std::sync::MutexGuard<'_, RowStream> {
    r.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn send_failed(e: io::Error) -> SqlError {
    SqlError::new("08006", format!("could not send data to client: {e}"))
}

impl RowSink for SharedRowStream {
    fn columns(&mut self, cols: &[Column]) -> Result<(), SqlError> {
        let mut r = lock(&self.0);
        row_description(&mut r.out, cols, &[]);
        r.oids = cols.iter().map(|c| c.type_oid).collect();
        r.described = true;
        Ok(())
    }

    fn row(&mut self, row: &[Datum]) -> Result<(), SqlError> {
        let mut r = lock(&self.0);
        let vals = row
            .iter()
            .enumerate()
            .map(|(i, d)| encode(d, false, r.oids.get(i).copied().unwrap_or(0)))
            .collect::<Result<Vec<_>, _>>()?;
        r.out.data_row(&vals);
        if r.out.buf.len() >= STREAM_FLUSH_BYTES {
            r.send().map_err(send_failed)?;
        }
        Ok(())
    }
}

fn simple_query(
    stream: &mut ClientStream,
    s: &mut Session,
    out: &mut Out,
    sql: &str,
) -> io::Result<()> {
    // Streamed rows go straight to the socket: what is queued goes first.
    if !out.buf.is_empty() {
        stream.write_all(&out.buf)?;
        out.buf.clear();
    }
    let rows = Arc::new(Mutex::new(RowStream {
        writer: stream.writer()?,
        out: Out { buf: Vec::new() },
        oids: Vec::new(),
        described: false,
    }));
    let sink = Box::new(SharedRowStream(rows.clone()));
    let results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.execute_streaming(sql, sink)
    }));
    let results = results.unwrap_or_else(|_| panicked(s));
    // What the stream has not sent yet leads this reply (one write for a small result).
    let streamed = {
        let mut r = lock(&rows);
        let mut left = std::mem::take(&mut r.out.buf);
        left.append(&mut out.buf);
        out.buf = left;
        r.described
    };
    if results.is_empty() {
        out.simple(b'I');
        return Ok(());
    }
    for r in results {
        match r {
            Ok(Outcome::Done(q)) => {
                if !streamed {
                    if q.returns_rows() {
                        row_description(out, &q.columns, &[]);
                    }
                    if let Err(e) = send_rows(out, &q, &[]) {
                        send_error(out, &e);
                        return Ok(());
                    }
                }
                out.command_complete(&q.tag);
            }
            Ok(Outcome::CopyIn(copy)) => match copy_in(stream, s, out, *copy)? {
                Ok(q) => out.command_complete(&q.tag),
                Err(e) => {
                    send_error(out, &e);
                    return Ok(());
                }
            },
            Ok(Outcome::CopyOut(copy)) => match copy_out(stream, out, &copy)? {
                Ok(q) => out.command_complete(&q.tag),
                Err(e) => {
                    send_error(out, &e);
                    return Ok(());
                }
            },
            Err(e) => {
                send_error(out, &e);
                return Ok(());
            }
        }
    }
    Ok(())
}

/// How much text/CSV COPY data is gathered from received CopyData messages before it
/// goes to the session.
const COPY_IN_CHUNK_BYTES: usize = 64 << 10;

/// COPY FROM STDIN's sub-protocol: CopyInResponse, then CopyData until CopyDone or
/// CopyFail. The session loads complete records as each message arrives (a CSV record
/// may span messages), so memory stays bounded; an error is reported after CopyDone or
/// CopyFail, the data between being read and dropped.
fn copy_in(
    stream: &mut ClientStream,
    s: &mut Session,
    out: &mut Out,
    mut copy: walrus_sql::CopyIn,
) -> io::Result<Result<QueryResult, SqlError>> {
    out.copy_response(b'G', copy.binary(), copy.column_count());
    stream.write_all(&out.buf)?;
    out.buf.clear();
    let mut chunk = Vec::new();
    loop {
        let m = read_message(stream)?;
        match m.kind {
            // Text and CSV data is a stream whose message boundaries mean nothing:
            // the CopyData messages already received go to the session as one piece.
            // (Binary keeps them apart: data in a message after the trailer's is an
            // error there.)
            b'd' if !copy.binary() => {
                chunk.clear();
                chunk.extend_from_slice(&m.body);
                while chunk.len() < COPY_IN_CHUNK_BYTES
                    && stream.take_buffered_copy_data(&mut chunk)
                {}
                s.copy_data(&mut copy, &chunk)
            }
            b'd' => s.copy_data(&mut copy, &m.body),
            b'c' => return Ok(s.copy_done(copy)),
            b'f' => {
                return Ok(match Reader::new(&m.body).cstr() {
                    Ok(why) => s.copy_fail(copy, &why),
                    Err(e) => s.copy_abort(copy, message_error(e)),
                });
            }
            b'H' | b'S' => {}
            other => {
                return Ok(s.copy_abort(
                    copy,
                    SqlError::new(
                        "08P01",
                        format!("unexpected message type 0x{other:02x} during COPY from stdin"),
                    ),
                ));
            }
        }
    }
}

/// Output buffered before it is written during COPY TO (one write per this much).
const COPY_OUT_FLUSH_BYTES: usize = 64 << 10;

/// COPY TO STDOUT's sub-protocol: CopyOutResponse, one CopyData per row (the header
/// line and binary header/trailer as PostgreSQL frames them), CopyDone; the caller
/// sends `COPY n`.
fn copy_out(
    stream: &mut ClientStream,
    out: &mut Out,
    copy: &walrus_sql::CopyOut,
) -> io::Result<Result<QueryResult, SqlError>> {
    out.copy_response(b'H', copy.binary(), copy.column_count());
    for m in copy.messages() {
        match m {
            Ok(data) => out.copy_data(&data),
            Err(e) => return Ok(Err(e)),
        }
        if out.buf.len() >= COPY_OUT_FLUSH_BYTES {
            stream.write_all(&out.buf)?;
            out.buf.clear();
        }
    }
    out.simple(b'c');
    Ok(Ok(QueryResult {
        tag: copy.tag(),
        ..QueryResult::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text parameters of the catalog-only types read as PostgreSQL's input functions
    /// read them: `"char"` keeps the first character (charin), `name` at most 63 bytes
    /// (namein), `oid` is a number; binary ones are their 1 and 4 bytes.
    #[test]
    fn kept_type_parameters_read_as_postgresql() {
        let text = |s: &str, oid| decode_param(s.as_bytes(), false, oid).unwrap();
        assert_eq!(text("bb", 18), Datum::Text("b".into()));
        assert_eq!(text("", 18), Datum::Text(String::new()));
        assert_eq!(text(&"é".repeat(40), 19), Datum::Text("é".repeat(31)));
        assert_eq!(text("int4", 19), Datum::Text("int4".into()));
        assert_eq!(text("1007", 26), Datum::Int8(1007));
        assert_eq!(
            decode_param(b"r", true, 18).unwrap(),
            Datum::Text("r".into())
        );
        assert_eq!(
            decode_param(&1007u32.to_be_bytes(), true, 26).unwrap(),
            Datum::Int8(1007)
        );
    }

    #[test]
    fn startup_options_are_read_as_libpq_sends_them() {
        assert_eq!(
            startup_options("-c TimeZone=UTC  --search_path=a\\ b -cjit=off").unwrap(),
            vec![
                ("TimeZone".to_string(), "UTC".to_string()),
                ("search_path".to_string(), "a b".to_string()),
                ("jit".to_string(), "off".to_string()),
            ]
        );
        assert!(startup_options("").unwrap().is_empty());
        assert!(startup_options("-c").is_err());
        assert!(startup_options("-x foo").is_err());
        assert!(startup_options("-c noequals").is_err());
    }
}
