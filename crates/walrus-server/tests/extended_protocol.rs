//! The extended query protocol as PostgreSQL 15 speaks it, with raw messages against an
//! in-process server. Every expected answer here is what PostgreSQL 15 sent for the same
//! bytes (checked with a raw-socket script against a scratch cluster): the types declared
//! in Parse come back in ParameterDescription, undeclared ones are inferred,
//! RowDescription carries the declared column types, modifiers, table OID and column
//! number, errors are sent at once (a client waiting after Flush hears them) and abort
//! an explicit block, and a run-time error comes at Execute, not at Describe.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use walrus_engine::Engine;
use walrus_server::socket::Socket;
use walrus_server::{Server, ServerConfig};

struct Live {
    addr: SocketAddr,
    /// The server's Unix-domain socket (in the test's own directory).
    unix_socket: std::path::PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    engine: Engine,
    _dir: tempfile::TempDir,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // After a failed assertion the client's session may still be open: a shutdown
        // then could panic again and abort the run, hiding the assertion's message.
        if !std::thread::panicking() {
            let _ = self.engine.shutdown();
        }
    }
}

fn start() -> Live {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    Engine::init(&data, None).unwrap();
    let (engine, _) = Engine::open(&data).unwrap();
    let server = Server::bind(
        engine.clone(),
        &ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            max_connections: 10,
            authentication_timeout: Duration::from_secs(5),
            password: None,
            unix_socket_directories: vec![dir.path().to_path_buf()],
        },
    )
    .unwrap();
    let addr = server.local_addr().unwrap();
    let unix_socket = server.unix_socket_paths().remove(0);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || server.run(&flag));
    Live {
        addr,
        unix_socket,
        stop,
        thread: Some(thread),
        engine,
        _dir: dir,
    }
}

/// A backend message as the tests compare it.
#[derive(Debug, PartialEq)]
enum Msg {
    ParseComplete,
    BindComplete,
    NoData,
    Params(Vec<u32>),
    /// (name, from a table, attnum, type oid, type size, typmod, format)
    Rows(Vec<(String, bool, i16, u32, i16, i32, i16)>),
    Data(Vec<Option<String>>),
    Complete(String),
    Error(String),
    Ready(char),
    /// PortalSuspended: an Execute's row limit was reached.
    Suspended,
    /// ParameterStatus (name, value).
    Status(String, String),
    Other(char),
}

struct Client {
    s: Socket,
}

fn cstr(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(s.as_bytes());
    b.push(0);
}

fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn parse(name: &str, sql: &str, oids: &[u32]) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, name);
    cstr(&mut b, sql);
    b.extend_from_slice(&(oids.len() as i16).to_be_bytes());
    for o in oids {
        b.extend_from_slice(&o.to_be_bytes());
    }
    frame(b'P', &b)
}

/// Bind with text parameters (`None`: NULL) and text results.
fn bind(stmt: &str, params: &[Option<&str>]) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, "");
    cstr(&mut b, stmt);
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&(params.len() as i16).to_be_bytes());
    for p in params {
        match p {
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                b.extend_from_slice(v.as_bytes());
            }
        }
    }
    b.extend_from_slice(&0i16.to_be_bytes());
    frame(b'B', &b)
}

fn describe(kind: u8, name: &str) -> Vec<u8> {
    let mut b = vec![kind];
    cstr(&mut b, name);
    frame(b'D', &b)
}

fn execute() -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, "");
    b.extend_from_slice(&0i32.to_be_bytes());
    frame(b'E', &b)
}

/// Execute of the unnamed portal returning at most `max_rows` rows.
fn execute_limit(max_rows: i32) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, "");
    b.extend_from_slice(&max_rows.to_be_bytes());
    frame(b'E', &b)
}

fn sync() -> Vec<u8> {
    frame(b'S', &[])
}

fn flush() -> Vec<u8> {
    frame(b'H', &[])
}

