//! walrus from this very binary: `walrus init` (16 MB WAL segments, as PostgreSQL's), a
//! configuration file with the matched settings, and `walrus serve --config`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::bail;

use super::process::run_captured;
use super::server::Settings;
use super::Tools;

fn config_path(data: &Path) -> PathBuf {
    data.parent()
        .unwrap_or(Path::new("."))
        .join("walrus-bench.toml")
}

pub fn init(tools: &Tools, data: &Path, s: &Settings, _root: &Path) -> anyhow::Result<()> {
    let mut cmd = Command::new(&tools.walrus);
    cmd.arg("init")
        .arg(data)
        .args(["--wal-segment-size", "16MB"])
        .env("WALRUS_LOG", "warn");
    let (status, out, err) = run_captured(
        "walrus init",
        &mut cmd,
        &tools.scratch,
        Duration::from_secs(120),
    )?;
    if !status.success() {
        bail!("walrus init failed: {}{}", out.trim(), err.trim());
    }
    let conf = format!(
        "# written by walrus-bench compare\n\
         listen_addresses = \"127.0.0.1\"\n\
         unix_socket_directories = \"{}\"\n\
         max_connections = {}\n\
         shared_buffers = \"{}\"\n\
         max_wal_size = \"{}\"\n\
         checkpoint_timeout = \"{}\"\n\
         synchronous_commit = \"{}\"\n\
         page_protection = \"{}\"\n\
         wal_sync_method = \"{}\"\n",
        tools
            .socket_dir
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        s.max_connections,
        s.shared_buffers,
        s.max_wal_size,
        s.checkpoint_timeout,
        if s.synchronous_commit { "on" } else { "off" },
        if s.double_write {
            "dwb"
        } else if s.page_images {
            "fpw"
        } else {
            "none"
        },
        if s.pmem_forced { "pmem" } else { "fdatasync" }
    );
    let mut conf = conf;
    for (k, v) in &s.walrus_extra {
        conf.push_str(&format!("{k} = {v}\n"));
    }
    std::fs::write(config_path(data), conf)?;
    Ok(())
}

pub fn command(tools: &Tools, data: &Path, port: u16) -> Command {
    let mut cmd = Command::new(&tools.walrus);
    cmd.arg("serve")
        .arg("--data")
        .arg(data)
        .args(["--port", &port.to_string()])
        .arg("--config")
        .arg(config_path(data))
        .env("WALRUS_LOG", "info")
        .env("NO_COLOR", "1");
    if let Some(parent) = data.parent() {
        cmd.current_dir(parent);
    }
    cmd
}
