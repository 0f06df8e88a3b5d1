//! Real applications' first statements (issue 43), run with their real tools against a
//! `walrus serve` this test starts:
//! - sysbench (Debian's package): `prepare`, `run` with several threads, and `cleanup`
//!   of every bundled OLTP script (its tables have a `serial` key and `k INTEGER
//!   DEFAULT '0' NOT NULL`, and it checks every statement's result);
//! - Django 5.2 (PyPI, in `target/django-venv`, which `.ci/run` makes): `migrate` of
//!   its built-in apps and of an app of this test's own (`tests/django/`: foreign keys
//!   with CASCADE and PROTECT, a two-column unique constraint, DecimalField,
//!   JSONField), then that app's ORM use (`tests/django/check.py`: annotate(Count),
//!   JSON lookups, select_for_update, the constraints enforced);
//! - session settings the way pg_dump, Django and libpq change them: `set_config()`
//!   (session-wide and local to a transaction) and the startup packet's options
//!   (`PGOPTIONS='-c name=value'`), a bad one ending the connection.
//!
//! Tools missing outside CI skip the test with a message; in CI (`CI` set) they fail it.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::servers::{start_walrus, Server};
use common::text;

fn have(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn available(tool: &str, arg: &str, package: &str) -> bool {
    if have(tool, arg) {
        return true;
    }
    assert!(
        std::env::var("CI").is_err(),
        "{tool} missing in CI: .ci/run must install {package}"
    );
    eprintln!("skipping: {tool} not installed");
    false
}

/// A started walrus and its port.
fn walrus_server(dir: &std::path::Path) -> (Server, u16) {
    let (server, conninfo) = start_walrus(dir).expect("start walrus");
    let port: u16 = conninfo
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("port="))
        .and_then(|p| p.parse().ok())
        .expect("port in conninfo");
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "walrus did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, port)
}

/// psql running `sql`, each `;`-separated statement as its own `-c` (its own query
/// message).
fn psql(port: u16, options: Option<&str>, sql: &str) -> Output {
    let mut c = Command::new("psql");
    c.args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1"])
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "bench",
            "-d",
            "bench",
        ]);
    for statement in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        c.args(["-c", statement]);
    }
    if let Some(o) = options {
        c.env("PGOPTIONS", o);
    }
    c.output().expect("run psql")
}