fn query(sql: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, sql);
    frame(b'Q', &b)
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        Client::start(Socket::Tcp(TcpStream::connect(addr).unwrap()))
    }

    fn start(mut s: Socket) -> Client {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut body = 196_608i32.to_be_bytes().to_vec();
        for kv in ["user", "proto", "database", "proto", ""] {
            cstr(&mut body, kv);
        }
        let mut pkt = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        pkt.extend_from_slice(&body);
        s.write_all(&pkt).unwrap();
        let mut c = Client { s };
        c.until_ready();
        c
    }

    fn send(&mut self, msgs: &[Vec<u8>]) {
        self.s.write_all(&msgs.concat()).unwrap();
    }

    /// One message; `None` when nothing arrives within `wait`.
    fn next(&mut self, wait: Duration) -> Option<Msg> {
        self.s.set_read_timeout(Some(wait)).unwrap();
        let mut hdr = [0u8; 5];
        match self.s.read_exact(&mut hdr) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None
            }
            Err(e) => panic!("read: {e}"),
        }
        let len = i32::from_be_bytes([hdr[1], hdr[2], hdr[3], hdr[4]]) as usize - 4;
        let mut b = vec![0u8; len];
        self.s
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        self.s.read_exact(&mut b).unwrap();
        let i16_at = |b: &[u8], i: usize| i16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |b: &[u8], i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(match hdr[0] {
            b'1' => Msg::ParseComplete,
            b'2' => Msg::BindComplete,
            b'n' => Msg::NoData,
            b'D' => {
                let n = i16_at(&b, 0) as usize;
                let mut at = 2;
                let mut vals = Vec::new();
                for _ in 0..n {
                    let len = u32_at(&b, at) as i32;
                    at += 4;
                    if len < 0 {
                        vals.push(None);
                    } else {
                        let end = at + len as usize;
                        vals.push(Some(String::from_utf8_lossy(&b[at..end]).into_owned()));
                        at = end;
                    }
                }
                Msg::Data(vals)
            }
            b't' => {
                let n = i16_at(&b, 0) as usize;
                Msg::Params((0..n).map(|i| u32_at(&b, 2 + 4 * i)).collect())
            }
            b'T' => {
                let n = i16_at(&b, 0) as usize;
                let mut at = 2;
                let mut cols = Vec::new();
                for _ in 0..n {
                    let end = at + b[at..].iter().position(|&c| c == 0).unwrap();
                    let name = String::from_utf8(b[at..end].to_vec()).unwrap();
                    at = end + 1;
                    cols.push((
                        name,
                        u32_at(&b, at) != 0,
                        i16_at(&b, at + 4),
                        u32_at(&b, at + 6),
                        i16_at(&b, at + 10),
                        u32_at(&b, at + 12) as i32,
                        i16_at(&b, at + 16),
                    ));
                    at += 18;
                }
                Msg::Rows(cols)
            }
            b'C' => Msg::Complete(String::from_utf8_lossy(&b[..b.len() - 1]).into_owned()),
            b'E' => {
                let code = b
                    .split(|&c| c == 0)
                    .find(|f| f.first() == Some(&b'C'))
                    .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
                    .unwrap_or_default();
                Msg::Error(code)
            }
            b'Z' => Msg::Ready(b[0] as char),
            b's' => Msg::Suspended,
            b'S' => {
                let mut f = b
                    .split(|&c| c == 0)
                    .map(|f| String::from_utf8_lossy(f).into_owned());
                Msg::Status(f.next().unwrap_or_default(), f.next().unwrap_or_default())
            }
            other => Msg::Other(other as char),
        })
    }

    /// Every message up to and including ReadyForQuery.
    fn until_ready(&mut self) -> Vec<Msg> {
        let mut out = Vec::new();
        loop {
            let m = self
                .next(Duration::from_secs(10))
                .expect("no ReadyForQuery within 10 s");
            let done = matches!(m, Msg::Ready(_));
            if !matches!(m, Msg::Other(_)) {
                out.push(m);
            }
            if done {
                return out;
            }
        }
    }

    fn simple(&mut self, sql: &str) -> Vec<Msg> {
        self.send(&[query(sql)]);
        self.until_ready()
    }
}

const TABLE: &str = "create table t (id int primary key, name varchar(20), \
    amount numeric(10,2), at timestamptz, ok boolean, note varchar(20))";

