//! The real `walrus serve` driven by the real PostgreSQL 15 clients: psql and pgbench
//! (`-i`, then tpcb-like in `-M simple`, `-M extended` and `-M prepared`, `-S`, `-N`, a
//! custom `-f` script), checking the TPC-B invariant, plus a kill -9 during a pgbench run
//! followed by a restart. Skips (with a message, failing in CI) when the clients are not
//! installed; `.ci/run` installs them.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{text, walrus};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn clients_available() -> bool {
    if have("psql") && have("pgbench") {
        return true;
    }
    assert!(
        std::env::var("CI").is_err(),
        "psql/pgbench missing in CI: .ci/run must install postgresql-client-15"
    );
    eprintln!("skipping: psql/pgbench not installed");
    false
}

struct ServerProc {
    child: Child,
    port: u16,
    data: PathBuf,
}

impl ServerProc {
    fn start(data: &Path, port: u16) -> ServerProc {
        Self::start_with(data, port, &[])
    }

    fn start_with(data: &Path, port: u16, extra: &[&str]) -> ServerProc {
        let mut cmd = walrus();
        cmd.args(["serve", "--data"])
            .arg(data)
            .args(["--port", &port.to_string()])
            .args(extra);
        Self::spawn(cmd, data, port)
    }

    /// A server on `dir/data` with `settings` in an extra configuration file.
    fn start_configured(dir: &Path, settings: &str) -> ServerProc {
        let conf = dir.join("extra.toml");
        std::fs::write(&conf, settings).unwrap();
        Self::start_with(
            &dir.join("data"),
            free_port(),
            &["--config", conf.to_str().unwrap()],
        )
    }

    /// Starts `cmd` (a `walrus serve` command line) and waits until it listens on `port`;
    /// `data` is its data directory as this process sees it.
    fn spawn(mut cmd: Command, data: &Path, port: u16) -> ServerProc {
        let child = cmd
            .env("WALRUS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start walrus serve");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "walrus serve did not start listening"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        ServerProc {
            child,
            port,
            data: data.to_path_buf(),
        }
    }

    fn psql(&self, sql: &str) -> Output {
        self.psql_with(&[], sql)
    }

    fn psql_with(&self, extra: &[&str], sql: &str) -> Output {
        Command::new("psql")
            .args(extra)
            .args([
                "-X",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "bench",
                "-d",
                "bench",
                "-c",
                sql,
            ])
            .output()
            .expect("run psql")
    }

