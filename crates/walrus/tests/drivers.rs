//! Real drivers against `walrus serve`: Python's psycopg 3 (connect, parameters,
//! transactions, SQLSTATE errors, prepared statements, COPY). Needs `python3` with
//! `psycopg` (`.ci/run` installs it); skipped with a message outside CI when missing.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{text, walrus};

/// The first Python that can import psycopg 3: the one on PATH, else Debian's (where
/// `.ci/run` installs `python3-psycopg`; PATH may lead to another Python, e.g. pyenv's).
fn python_with_psycopg() -> Option<&'static str> {
    ["python3", "/usr/bin/python3"].into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import psycopg"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    })
}

#[test]
fn psycopg_driver_works_against_walrus() {
    let Some(python) = python_with_psycopg() else {
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
/// results, transactions, SQLSTATE errors, COPY through the simple protocol.
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
        Ok(())
    });
    let stop = walrus().arg("stop").arg(&data).output().unwrap();
    let _ = server.wait();
    assert!(result.is_ok(), "tokio-postgres: {result:?}");
    assert!(stop.status.success(), "{}", text(&stop));
}
