//! walrus-server: the PostgreSQL wire protocol v3 in front of `walrus-sql` sessions.
//!
//! One OS thread per connection with blocking socket I/O (at most `max_connections`,
//! default 100): sessions call the synchronous engine directly, and a commit waiting
//! for its WAL flush parks only its own thread while the group-commit leader syncs for
//! everyone. The protocol codec is walrus's own (`protocol.rs`, ~300 lines) rather than
//! the pgwire crate: walrus must own the startup parameters, the transaction status byte,
//! the buffering of extended-protocol replies until Sync and the cancel flag — the parts
//! that, tried against a pgwire stub, were wrong or had to be overridden anyway (its own
//! `server_version`, four socket writes per extended-protocol round trip, cancel only at
//! an `.await`).
//!
//! A malformed message or an I/O error ends only that connection; a panic in a session
//! is caught and reported to that client as XX000 (the engine's own invariants abort the
//! whole process instead, see `buffer::PageWrite`).

#![forbid(unsafe_code)]

pub mod auth;
mod client_stream;
mod connection;
pub mod protocol;
pub mod socket;

/// Validates the SQL layer's `statement_memory_limit` (for `walrus serve` at startup).
pub use walrus_sql::statement_memory_limit;

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use walrus_engine::Engine;

use socket::{Socket, UnixSocketError, UnixSocketListener};

pub struct ServerConfig {
    pub listen: SocketAddr,
    pub max_connections: usize,
    /// How long a client may take to send its startup packet and authenticate.
    pub authentication_timeout: Duration,
    /// When set, every connection authenticates with SCRAM-SHA-256 against it;
    /// otherwise trust (PostgreSQL's `trust` method, loopback by default).
    pub password: Option<auth::ScramVerifier>,
    /// Directories to create the Unix-domain socket `.s.PGSQL.<port>` in (PostgreSQL's
    /// `unix_socket_directories`); empty: TCP only.
    pub unix_socket_directories: Vec<PathBuf>,
}

/// Cancel keys of the live sessions: (pid, secret) → the session's interrupt flag.
#[derive(Default)]
pub struct CancelRegistry {
    sessions: Mutex<HashMap<(i32, i32), Arc<AtomicBool>>>,
}

impl CancelRegistry {
    fn register(&self, key: (i32, i32), flag: Arc<AtomicBool>) {
        self.sessions.lock().insert(key, flag);
    }
    fn remove(&self, key: (i32, i32)) {
        self.sessions.lock().remove(&key);
    }
    fn cancel(&self, key: (i32, i32)) -> bool {
        match self.sessions.lock().get(&key) {
            Some(f) => {
                f.store(true, Ordering::Release);
                true
            }
            None => false,
        }
    }
}

/// Refused connections waiting for their 53300 (beyond this they are just closed).
const REFUSE_QUEUE_LEN: usize = 64;
/// How long a refused client gets to send its startup packet.
const REFUSE_TIMEOUT: Duration = Duration::from_secs(2);

pub struct Server {
    engine: Engine,
    listener: TcpListener,
    /// One per directory of `unix_socket_directories` that took a socket.
    unix_listeners: Vec<UnixSocketListener>,
    max_connections: usize,
    authentication_timeout: Duration,
    password: Option<Arc<auth::ScramVerifier>>,
    active: Arc<AtomicUsize>,
    /// Connections over `max_connections`, refused one at a time by one thread.
    refuse_queue: std::sync::mpsc::SyncSender<Socket>,
    next_pid: AtomicI32,
    cancel: Arc<CancelRegistry>,
    /// The server's own settings with the values in effect, for every session's SHOW.
    shown_settings: Arc<Vec<(String, String)>>,
}