fn col(
    name: &str,
    attnum: i16,
    oid: u32,
    size: i16,
    typmod: i32,
) -> (String, bool, i16, u32, i16, i32, i16) {
    (name.to_string(), attnum > 0, attnum, oid, size, typmod, 0)
}

/// pgjdbc declares `setString` parameters as varchar (1043) and leaves `setTimestamp`
/// ones unspecified; it closes the connection when ParameterDescription disagrees.
#[test]
fn parameter_description_echoes_declared_types_and_infers_the_rest() {
    let live = start();
    let mut c = Client::connect(live.addr);
    c.simple(TABLE);
    let insert = "insert into t values ($1, $2, $3, $4, $5, $6)";
    for declared in [&[23, 1043, 1700, 0, 16, 1043][..], &[]] {
        c.send(&[parse("", insert, declared), describe(b'S', ""), sync()]);
        assert_eq!(
            c.until_ready(),
            vec![
                Msg::ParseComplete,
                Msg::Params(vec![23, 1043, 1700, 1184, 16, 1043]),
                Msg::NoData,
                Msg::Ready('I')
            ],
            "declared {declared:?}"
        );
    }
    for (sql, declared, want) in [
        (
            "select * from t where name = $1 and id = $2::int4 and amount > $3",
            &[][..],
            vec![25, 23, 1700],
        ),
        ("select $1", &[], vec![25]),
        ("select $1, $2::int8, $3::varchar", &[], vec![25, 20, 1043]),
        ("select $1::numeric(10,2)", &[], vec![1700]),
        ("select $1::text::int4", &[], vec![25]),
        // pgx's and asyncpg's type lookups.
        ("select $1::text::regtype::oid", &[], vec![25]),
        ("select id from t limit $1 offset $2", &[], vec![20, 20]),
        (
            "update t set name = $1, amount = $2 where id = $3",
            &[],
            vec![1043, 1700, 23],
        ),
        ("select $1", &[705], vec![25]),
        ("select 1", &[23, 23], vec![23, 23]),
        ("select $1", &[1043], vec![1043]),
        ("select $1, $2", &[17, 2950], vec![17, 2950]),
    ] {
        c.send(&[parse("", sql, declared), describe(b'S', ""), sync()]);
        let got = c.until_ready();
        assert_eq!(got.get(1), Some(&Msg::Params(want)), "{sql}: {got:?}");
    }
    // An array cast types its parameter and column int4[] (1007), named by the element
    // type, as PostgreSQL does.
    c.send(&[
        parse("", "select $1::int4[]", &[]),
        describe(b'S', ""),
        sync(),
    ]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::Params(vec![1007]),
            Msg::Rows(vec![("int4".into(), false, 0, 1007, -1, -1, 0)]),
            Msg::Ready('I')
        ]
    );
    // A declared type walrus does not have is refused, not read as text.
    // (142 is xml.)
    c.send(&[parse("", "select $1", &[142]), describe(b'S', ""), sync()]);
    assert_eq!(
        c.until_ready(),
        vec![Msg::Error("0A000".into()), Msg::Ready('I')]
    );
}

#[test]
fn row_description_carries_declared_type_modifier_table_and_column() {
    let live = start();
    let mut c = Client::connect(live.addr);
    c.simple(TABLE);
    let want = vec![
        col("id", 1, 23, 4, -1),
        col("name", 2, 1043, -1, 24),
        col("amount", 3, 1700, -1, 655_366),
        col("at", 4, 1184, 8, -1),
        col("ok", 5, 16, 1, -1),
        col("next", 0, 23, 4, -1),
        col("note", 6, 1043, -1, 24),
    ];
    let sql = "select id, name, amount, at, ok, id + 1 as next, note from t";
    c.send(&[parse("s", sql, &[]), describe(b'S', "s"), sync()]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::Params(vec![]),
            Msg::Rows(want.clone()),
            Msg::Ready('I')
        ]
    );
    // Casts to varchar(n) and numeric(p,s) are described with their modifiers.
    c.send(&[
        parse(
            "",
            "select 'x'::varchar(20) as v, 1.5::numeric(10,2) as n",
            &[],
        ),
        describe(b'S', ""),
        sync(),
    ]);
    assert_eq!(
        c.until_ready()[2],
        Msg::Rows(vec![
            col("v", 0, 1043, -1, 24),
            col("n", 0, 1700, -1, 655_366)
        ])
    );
    // A portal describes the same, and so does RETURNING.
    c.send(&[bind("s", &[]), describe(b'P', ""), execute(), sync()]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::BindComplete,
            Msg::Rows(want.clone()),
            Msg::Complete("SELECT 0".into()),
            Msg::Ready('I')
        ]
    );
    let ret = "insert into t (id, name) values ($1, $2) returning id, name, amount";
    c.send(&[parse("", ret, &[]), describe(b'S', ""), sync()]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::Params(vec![23, 1043]),
            Msg::Rows(vec![want[0].clone(), want[1].clone(), want[2].clone()]),
            Msg::Ready('I')
        ]
    );
}

