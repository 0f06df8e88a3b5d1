//! `walrus serve` and `walrus stop`.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use walrus_engine::settings::Settings;
use walrus_engine::Engine;
use walrus_server::{Server, ServerConfig};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Data directory (created with defaults when absent).
    #[arg(long, default_value = "walrus-data")]
    data: PathBuf,
    /// TCP port (default: `port` in walrus.toml, else 5433).
    #[arg(long)]
    port: Option<u16>,
    /// Extra configuration file whose settings override the data directory's walrus.toml.
    #[arg(long)]
    config: Option<PathBuf>,
}

use walrus_engine::storage::dir_lock::{is_held, LOCK_FILE as PID_FILE};

pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let overrides = match &a.config {
        Some(c) => Some(
            std::fs::read_to_string(c)
                .with_context(|| format!("cannot read configuration file {}", c.display()))?,
        ),
        None => None,
    };
    if !a.data.join("control").exists() {
        Engine::init(&a.data, None)?;
        tracing::info!("created data directory {}", a.data.display());
        crate::calibrate_replay_rate(&a.data, overrides.as_deref());
    }
    let mut settings = Settings::load(&a.data)?;
    if let Some(text) = &overrides {
        settings.apply_toml(text)?;
    }
    let extra = |k: &str| {
        settings
            .extra
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    let port = match a.port {
        Some(p) => p,
        None => match extra("port") {
            Some(p) => p.parse().with_context(|| format!("invalid port \"{p}\""))?,
            None => 5433,
        },
    };
    let listen = extra("listen_addresses").unwrap_or_else(|| "127.0.0.1".into());
    let ip: IpAddr = match listen.as_str() {
        "*" | "0.0.0.0" => "0.0.0.0".parse()?,
        "localhost" => "127.0.0.1".parse()?,
        other => other
            .parse()
            .with_context(|| format!("invalid listen_addresses \"{other}\""))?,
    };
    // PostgreSQL's built-in default (Debian's packages use /var/run/postgresql).
    let unix_socket_directories: Vec<PathBuf> = extra("unix_socket_directories")
        .unwrap_or_else(|| "/tmp".into())
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    let max_connections = match extra("max_connections") {
        Some(m) => m
            .parse()
            .with_context(|| format!("invalid max_connections \"{m}\""))?,
        None => 100,
    };
    // PostgreSQL's range and default: 1 s to 10 min, 1 min.
    let authentication_timeout = match extra("authentication_timeout") {
        Some(t) => walrus_engine::settings::parse_duration(&t)
            .filter(|d| (Duration::from_secs(1)..=Duration::from_secs(600)).contains(d))
            .with_context(|| {
                format!(
                    "invalid value for parameter \"authentication_timeout\": \"{t}\" \
                     (expected a duration between 1s and 10min)"
                )
            })?,
        None => Duration::from_secs(60),
    };
    let password = match extra("password") {
        Some(p) => Some(
            walrus_server::auth::ScramVerifier::from_setting(&p)
                .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?,
        ),
        None => None,
    };
    // Checked here so a bad value stops the server instead of failing every statement.
    walrus_server::statement_memory_limit(&settings)
        .map_err(|e| anyhow::anyhow!("invalid configuration: {}", e.message))?;
    // The engine locks the directory (walrus.pid) before recovery, so `walrus stop` and a
    // second server see this process while it recovers.
    let (engine, report) = Engine::open_with(&a.data, settings)?;
    if let Some(r) = report {
        tracing::info!(
            "recovered {} bytes of WAL in {:.2} s",
            r.replayed_bytes,
            r.elapsed.as_secs_f64()
        );
    }
    let server = Server::bind(
        engine.clone(),
        &ServerConfig {
            listen: SocketAddr::new(ip, port),
            max_connections,
            authentication_timeout,
            password,
            unix_socket_directories,
        },
    )?;
    tracing::info!(
        "walrus listening on {}, data directory {}",
        server.local_addr()?,
        a.data.display()
    );
    println!("walrus listening on {}", server.local_addr()?);
    for path in server.unix_socket_paths() {
        tracing::info!("walrus listening on Unix-domain socket {}", path.display());
        println!("walrus listening on Unix-domain socket {}", path.display());
    }

    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = shutdown.clone();
    std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!("cannot install signal handlers: {e}");
                return;
            }
        };
        rt.block_on(async {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(t) => t,
                    Err(_) => return,
                };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        });
        tracing::info!("shutdown requested");
        flag.store(true, Ordering::Release);
    });
    server.run(&shutdown);
    engine.shutdown()?;
    tracing::info!("walrus stopped");
    Ok(())
}

pub fn stop(dir: &Path) -> anyhow::Result<()> {
    let pid_path = dir.join(PID_FILE);
    let pid = std::fs::read_to_string(&pid_path).with_context(|| {
        format!(
            "no {} in {}: is walrus running there?",
            PID_FILE,
            dir.display()
        )
    })?;
    let pid = pid.trim().to_string();
    // Nobody holds the pid file's lock: the process that wrote it is gone (a crash), and
    // signalling its pid could hit an unrelated process that reuses the number.
    if !is_held(&pid_path) {
        bail!(
            "walrus is not running on {} (its {} is left from pid {pid}, which ended)",
            dir.display(),
            PID_FILE
        );
    }
    let st = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()?;
    if !st.success() {
        bail!("could not signal walrus (pid {pid})");
    }
    let start = Instant::now();
    while is_held(&pid_path) {
        if start.elapsed() > Duration::from_secs(120) {
            bail!("walrus (pid {pid}) did not stop within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if pid_path.exists() {
        // A clean stop removes the file before the lock goes: this one ended on the
        // signal itself, during startup or recovery, before its signal handling began.
        println!("walrus stopped before its shutdown checkpoint (it was still starting); the next start recovers");
    } else {
        println!("walrus stopped");
    }
    Ok(())
}
