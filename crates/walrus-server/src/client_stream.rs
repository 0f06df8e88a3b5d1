//! A client connection with a read buffer. Frontend messages are small and arrive
//! several per packet (Bind/Execute/Sync of a prepared statement, thousands of CopyData
//! messages of a COPY): reading each message's header and body straight from the socket
//! cost two `recv` calls per message; through this buffer one `recv` serves many.
//! Writes go straight to the socket (replies are already buffered per round trip in
//! `protocol::Out`).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

/// Bytes read ahead: a few dozen messages, or one large CopyData message's worth.
const READ_BUFFER_BYTES: usize = 64 << 10;

pub struct ClientStream {
    stream: TcpStream,
    buf: Box<[u8]>,
    /// `buf[start..end]` is received and not yet consumed.
    start: usize,
    end: usize,
    /// A second handle on the socket for a writer that runs inside the session (a
    /// streamed SELECT's DataRows), made on first use.
    writer: Option<Arc<TcpStream>>,
}

impl ClientStream {
    pub fn new(stream: TcpStream) -> ClientStream {
        ClientStream {
            stream,
            buf: vec![0u8; READ_BUFFER_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            writer: None,
        }
    }

    /// A handle on the socket that writes go through from elsewhere (`&TcpStream` is a
    /// writer); whoever uses it must have sent everything queued before.
    pub fn writer(&mut self) -> io::Result<Arc<TcpStream>> {
        if self.writer.is_none() {
            self.writer = Some(Arc::new(self.stream.try_clone()?));
        }
        match &self.writer {
            Some(w) => Ok(w.clone()),
            None => Err(io::Error::other("socket handle missing")),
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
        let mut client = ClientStream::new(s);
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