/// asyncpg prepares with Parse/Describe/Flush and waits: the error must come without a
/// Sync. In a block it aborts the block like any error.
#[test]
fn errors_before_execute_are_sent_at_once_and_abort_the_block() {
    let live = start();
    let mut c = Client::connect(live.addr);
    c.simple(TABLE);
    let wait = Duration::from_secs(5);
    c.send(&[parse("", "selec 1", &[]), flush()]);
    assert_eq!(c.next(wait), Some(Msg::Error("42601".into())));
    c.send(&[sync()]);
    assert_eq!(c.until_ready(), vec![Msg::Ready('I')]);

    c.send(&[
        parse("", "select nosuch from t", &[]),
        describe(b'S', ""),
        flush(),
    ]);
    let mut got = Vec::new();
    while let Some(m) = c.next(Duration::from_millis(500)) {
        got.push(m);
    }
    assert_eq!(got.last(), Some(&Msg::Error("42703".into())), "{got:?}");
    c.send(&[sync()]);
    assert_eq!(c.until_ready(), vec![Msg::Ready('I')]);

    // In a block: ReadyForQuery 'E', then 25P02 until ROLLBACK (also at Parse).
    c.simple("begin");
    c.send(&[parse("", "selec 1", &[]), sync()]);
    assert_eq!(
        c.until_ready(),
        vec![Msg::Error("42601".into()), Msg::Ready('E')]
    );
    assert_eq!(
        c.simple("select 1"),
        vec![Msg::Error("25P02".into()), Msg::Ready('E')]
    );
    c.send(&[parse("", "select 1", &[]), sync()]);
    assert_eq!(
        c.until_ready(),
        vec![Msg::Error("25P02".into()), Msg::Ready('E')]
    );
    c.send(&[parse("", "rollback", &[]), bind("", &[]), execute(), sync()]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::BindComplete,
            Msg::Complete("ROLLBACK".into()),
            Msg::Ready('I')
        ]
    );

    // Named statements: a second Parse of a name in use fails (42P05); several
    // statements in one Parse fail (42601).
    c.send(&[parse("dup", "select 1", &[]), sync()]);
    assert_eq!(c.until_ready(), vec![Msg::ParseComplete, Msg::Ready('I')]);
    c.send(&[parse("dup", "select 2", &[]), sync()]);
    assert_eq!(
        c.until_ready(),
        vec![Msg::Error("42P05".into()), Msg::Ready('I')]
    );
    c.send(&[parse("", "select 1; select 2", &[]), sync()]);
    assert_eq!(
        c.until_ready(),
        vec![Msg::Error("42601".into()), Msg::Ready('I')]
    );
    // A Bind error in a block aborts it too.
    c.simple("begin");
    c.send(&[bind("nosuch", &[]), sync()]);
    assert_eq!(
        c.until_ready(),
        vec![Msg::Error("26000".into()), Msg::Ready('E')]
    );
    assert_eq!(
        c.simple("rollback"),
        vec![Msg::Complete("ROLLBACK".into()), Msg::Ready('I')]
    );
}

