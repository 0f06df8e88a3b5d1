//! The real `walrus serve` driven by the real PostgreSQL 15 clients: psql and pgbench
//! (`-i`, then tpcb-like in `-M simple`, `-M extended` and `-M prepared`, `-S`, `-N`, a
//! custom `-f` script), checking the TPC-B invariant, plus a kill -9 during a pgbench run
//! followed by a restart. Skips (with a message, failing in CI) when the clients are not
//! installed; `.ci/run` installs them.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
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
        let child = walrus()
            .args(["serve", "--data"])
            .arg(data)
            .args(["--port", &port.to_string()])
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
        Command::new("psql")
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
