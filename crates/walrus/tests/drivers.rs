//! Real drivers against `walrus serve`: Python's psycopg 3 (connect, parameters,
//! transactions, SQLSTATE errors, prepared statements, COPY), tokio-postgres, and
//! and the conformance programs of pgjdbc (`drivers/PgjdbcCheck.java`), psycopg2
//! (`drivers/psycopg2_check.py`), asyncpg (`drivers/asyncpg_check.py`), node-postgres
//! (`drivers/node_pg_check.js`), postgres.js (`drivers/postgres_js_check.js`), pgx
//! (`drivers/pgx`) and sqlx (`drivers/sqlx`), each run first against a scratch PostgreSQL 15, which
//! proves the program, then against walrus. Needs `python3` with `psycopg`,
//! `psycopg2` and `asyncpg`, node with npm's `pg` and `postgres`, go, a JDK with the pgjdbc jar in the local Maven repository and PostgreSQL
//! 15's server (`.ci/run` installs them); each is skipped with a message outside CI when
//! missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{text, walrus};

#[test]
fn psycopg_driver_works_against_walrus() {
    let Some(python) = python_with("psycopg") else {
        assert!(
            std::env::var("CI").is_err(),
            "psycopg missing in CI: .ci/run must install python3-psycopg"
        );
        eprintln!("skipping: python3 with psycopg not installed");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let data = tmp.path().join("data");
    let mut server = walrus()
        .args(["serve", "--data"])
        .arg(&data)
        .args(["--port", &port.to_string()])
        .env("WALRUS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/drivers/psycopg_check.py"
    );
    let out = Command::new(python)
        .arg(script)
        .arg(port.to_string())
        .output()
        .unwrap();
    let stop = walrus().arg("stop").arg(&data).output().unwrap();
    let _ = server.wait();
    assert!(
        out.status.success() && text(&out).contains("OK"),
        "psycopg check failed:\n{}",
        text(&out)
    );
    assert!(stop.status.success(), "{}", text(&stop));
}

/// tokio-postgres (the Rust driver): prepared statements with binary parameters and
/// results, transactions, SQLSTATE errors, COPY in and out through the extended protocol.
#[test]
fn tokio_postgres_driver_works_against_walrus() {
    let tmp = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let data = tmp.path().join("data");
    let mut server = walrus()
        .args(["serve", "--data"])
        .arg(&data)
        .args(["--port", &port.to_string()])
        .env("WALRUS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result: Result<(), String> = rt.block_on(async {
        let (mut client, conn) = tokio_postgres::connect(
            &format!("host=127.0.0.1 port={port} user=bench dbname=bench"),
            tokio_postgres::NoTls,
        )
        .await
        .map_err(|e| format!("connect: {e}"))?;
        tokio::spawn(conn);
        client
            .batch_execute(
                "create table tp (id bigint primary key, name text, n int, at timestamp)",
            )
            .await
            .map_err(|e| format!("create: {e}"))?;
        let ins = client
            .prepare("insert into tp (id, name, n) values ($1, $2, $3)")
            .await
            .map_err(|e| format!("prepare: {e}"))?;
        for i in 0..20i64 {
            client
                .execute(&ins, &[&i, &format!("row{i}"), &(i as i32 * 2)])
                .await
                .map_err(|e| format!("insert: {e:?}"))?;
        }
        let row = client
            .query_one("select name, n from tp where id = $1", &[&7i64])
            .await
            .map_err(|e| format!("select: {e}"))?;
        let (name, n): (String, i32) = (row.get(0), row.get(1));
        if name != "row7" || n != 14 {
            return Err(format!("got {name} {n}"));
        }
        let tx = client.transaction().await.map_err(|e| e.to_string())?;
        tx.execute("update tp set n = n + 1 where id = $1", &[&1i64])
            .await
            .map_err(|e| e.to_string())?;
        tx.rollback().await.map_err(|e| e.to_string())?;
        let n: i32 = client
            .query_one("select n from tp where id = 1", &[])
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        if n != 2 {
            return Err(format!("rollback lost: n = {n}"));
        }
        let err = client
            .execute(&ins, &[&1i64, &"dup", &0i32])
            .await
            .err()
            .ok_or("duplicate accepted")?;
        if err.code() != Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
            return Err(format!("wrong error: {err:?}"));
        }
        let count: i64 = client
            .query_one("select count(*) from tp", &[])
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        if count != 20 {
            return Err(format!("count {count}"));
        }
        // COPY through the extended protocol (tokio-postgres prepares it): text in,
        // CSV out.
        use futures_util::{SinkExt, StreamExt};
        let sink = client
            .copy_in("copy tp (id, name) from stdin")
            .await
            .map_err(|e| format!("copy in: {e}"))?;
        futures_util::pin_mut!(sink);
        for chunk in ["100\tcopied\n101\t", "tab\\there\n"] {
            sink.send(bytes::Bytes::from(chunk))
                .await
                .map_err(|e| format!("copy data: {e}"))?;
        }
        let loaded = sink.finish().await.map_err(|e| format!("copy done: {e}"))?;
        let stream = client
            .copy_out("copy (select id, name from tp where id >= 100 order by id) to stdout csv")
            .await
            .map_err(|e| format!("copy out: {e}"))?;
        let chunks: Vec<_> = stream.collect().await;
        let mut csv = Vec::new();
        for c in chunks {
            csv.extend_from_slice(&c.map_err(|e| format!("copy out data: {e}"))?);
        }
        let want = "100,copied\n101,tab\there\n";
        if loaded != 2 || csv != want.as_bytes() {
            return Err(format!(
                "copy: {loaded} rows, {:?}",
                String::from_utf8_lossy(&csv)
            ));
        }
        Ok(())
    });
    let stop = walrus().arg("stop").arg(&data).output().unwrap();
    let _ = server.wait();
    assert!(result.is_ok(), "tokio-postgres: {result:?}");
    assert!(stop.status.success(), "{}", text(&stop));
}