/// Division by zero is an error of execution: Describe still describes the statement.
#[test]
fn run_time_errors_come_at_execute_not_describe() {
    let live = start();
    let mut c = Client::connect(live.addr);
    c.simple(TABLE);
    c.simple("insert into t (id) values (0)");
    c.send(&[
        parse("", "select 1/0 as x", &[]),
        describe(b'S', ""),
        sync(),
    ]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::Params(vec![]),
            Msg::Rows(vec![col("x", 0, 23, 4, -1)]),
            Msg::Ready('I')
        ]
    );
    c.send(&[
        parse("", "select 1/id as x from t", &[]),
        bind("", &[]),
        describe(b'P', ""),
        execute(),
        sync(),
    ]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::BindComplete,
            Msg::Rows(vec![col("x", 0, 23, 4, -1)]),
            Msg::Error("22012".into()),
            Msg::Ready('I')
        ]
    );
    // A duplicate key of an INSERT ... RETURNING: described, then failed at Execute.
    c.send(&[
        parse("", "insert into t (id) values (0) returning id", &[]),
        bind("", &[]),
        describe(b'P', ""),
        execute(),
        sync(),
    ]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::BindComplete,
            Msg::Rows(vec![col("id", 1, 23, 4, -1)]),
            Msg::Error("23505".into()),
            Msg::Ready('I')
        ]
    );
    // Text parameters with an offset are converted to UTC.
    c.send(&[
        parse("", "insert into t (id, at) values ($1, $2)", &[23, 0]),
        bind("", &[Some("7"), Some("2024-01-01 10:11:12.123457+05:30")]),
        execute(),
        sync(),
    ]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::BindComplete,
            Msg::Complete("INSERT 0 1".into()),
            Msg::Ready('I')
        ]
    );
    let got = c.simple("select at from t where id = 7");
    assert_eq!(
        got[1],
        Msg::Data(vec![Some("2024-01-01 04:41:12.123457+00".into())])
    );
}

/// The session TimeZone: a SET, RESET or rollback that changes it is reported with a
/// ParameterStatus before ReadyForQuery (PostgreSQL 15 reports at ReadyForQuery the
/// values changed since last reported), and timestamptz text follows it.
#[test]
fn time_zone_changes_are_reported_and_applied() {
    let live = start();
    let mut c = Client::connect(live.addr);
    let status = |v: &str| Msg::Status("TimeZone".into(), v.into());
    assert_eq!(
        c.simple("set timezone = 'europe/berlin'"),
        vec![
            Msg::Complete("SET".into()),
            status("Europe/Berlin"),
            Msg::Ready('I')
        ]
    );
    // Unchanged: nothing reported.
    assert_eq!(
        c.simple("set timezone = 'Europe/Berlin'"),
        vec![Msg::Complete("SET".into()), Msg::Ready('I')]
    );
    // Extended protocol: text results in the zone, binary stays UTC microseconds.
    c.send(&[
        parse("", "select $1::timestamptz", &[0]),
        bind("", &[Some("2024-07-01 10:00")]),
        execute(),
        sync(),
    ]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::BindComplete,
            Msg::Data(vec![Some("2024-07-01 10:00:00+02".into())]),
            Msg::Complete("SELECT 1".into()),
            Msg::Ready('I')
        ]
    );
    // A rollback restores the zone, and that is reported too.
    c.simple("begin");
    assert_eq!(
        c.simple("set time zone 5.5"),
        vec![
            Msg::Complete("SET".into()),
            status("<+05:30>-05:30"),
            Msg::Ready('T')
        ]
    );
    assert_eq!(
        c.simple("rollback"),
        vec![
            Msg::Complete("ROLLBACK".into()),
            status("Europe/Berlin"),
            Msg::Ready('I')
        ]
    );
    assert_eq!(
        c.simple("set timezone = 'Nowhere/Land'"),
        vec![Msg::Error("22023".into()), Msg::Ready('I')]
    );
    assert_eq!(
        c.simple("reset timezone"),
        vec![
            Msg::Complete("RESET".into()),
            status("Etc/UTC"),
            Msg::Ready('I')
        ]
    );
}

