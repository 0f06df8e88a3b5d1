//! A client's socket: TCP, or a Unix-domain socket in one of `unix_socket_directories`
//! (PostgreSQL's `.s.PGSQL.<port>` files, where psql and pgbench look when given a
//! directory as host or no host at all).
//!
//! Local clients are better served by the Unix-domain socket: a loopback TCP round trip
//! runs the whole TCP/IP stack twice (segment, ACK, softirq) for bytes that never leave
//! the machine, and on a 2-vCPU virtual machine that kernel work is a large part of a
//! short statement's cost (BENCHMARKS.md has both transports side by side).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One connected client, whichever way it came.
#[derive(Debug)]
pub enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    pub fn set_read_timeout(&self, limit: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(limit),
            Socket::Unix(s) => s.set_read_timeout(limit),
        }
    }

    pub fn set_write_timeout(&self, limit: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_write_timeout(limit),
            Socket::Unix(s) => s.set_write_timeout(limit),
        }
    }

    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_nonblocking(on),
            Socket::Unix(s) => s.set_nonblocking(on),
        }
    }

    pub fn try_clone(&self) -> io::Result<Socket> {
        Ok(match self {
            Socket::Tcp(s) => Socket::Tcp(s.try_clone()?),
            Socket::Unix(s) => Socket::Unix(s.try_clone()?),
        })
    }

    /// Ends reading only: a session blocked reading from its client wakes to
    /// end-of-input, while a last message (a FATAL error) can still be written.
    pub fn shutdown_read(&self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.shutdown(Shutdown::Read),
            Socket::Unix(s) => s.shutdown(Shutdown::Read),
        }
    }

    /// The client's address and port (none for a Unix-domain socket, as
    /// `pg_stat_activity` shows such a client: NULL address, port -1).
    pub fn peer(&self) -> (Option<String>, Option<i32>) {
        match self {
            Socket::Tcp(s) => match s.peer_addr() {
                Ok(a) => (Some(a.ip().to_string()), Some(i32::from(a.port()))),
                Err(_) => (None, None),
            },
            Socket::Unix(_) => (None, Some(-1)),
        }
    }

    pub fn shutdown(&self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.shutdown(Shutdown::Both),
            Socket::Unix(s) => s.shutdown(Shutdown::Both),
        }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Read for &Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match *self {
            Socket::Tcp(s) => (&*s).read(buf),
            Socket::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        (&*self).write(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &Socket {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match *self {
            Socket::Tcp(s) => (&*s).write(data),
            Socket::Unix(s) => (&*s).write(data),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The socket file for `port` in `dir`, named as libpq expects.
pub fn unix_socket_path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

/// A listening Unix-domain socket; its file is removed when it is dropped.
#[derive(Debug)]
pub struct UnixSocketListener {
    pub listener: UnixListener,
    pub path: PathBuf,
}

impl Drop for UnixSocketListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Why a Unix-domain socket could not be created.
#[derive(Debug, thiserror::Error)]
pub enum UnixSocketError {
    /// Another server answers on this socket: starting would steal its clients.
    #[error(
        "another server is listening on Unix-domain socket \"{0}\"; \
         is another postmaster or walrus running on this port?"
    )]
    InUse(PathBuf),
    #[error("could not create Unix-domain socket \"{path}\": {source}")]
    Create { path: PathBuf, source: io::Error },
}

/// Binds `.s.PGSQL.<port>` in `dir`, non-blocking, with mode 0777 (PostgreSQL's
/// `unix_socket_permissions` default: access is governed by authentication, as on TCP).
/// A socket file nobody answers on is left over from a server that did not shut down
/// cleanly (kill -9, power loss) and is replaced; one that answers is refused.
pub fn bind_unix(dir: &Path, port: u16) -> Result<UnixSocketListener, UnixSocketError> {
    use std::os::unix::fs::PermissionsExt;
    let path = unix_socket_path(dir, port);
    let create = |source| UnixSocketError::Create {
        path: path.clone(),
        source,
    };
    if std::fs::symlink_metadata(&path).is_ok() {
        if UnixStream::connect(&path).is_ok() {
            return Err(UnixSocketError::InUse(path));
        }
        std::fs::remove_file(&path).map_err(create)?;
    }
    let listener = UnixListener::bind(&path).map_err(create)?;
    // From here on the file is ours: dropping the listener removes it.
    let bound = UnixSocketListener {
        listener,
        path: path.clone(),
    };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).map_err(create)?;
    bound.listener.set_nonblocking(true).map_err(create)?;
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stale socket file (its server gone) is replaced; a live one is refused; the
    /// file goes away with the listener.
    #[test]
    fn stale_sockets_are_replaced_and_live_ones_refused() {
        let dir = std::env::temp_dir().join(format!("walrus-sock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let port = 6543;
        let path = unix_socket_path(&dir, port);
        // A server that died without removing its socket.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists(), "a dropped std listener leaves its file");
        let first = bind_unix(&dir, port).unwrap();
        assert!(matches!(
            bind_unix(&dir, port),
            Err(UnixSocketError::InUse(p)) if p == path
        ));
        let mut client = UnixStream::connect(&path).unwrap();
        client.write_all(b"x").unwrap();
        drop(first);
        assert!(!path.exists());
        let missing = dir.join("no-such-directory");
        let err = bind_unix(&missing, port).err().unwrap().to_string();
        assert!(err.contains("no-such-directory/.s.PGSQL.6543"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
