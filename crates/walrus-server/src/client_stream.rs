//! A client connection with a read buffer. Frontend messages are small and arrive
//! several per packet (Bind/Execute/Sync of a prepared statement, thousands of CopyData
//! messages of a COPY): reading each message's header and body straight from the socket
//! cost two `recv` calls per message; through this buffer one `recv` serves many.
//! Writes go straight to the socket (replies are already buffered per round trip in
//! `protocol::Out`).
//!
//! A session that has just replied, when no other session is running, polls its
//! socket for up to 150 µs before blocking (`poll_when_dry`): a client running one
//! short statement after another then finds it awake, without the sleep and wake-up
//! that are most of such a round trip on a virtual machine (one-client select-only
//! latency 0.064 → 0.037 ms; one-client TPC-B 1.21 → 0.79 ms once polling covered
//! statements inside write transactions too, and 50 → 150 µs took it to 0.77 ms).
//! With other sessions running it blocks at once: the core then belongs to them, and
//! only one session polls at a time, so polling never takes more than one core.

use crate::socket::Socket;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes read ahead: a few dozen messages, or one large CopyData message's worth.
const READ_BUFFER_BYTES: usize = 64 << 10;

pub struct ClientStream {
    stream: Socket,
    buf: Box<[u8]>,
    /// `buf[start..end]` is received and not yet consumed.
    start: usize,
    end: usize,
    /// A second handle on the socket for a writer that runs inside the session (a
    /// streamed SELECT's DataRows), made on first use.
    writer: Option<Arc<Socket>>,
    /// Whether a read that finds nothing buffered polls briefly before it blocks (see
    /// [`ClientStream::poll_briefly`]); the connection sets it per message.
    pub poll_when_dry: bool,
}

impl ClientStream {
    pub fn new(stream: Socket) -> ClientStream {
        RUNNING.fetch_add(1, Ordering::AcqRel);
        ClientStream {
            stream,
            buf: vec![0u8; READ_BUFFER_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            writer: None,
            poll_when_dry: false,
        }
    }

    /// A handle on the socket that writes go through from elsewhere (`&Socket` is a
    /// writer); whoever uses it must have sent everything queued before.
    pub fn writer(&mut self) -> io::Result<Arc<Socket>> {
        if self.writer.is_none() {
            self.writer = Some(Arc::new(self.stream.try_clone()?));
        }
        match &self.writer {
            Some(w) => Ok(w.clone()),
            None => Err(io::Error::other("socket handle missing")),
        }
    }

    /// Waits up to `limit` for the client to send something; false when nothing came.
    /// Bytes already buffered count as input; what arrives is buffered.
    pub fn wait_for_input(&mut self, limit: Duration) -> io::Result<bool> {
        if self.start < self.end {
            return Ok(true);
        }
        self.stream.set_read_timeout(Some(limit))?;
        let got = loop {
            match self.stream.read(&mut self.buf) {
                Ok(n) => {
                    self.start = 0;
                    self.end = n;
                    // Zero bytes is the client closing: input the next read reports.
                    break true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    break false
                }
                Err(e) => return Err(e),
            }
        };
        self.stream.set_read_timeout(None)?;
        Ok(got)
    }
}

impl ClientStream {
    /// If the next message is a CopyData message already wholly received, appends its
    /// body to `out`, consumes it and returns true; otherwise (another message, one
    /// not all here yet, or a malformed length, which the next read reports) leaves
    /// everything as it is. Lets COPY hand many small CopyData messages (one per row,
    /// as pgbench and psql send them) to the session as one piece of data.
    pub fn take_buffered_copy_data(&mut self, out: &mut Vec<u8>) -> bool {
        let b = &self.buf[self.start..self.end];
        if b.len() < 5 || b[0] != b'd' {
            return false;
        }
        let len = i32::from_be_bytes([b[1], b[2], b[3], b[4]]);
        if len < 4 || 1 + len as usize > b.len() {
            return false;
        }
        out.extend_from_slice(&b[5..1 + len as usize]);
        self.start += 1 + len as usize;
        true
    }
}

/// How long an idle session polls its socket before it blocks in the kernel (see
/// [`ClientStream::poll_briefly`]).
const POLL_BEFORE_BLOCKING: Duration = Duration::from_micros(150);

/// Whether a session is polling now: one at a time, so polling takes at most one core.
static POLLING: AtomicBool = AtomicBool::new(false);

/// Sessions not blocked reading from their client (working, or polling). A session
/// polls only while it is the only one: with others running, the core is theirs.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

impl ClientStream {
    /// Polls the socket for up to [`POLL_BEFORE_BLOCKING`] when no other session is
    /// polling. A client that sends its next statement at once (one client running
    /// statement after statement) then finds this session awake: on a virtual machine
    /// the sleep and wake-up of an idle CPU are most of a short statement's round trip.
    /// `None`: nothing came, block.
    fn poll_briefly(&mut self) -> io::Result<Option<usize>> {
        if RUNNING.load(Ordering::Acquire) > 1
            || POLLING
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return Ok(None);
        }
        let polled = self.poll_nonblocking();
        POLLING.store(false, Ordering::Release);
        polled
    }