/// A table that does not exist is 42P01 in reply to Parse itself (before any Describe,
/// Sync or Flush asks), as PostgreSQL's parse analysis reports it; catalog views and
/// tables created earlier in the same block parse.
#[test]
fn missing_tables_are_reported_at_parse() {
    let live = start();
    let mut c = Client::connect(live.addr);
    c.simple(TABLE);
    let wait = Duration::from_secs(5);
    for sql in [
        "select * from nosuch",
        "select id from t join nosuch on true",
        "select id from t where id in (select a from nosuch)",
        "insert into nosuch values ($1)",
        "update nosuch set a = 1",
        "delete from nosuch",
        "select * from myschema.t",
    ] {
        c.send(&[parse("", sql, &[])]);
        assert_eq!(c.next(wait), Some(Msg::Error("42P01".into())), "{sql}");
        c.send(&[sync()]);
        assert_eq!(c.until_ready(), vec![Msg::Ready('I')], "{sql}");
    }
    for sql in [
        "select id from t",
        "select count(*) from pg_catalog.pg_class",
        "select typname from pg_type",
        "select * from generate_series(1, 2)",
    ] {
        c.send(&[parse("", sql, &[]), flush()]);
        assert_eq!(c.next(wait), Some(Msg::ParseComplete), "{sql}");
        c.send(&[sync()]);
        assert_eq!(c.until_ready(), vec![Msg::Ready('I')], "{sql}");
    }
    c.simple("begin");
    c.simple("create table fresh (a int)");
    c.send(&[parse("", "insert into fresh values (1)", &[]), sync()]);
    assert_eq!(c.until_ready(), vec![Msg::ParseComplete, Msg::Ready('T')]);
    // The error aborts the block, as any error does.
    c.send(&[parse("", "select * from nosuch", &[]), sync()]);
    assert_eq!(
        c.until_ready(),
        vec![Msg::Error("42P01".into()), Msg::Ready('E')]
    );
    c.simple("rollback");
}

/// A column a SELECT over plain tables names that its tables do not have is 42703 in
/// reply to Parse (before Describe, Sync or Flush), as PostgreSQL's parse analysis
/// reports it; output aliases, outer references and valid columns still parse.
#[test]
fn missing_columns_are_reported_at_parse() {
    let live = start();
    let mut c = Client::connect(live.addr);
    c.simple(TABLE);
    let wait = Duration::from_secs(5);
    for (sql, code) in [
        ("select nosuch from t", "42703"),
        ("select id, t.nosuch from t", "42703"),
        ("select id from t where nosuch = $1", "42703"),
        ("select x.id from t as x where x.nosuch is null", "42703"),
        ("select t.id + nosuch as s from t, t as u", "42703"),
        ("select u.id from t", "42P01"),
    ] {
        c.send(&[parse("", sql, &[])]);
        assert_eq!(c.next(wait), Some(Msg::Error(code.into())), "{sql}");
        c.send(&[sync()]);
        assert_eq!(c.until_ready(), vec![Msg::Ready('I')], "{sql}");
    }
    for sql in [
        "select id, name as n from t where amount > $1",
        "select x.id from t as x",
        "select id from t where id in (select id from t as u where u.id = t.id)",
        "select count(*) from t",
        "select current_schema, current_catalog from t",
    ] {
        c.send(&[parse("", sql, &[]), flush()]);
        assert_eq!(c.next(wait), Some(Msg::ParseComplete), "{sql}");
        c.send(&[sync()]);
        assert_eq!(c.until_ready(), vec![Msg::Ready('I')], "{sql}");
    }
}

/// reg* and timetz results are described with PostgreSQL's type OIDs (2205 regclass,
/// 2206 regtype, 4089 regnamespace, 1266 timetz) and print as PostgreSQL does.
#[test]
fn reg_and_timetz_columns_are_described_with_their_types() {
    let live = start();
    let mut c = Client::connect(live.addr);
    c.simple(TABLE);
    let sql = "select 't'::regclass as c, 'int4'::regtype as ty, 'public'::regnamespace as n, \
               '10:11:12+05:30'::timetz as tz, to_regtype('text') as tr";
    c.send(&[
        parse("", sql, &[]),
        describe(b'S', ""),
        bind("", &[]),
        execute(),
        sync(),
    ]);
    let msgs = c.until_ready();
    assert_eq!(
        msgs[2],
        Msg::Rows(vec![
            col("c", 0, 2205, 4, -1),
            col("ty", 0, 2206, 4, -1),
            col("n", 0, 4089, 4, -1),
            col("tz", 0, 1266, 12, -1),
            col("tr", 0, 2206, 4, -1),
        ])
    );
    assert_eq!(
        msgs[4],
        Msg::Data(vec![
            Some("t".into()),
            Some("integer".into()),
            Some("public".into()),
            Some("10:11:12+05:30".into()),
            Some("text".into()),
        ])
    );
}

