//! Helpers shared by the SQL session tests: a small engine with syncs off, and
//! statement runners that fail the test with the statement in the message.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use walrus_engine::Engine;
use walrus_sql::{Outcome, QueryResult, Session};

pub fn engine(dir: &std::path::Path) -> Engine {
    let cfg = walrus_engine::settings::default_config_text(1 << 20)
        .replace("shared_buffers = \"128MB\"", "shared_buffers = \"8MB\"")
        .replace(
            "wal_sync_method = \"fdatasync\"",
            "wal_sync_method = \"none\"",
        );
    Engine::init(dir, Some(&cfg)).unwrap();
    Engine::open(dir).unwrap().0
}

pub fn ok(s: &mut Session, sql: &str) -> QueryResult {
    let mut r = s.execute(sql, &[]);
    assert_eq!(r.len(), 1, "{sql}");
    match r.pop().unwrap() {
        Ok(Outcome::Done(q)) => q,
        other => panic!("{sql}: {other:?}"),
    }
}

pub fn err(s: &mut Session, sql: &str) -> &'static str {
    match s.execute(sql, &[]).pop().unwrap() {
        Err(e) => e.sqlstate,
        Ok(o) => panic!("{sql} should fail, got {o:?}"),
    }
}

/// The rows `sql` returns, each as its values' text (`NULL` for null).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn text_cells(s: &mut Session, sql: &str) -> Vec<Vec<String>> {
    ok(s, sql)
        .rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|d| walrus_sql::value::format_text(d).unwrap_or_else(|| "NULL".into()))
                .collect()
        })
        .collect()
}

/// [`text_cells`] with each row's values joined by `|`.
#[allow(dead_code)]
pub fn text_rows(s: &mut Session, sql: &str) -> Vec<String> {
    text_cells(s, sql)
        .into_iter()
        .map(|r| r.join("|"))
        .collect()
}

#[allow(dead_code)]
/// Runs `sqls` in a new session on its own thread; reports each statement's outcome
/// (rows joined by `,` or the SQLSTATE) in order, then ends.
pub fn in_thread(
    e: &Engine,
    sqls: &[&str],
) -> (thread::JoinHandle<Vec<String>>, mpsc::Receiver<()>) {
    let e = e.clone();
    let sqls: Vec<String> = sqls.iter().map(|s| s.to_string()).collect();
    let (started_tx, started_rx) = mpsc::channel();
    let h = thread::spawn(move || {
        let mut s = Session::new(e);
        started_tx.send(()).unwrap();
        sqls.iter()
            .map(|sql| match s.execute(sql, &[]).pop().unwrap() {
                Ok(walrus_sql::Outcome::Done(q)) => q
                    .rows
                    .iter()
                    .map(|r| {
                        r.iter()
                            .map(|d| walrus_sql::value::format_text(d).unwrap_or_default())
                            .collect::<Vec<_>>()
                            .join("|")
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                Ok(other) => format!("{other:?}"),
                Err(e) => e.sqlstate.to_string(),
            })
            .collect()
    });
    (h, started_rx)
}

#[allow(dead_code)]
/// Waits until the thread has started, then a little: long enough to be blocked.
pub fn settle(started: &mpsc::Receiver<()>) {
    started.recv().unwrap();
    thread::sleep(Duration::from_millis(300));
}