impl Server {
    pub fn bind(engine: Engine, cfg: &ServerConfig) -> Result<Server, BindError> {
        let listener = TcpListener::bind(cfg.listen).map_err(|source| BindError::Tcp {
            addr: cfg.listen,
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| BindError::Tcp {
                addr: cfg.listen,
                source,
            })?;
        // Named after the port actually bound (a configured port 0 picks a free one).
        let port = listener
            .local_addr()
            .map_err(|source| BindError::Tcp {
                addr: cfg.listen,
                source,
            })?
            .port();
        let unix_listeners = bind_unix_sockets(&cfg.unix_socket_directories, port)?;
        let shown_settings = Arc::new(shown_settings(cfg, port));
        let cancel = Arc::new(CancelRegistry::default());
        let (refuse_queue, refused) = std::sync::mpsc::sync_channel(REFUSE_QUEUE_LEN);
        let registry = cancel.clone();
        std::thread::Builder::new()
            .name("walrus-refuse".into())
            .spawn(move || {
                // Each refusal is bounded in time, so a silent client delays the next
                // refusal by at most that much, and never uses a session's thread.
                for stream in refused {
                    if let Err(e) = connection::refuse(stream, &registry, REFUSE_TIMEOUT) {
                        tracing::debug!("refused connection: {e}");
                    }
                }
            })
            .map_err(BindError::Thread)?;
        Ok(Server {
            engine,
            listener,
            unix_listeners,
            max_connections: cfg.max_connections,
            authentication_timeout: cfg.authentication_timeout,
            refuse_queue,
            password: cfg.password.clone().map(Arc::new),
            active: Arc::new(AtomicUsize::new(0)),
            next_pid: AtomicI32::new(1000),
            cancel,
            shown_settings,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The Unix-domain socket files this server listens on.
    pub fn unix_socket_paths(&self) -> Vec<PathBuf> {
        self.unix_listeners.iter().map(|u| u.path.clone()).collect()
    }

    /// Accepts connections until `shutdown` is set, then waits (bounded) for sessions to
    /// end.
    pub fn run(&self, shutdown: &AtomicBool) {
        while !shutdown.load(Ordering::Acquire) {
            let mut accepted = false;
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    accepted = true;
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_nodelay(true);
                    self.start_session(Socket::Tcp(stream), peer.to_string());
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            for unix in &self.unix_listeners {
                match unix.listener.accept() {
                    Ok((stream, _)) => {
                        accepted = true;
                        let _ = stream.set_nonblocking(false);
                        self.start_session(Socket::Unix(stream), "[local]".into());
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => {
                        tracing::warn!("accept on {} failed: {e}", unix.path.display());
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
            if !accepted {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for _ in 0..250 {
            if self.active.load(Ordering::Acquire) == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Gives a new connection a thread of its own, or (over `max_connections`) to the
    /// refusing thread.
    fn start_session(&self, stream: Socket, peer: String) {
        if self.active.load(Ordering::Acquire) >= self.max_connections {
            // Over the limit: no thread of its own. When even the refusal queue is full
            // the connection is closed without a word.
            if let Err(std::sync::mpsc::TrySendError::Full(_)) = self.refuse_queue.try_send(stream)
            {
                tracing::warn!("too many connections: closed one from {peer}");
            }
            return;
        }
        // A connection number for the logs (the session's pid is the engine's).
        let pid = self.next_pid.fetch_add(1, Ordering::Relaxed);
        let engine = self.engine.clone();
        let auth_timeout = self.authentication_timeout;
        let active = self.active.clone();
        let cancel = self.cancel.clone();
        let password = self.password.clone();
        let shown_settings = self.shown_settings.clone();
        active.fetch_add(1, Ordering::AcqRel);
        let spawned = std::thread::Builder::new()
            .name(format!("walrus-conn-{pid}"))
            // Room for `max_stack_depth` and the slop beyond it (walrus_sql::stack).
            .stack_size(walrus_sql::stack::SESSION_THREAD_STACK_BYTES)
            .spawn(move || {
                walrus_sql::stack::mark_base();
                tracing::debug!("connection {pid} from {peer}");
                if let Err(e) = connection::serve(
                    stream,
                    engine,
                    &cancel,
                    auth_timeout,
                    password.as_deref(),
                    &shown_settings,
                ) {
                    tracing::debug!("connection {pid} ended: {e}");
                }
                active.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            self.active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What SHOW says for the settings the server reads, spelled as PostgreSQL shows them.
fn shown_settings(cfg: &ServerConfig, port: u16) -> Vec<(String, String)> {
    let timeout = cfg.authentication_timeout.as_secs();
    [
        ("port", port.to_string()),
        ("listen_addresses", cfg.listen.ip().to_string()),
        (
            "unix_socket_directories",
            cfg.unix_socket_directories
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ("max_connections", cfg.max_connections.to_string()),
        (
            "authentication_timeout",
            if timeout.is_multiple_of(60) {
                format!("{}min", timeout / 60)
            } else {
                format!("{timeout}s")
            },
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Why the server could not start listening.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("could not listen on {addr}: {source}")]
    Tcp {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Unix(UnixSocketError),
    #[error("could not create any Unix-domain sockets ({0})")]
    NoUnixSocket(String),
    #[error("could not start the connection-refusing thread: {0}")]
    Thread(std::io::Error),
}

/// PostgreSQL's rule: a directory that cannot take a socket is reported and skipped, but
/// at least one of those listed must; a socket another server answers on stops startup.
fn bind_unix_sockets(dirs: &[PathBuf], port: u16) -> Result<Vec<UnixSocketListener>, BindError> {
    let mut bound = Vec::new();
    let mut failures = Vec::new();
    for dir in dirs {
        match socket::bind_unix(dir, port) {
            Ok(l) => bound.push(l),
            Err(e @ UnixSocketError::InUse(_)) => return Err(BindError::Unix(e)),
            Err(e) => {
                tracing::warn!("{e}");
                failures.push(e.to_string());
            }
        }
    }
    if bound.is_empty() && !dirs.is_empty() {
        return Err(BindError::NoUnixSocket(failures.join("; ")));
    }
    Ok(bound)
}