/// Execute's row limit: the portal is suspended after that many rows and the next
/// Execute goes on where it stopped; the last one's CommandComplete counts only its own
/// rows, and a limit reached exactly still suspends (the next Execute completes with
/// `SELECT 0`). PostgreSQL 15 sent exactly these messages for the same bytes.
#[test]
fn execute_row_limit_suspends_the_portal() {
    let live = start();
    let mut c = Client::connect(live.addr);
    let data = |v: &str| Msg::Data(vec![Some(v.to_string())]);
    c.send(&[
        parse("", "select g from generate_series(1, 5) g", &[]),
        bind("", &[]),
        execute_limit(2),
        execute_limit(2),
        describe(b'P', ""),
        execute_limit(2),
        sync(),
    ]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::BindComplete,
            data("1"),
            data("2"),
            Msg::Suspended,
            data("3"),
            data("4"),
            Msg::Suspended,
            Msg::Rows(vec![col("g", 0, 23, 4, -1)]),
            data("5"),
            Msg::Complete("SELECT 1".into()),
            Msg::Ready('I')
        ]
    );
    c.send(&[
        parse("", "select g from generate_series(1, 4) g", &[]),
        bind("", &[]),
        execute_limit(2),
        execute_limit(2),
        execute_limit(2),
        sync(),
    ]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::BindComplete,
            data("1"),
            data("2"),
            Msg::Suspended,
            data("3"),
            data("4"),
            Msg::Suspended,
            Msg::Complete("SELECT 0".into()),
            Msg::Ready('I')
        ]
    );
    // No limit (0) and a limit larger than the result: every row, the full tag.
    c.send(&[
        parse("", "select g from generate_series(1, 3) g", &[]),
        bind("", &[]),
        execute_limit(10),
        sync(),
    ]);
    assert_eq!(
        c.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::BindComplete,
            data("1"),
            data("2"),
            data("3"),
            Msg::Complete("SELECT 3".into()),
            Msg::Ready('I')
        ]
    );
}

// ---- drv4: missing columns of every statement shape found at Parse -------------------

/// A column a join, an INSERT target list, an UPDATE or a DELETE names and its tables
/// lack is 42703 in reply to Parse followed only by Flush (asyncpg prepares that way),
/// as PostgreSQL's parse analysis reports it; the same shapes with existing columns
/// parse.
#[test]
fn missing_columns_of_joins_and_dml_are_reported_at_parse_before_sync() {
    let live = start();
    let mut c = Client::connect(live.addr);
    c.simple(TABLE);
    c.simple("create table u (uid int primary key, tid int, label text)");
    let wait = Duration::from_secs(5);
    for (sql, code) in [
        (
            "select t.id, u.nosuch from t join u on u.tid = t.id",
            "42703",
        ),
        ("select t.id from t join u on u.nosuch = t.id", "42703"),
        (
            "select t.id from t left join u on u.tid = t.id where nosuch > 1",
            "42703",
        ),
        (
            "select t.id from t join u on u.tid = t.id where x.id = 1",
            "42P01",
        ),
        ("insert into t (id, nosuch) values ($1, $2)", "42703"),
        ("insert into t (id) select nosuch from u", "42703"),
        ("update t set nosuch = 1", "42703"),
        ("update t set name = $1 where nosuch = 2", "42703"),
        ("update t set name = nosuch", "42703"),
        ("update t as x set name = 'a' where t.id = 1", "42P01"),
        ("delete from t where nosuch = 1", "42703"),
        ("delete from t where id = $1 returning nosuch", "42703"),
    ] {
        c.send(&[parse("", sql, &[]), flush()]);
        assert_eq!(c.next(wait), Some(Msg::Error(code.into())), "{sql}");
        c.send(&[sync()]);
        assert_eq!(c.until_ready(), vec![Msg::Ready('I')], "{sql}");
    }
    for sql in [
        "select t.id, u.label from t join u on u.tid = t.id where t.amount > $1",
        "select id, label from t left join u on tid = id",
        "select t.id from t cross join u where uid = 1",
        "insert into t (id, name) values ($1, $2)",
        "insert into t (id) select uid from u",
        "update t set name = $1, amount = amount + 1 where id = $2 returning id",
        "update t as x set name = 'a' where x.id = 1",
        "delete from t where id = $1 returning name",
    ] {
        c.send(&[parse("", sql, &[]), flush()]);
        assert_eq!(c.next(wait), Some(Msg::ParseComplete), "{sql}");
        c.send(&[sync()]);
        assert_eq!(c.until_ready(), vec![Msg::Ready('I')], "{sql}");
    }
}

