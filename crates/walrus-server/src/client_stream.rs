//! A client connection with a read buffer. Frontend messages are small and arrive
//! several per packet (Bind/Execute/Sync of a prepared statement, thousands of CopyData
//! messages of a COPY): reading each message's header and body straight from the socket
//! cost two `recv` calls per message; through this buffer one `recv` serves many.
//! Writes go straight to the socket (replies are already buffered per round trip in
//! `protocol::Out`).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Bytes read ahead: a few dozen messages, or one large CopyData message's worth.
const READ_BUFFER_BYTES: usize = 64 << 10;

pub struct ClientStream {
    stream: TcpStream,
    buf: Box<[u8]>,
    /// `buf[start..end]` is received and not yet consumed.
    start: usize,
    end: usize,
}

impl ClientStream {
    pub fn new(stream: TcpStream) -> ClientStream {
        ClientStream {
            stream,
            buf: vec![0u8; READ_BUFFER_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Waits up to `limit` for the client to send something; false when nothing came.
    /// Bytes already buffered count as input.
    pub fn wait_for_input(&self, limit: Duration) -> io::Result<bool> {
        if self.start < self.end {
            return Ok(true);
        }
        self.stream.set_read_timeout(Some(limit))?;
        let got = match self.stream.peek(&mut [0u8; 1]) {
            Ok(_) => true,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                false
            }
            Err(e) => return Err(e),
        };
        self.stream.set_read_timeout(None)?;
        Ok(got)
    }
}

impl Read for ClientStream {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.start == self.end {
            // A read at least as large as the buffer gains nothing from it.
            if out.len() >= self.buf.len() {
                return self.stream.read(out);
            }
            let n = self.stream.read(&mut self.buf)?;
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
    use std::net::TcpListener;

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
        let mut client = ClientStream::new(s);
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
}
