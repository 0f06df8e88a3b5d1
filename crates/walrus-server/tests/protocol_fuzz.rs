//! Protocol fuzzing against a live server: random startup packets and random sequences
//! of frontend messages (every message kind the server reads, with random bodies, plus
//! raw garbage), each case on its own connection. After every case a fresh session must
//! still answer `select 1`, and no thread of the (in-process) server may have panicked:
//! no input may panic the server, hang it, or take down another session. The case count is bounded (`PROPTEST_CASES`, default 200).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use walrus_engine::Engine;
use walrus_server::{Server, ServerConfig};

struct Live {
    addr: SocketAddr,
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
        let _ = self.engine.shutdown();
    }
}

/// Set by the panic hook: the server runs in this process, so a panic on any of its
/// threads (even one a session catches and reports as XX000) is seen here.
static PANICKED: AtomicBool = AtomicBool::new(false);

fn start() -> Live {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICKED.store(true, Ordering::SeqCst);
        previous(info);
    }));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    Engine::init(&data, None).unwrap();
    let (engine, _) = Engine::open(&data).unwrap();
    let server = Server::bind(
        engine.clone(),
        &ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            max_connections: 50,
            authentication_timeout: Duration::from_secs(5),
            password: None,
            unix_socket_directories: Vec::new(),
        },
    )
    .unwrap();
    let addr = server.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || server.run(&flag));
    Live {
        addr,
        stop,
        thread: Some(thread),
        engine,
        _dir: dir,
    }
}

fn startup_packet() -> Vec<u8> {
    let mut body = 196_608i32.to_be_bytes().to_vec();
    for kv in ["user", "fuzz", "database", "fuzz", ""] {
        body.extend_from_slice(kv.as_bytes());
        body.push(0);
    }
    let mut pkt = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    pkt.extend_from_slice(&body);
    pkt
}

/// Reads until ReadyForQuery; returns everything read.
fn read_until_ready(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        // ReadyForQuery: 'Z', length 5, status byte.
        if let Some(p) = seen.windows(5).position(|w| w == [b'Z', 0, 0, 0, 5]) {
            if seen.len() > p + 5 {
                return Ok(seen);
            }
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed",
            ));
        }
        seen.extend_from_slice(&buf[..n]);
    }
}

/// A fresh session answers `select 1`.
fn healthy(addr: SocketAddr) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&startup_packet()).map_err(|e| e.to_string())?;
    read_until_ready(&mut s).map_err(|e| format!("startup: {e}"))?;
    let sql = b"select 1\0";
    let mut q = vec![b'Q'];
    q.extend_from_slice(&((sql.len() + 4) as i32).to_be_bytes());
    q.extend_from_slice(sql);
    s.write_all(&q).map_err(|e| e.to_string())?;
    let reply = read_until_ready(&mut s).map_err(|e| format!("select 1: {e}"))?;
    // DataRow: 'D', length 11, one column, length 1, "1".
    let row = [b'D', 0, 0, 0, 11, 0, 1, 0, 0, 0, 1, b'1'];
    if !reply.windows(row.len()).any(|w| w == row) {
        return Err(format!("no row 1 in {reply:?}"));
    }
    Ok(())
}

/// One frontend message: a kind the server reads (or any byte), a body, and a length
/// word that is usually right and sometimes a lie.
fn message() -> impl Strategy<Value = Vec<u8>> {
    let kinds = prop_oneof![
        Just(b'Q'),
        Just(b'P'),
        Just(b'B'),
        Just(b'E'),
        Just(b'D'),
        Just(b'C'),
        Just(b'S'),
        Just(b'H'),
        Just(b'd'),
        Just(b'c'),
        Just(b'f'),
        Just(b'F'),
        Just(b'p'),
        any::<u8>(),
    ];
    let body = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        // Plausible bodies: a statement name, SQL, parameter counts.
        "[a-z ]{0,12}".prop_map(|s| {
            let mut b = s.into_bytes();
            b.push(0);
            b.extend_from_slice(b"select $1\0");
            b.extend_from_slice(&[0, 1, 0, 0, 0, 23]);
            b
        }),
        Just(b"\0\0\0\x01\0\x01\0\0\0\x04abcd\0\0".to_vec()),
        Just(b"copy t from stdin\0".to_vec()),
    ];
    let len_lie = prop_oneof![
        8 => Just(None),
        1 => any::<i32>().prop_map(Some),
    ];
    (kinds, body, len_lie).prop_map(|(k, body, lie)| {
        let mut m = vec![k];
        let len = lie.unwrap_or(body.len() as i32 + 4);
        m.extend_from_slice(&len.to_be_bytes());
        m.extend_from_slice(&body);
        m
    })
}

fn case() -> impl Strategy<Value = (bool, Vec<u8>, Vec<Vec<u8>>)> {
    (
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..32),
        proptest::collection::vec(message(), 0..8),
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(200),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_input_panics_or_hangs_the_server((valid_startup, garbage, msgs) in case()) {
        let live = LIVE.with(|l| l.addr);
        let mut s = TcpStream::connect(live).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        if valid_startup {
            s.write_all(&startup_packet()).unwrap();
            let _ = read_until_ready(&mut s);
        } else {
            let _ = s.write_all(&garbage);
        }
        for m in &msgs {
            if s.write_all(m).is_err() {
                break;
            }
        }
        let mut sink = [0u8; 4096];
        let _ = s.read(&mut sink);
        drop(s);
        prop_assert_eq!(healthy(live), Ok(()));
        prop_assert!(!PANICKED.load(Ordering::SeqCst), "a server thread panicked");
    }
}

thread_local! {
    static LIVE: Live = start();
}