    fn scalar(&self, sql: &str) -> String {
        let o = self.psql(sql);
        assert!(o.status.success(), "{sql}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// psql reading a script from its standard input (`-f -`), with `options` before
    /// the connection arguments; the script is written and the input left open (the
    /// session waits for more) until the caller drops it.
    fn psql_script(&self, options: &[&str], script: &str) -> (Child, ChildStdin) {
        let mut child = Command::new("psql")
            .arg("-X")
            .args(options)
            .args(["-h", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .args(["-U", "bench", "-d", "bench", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run psql");
        use std::io::Write;
        let mut input = child.stdin.take().unwrap();
        input.write_all(script.as_bytes()).unwrap();
        (child, input)
    }

    fn pgbench(&self, args: &[&str]) -> Output {
        Command::new("pgbench")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "bench",
            ])
            .args(args)
            .arg("bench")
            .output()
            .expect("run pgbench")
    }

    fn invariant(&self) -> i64 {
        let a = self.scalar("select sum(abalance) from pgbench_accounts");
        let t = self.scalar("select sum(tbalance) from pgbench_tellers");
        let b = self.scalar("select sum(bbalance) from pgbench_branches");
        let mut h = self.scalar("select sum(delta) from pgbench_history");
        if h.is_empty() {
            h = "0".into(); // sum over no rows is NULL
        }
        assert!(
            a == t && t == b && b == h,
            "TPC-B invariant broken: accounts {a}, tellers {t}, branches {b}, history {h}"
        );
        a.parse().unwrap_or(0)
    }

    fn stop(mut self) {
        let st = walrus()
            .arg("stop")
            .arg(&self.data)
            .output()
            .expect("walrus stop");
        assert!(st.status.success(), "{}", text(&st));
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "server exit status {status}");
    }
}

#[test]
fn psql_and_pgbench_in_all_query_modes() {
    if !clients_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let srv = ServerProc::start(&tmp.path().join("data"), free_port());
    assert_eq!(srv.scalar("select 1"), "1");
    assert_eq!(srv.scalar("show server_version"), "15.18");
    // `walrus serve` created the directory and calibrated its replay rate.
    assert_eq!(
        srv.scalar("select replay_rate_source from walrus_flush_detail() where thread = 'total'"),
        "calibrated"
    );
    assert!(!tmp.path().join("data/replay_calibration.tmp").exists());
    let bad = srv.psql("select * from nosuch");
    assert!(
        !bad.status.success() && text(&bad).contains("does not exist"),
        "{}",
        text(&bad)
    );

    let init = srv.pgbench(&["-i", "-s", "1"]);
    assert!(init.status.success(), "pgbench -i: {}", text(&init));
    assert_eq!(
        srv.scalar("select count(*) from pgbench_accounts"),
        "100000"
    );
    assert_eq!(srv.invariant(), 0);
    // psql's describe commands run their catalog queries against walrus's pg_catalog.
    let dt = srv.psql("\\dt");
    assert!(dt.status.success(), "\\dt: {}", text(&dt));
    for t in ["accounts", "branches", "history", "tellers"] {
        assert!(
            text(&dt).contains(&format!("public|pgbench_{t}|table|bench")),
            "{}",
            text(&dt)
        );
    }
    let d = Command::new("psql")
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p"])
        .arg(srv.port.to_string())
        .args(["-U", "bench", "-d", "bench", "-c", "\\d", "-c"])
        .arg("\\d pgbench_accounts")
        .output()
        .expect("run psql");
    let out = text(&d);
    assert!(d.status.success(), "\\d: {out}");
    assert!(out.contains("Table \"public.pgbench_accounts\""), "{out}");
    assert!(
        out.contains("\"pgbench_accounts_pkey\" PRIMARY KEY, btree (aid)"),
        "{out}"
    );
    // As PostgreSQL 15 prints it: the type modifier widens the Type column.
    assert!(
        out.contains(" aid      | integer       |           | not null |"),
        "{out}"
    );
    assert!(out.contains(" filler   | character(84) |"), "{out}");
    for mode in ["simple", "extended", "prepared"] {
        // -n: keep history across runs so the invariant covers every run.
        let run = srv.pgbench(&["-n", "-M", mode, "-c", "4", "-j", "2", "-t", "100"]);
        let out = text(&run);
        assert!(run.status.success(), "pgbench -M {mode}: {out}");
        assert!(
            out.contains("number of transactions actually processed: 400/400"),
            "{mode}: {out}"
        );
        assert!(
            out.contains("number of failed transactions: 0"),
            "{mode}: {out}"
        );
        srv.invariant();
    }
    assert_eq!(srv.scalar("select count(*) from pgbench_history"), "1200");
    let s = srv.pgbench(&["-n", "-S", "-M", "prepared", "-c", "2", "-t", "200"]);
    assert!(
        s.status.success() && text(&s).contains("400/400"),
        "{}",
        text(&s)
    );
    // max_connections (100) concurrent sessions, each a thread in walrus.
    let many = srv.pgbench(&[
        "-n", "-S", "-M", "prepared", "-c", "100", "-j", "2", "-t", "5",
    ]);
    assert!(
        many.status.success() && text(&many).contains("500/500"),
        "{}",
        text(&many)
    );
    let script = tmp.path().join("custom.sql");
    std::fs::write(
        &script,
        "\\set aid random(1, 100000)\nselect abalance from pgbench_accounts where aid = :aid;\n",
    )
    .unwrap();
    let f = srv.pgbench(&["-n", "-f", script.to_str().unwrap(), "-t", "50"]);
    assert!(
        f.status.success() && text(&f).contains("50/50"),
        "{}",
        text(&f)
    );

    // Cancel: psql sends a CancelRequest on SIGINT; the sleeping statement stops at once.
    let started = Instant::now();
    let sleeper = Command::new("psql")
        .args([
            "-X",
            "-h",
            "127.0.0.1",
            "-p",
            &srv.port.to_string(),
            "-U",
            "bench",
            "-d",
            "bench",
            "-c",
            "select pg_sleep(30)",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let _ = Command::new("kill")
        .args(["-INT", &sleeper.id().to_string()])
        .status();
    let out = sleeper.wait_with_output().unwrap();
    assert!(
        text(&out).contains("canceling statement due to user request"),
        "{}",
        text(&out)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cancel took {:?}",
        started.elapsed()
    );
    assert_eq!(srv.scalar("select 1"), "1", "the server still serves");

    // Malformed protocol bytes close only that connection; the server keeps serving.
    for garbage in [
        &b"\x00\x00\x00\x08\x12\x34\x56\x78"[..],
        b"GET / HTTP/1.1\r\n\r\n",
        &[0xFFu8; 64][..],
    ] {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = c.write_all(garbage);
        let mut buf = [0u8; 256];
        let _ = c.read(&mut buf); // an error message or EOF, never a hang
    }
    // A valid startup followed by an unknown message type.
    {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let body = b"\x00\x03\x00\x00user\x00bench\x00\x00";
        let mut startup = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        startup.extend_from_slice(body);
        c.write_all(&startup).unwrap();
        c.write_all(b"\x01\x00\x00\x00\x04").unwrap();
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        while let Ok(n) = c.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert!(
            String::from_utf8_lossy(&got).contains("08P01"),
            "protocol violation reported with 08P01"
        );
    }
    assert_eq!(
        srv.scalar("select 1"),
        "1",
        "the server survives malformed clients"
    );

    // Server-side data generation (INSERT ... SELECT ... FROM generate_series).
    let gen = srv.pgbench(&["-i", "-I", "dtGvp", "-s", "1"]);
    assert!(gen.status.success(), "pgbench -i -I dtGvp: {}", text(&gen));
    assert!(
        text(&gen).contains("server-side generate"),
        "{}",
        text(&gen)
    );
    assert_eq!(
        srv.scalar("select count(*) from pgbench_accounts"),
        "100000"
    );
    let run = srv.pgbench(&["-n", "-M", "prepared", "-c", "2", "-t", "50"]);
    assert!(run.status.success(), "{}", text(&run));
    srv.invariant();
    srv.stop();
}

#[test]
fn crash_pgbench_kill9_restart_keeps_invariant() {
    if !clients_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let port = free_port();
    let mut srv = ServerProc::start(&data, port);
    assert!(srv.pgbench(&["-i", "-s", "1"]).status.success());
    let mut bench = Command::new("pgbench")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-n",
            "-M",
            "prepared",
            "-c",
            "4",
            "-T",
            "30",
            "bench",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    srv.child.kill().expect("kill -9 the server");
    srv.child.wait().unwrap();
    let _ = bench.wait();
    let srv = ServerProc::start(&data, port);
    let total = srv.invariant();
    assert!(
        srv.scalar("select count(*) from pgbench_history")
            .parse::<i64>()
            .unwrap()
            > 0,
        "some transactions committed before the kill (total {total})"
    );
    // And it serves again.
    let run = srv.pgbench(&["-n", "-c", "2", "-t", "50"]);
    assert!(run.status.success(), "{}", text(&run));
    srv.invariant();
    srv.stop();
}

/// psql and pgbench through the Unix-domain socket (`-h DIR`, as they connect to a local
/// PostgreSQL): the socket file is `.s.PGSQL.<port>`, a kill -9 leaves it behind and the
/// restarted server replaces it (nothing lost, the TPC-B invariant holds), and a clean
/// stop removes it.
#[test]
fn psql_and_pgbench_over_the_unix_socket_across_a_kill9() {
    if !clients_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("sock");
    std::fs::create_dir(&sock).unwrap();
    let conf = tmp.path().join("extra.toml");
    std::fs::write(
        &conf,
        format!("unix_socket_directories = \"{}\"\n", sock.display()),
    )
    .unwrap();
    let data = tmp.path().join("data");
    let port = free_port();
    let start = || ServerProc::start_with(&data, port, &["--config", conf.to_str().unwrap()]);
    let socket_file = sock.join(format!(".s.PGSQL.{port}"));
    let over_socket = |tool: &str, args: &[&str]| {
        let o = Command::new(tool)
            .args(["-h", sock.to_str().unwrap(), "-p", &port.to_string()])
            .args(["-U", "bench"])
            .args(args)
            .arg("bench")
            .output()
            .unwrap_or_else(|e| panic!("run {tool}: {e}"));
        assert!(o.status.success(), "{tool} {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let history_over_socket = || {
        over_socket(
            "psql",
            &[
                "-X",
                "-A",
                "-t",
                "-c",
                "select count(*) from pgbench_history",
            ],
        )
    };
    let mut srv = start();
    assert!(socket_file.exists());
    over_socket("pgbench", &["-i", "-s", "1"]);
    over_socket("pgbench", &["-n", "-M", "prepared", "-c", "2", "-t", "100"]);
    // What went in over the socket is what TCP reads.
    let history = srv.scalar("select count(*) from pgbench_history");
    assert_eq!(history, "200");
    assert_eq!(history_over_socket(), history);
    srv.child.kill().expect("kill -9 the server");
    srv.child.wait().unwrap();
    assert!(
        socket_file.exists(),
        "a killed server cannot remove its socket"
    );
    let srv = start();
    srv.invariant();
    over_socket("pgbench", &["-n", "-c", "2", "-t", "50"]);
    assert_eq!(history_over_socket(), "300");
    srv.invariant();
    srv.stop();
    assert!(
        !socket_file.exists(),
        "a clean stop removes the socket file"
    );
}

#[test]
fn scram_sha_256_password_authentication_with_psql() {
    if !clients_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let srv = ServerProc::start_configured(tmp.path(), "password = \"s3cret pass\"\n");
    let run = |password: Option<&str>| {
        let mut c = Command::new("psql");
        c.args(["-X", "-A", "-t", "-w", "-h", "127.0.0.1", "-p"])
            .arg(srv.port.to_string())
            .args(["-U", "bench", "-d", "bench", "-c", "select current_user"]);
        c.env_remove("PGPASSWORD");
        if let Some(p) = password {
            c.env("PGPASSWORD", p);
        }
        c.output().expect("run psql")
    };
    let good = run(Some("s3cret pass"));
    assert!(good.status.success(), "{}", text(&good));
    assert_eq!(String::from_utf8_lossy(&good.stdout).trim(), "bench");
    let wrong = run(Some("guess"));
    assert!(!wrong.status.success());
    assert!(
        text(&wrong).contains("password authentication failed for user \"bench\""),
        "{}",
        text(&wrong)
    );
    // -w: never prompt; with no password psql gives up after the server's SASL request.
    let none = run(None);
    assert!(!none.status.success(), "{}", text(&none));
    // The server is still healthy after failed attempts.
    let again = run(Some("s3cret pass"));
    assert!(again.status.success(), "{}", text(&again));
    srv.stop();
}

/// A lone SELECT over a table through the simple protocol streams its rows to the
/// client as the scan makes them: with `statement_memory_limit = 1MB`, reading a table
/// of ~6 MB whole works (every row and value intact) where holding the result
/// failed with 53200; a query that must hold its rows (ORDER BY) still fails that way,
/// and an error in the middle of the stream reaches psql after the rows sent before it.
#[test]
fn a_large_select_streams_its_rows_past_the_statement_memory_limit() {
    if !clients_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let srv = ServerProc::start_configured(tmp.path(), "statement_memory_limit = \"1MB\"\n");
    srv.scalar("create table big (id int primary key, v text, n int8)");
    // In pieces: INSERT ... SELECT holds its rows.
    for chunk in 0..30 {
        srv.scalar(&format!(
            "insert into big select i, repeat('v', 100) || i, i * 3 from \
             generate_series({}, {}) as g(i)",
            chunk * 2_000 + 1,
            (chunk + 1) * 2_000
        ));
    }
    let all = srv.psql("select * from big");
    assert!(all.status.success(), "{}", text(&all));
    let out = String::from_utf8_lossy(&all.stdout);
    // Heap order (where the inserts found room), not id order: compare by id.
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_by_key(|l| l.split('|').next().and_then(|id| id.parse::<u32>().ok()));
    assert_eq!(lines.len(), 60_000);
    for (i, line) in lines.iter().enumerate() {
        let id = i + 1;
        assert_eq!(
            *line,
            format!("{id}|{}{id}|{}", "v".repeat(100), id * 3),
            "row {id}"
        );
    }
    let some = srv.psql("select n, id from big where id % 4 = 1");
    assert!(some.status.success(), "{}", text(&some));
    assert_eq!(
        String::from_utf8_lossy(&some.stdout).lines().count(),
        15_000
    );

    let sorted = srv.psql("select * from big order by n desc");
    assert!(!sorted.status.success());
    assert!(
        text(&sorted).contains("ERROR:  out of memory"),
        "{}",
        text(&sorted)
    );

    // id 50000's division fails after the rows before it were sent.
    let failing = srv.psql("select id, 1 / (50000 - id) from big");
    assert!(!failing.status.success());
    let said = text(&failing);
    assert!(said.contains("ERROR:  division by zero"), "{said}");
    assert_eq!(srv.scalar("select count(*) from big"), "60000");
    srv.stop();
}

/// `statement_memory_limit`: psql shows the 53200 with walrus's detail and hint, the
/// session and server go on; a COPY line longer than the limit fails the COPY the same
/// way; a server with an invalid value refuses to start.
#[test]
fn statement_memory_limit_fails_the_statement_not_the_server() {
    if !clients_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let srv = ServerProc::start_configured(tmp.path(), "statement_memory_limit = \"1MB\"\n");
    assert_eq!(srv.scalar("show statement_memory_limit"), "1MB");
    let big = srv.psql("select * from generate_series(1, 10000000)");
    assert!(!big.status.success());
    let out = text(&big);
    assert!(out.contains("ERROR:  out of memory"), "{out}");
    assert!(
        out.contains("DETAIL:  the statement's materialised rows need more than statement_memory_limit (1MB)"),
        "{out}"
    );
    assert!(out.contains("HINT:  walrus materialises"), "{out}");
    assert_eq!(
        srv.scalar("select count(*) from generate_series(1, 1000)"),
        "1000"
    );

    srv.scalar("create table t (v text)");
    let mut copy = Command::new("psql")
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p"])
        .arg(srv.port.to_string())
        .args(["-U", "bench", "-d", "bench", "-c", "copy t from stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run psql");
    {
        use std::io::Write;
        let mut stdin = copy.stdin.take().unwrap();
        stdin.write_all(b"short line\n").unwrap();
        stdin.write_all(&vec![b'x'; 3 << 20]).unwrap();
        stdin.write_all(b"\n").unwrap();
    }
    let copied = copy.wait_with_output().unwrap();
    assert!(!copied.status.success());
    assert!(
        text(&copied).contains("ERROR:  out of memory"),
        "{}",
        text(&copied)
    );
    assert_eq!(srv.scalar("select count(*) from t"), "0");
    srv.stop();

    let conf = tmp.path().join("bad.toml");
    std::fs::write(&conf, "statement_memory_limit = \"lots\"\n").unwrap();
    let bad = walrus()
        .args(["serve", "--data"])
        .arg(tmp.path().join("data"))
        .args(["--port", &free_port().to_string(), "--config"])
        .arg(&conf)
        .output()
        .expect("run walrus serve");
    assert!(
        !bad.status.success(),
        "started with a bad statement_memory_limit"
    );
    assert!(
        text(&bad).contains("invalid value for parameter \"statement_memory_limit\""),
        "{}",
        text(&bad)
    );
}

/// The pid file's lock, not the pid in it, says whether a server runs on a directory: a
/// second server is refused while the first runs; after a kill -9 the leftover pid file
/// blocks nothing, even when the pid it names is a live process (here: this test), and
/// `walrus stop` refuses to signal that pid.
#[test]
fn pid_file_lock_refuses_a_second_server_but_never_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let port = free_port();
    let mut srv = ServerProc::start(&data, port);
    let second = walrus()
        .args(["serve", "--data"])
        .arg(&data)
        .args(["--port", &free_port().to_string()])
        .output()
        .expect("run a second walrus serve");
    assert!(!second.status.success(), "a second server started");
    let expected = format!("another walrus (pid {}) is running", srv.child.id());
    assert!(text(&second).contains(&expected), "{}", text(&second));

    srv.child.kill().expect("kill -9 the server");
    srv.child.wait().unwrap();
    let pid_file = data.join("walrus.pid");
    std::fs::write(&pid_file, std::process::id().to_string()).unwrap();
    let stop = walrus().arg("stop").arg(&data).output().unwrap();
    assert!(!stop.status.success(), "stop signalled a stale pid");
    assert!(text(&stop).contains("not running"), "{}", text(&stop));

    let srv = ServerProc::start(&data, port);
    let mut owner = String::new();
    for _ in 0..100 {
        owner = std::fs::read_to_string(&pid_file).unwrap_or_default();
        if owner.trim() == srv.child.id().to_string() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(owner.trim(), srv.child.id().to_string());
    srv.stop();
    assert!(!pid_file.exists(), "a clean stop removes the pid file");
}

/// Autovacuum through the server: under pgbench, the small hot tables pass their
/// threshold (50 + 0.2 × rows) within seconds; `pg_stat_user_tables` shows the runs and
/// the row counts, through psql, and the TPC-B invariant holds afterwards.
#[test]
fn autovacuum_runs_under_pgbench_and_pg_stat_user_tables_shows_it() {
    if !clients_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let srv = ServerProc::start_configured(tmp.path(), "autovacuum_naptime = \"200ms\"\n");
    assert_eq!(srv.scalar("show autovacuum"), "on");
    let init = srv.pgbench(&["-i", "-s", "1", "-q"]);
    assert!(init.status.success(), "{}", text(&init));
    let run = srv.pgbench(&["-c", "4", "-j", "2", "-T", "3", "-M", "prepared"]);
    assert!(run.status.success(), "{}", text(&run));
    let q = "select autovacuum_count > 0, n_live_tup, n_tup_upd > 0 from pg_stat_user_tables where relname = 'pgbench_tellers'";
    let start = Instant::now();
    loop {
        let row = srv.scalar(q);
        if row.starts_with("t|") {
            assert_eq!(row, "t|10|t", "tellers after an autovacuum");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no autovacuum of pgbench_tellers: {row}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        srv.scalar("select count(*) from pg_stat_user_tables where relname like 'pgbench_%'"),
        "4"
    );
    srv.invariant();
    srv.stop();
}

/// A small real filesystem: a tmpfs of a few MiB mounted in a private mount namespace that
/// a holder process keeps alive, so servers can be started in it, killed and restarted,
/// and the test can fill and free it from outside through `/proc/<holder>/root`. Needs
/// root (CI runs as root); elsewhere the test says so and skips.
struct SmallDisk {
    holder: Child,
    mount: PathBuf,
    _tmp: tempfile::TempDir,
}

impl SmallDisk {
    fn new(mib: u32) -> Option<SmallDisk> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            assert!(
                std::env::var("CI").is_err(),
                "the full-disk test mounts a tmpfs and needs root in CI"
            );
            eprintln!("skipping: mounting a small tmpfs needs root");
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let mount = tmp.path().join("disk");
        std::fs::create_dir(&mount).unwrap();
        let mut holder = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount -t tmpfs -o size="$1"m walrus-test "$2" && echo mounted && exec sleep 900"#)
            .args(["sh", &mib.to_string()])
            .arg(&mount)
            .stdout(Stdio::piped())
            .spawn()
            .expect("run unshare");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(
            line.trim(),
            "mounted",
            "could not mount a tmpfs in a namespace"
        );
        Some(SmallDisk {
            holder,
            mount,
            _tmp: tmp,
        })
    }

    /// `rel` as processes inside the namespace see it.
    fn inside(&self, rel: &str) -> PathBuf {
        self.mount.join(rel)
    }

    /// `rel` as this process sees it.
    fn outside(&self, rel: &str) -> PathBuf {
        let mount = self.mount.strip_prefix("/").unwrap();
        PathBuf::from(format!("/proc/{}/root", self.holder.id()))
            .join(mount)
            .join(rel)
    }

    /// The walrus binary run inside the namespace.
    fn walrus(&self) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["-t", &self.holder.id().to_string(), "-m", "--"])
            .arg(env!("CARGO_BIN_EXE_walrus"));
        c
    }

    /// Fills the filesystem to the last byte with a ballast file.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.outside("ballast")).unwrap();
        for chunk in [1 << 20, 4096, 512] {
            let buf = vec![7u8; chunk];
            loop {
                match f.write_all(&buf) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                    Err(e) => panic!("filling the disk: {e}"),
                }
            }
        }
        let _ = f.sync_all();
    }

    fn free(&self) {
        std::fs::remove_file(self.outside("ballast")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// The house rule for a full disk, on a real one: a write that needs space fails with
/// SQLSTATE 53100 and PostgreSQL's hint, before it changed anything; the server and the
/// other sessions carry on; what was acknowledged survives a kill -9 and a restart on the
/// still-full disk; once space is freed, writes work again. Before this was built, the
/// WAL writer aborted the whole server at the first segment it could not create, and
/// recovery could not start again on the full disk.
#[test]
fn full_disk_fails_writes_with_53100_and_loses_nothing() {
    if !clients_available() {
        return;
    }
    let Some(disk) = SmallDisk::new(48) else {
        return;
    };
    let init = disk
        .walrus()
        .args(["init", "--wal-segment-size", "4MB"])
        .arg(disk.inside("data"))
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", text(&init));
    let port = free_port();
    let serve = |d: &SmallDisk| {
        let mut cmd = d.walrus();
        cmd.args(["serve", "--data"])
            .arg(d.inside("data"))
            .args(["--port", &port.to_string()]);
        ServerProc::spawn(cmd, &d.outside("data"), port)
    };
    let mut srv = serve(&disk);
    srv.scalar("create table t (id int primary key, pad text) with (fillfactor = 50)");
    srv.scalar("insert into t select g, repeat('a', 500) from generate_series(1, 2000) g");
    let verbose = ["-v", "VERBOSITY=verbose"];
    let full = |o: &Output| {
        let t = text(o);
        assert!(!o.status.success(), "a write on a full disk succeeded: {t}");
        assert!(
            t.contains("ERROR:  53100:")
                && t.contains("No space left on device")
                && t.contains("HINT:  Check free disk space."),
            "not a clean disk-full error: {t}"
        );
    };

    disk.fill();
    // Growing the table needs space: the statement fails and leaves nothing behind.
    full(&srv.psql_with(
        &verbose,
        "insert into t select g, repeat('b', 500) from generate_series(100001, 120000) g",
    ));
    assert_eq!(srv.scalar("select count(*) from t"), "2000");
    // Updates in place need no new pages, only WAL, and no WAL segment can be created:
    // they keep running because checkpoints recycle old segments into the ones needed
    // next (any refusal must still be a clean 53100). Before, the first segment the WAL
    // writer could not create aborted the server.
    let lsn = |srv: &ServerProc| {
        let t = srv.scalar("select pg_current_wal_lsn()");
        let (hi, lo) = t.split_once('/').unwrap();
        u64::from_str_radix(hi, 16).unwrap() << 32 | u64::from_str_radix(lo, 16).unwrap()
    };
    let wal_before = lsn(&srv);
    let (mut done, mut refused, mut last) = (0, 0, 'a');
    for i in 0..40u8 {
        let c = (b'c' + i % 24) as char;
        let o = srv.psql_with(
            &verbose,
            &format!("update t set pad = repeat('{c}', 500) where id <= 500"),
        );
        if o.status.success() {
            done += 1;
            last = c;
        } else {
            full(&o);
            eprintln!("{}", text(&o).lines().next().unwrap_or(""));
            refused += 1;
        }
    }
    let wal_written = lsn(&srv) - wal_before;
    eprintln!(
        "in-place updates on the full disk: {done} done, {refused} refused, {wal_written} bytes of WAL"
    );
    assert!(
        wal_written > 3 * (4 << 20),
        "the updates wrote only {wal_written} bytes of WAL: no segment needed recycling"
    );
    assert!(done > refused, "{done} updates done, {refused} refused");
    assert_eq!(
        srv.scalar(&format!(
            "select count(*) from t where id <= 500 and pad = repeat('{last}', 500)"
        )),
        "500"
    );

    // A crash on the full disk, and a restart on it: recovery needs no new space.
    srv.child.kill().unwrap();
    srv.child.wait().unwrap();
    let srv = serve(&disk);
    assert_eq!(srv.scalar("select count(*) from t"), "2000");
    assert_eq!(
        srv.scalar(&format!(
            "select count(*) from t where id <= 500 and pad = repeat('{last}', 500)"
        )),
        "500",
        "the last acknowledged update was lost"
    );
    full(&srv.psql_with(
        &verbose,
        "insert into t select g, repeat('b', 500) from generate_series(100001, 120000) g",
    ));

    disk.free();
    srv.scalar("insert into t select g, repeat('b', 500) from generate_series(100001, 102000) g");
    assert_eq!(srv.scalar("select count(*) from t"), "4000");
    srv.stop();
}

/// A raw protocol-3.0 session that completed startup (ReadyForQuery received).
fn raw_session(port: u16) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut body = 196_608i32.to_be_bytes().to_vec();
    for kv in ["user", "bench", "database", "bench", ""] {
        body.extend_from_slice(kv.as_bytes());
        body.push(0);
    }
    let mut pkt = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    pkt.extend_from_slice(&body);
    s.write_all(&pkt).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(6).any(|w| w == [b'Z', 0, 0, 0, 5, b'I']) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "server closed the session during startup");
        seen.extend_from_slice(&buf[..n]);
    }
    s
}

/// `max_connections` sessions are served; one more is refused with PostgreSQL's 53300
/// (on the server's refusal thread, not a thread of its own) and served again once a
/// slot frees; a client that never sends a startup packet is disconnected after
/// `authentication_timeout`.
#[test]
fn connection_limit_and_authentication_timeout() {
    use std::io::Read;
    if !clients_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let srv = ServerProc::start_configured(
        tmp.path(),
        "max_connections = \"2\"\nauthentication_timeout = \"1s\"\n",
    );
    // The start-up probe's connections may still be ending: wait until two fit.
    let start = Instant::now();
    let (a, b) = loop {
        let a = raw_session(srv.port);
        let b = raw_session(srv.port);
        let probe = srv.psql("select 1");
        if !probe.status.success() {
            break (a, b);
        }
        assert!(start.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(100));
    };
    let refused = srv.psql("select 1");
    assert!(
        !refused.status.success() && text(&refused).contains("sorry, too many clients already"),
        "{}",
        text(&refused)
    );
    drop(a);
    let start = Instant::now();
    loop {
        let ok = srv.psql("select 1");
        if ok.status.success() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "a freed slot was never reused: {}",
            text(&ok)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(b);

    // A silent client is dropped after authentication_timeout (1 s), well before the
    // 30 s this test waits.
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = [0u8; 16];
    let r = silent.read(&mut buf);
    assert!(
        matches!(r, Ok(0))
            || matches!(&r, Err(e) if e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut),
        "the server kept a silent connection open: {r:?}"
    );
    srv.stop();
}

/// Issue 52: statements nested deeper than any stack (chains the parser builds in a loop:
/// `+`, `||`, `AND`, `UNION ALL`; chained CTEs; deep JSON) are answered as PostgreSQL 15
/// answers them (the expected values were read off PostgreSQL 15 at its default
/// `max_stack_depth`) or refused with its 54001, in the same session, which goes on;
/// another session, open all along, is undisturbed. Before the stack-depth guard each
/// of these aborted the whole server (`thread 'walrus-conn-N' has overflowed its stack`).
#[test]
fn deep_statements_are_answered_or_refused_and_never_take_the_server_down() {
    use std::io::{Read, Write};
    if !clients_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let srv = ServerProc::start(&tmp.path().join("data"), free_port());
    let mut bystander = raw_session(srv.port);
    let chain = |n: usize, item: &str, op: &str| vec![item; n].join(op);
    let ctes = |n: usize| {
        let links: Vec<String> = (1..n)
            .map(|i| format!("c{i} as (select * from c{})", i - 1))
            .collect();
        format!(
            "with c0 as (select 1 as x), {} select * from c{}",
            links.join(", "),
            n - 1
        )
    };
    let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    // (statement, PostgreSQL 15's answer: its one value, or its SQLSTATE)
    let cases: Vec<(String, Result<&str, &str>)> = vec![
        (format!("select {}", chain(2156, "1", "+")), Ok("2156")),
        (format!("select {}", chain(200_000, "1", "+")), Err("54001")),
        (
            format!("select length({})", chain(1452, "'a'", "||")),
            Ok("1452"),
        ),
        (
            format!("select length({})", chain(100_000, "'a'", "||")),
            Err("54001"),
        ),
        (
            format!(
                "select count(*) from (select 1 as x) t where {}",
                chain(50_000, "x = 1", " and ")
            ),
            Ok("1"),
        ),
        (
            format!(
                "select count(*) from (select 1 as x) t where {}",
                chain(20_000, "x = 2", " or ")
            ),
            Ok("0"),
        ),
        (
            format!(
                "select count(*) from (select 1{}) s",
                " union all select 1".repeat(2000)
            ),
            Ok("2001"),
        ),
        (
            format!(
                "select count(*) from (select 1{}) s",
                " union select 2".repeat(100_000)
            ),
            Err("54001"),
        ),
        (ctes(98), Ok("1")),
        (ctes(1000), Ok("1")),
        (format!("select '{}'::json is null", nested(5643)), Ok("f")),
        (format!("select '{}'::jsonb is null", nested(5643)), Ok("f")),
        (format!("select '{}'::jsonb", nested(200_000)), Err("54001")),
        (format!("select '{}'::json", "[".repeat(5643)), Err("22P02")),
    ];
    for (sql, expect) in &cases {
        let file = tmp.path().join("deep.sql");
        std::fs::write(&file, format!("{sql};\nselect 'alive';\n")).unwrap();
        let out = Command::new("psql")
            .args([
                "-X",
                "-A",
                "-t",
                "-v",
                "VERBOSITY=verbose",
                "-h",
                "127.0.0.1",
                "-p",
            ])
            .arg(srv.port.to_string())
            .args(["-U", "bench", "-d", "bench", "-f"])
            .arg(&file)
            .output()
            .expect("run psql");
        let shown = text(&out);
        let head: String = sql.chars().take(60).collect();
        match expect {
            Ok(value) => assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                format!("{value}\nalive"),
                "{head}...: {shown}"
            ),
            Err(code) => {
                assert!(
                    shown.contains(&format!("ERROR:  {code}")),
                    "{head}...: {shown}"
                );
                // The session went on to its next statement.
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout).trim(),
                    "alive",
                    "{head}...: {shown}"
                );
            }
        }
    }
    // max_stack_depth is checked as PostgreSQL checks it.
    assert_eq!(srv.scalar("show max_stack_depth"), "8MB");
    let too_big = srv.psql("set max_stack_depth = '1TB'");
    assert!(
        text(&too_big).contains("must not exceed"),
        "{}",
        text(&too_big)
    );
    let small = srv.psql_with(
        &["-c", "set max_stack_depth = '100kB'"],
        &format!("select {}", chain(2000, "1", "+")),
    );
    assert!(
        text(&small).contains("stack depth limit exceeded"),
        "{}",
        text(&small)
    );
    // The session that was open all along still answers.
    bystander
        .write_all(&[
            b'Q', 0, 0, 0, 13, b's', b'e', b'l', b'e', b'c', b't', b' ', b'1', 0,
        ])
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !seen.windows(6).any(|w| w == [b'Z', 0, 0, 0, 5, b'I']) {
        let n = bystander.read(&mut buf).unwrap();
        assert!(n > 0, "the bystander session was dropped");
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(
        seen.windows(2).any(|w| w == [b'D', 0]),
        "no row for the bystander"
    );
    srv.stop();
}

/// psql's `ON_ERROR_ROLLBACK` wraps each statement of a block in a savepoint and rolls
/// back to it on error (PostgreSQL's own client driving SAVEPOINT / RELEASE / ROLLBACK
/// TO): the block goes on, and only the failed statements are lost.
#[test]
fn psql_on_error_rollback_keeps_the_block_going() {
    if !clients_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let srv = ServerProc::start(&tmp.path().join("data"), free_port());
    srv.scalar("create table oer (id int primary key, v text check (v <> 'bad'))");
    let script = "begin;\n\
                  insert into oer values (1, 'a');\n\
                  insert into oer values (1, 'duplicate');\n\
                  insert into oer values (2, 'bad');\n\
                  insert into oer values (3, 'c');\n\
                  commit;\n";
    let (child, input) = srv.psql_script(&["-v", "ON_ERROR_ROLLBACK=on"], script);
    drop(input);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("duplicate key"), "{err}");
    assert!(err.contains("violates check constraint"), "{err}");
    assert_eq!(
        srv.scalar("select string_agg(id::text, ',' order by id) from oer"),
        "1,3"
    );
    srv.stop();
}

/// `pg_stat_activity` shows every session with its state and statement; a TRUNCATE
/// waiting for a reader's lock shows as waiting on a Lock (and in `pg_locks`, not
/// granted); `pg_cancel_backend` interrupts a statement and `pg_terminate_backend` ends
/// a session with PostgreSQL's FATAL 57P01, the others going on.
#[test]
fn pg_stat_activity_pg_locks_cancel_and_terminate() {
    if !clients_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let srv = ServerProc::start(&tmp.path().join("data"), free_port());
    srv.scalar("create table act (id int)");
    srv.scalar("insert into act values (1)");
    let wait_until = |sql: &str, want: &str| {
        let start = std::time::Instant::now();
        loop {
            let got = srv.scalar(sql);
            if got == want {
                return;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "{sql}: {got}, waited for {want}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    // A reader holding its lock (idle in transaction) and a TRUNCATE waiting for it.
    let (reader, reader_input) = srv.psql_script(
        &[],
        "begin;\nselect count(*) from act;\nselect pg_sleep(60);\n",
    );
    wait_until(
        "select count(*) from pg_stat_activity where query like 'select pg_sleep(60)%' and state = 'active'",
        "1",
    );
    let (truncate, truncate_input) = srv.psql_script(&[], "truncate act;\n");
    drop(truncate_input);
    wait_until(
        "select count(*) from pg_stat_activity where query like 'truncate%' and wait_event_type = 'Lock'",
        "1",
    );
    assert_eq!(
        srv.scalar("select string_agg(mode || ':' || case when granted then 'held' else 'waiting' end, ',' order by granted desc) from pg_locks where relation = 'act'::regclass"),
        "AccessShareLock:held,AccessExclusiveLock:waiting"
    );
    // Cancel the reader's sleep: its statement fails, its block stays open (the lock
    // held), so TRUNCATE still waits.
    assert_eq!(
        srv.scalar("select pg_cancel_backend(pid) from pg_stat_activity where query like 'select pg_sleep(60)%'"),
        "t"
    );
    wait_until(
        "select state from pg_stat_activity where query like 'select pg_sleep(60)%'",
        "idle in transaction (aborted)",
    );
    assert_eq!(
        srv.scalar("select count(*) from pg_stat_activity where wait_event_type = 'Lock'"),
        "1"
    );
    // Terminate the reader: its session ends and the TRUNCATE goes through.
    assert_eq!(
        srv.scalar("select pg_terminate_backend(pid) from pg_stat_activity where query like 'select pg_sleep(60)%'"),
        "t"
    );
    wait_until(
        "select count(*) from pg_stat_activity where query like 'select pg_sleep(60)%'",
        "0",
    );
    drop(reader_input);
    let out = reader.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("canceling statement due to user request"),
        "{err}"
    );
    let out = truncate.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(srv.scalar("select count(*) from act"), "0");
    assert_eq!(srv.scalar("select pg_terminate_backend(999999)"), "f");
    assert_eq!(
        srv.scalar("select count(*) from pg_stat_activity where pid = pg_backend_pid() and backend_type = 'client backend'"),
        "1"
    );
    srv.stop();
}