fn lines(o: &Output) -> Vec<String> {
    assert!(o.status.success(), "psql: {}", text(o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

const SYSBENCH_SCRIPTS: [&str; 10] = [
    "oltp_read_write",
    "oltp_read_only",
    "oltp_write_only",
    "oltp_point_select",
    "oltp_update_index",
    "oltp_update_non_index",
    "oltp_delete",
    "oltp_insert",
    "select_random_points",
    "select_random_ranges",
];

fn sysbench(port: u16, script: &str, command: &str, extra: &[&str]) -> Output {
    Command::new("sysbench")
        .arg(script)
        .args([
            "--db-driver=pgsql",
            "--pgsql-host=127.0.0.1",
            &format!("--pgsql-port={port}"),
            "--pgsql-user=bench",
            "--pgsql-db=bench",
            "--tables=2",
            "--table-size=2000",
            "--threads=4",
        ])
        .args(extra)
        .arg(command)
        .output()
        .expect("run sysbench")
}

#[test]
fn sysbench_prepares_runs_and_cleans_up_every_oltp_script() {
    if !available("sysbench", "--version", "sysbench")
        || !available("psql", "--version", "postgresql-client-15")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = walrus_server(dir.path());
    let o = sysbench(port, "oltp_common", "prepare", &[]);
    assert!(o.status.success(), "sysbench prepare: {}", text(&o));
    // The tables sysbench made: a serial key filled from its sequence, k's default.
    let rows = lines(&psql(
        port,
        None,
        "select count(*), min(id), max(id), count(distinct id) from sbtest1",
    ));
    assert_eq!(rows, vec!["2000|1|2000|2000"], "sbtest1 after prepare");
    assert_eq!(
        lines(&psql(
            port,
            None,
            "select pg_get_serial_sequence('sbtest1', 'id')"
        )),
        vec!["public.sbtest1_id_seq"]
    );
    for script in SYSBENCH_SCRIPTS {
        let o = sysbench(port, script, "run", &["--time=2"]);
        let out = text(&o);
        assert!(o.status.success(), "sysbench {script} run: {out}");
        assert!(!out.contains("FATAL"), "sysbench {script} run: {out}");
        let transactions: u64 = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("transactions:"))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(
            transactions > 0,
            "sysbench {script}: no transaction ran: {out}"
        );
        eprintln!("sysbench {script}: {transactions} transactions");
    }
    // oltp_insert and oltp_delete insert rows without an id: the sequence gave them
    // fresh ones, never a duplicate of a key already there.
    let rows = lines(&psql(
        port,
        None,
        "select count(*) = count(distinct id) from sbtest1",
    ));
    assert_eq!(rows, vec!["t"]);
    let o = sysbench(port, "oltp_common", "cleanup", &[]);
    assert!(o.status.success(), "sysbench cleanup: {}", text(&o));
    let rows = lines(&psql(
        port,
        None,
        "select count(*) from pg_class where relname like 'sbtest%'",
    ));
    assert_eq!(
        rows,
        vec!["0"],
        "cleanup drops the tables and their sequences"
    );
}

#[test]
fn set_config_and_startup_options_change_settings_as_set_does() {
    if !available("psql", "--version", "postgresql-client-15") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = walrus_server(dir.path());
    // pg_dump's first statement, and Django's time zone.
    let rows = lines(&psql(
        port,
        None,
        "select pg_catalog.set_config('search_path', '', false); show search_path; \
         select set_config('TimeZone', 'America/New_York', false); show timezone",
    ));
    assert_eq!(rows, vec!["", "", "America/New_York", "America/New_York"]);
    // is_local: until the transaction ends.
    let rows = lines(&psql(
        port,
        None,
        "begin; select set_config('statement_timeout', '5s', true); show statement_timeout; \
         commit; show statement_timeout",
    ));
    assert_eq!(rows, vec!["5s", "5s", "0"]);
    // A value SET would refuse fails the statement.
    let o = psql(port, None, "select set_config('work_mem', 'lots', false)");
    assert!(!o.status.success(), "bad work_mem accepted: {}", text(&o));
    let o = psql(
        port,
        None,
        "select set_config('no_such_setting', '1', false)",
    );
    assert!(
        !o.status.success(),
        "unknown setting accepted: {}",
        text(&o)
    );
    // PGOPTIONS: applied before the first statement.
    let rows = lines(&psql(
        port,
        Some("-c TimeZone=UTC -c statement_timeout=7s"),
        "show timezone; show statement_timeout",
    ));
    assert_eq!(rows, vec!["UTC", "7s"]);
    let o = psql(port, Some("-c TimeZone=Nowhere/Special"), "select 1");
    assert!(
        !o.status.success(),
        "bad startup option accepted: {}",
        text(&o)
    );
    let o = psql(port, Some("--bogus"), "select 1");
    assert!(
        !o.status.success(),
        "malformed options accepted: {}",
        text(&o)
    );
}

/// The Python with Django 5.2: `WALRUS_DJANGO_PYTHON`, else `target/django-venv`'s.
fn django_python() -> Option<std::path::PathBuf> {
    let python = std::env::var_os("WALRUS_DJANGO_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/django-venv/bin/python")
        });
    let ok = Command::new(&python)
        .args([
            "-c",
            "import django, psycopg; assert django.VERSION[:2] == (5, 2)",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    assert!(
        std::env::var("CI").is_err(),
        "Django 5.2 missing in CI: .ci/run must make target/django-venv"
    );
    eprintln!(
        "skipping: no Python with Django 5.2 (run .ci/run once, or set WALRUS_DJANGO_PYTHON)"
    );
    None
}

/// Copies `from` (a directory of plain files and directories) into `to`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn django_migrates_and_its_orm_runs() {
    let Some(python) = django_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = walrus_server(&dir.path().join("data"));
    // The project is copied: makemigrations writes the app's migration beside it.
    let project = dir.path().join("project");
    copy_tree(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/django"),
        &project,
    );
    let manage = |args: &[&str]| -> Output {
        let out = Command::new("timeout")
            .arg("600")
            .arg(&python)
            .arg("manage.py")
            .args(args)
            .current_dir(&project)
            .env("WALRUS_PORT", port.to_string())
            .output()
            .expect("run manage.py");
        assert!(
            out.status.success(),
            "manage.py {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    manage(&["makemigrations", "shop"]);
    let migrated = String::from_utf8_lossy(&manage(&["migrate"]).stdout).into_owned();
    for step in [
        "contenttypes.0002_remove_content_type_name... OK",
        "auth.0012_alter_user_first_name_max_length... OK",
        "shop.0001_initial... OK",
    ] {
        assert!(migrated.contains(step), "{step} not applied:\n{migrated}");
    }
    let again = String::from_utf8_lossy(&manage(&["migrate"]).stdout).into_owned();
    assert!(again.contains("No migrations to apply"), "{again}");
    let checked = manage(&["shell", "-c", "exec(open('check.py').read())"]);
    let checked = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.contains("django check passed"), "{checked}");
    // What migrate built, as PostgreSQL's catalog shows it.
    let out = psql(
        port,
        None,
        "select count(*) from information_schema.columns where table_name = 'django_content_type'",
    );
    assert_eq!(lines(&out), ["3"], "the dropped column is gone");
}