/// The Unix-domain socket `.s.PGSQL.<port>` serves the same protocol as TCP: a session
/// over it sees what a TCP session committed and the reverse, an extended-protocol
/// round trip works, and the socket file is gone once the server has stopped.
#[test]
fn unix_domain_socket_serves_sessions_like_tcp() {
    let live = start();
    let name = live.unix_socket.file_name().unwrap().to_str().unwrap();
    assert_eq!(name, format!(".s.PGSQL.{}", live.addr.port()));
    let unix = || {
        Client::start(Socket::Unix(
            std::os::unix::net::UnixStream::connect(&live.unix_socket).unwrap(),
        ))
    };
    let mut local = unix();
    let mut tcp = Client::connect(live.addr);
    local.simple("create table u (id int primary key, v text)");
    local.simple("insert into u values (1, 'over the socket file')");
    assert_eq!(
        tcp.simple("select v from u where id = 1"),
        vec![
            Msg::Rows(vec![col("v", 2, 25, -1, -1)]),
            Msg::Data(vec![Some("over the socket file".into())]),
            Msg::Complete("SELECT 1".into()),
            Msg::Ready('I')
        ]
    );
    tcp.simple("insert into u values (2, 'over tcp')");
    local.send(&[
        parse("", "select v from u where id = $1", &[0]),
        bind("", &[Some("2")]),
        execute(),
        sync(),
    ]);
    assert_eq!(
        local.until_ready(),
        vec![
            Msg::ParseComplete,
            Msg::BindComplete,
            Msg::Data(vec![Some("over tcp".into())]),
            Msg::Complete("SELECT 1".into()),
            Msg::Ready('I')
        ]
    );
    // SHOW gives the values in effect (the port actually bound), SET refuses them.
    let shown = |c: &mut Client, name: &str| {
        c.simple(&format!("show {name}"))
            .into_iter()
            .find_map(|m| match m {
                Msg::Data(v) => v[0].clone(),
                _ => None,
            })
    };
    assert_eq!(
        shown(&mut local, "port"),
        Some(live.addr.port().to_string())
    );
    assert_eq!(
        shown(&mut tcp, "unix_socket_directories"),
        Some(live.unix_socket.parent().unwrap().display().to_string())
    );
    assert_eq!(
        shown(&mut tcp, "listen_addresses"),
        Some("127.0.0.1".into())
    );
    assert_eq!(
        local.simple("set port = 1"),
        vec![Msg::Error("55P02".into()), Msg::Ready('I')]
    );
    // Another server may not take over a socket this one answers on.
    let other =
        walrus_server::socket::bind_unix(live.unix_socket.parent().unwrap(), live.addr.port());
    assert!(
        matches!(other, Err(walrus_server::socket::UnixSocketError::InUse(_))),
        "{other:?}"
    );
    drop(local);
    drop(tcp);
    let mut live = live;
    assert!(live.unix_socket.exists());
    live.stop.store(true, Ordering::Release);
    live.thread.take().unwrap().join().unwrap();
    assert!(
        !live.unix_socket.exists(),
        "{} left behind",
        live.unix_socket.display()
    );
}
