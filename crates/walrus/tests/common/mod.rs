//! Helpers shared by the server tests: run the real `walrus` binary, read its output.

#![allow(dead_code)]

pub mod servers;

use std::process::{Command, Output};

pub fn walrus() -> Command {
    Command::new(env!("CARGO_BIN_EXE_walrus"))
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
