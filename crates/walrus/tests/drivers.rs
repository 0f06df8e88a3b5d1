//! Real drivers against `walrus serve`: Python's psycopg 3 (connect, parameters,
//! transactions, SQLSTATE errors, prepared statements, COPY). Needs `python3` with
//! `psycopg` (`.ci/run` installs it); skipped with a message outside CI when missing.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{text, walrus};

#[test]
fn psycopg_driver_works_against_walrus() {
    let has = Command::new("python3")
        .args(["-c", "import psycopg"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !has {
        assert!(
            std::env::var("CI").is_err(),
            "psycopg missing in CI: .ci/run must pip-install it"
        );
        eprintln!("skipping: python3 with psycopg not installed");
        return;
    }
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
    let out = Command::new("python3")
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