    fn poll_nonblocking(&mut self) -> io::Result<Option<usize>> {
        let start = std::time::Instant::now();
        self.stream.set_nonblocking(true)?;
        let got = loop {
            match self.stream.read(&mut self.buf) {
                Ok(n) => break Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let others = RUNNING.load(Ordering::Acquire) > 1;
                    if others || start.elapsed() >= POLL_BEFORE_BLOCKING {
                        break Ok(None);
                    }
                    std::hint::spin_loop();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.stream.set_nonblocking(false)?;
        got
    }
}

impl Drop for ClientStream {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Read for ClientStream {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.start == self.end {
            // A read at least as large as the buffer gains nothing from it.
            if out.len() >= self.buf.len() {
                return self.stream.read(out);
            }
            let polled = if self.poll_when_dry {
                self.poll_briefly()?
            } else {
                None
            };
            let n = match polled {
                Some(n) => n,
                None => {
                    RUNNING.fetch_sub(1, Ordering::AcqRel);
                    let read = self.stream.read(&mut self.buf);
                    RUNNING.fetch_add(1, Ordering::AcqRel);
                    read?
                }
            };
            self.start = 0;
            self.end = n;
        }
        let n = out.len().min(self.end - self.start);
        out[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
        Ok(n)
    }
}

impl Write for ClientStream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.stream.write(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// Many small messages in one packet are read back exactly, across buffer refills,
    /// and a read larger than the buffer still gets every byte.
    #[test]
    fn reads_back_exactly_what_was_sent() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let sent: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let to_send = sent.clone();
        let writer = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(&to_send).unwrap();
        });
        let (s, _) = listener.accept().unwrap();
        let mut client = ClientStream::new(Socket::Tcp(s));
        let mut got = Vec::new();
        let mut small = [0u8; 5];
        for _ in 0..10_000 {
            client.read_exact(&mut small).unwrap();
            got.extend_from_slice(&small);
        }
        assert!(client.wait_for_input(Duration::from_secs(5)).unwrap());
        let mut big = vec![0u8; 100_000];
        client.read_exact(&mut big).unwrap();
        got.extend_from_slice(&big);
        let mut rest = Vec::new();
        writer.join().unwrap();
        client.read_to_end(&mut rest).unwrap();
        got.extend_from_slice(&rest);
        assert_eq!(got, sent);
    }

    /// A polling read gets what comes during the poll, falls back to a blocking read
    /// for what comes later, and leaves the socket blocking for the reads after it.
    #[test]
    fn a_polling_read_gets_early_and_late_input_and_leaves_the_socket_blocking() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (go, wait) = std::sync::mpsc::channel::<Duration>();
        let writer = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            for (i, delay) in wait.iter().enumerate() {
                std::thread::sleep(delay);
                c.write_all(&[i as u8; 3]).unwrap();
            }
        });
        let (s, _) = listener.accept().unwrap();
        let mut client = ClientStream::new(Socket::Tcp(s));
        client.poll_when_dry = true;
        // At once (within the poll when no other session runs), then long after it.
        for (i, delay) in [Duration::ZERO, Duration::from_millis(30)]
            .into_iter()
            .enumerate()
        {
            go.send(delay).unwrap();
            let mut got = [0u8; 3];
            client.read_exact(&mut got).unwrap();
            assert_eq!(got, [i as u8; 3]);
        }
        // Blocking again: a read with a timeout and nothing sent times out rather than
        // failing at once with WouldBlock.
        client
            .stream
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        client.poll_when_dry = false;
        let started = std::time::Instant::now();
        let err = client.read(&mut [0u8; 1]).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) && started.elapsed() >= Duration::from_millis(15),
            "{err:?} after {:?}",
            started.elapsed()
        );
        drop(go);
        writer.join().unwrap();
    }

    /// CopyData messages already received are taken whole and in order; a message of
    /// another kind, or one whose body has not all arrived, is left for the next read.
    #[test]
    fn takes_only_whole_buffered_copy_data_messages() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let message = |kind: u8, body: &[u8]| {
            let mut m = vec![kind];
            m.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
            m.extend_from_slice(body);
            m
        };
        let mut first = message(b'd', b"1\t2\n");
        first.extend(message(b'd', b"3\t4\n"));
        first.extend(message(b'c', b""));
        // A CopyData header whose body comes later.
        let partial = message(b'd', b"5\t6\n");
        first.extend_from_slice(&partial[..7]);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let writer = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(&first).unwrap();
            rx.recv().unwrap();
            c.write_all(&partial[7..]).unwrap();
        });
        let (s, _) = listener.accept().unwrap();
        let mut client = ClientStream::new(Socket::Tcp(s));
        let mut header = [0u8; 1];
        client.read_exact(&mut header).unwrap();
        assert_eq!(header, [b'd']);
        // Everything up to here arrived in one write; wait until it is buffered.
        let mut len = [0u8; 4];
        client.read_exact(&mut len).unwrap();
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize - 4];
        client.read_exact(&mut body).unwrap();
        let mut chunk = body;
        while client.end - client.start < 9 + 5 + 7 {
            std::thread::sleep(Duration::from_millis(1));
            let n = client.stream.read(&mut client.buf[client.end..]).unwrap();
            client.end += n;
        }
        assert!(client.take_buffered_copy_data(&mut chunk));
        assert_eq!(chunk, b"1\t2\n3\t4\n");
        // CopyDone is not CopyData: left for the next read.
        assert!(!client.take_buffered_copy_data(&mut chunk));
        let mut done = [0u8; 5];
        client.read_exact(&mut done).unwrap();
        assert_eq!(done[0], b'c');
        // Only part of the next message is here: nothing is taken.
        assert!(!client.take_buffered_copy_data(&mut chunk));
        assert_eq!(chunk, b"1\t2\n3\t4\n");
        tx.send(()).unwrap();
        writer.join().unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, message(b'd', b"5\t6\n"));
    }
}