/// The pgjdbc version `.ci/run` fetches into the local Maven repository.
const PGJDBC_VERSION: &str = "42.7.14";

/// pgjdbc's jar: `$PGJDBC_JAR`, else the local Maven repository's copy.
fn pgjdbc_jar() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PGJDBC_JAR") {
        return Some(PathBuf::from(p)).filter(|p| p.exists());
    }
    let home = PathBuf::from(std::env::var_os("HOME")?);
    let jar = home.join(format!(
        ".m2/repository/org/postgresql/postgresql/{v}/postgresql-{v}.jar",
        v = PGJDBC_VERSION
    ));
    jar.exists().then_some(jar)
}

fn have_java() -> bool {
    Command::new("java")
        .arg("-version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A scratch PostgreSQL 15 (trust authentication, superuser `bench`, loopback only),
/// stopped on drop. PostgreSQL refuses to run as root, so a root test runs it as
/// `nobody`, owner of the scratch directory.
struct Postgres {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Postgres {
    fn start() -> Postgres {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        // The scratch directory belongs to whoever runs this: root gives it to nobody.
        let as_root = std::fs::metadata(dir.path()).unwrap().uid() == 0;
        const NOBODY: u32 = 65_534;
        if as_root {
            std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let user = |cmd: &mut Command| {
            if as_root {
                cmd.uid(NOBODY).gid(NOBODY);
            }
        };
        let data = dir.path().join("data");
        let mut initdb = Command::new(Path::new(PG_BIN).join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "bench", "-A", "trust", "-N", "--no-instructions"])
            .stdout(Stdio::null());
        user(&mut initdb);
        let out = initdb.output().unwrap();
        assert!(out.status.success(), "initdb: {}", text(&out));
        let port = free_port();
        let mut postgres = Command::new(Path::new(PG_BIN).join("postgres"));
        postgres
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        user(&mut postgres);
        let child = postgres.spawn().unwrap();
        let pg = Postgres {
            child,
            port,
            _dir: dir,
        };
        pg.wait_ready();
        pg
    }

    /// Waits (bounded) until the server authenticates a session: it accepts TCP
    /// connections while still starting up, answering them with 57P03.
    fn wait_ready(&self) {
        use std::io::{Read, Write};
        let start = Instant::now();
        loop {
            let ready = (|| -> std::io::Result<bool> {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
                s.set_read_timeout(Some(Duration::from_secs(5)))?;
                let mut body = 196_608i32.to_be_bytes().to_vec();
                body.extend_from_slice(b"user\0bench\0database\0postgres\0\0");
                let mut packet = ((body.len() + 4) as i32).to_be_bytes().to_vec();
                packet.extend_from_slice(&body);
                s.write_all(&packet)?;
                let mut kind = [0u8; 1];
                s.read_exact(&mut kind)?;
                Ok(kind[0] == b'R') // authentication request/ok, not an error
            })()
            .unwrap_or(false);
            if ready {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "PostgreSQL on port {} did not become ready",
                self.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Fast shutdown (SIGINT), bounded; then kill.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_port(port: u16) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "server on port {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `drivers/PgjdbcCheck.java` against the server on `port` (database `db`); its
/// output, and whether it printed OK and exited 0.
fn run_pgjdbc_check(jar: &Path, port: u16, db: &str) -> (bool, String) {
    let program = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/drivers/PgjdbcCheck.java"
    );
    let out = Command::new("java")
        .arg("-cp")
        .arg(jar)
        .arg(program)
        .arg(port.to_string())
        .arg(db)
        .output()
        .unwrap();
    (
        out.status.success() && text(&out).contains("OK"),
        text(&out),
    )
}

/// Runs a driver program (`run(port, database)` gives whether it passed, and its
/// output) against a scratch PostgreSQL 15 first, which proves the program, then against
/// walrus.
fn on_postgres_then_walrus(driver: &str, run: impl Fn(u16, &str) -> (bool, String)) {
    {
        let postgres = Postgres::start();
        let (ok, out) = run(postgres.port, "postgres");
        assert!(
            ok,
            "the {driver} program fails on PostgreSQL 15 itself:\n{out}"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = tmp.path().join("data");
    let mut server = walrus()
        .args(["serve", "--data"])
        .arg(&data)
        .args(["--port", &port.to_string()])
        .env("WALRUS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_port(port);
    let (ok, out) = run(port, "bench");
    let stop = walrus().arg("stop").arg(&data).output().unwrap();
    let _ = server.wait();
    assert!(ok, "{driver} check failed on walrus:\n{out}");
    assert!(stop.status.success(), "{}", text(&stop));
}

/// Whether a missing tool may skip a test: only outside CI (`.ci/run` installs them all).
fn skip_without(what: &str, have: bool) -> bool {
    if have {
        return false;
    }
    assert!(
        std::env::var("CI").is_err(),
        "in CI .ci/run must install {what}"
    );
    eprintln!("skipping: {what} not installed");
    true
}

/// pgjdbc, the Java driver: typed PreparedStatement inserts (also batched), selects
/// past the server-side prepare threshold, exact round trips of int, varchar(20),
/// numeric(10,2), timestamptz, boolean, bytea and uuid, ResultSetMetaData, rollback, a
/// duplicate key in a transaction and 25P02 after it.
#[test]
fn pgjdbc_driver_works_on_postgres_and_on_walrus() {
    let jar = pgjdbc_jar();
    let have = jar.is_some() && have_java() && Path::new(PG_BIN).join("postgres").exists();
    if skip_without(
        &format!("a JDK, pgjdbc {PGJDBC_VERSION} in ~/.m2 and PostgreSQL 15"),
        have,
    ) {
        return;
    }
    let jar = jar.unwrap();
    on_postgres_then_walrus("pgjdbc", |port, db| run_pgjdbc_check(&jar, port, db));
}

/// The first Python that can import `module` (PATH's, else Debian's).
fn python_with(module: &str) -> Option<&'static str> {
    ["python3", "/usr/bin/python3"].into_iter().find(|py| {
        Command::new(py)
            .args(["-c", &format!("import {module}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    })
}

/// Runs a Python driver program from `tests/drivers/` on PostgreSQL 15, then walrus.
fn python_program_on_postgres_then_walrus(module: &str, debian_package: &str, script: &str) {
    let python = python_with(module);
    let have = python.is_some() && Path::new(PG_BIN).join("postgres").exists();
    if skip_without(&format!("{debian_package} and PostgreSQL 15"), have) {
        return;
    }
    let python = python.unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/drivers")
        .join(script);
    on_postgres_then_walrus(module, |port, db| {
        let out = Command::new(python)
            .arg(&script)
            .arg(port.to_string())
            .arg(db)
            .output()
            .unwrap();
        (
            out.status.success() && text(&out).contains("OK"),
            text(&out),
        )
    });
}

/// psycopg2 (Debian's python3-psycopg2): literals of every type interpolated by the
/// client, results typed by RowDescription's OIDs and modifiers, executemany,
/// rollback, a duplicate key then 25P02, COPY from the client.
#[test]
fn psycopg2_driver_works_on_postgres_and_on_walrus() {
    python_program_on_postgres_then_walrus("psycopg2", "python3-psycopg2", "psycopg2_check.py");
}

/// psycopg 3 transactions as ORMs use them: nested `conn.transaction()` blocks
/// (SAVEPOINT, RELEASE, ROLLBACK TO through the extended protocol) with errors caught
/// inside, foreign keys with CASCADE and a deferred one failing COMMIT, CHECK
/// constraints, a SKIP LOCKED queue between two connections and NOWAIT.
#[test]
fn psycopg_transactions_on_postgres_and_on_walrus() {
    python_program_on_postgres_then_walrus(
        "psycopg",
        "python3-psycopg",
        "psycopg_transactions_check.py",
    );
}

/// asyncpg (Debian's python3-asyncpg): Parse/Describe/Flush preparation, binary
/// parameters and results of every type, described parameter and column types,
/// executemany, rollback, a duplicate key then 25P02, errors found while preparing.
#[test]
fn asyncpg_driver_works_on_postgres_and_on_walrus() {
    python_program_on_postgres_then_walrus("asyncpg", "python3-asyncpg", "asyncpg_check.py");
}

/// Where `.ci/run` installs node-postgres (`npm install --prefix target/drivers-node`),
/// or `$NODE_PG_MODULES`: a `node_modules` directory holding `pg`.
fn node_pg_modules() -> Option<PathBuf> {
    let dir = match std::env::var_os("NODE_PG_MODULES") {
        Some(d) => PathBuf::from(d),
        None => {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/drivers-node/node_modules")
        }
    };
    dir.join("pg/package.json").exists().then_some(dir)
}

/// node-postgres (npm `pg` 8): untyped text parameters through the extended protocol,
/// named prepared queries, results typed by RowDescription (fields' type OIDs,
/// modifiers and table OIDs checked), bytea and uuid, rollback, a duplicate key then
/// 25P02, errors found while preparing.
#[test]
fn node_postgres_driver_works_on_postgres_and_on_walrus() {
    let modules = node_pg_modules();
    let node = Command::new("node")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let have = node && modules.is_some() && Path::new(PG_BIN).join("postgres").exists();
    if skip_without(
        "node, npm's pg in target/drivers-node and PostgreSQL 15",
        have,
    ) {
        return;
    }
    let modules = modules.unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/drivers/node_pg_check.js"
    );
    on_postgres_then_walrus("node-postgres", |port, db| {
        let out = Command::new("node")
            .arg(script)
            .arg(port.to_string())
            .arg(db)
            .env("NODE_PATH", &modules)
            .output()
            .unwrap();
        (
            out.status.success() && text(&out).contains("OK"),
            text(&out),
        )
    });
}

/// postgres.js (npm `postgres` 3): named statements prepared with Parse/Describe/Flush,
/// parameters serialized by the described types, array types read from pg_type at
/// connect, results parsed by RowDescription (columns' type OIDs, table OIDs and
/// numbers checked), batched multi-row insert, time, interval, json, jsonb and arrays as
/// parameters and results, rollback, a duplicate key then 25P02, errors found while
/// preparing.
#[test]
fn postgres_js_driver_works_on_postgres_and_on_walrus() {
    let modules = node_pg_modules().filter(|d| d.join("postgres/package.json").exists());
    let node = Command::new("node")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let have = node && modules.is_some() && Path::new(PG_BIN).join("postgres").exists();
    if skip_without(
        "node, npm's postgres in target/drivers-node and PostgreSQL 15",
        have,
    ) {
        return;
    }
    let modules = modules.unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/drivers/postgres_js_check.js"
    );
    on_postgres_then_walrus("postgres.js", |port, db| {
        let out = Command::new("node")
            .arg(script)
            .arg(port.to_string())
            .arg(db)
            .env("NODE_PATH", &modules)
            .output()
            .unwrap();
        (
            out.status.success() && text(&out).contains("OK"),
            text(&out),
        )
    });
}

/// pgx v5 (Go): prepared statements with every parameter and result in binary by the
/// described types, batches, bytea, uuid, numeric, rollback, a duplicate key then 25P02,
/// errors found while preparing, binary COPY through `CopyFrom`. The program (`drivers/pgx`) is built with `go build`
/// (modules from the Go module proxy, `go.sum` pinned) into the test's scratch directory.
#[test]
fn pgx_driver_works_on_postgres_and_on_walrus() {
    let go = Command::new("go")
        .arg("version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let have = go && Path::new(PG_BIN).join("postgres").exists();
    if skip_without("go and PostgreSQL 15", have) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let binary = tmp.path().join("pgxcheck");
    let build = Command::new("go")
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/drivers/pgx"))
        .output()
        .unwrap();
    assert!(build.status.success(), "go build: {}", text(&build));
    on_postgres_then_walrus("pgx", |port, db| {
        let out = Command::new(&binary)
            .arg(port.to_string())
            .arg(db)
            .output()
            .unwrap();
        (
            out.status.success() && text(&out).contains("OK"),
            text(&out),
        )
    });
}

/// What a COPY check prints, minus the lines only PostgreSQL has: LOCATION (its
/// source file), the error fields walrus does not send (schema, table, column and
/// constraint names, the failing row's detail) and the statement-position lines.
fn comparable(output: &str) -> String {
    output
        .lines()
        .map(|l| match l.strip_prefix("psql:") {
            // `psql:FILE:LINE: ERROR: ...`: the file name differs between runs.
            Some(rest) => rest.splitn(3, ':').nth(2).unwrap_or(rest).trim_start(),
            None => l,
        })
        .filter(|l| {
            ![
                "LOCATION:",
                "SCHEMA NAME:",
                "TABLE NAME:",
                "COLUMN NAME:",
                "CONSTRAINT NAME:",
                "DETAIL:  Failing row",
                "LINE ",
            ]
            .iter()
            .any(|p| l.starts_with(p))
                && l.trim() != "^"
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// psql on `port` with `args` (`-f file` or `-c command`) and `stdin` piped in; all
/// it printed.
fn psql_run(port: u16, db: &str, args: &[&str], stdin: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("psql")
        .args(["-X", "-q", "-v", "VERBOSITY=verbose", "-h", "127.0.0.1"])
        .args(["-p", &port.to_string(), "-U", "bench", "-d", db])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run psql");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    text(&out)
}

/// Everything the COPY checks print against the server on `port`: the psql script
/// `drivers/copy_check.sql`; psql's `\copy` of a 2 MB CSV file with quoted fields
/// spanning lines (many CopyData messages) into a table and back out to a file, and
/// `COPY ... FROM STDIN` fed on psql's standard input; the psycopg 3 program
/// `drivers/psycopg_copy_check.py` (text, CSV and binary in and out) and the asyncpg
/// one `drivers/asyncpg_copy_check.py` (its binary `copy_records_to_table`).
fn copy_checks(port: u16, db: &str, python: &str, scratch: &Path) -> String {
    let drivers = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/drivers");
    let check = drivers.join("copy_check.sql");
    let mut all = comparable(&psql_run(port, db, &["-f", check.to_str().unwrap()], b""));
    let mut csv = String::from("id,note\n");
    for i in 0..20_000 {
        csv.push_str(&format!("{i},\"line one {i}\nline \"\"two\"\", {i}\"\n"));
    }
    let data_in = scratch.join("in.csv");
    let data_out = scratch.join("out.csv");
    std::fs::write(&data_in, &csv).unwrap();
    let script = scratch.join("backslash_copy.sql");
    std::fs::write(
        &script,
        format!(
            "create table big (id int primary key, note text);\n\
             \\copy big from '{}' with csv header\n",
            data_in.display(),
        ),
    )
    .unwrap();
    all += &comparable(&psql_run(port, db, &["-f", script.to_str().unwrap()], b""));
    let piped = b"\"piped, \"\"in\"\"\",100000\nsecond,100001\n\\.\n";
    let copy = "copy big (note, id) from stdin (format csv)";
    all += &comparable(&psql_run(port, db, &["-c", copy], piped));
    let copy_out = format!(
        "\\copy (select * from big order by id) to '{}' with (format csv, header)",
        data_out.display()
    );
    for command in ["select count(*), sum(length(note)) from big", &copy_out] {
        all += &comparable(&psql_run(port, db, &["-c", command], b""));
    }
    let round_trip = std::fs::read_to_string(&data_out).unwrap();
    let mut expected = csv.clone();
    expected.push_str("100000,\"piped, \"\"in\"\"\"\n100001,second\n");
    all += &format!(
        "\\copy out equals what went in: {}\n",
        round_trip == expected
    );
    // Data psql sends as it is: line-end styles, markers, bytes that are not UTF-8.
    all += &comparable(&psql_run(
        port,
        db,
        &["-c", "create table e (a int, b text)"],
        b"",
    ));
    let piped: &[(&str, &[u8])] = &[
        ("copy e from stdin", b"1\ta\r2\tb\r"),
        ("copy e from stdin", b"1\ta\r\n2\tb\r\n"),
        ("copy e from stdin", b"1\ta\r\n2\tb\n"),
        ("copy e from stdin", b"1\ta\rb\n"),
        ("copy e from stdin csv", b"1,\"a\r\nb\"\r\n2,c\r\n"),
        ("copy e from stdin csv", b"1,\"a\nb\"\n2,\"c\nd\"\n3,x,y\n"),
        ("copy e from stdin csv", b"1,a\rb\n"),
        ("copy e from stdin", b"1\ta\n\\."),
        ("copy e from stdin csv", b"1,a\n\\."),
        ("copy e from stdin", b"1\ta\\.\n2\tb\n"),
        ("copy e from stdin", b"1\ta\xe2\x82\n"),
        ("copy e from stdin", b"1\ta\x00b\n"),
        ("copy e from stdin", b"1\t\\x41\\x4g\\7\\08\n"),
        ("copy e from stdin csv", b"1,\"a\xff\"\n"),
        ("copy e (b) from stdin", b"\\N\n\\\\N\n\n"),
        (
            "copy e from stdin (format csv, escape '\\')",
            b"1,\"a\\\"b\\\\c\\d\"\n",
        ),
        ("copy e from stdin (format binary)", b"junk"),
        ("copy e from stdin (format binary)", b""),
    ];
    for (copy, data) in piped {
        all += &format!("{copy} <- {:?}\n", String::from_utf8_lossy(data));
        all += &comparable(&psql_run(port, db, &["-c", copy], data));
        let check = "select a, coalesce(b, '<null>') from e order by a; delete from e";
        all += &comparable(&psql_run(port, db, &["-A", "-t", "-c", check], b""));
    }
    for program in ["psycopg_copy_check.py", "asyncpg_copy_check.py"] {
        let out = Command::new(python)
            .arg(drivers.join(program))
            .arg(port.to_string())
            .arg(db)
            .output()
            .unwrap();
        all += &text(&out);
    }
    all
}

/// COPY as psql (`COPY ... FROM STDIN`, `\copy` both ways), psycopg 3 (text, CSV and
/// binary) and asyncpg (binary) use it: every output, error messages with their SQLSTATE and CONTEXT
/// included, is the same on walrus as on PostgreSQL 15.
#[test]
fn copy_matches_postgresql_through_psql_and_psycopg() {
    let python = python_with("psycopg").filter(|py| {
        Command::new(py)
            .args(["-c", "import asyncpg"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let have = python.is_some()
        && Path::new(PG_BIN).join("postgres").exists()
        && Command::new("psql").arg("--version").output().is_ok();
    if skip_without(
        "psql, python3-psycopg, python3-asyncpg and PostgreSQL 15",
        have,
    ) {
        return;
    }
    let python = python.unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let on_postgres = {
        let postgres = Postgres::start();
        copy_checks(postgres.port, "postgres", python, scratch.path())
    };
    assert!(
        on_postgres.matches("\nOK\n").count() == 2
            && on_postgres.contains("equals what went in: true"),
        "the COPY checks fail on PostgreSQL 15 itself:\n{on_postgres}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = tmp.path().join("data");
    let mut server = walrus()
        .args(["serve", "--data"])
        .arg(&data)
        .args(["--port", &port.to_string()])
        .env("WALRUS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_port(port);
    let on_walrus = copy_checks(port, "bench", python, scratch.path());
    let stop = walrus().arg("stop").arg(&data).output().unwrap();
    let _ = server.wait();
    let (pg, w): (Vec<&str>, Vec<&str>) =
        (on_postgres.lines().collect(), on_walrus.lines().collect());
    for (i, (a, b)) in pg.iter().zip(&w).enumerate() {
        assert_eq!(a, b, "line {} differs (PostgreSQL 15, then walrus)", i + 1);
    }
    assert_eq!(pg.len(), w.len(), "walrus printed:\n{on_walrus}");
    assert!(stop.status.success(), "{}", text(&stop));
}

/// sqlx 0.8 (Rust): named statements with the bound values' type OIDs, binary
/// parameters and results checked against the Rust types, a QueryBuilder batch insert,
/// `describe` (pg_attribute's attnotnull by the columns' table OIDs and numbers, then
/// `EXPLAIN (VERBOSE, FORMAT JSON) EXECUTE`), time, interval, json, jsonb and arrays,
/// rollback, a duplicate key then 25P02, errors found while preparing. The program
/// (`drivers/sqlx`, its own Cargo project with a pinned Cargo.lock, not a workspace
/// member) is built with cargo into `target/drivers-sqlx`; the first build needs
/// crates.io (`.ci/run` fetches the crates).
#[test]
fn sqlx_driver_works_on_postgres_and_on_walrus() {
    if skip_without("PostgreSQL 15", Path::new(PG_BIN).join("postgres").exists()) {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/drivers/sqlx/Cargo.toml");
    let target = root.join("target/drivers-sqlx");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = Command::new(&cargo)
        .args(["build", "--locked", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .output()
        .unwrap();
    if !build.status.success() {
        let why = text(&build);
        // Without crates.io (and nothing fetched before) the program cannot be built.
        let offline = why.contains("failed to download") || why.contains("Could not resolve host");
        if skip_without(
            "crates.io access for sqlx (or its crates fetched)",
            !offline,
        ) {
            return;
        }
        panic!("building the sqlx program failed:\n{why}");
    }
    let program = target.join("debug/walrus-sqlx-check");
    on_postgres_then_walrus("sqlx", |port, db| {
        let out = Command::new(&program)
            .arg(port.to_string())
            .arg(db)
            .output()
            .unwrap();
        (
            out.status.success() && text(&out).contains("OK"),
            text(&out),
        )
    });
}

/// Each value of each type issue 29 added, through the extended protocol: text in →
/// text out, text in → binary out, and PostgreSQL's own binary form sent back in binary
/// → text and binary out. walrus must answer byte for byte as PostgreSQL 15 does (or
/// with the same SQLSTATE).
#[test]
fn type_round_trips_match_postgresql_byte_for_byte() {
    if skip_without("PostgreSQL 15", Path::new(PG_BIN).join("postgres").exists()) {
        return;
    }
    let cases: &[(&str, u32, &[&str])] = &[
        (
            "time",
            1083,
            &["04:05:06.789", "00:00:00", "24:00:00", "23:59:59.999999"],
        ),
        (
            "interval",
            1186,
            &[
                "1 year 2 mons 3 days 04:05:06.5",
                "-1 days +02:00:00",
                "00:00:00",
                "-178000000 years",
                "1 mon -1 days -00:00:00.000001",
            ],
        ),
        (
            "json",
            114,
            &[r#"{"b": 1,  "a" : [1, 2.50]}"#, "null", r#""\u00e9""#],
        ),
        (
            "jsonb",
            3802,
            &[
                r#"{"b": 1, "a": [1.50, 1e2], "a": 3}"#,
                "[]",
                "true",
                r#""x\ny""#,
            ],
        ),
        ("int4[]", 1007, &["{1,2,NULL}", "{}", "{-2147483648}"]),
        ("int2[]", 1005, &["{1,-2}"]),
        ("int8[]", 1016, &["{9223372036854775807,NULL}"]),
        ("float8[]", 1022, &["{1.5,-0,Infinity,NaN}"]),
        ("numeric[]", 1231, &["{1.50,-2,0.001,NULL}"]),
        ("bool[]", 1000, &["{t,f,NULL}"]),
        (
            "text[]",
            1009,
            &[r#"{"a b","",NULL,"NULL","x\"y",é}"#, "{}"],
        ),
        ("varchar[]", 1015, &["{ab,cd}"]),
        ("bytea[]", 1001, &[r#"{"\\x0102",NULL}"#]),
        ("uuid[]", 2951, &["{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}"]),
        ("date[]", 1182, &["{2024-01-02,2000-01-01}"]),
        (
            "timestamptz[]",
            1185,
            &[r#"{"2024-01-01 10:11:12.123457+05:30"}"#],
        ),
        ("time[]", 1183, &[r#"{"04:05:06"}"#]),
        ("interval[]", 1187, &[r#"{"1 day","-00:00:01"}"#]),
        ("jsonb[]", 3807, &[r#"{"{\"a\": 1}",NULL}"#]),
        (
            "timetz",
            1266,
            &[
                "10:11:12.123+05:30",
                "00:00:00+00",
                "24:00:00-15:59",
                "23:59:59.999999-08",
                "04:05:06 PST",
            ],
        ),
        ("timetz[]", 1270, &[r#"{"10:00:00+01",NULL}"#]),
        // reg* results from an `oid` parameter: the name in text, the OID in binary.
        ("regtype", 26, &["23", "1043", "1007", "0", "99999"]),
        ("regclass", 26, &["1259", "2610", "0"]),
        ("regnamespace", 26, &["11", "2200"]),
        // reg* parameters: a name in text, the OID in binary.
        ("regclass", 2205, &["pg_class", "pg_catalog.pg_index"]),
        ("regtype", 2206, &["integer", "character varying[]"]),
    ];
    let run = |port: u16, db: &str| {
        let mut c = Raw::connect(port, db);
        let mut out = Vec::new();
        for (ty, oid, values) in cases {
            for v in *values {
                let text_out = c.round_trip(ty, *oid, Some(v.as_bytes()), 0, 0);
                let binary_out = c.round_trip(ty, *oid, Some(v.as_bytes()), 0, 1);
                let back = binary_out.clone().ok().flatten().map(|b| {
                    (
                        c.round_trip(ty, *oid, Some(&b), 1, 0),
                        c.round_trip(ty, *oid, Some(&b), 1, 1),
                    )
                });
                out.push((ty.to_string(), v.to_string(), text_out, binary_out, back));
            }
        }
        out
    };
    let postgres = Postgres::start();
    let want = run(postgres.port, "postgres");
    drop(postgres);
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = tmp.path().join("data");
    let mut server = walrus()
        .args(["serve", "--data"])
        .arg(&data)
        .args(["--port", &port.to_string()])
        .env("WALRUS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_port(port);
    let got = run(port, "bench");
    let stop = walrus().arg("stop").arg(&data).output().unwrap();
    let _ = server.wait();
    assert!(stop.status.success(), "{}", text(&stop));
    let mut wrong = Vec::new();
    for (g, w) in got.iter().zip(&want) {
        if g != w {
            wrong.push(format!(
                "{} {:?}:\n  walrus     {:?}\n  PostgreSQL {:?}",
                w.0, w.1, g, w
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A raw protocol session for [`type_round_trips_match_postgresql_byte_for_byte`]:
/// startup with `TimeZone=UTC`, then extended-protocol round trips.
struct Raw {
    s: std::net::TcpStream,
}

impl Raw {
    fn connect(port: u16, db: &str) -> Raw {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut body = 196_608i32.to_be_bytes().to_vec();
        for kv in ["user", "bench", "database", db, "TimeZone", "UTC", ""] {
            body.extend_from_slice(kv.as_bytes());
            body.push(0);
        }
        let mut pkt = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        pkt.extend_from_slice(&body);
        s.write_all(&pkt).unwrap();
        let mut r = Raw { s };
        r.until_ready();
        r
    }

    fn read_msg(&mut self) -> (u8, Vec<u8>) {
        use std::io::Read;
        let mut head = [0u8; 5];
        self.s.read_exact(&mut head).unwrap();
        let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize - 4;
        let mut body = vec![0u8; len];
        self.s.read_exact(&mut body).unwrap();
        (head[0], body)
    }

    /// Messages until ReadyForQuery: the DataRow values (None for NULL) and the first
    /// error's SQLSTATE.
    fn until_ready(&mut self) -> (Vec<Option<Vec<u8>>>, Option<String>) {
        let mut values = Vec::new();
        let mut error = None;
        loop {
            let (kind, body) = self.read_msg();
            match kind {
                b'D' => {
                    let n = i16::from_be_bytes([body[0], body[1]]) as usize;
                    let mut at = 2;
                    for _ in 0..n {
                        let len = i32::from_be_bytes(body[at..at + 4].try_into().unwrap());
                        at += 4;
                        if len < 0 {
                            values.push(None);
                        } else {
                            values.push(Some(body[at..at + len as usize].to_vec()));
                            at += len as usize;
                        }
                    }
                }
                b'E' if error.is_none() => {
                    let code = body
                        .split(|b| *b == 0)
                        .find(|f| f.first() == Some(&b'C'))
                        .map(|f| String::from_utf8_lossy(&f[1..]).into_owned());
                    error = Some(code.unwrap_or_default());
                }
                b'Z' => return (values, error),
                _ => {}
            }
        }
    }

    /// `select $1::<ty>` with the parameter declared as `oid`, sent in `param_format`,
    /// the result asked for in `result_format`: the result value or the SQLSTATE.
    fn round_trip(
        &mut self,
        ty: &str,
        oid: u32,
        value: Option<&[u8]>,
        param_format: i16,
        result_format: i16,
    ) -> Result<Option<Vec<u8>>, String> {
        use std::io::Write;
        fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
            let mut m = vec![kind];
            m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
            m.extend_from_slice(body);
            m
        }
        let mut p = vec![0u8];
        p.extend_from_slice(format!("select $1::{ty}").as_bytes());
        p.push(0);
        p.extend_from_slice(&1i16.to_be_bytes());
        p.extend_from_slice(&oid.to_be_bytes());
        let mut b = vec![0u8, 0u8];
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&param_format.to_be_bytes());
        b.extend_from_slice(&1i16.to_be_bytes());
        match value {
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                b.extend_from_slice(v);
            }
        }
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&result_format.to_be_bytes());
        let mut e = vec![0u8];
        e.extend_from_slice(&0i32.to_be_bytes());
        let mut out = frame(b'P', &p);
        out.extend(frame(b'B', &b));
        out.extend(frame(b'E', &e));
        out.extend(frame(b'S', &[]));
        self.s.write_all(&out).unwrap();
        match self.until_ready() {
            (_, Some(code)) => Err(code),
            (mut values, None) => Ok(values.pop().flatten()),
        }
    }
}
