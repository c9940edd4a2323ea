//! Framing of the control plane: a 4-byte big-endian length, then that many bytes (JSON during
//! the handshake; sealed JSON after it, see [`super::session`]).
//!
//! Every frame has a size cap chosen by the caller (a handshake message is small; a sum carries
//! one number per rank), checked before a byte of the body is buffered, and every read and write
//! is bounded by one deadline for the whole message: the socket timeout is re-armed with the time
//! left before each system call, so a peer that sends one byte every second cannot stretch it.

use serde::{de::DeserializeOwned, Serialize};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Largest handshake message (challenge, hello, accepted, welcome of a 1,024-process job is far
/// below this; welcome of 65,536 processes with 64-byte host names is about 8 MiB).
pub const MAX_HANDSHAKE_FRAME: usize = 16 << 20;
/// Largest hello or challenge: a few hundred bytes in practice.
pub const MAX_HELLO_FRAME: usize = 4096;

/// Why a frame could not be sent or received.
#[derive(Debug, Clone, PartialEq, Eq, strum::Display)]
pub enum WireError {
    /// The deadline passed first.
    #[strum(to_string = "no answer before the deadline")]
    Deadline,
    /// The peer closed the connection.
    #[strum(
        to_string = "the connection was closed (the process at the other end exited, was killed, or refused it)"
    )]
    Closed,
    /// The announced length is over the cap.
    #[strum(to_string = "message of {len} bytes is over the limit of {max}")]
    TooLarge { len: usize, max: usize },
    /// Not JSON of the expected shape.
    #[strum(to_string = "malformed message: {0}")]
    Malformed(String),
    /// A sealed frame that does not open: changed, reordered or dropped on the way.
    #[strum(
        to_string = "a message failed its integrity check: it was tampered with on the way by a process \
                 relaying the connection (not a network fault: TCP delivers bytes as sent or not at all)"
    )]
    Forged,
    /// A sealed frame that arrived before, sent again.
    #[strum(
        to_string = "a message that had already arrived came again: a replay by a process relaying the connection"
    )]
    Replayed,
    /// Any other socket error.
    #[strum(to_string = "{0}")]
    Io(String),
}

fn left(deadline: Instant) -> Result<Duration, WireError> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or(WireError::Deadline)
}

fn io(e: std::io::Error) -> WireError {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => WireError::Deadline,
        ErrorKind::UnexpectedEof
        | ErrorKind::ConnectionReset
        | ErrorKind::ConnectionAborted
        | ErrorKind::BrokenPipe => WireError::Closed,
        _ => WireError::Io(e.to_string()),
    }
}

/// Moves `len` bytes before `deadline`: `step(done, left)` arms the socket's timeout with the
/// time left, then reads or writes once from byte `done` on.
fn whole(
    len: usize,
    deadline: Instant,
    mut step: impl FnMut(usize, Duration) -> std::io::Result<usize>,
) -> Result<(), WireError> {
    let mut done = 0;
    while done < len {
        match step(done, left(deadline)?) {
            Ok(0) => return Err(WireError::Closed),
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes before `deadline`.
fn read_exact(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), WireError> {
    whole(buf.len(), deadline, |done, left| {
        stream.set_read_timeout(Some(left))?;
        stream.read(&mut buf[done..])
    })
}

/// Sends one message.
pub fn send<T: Serialize>(
    stream: &mut TcpStream,
    msg: &T,
    deadline: Instant,
) -> Result<(), WireError> {
    let body = serde_json::to_vec(msg).map_err(|e| WireError::Malformed(e.to_string()))?;
    send_frame(stream, &body, deadline)
}

/// `body` as one frame: its 4-byte length, then itself.
pub fn framed(body: &[u8]) -> Result<Vec<u8>, WireError> {
    let len = u32::try_from(body.len()).map_err(|_| WireError::TooLarge {
        len: body.len(),
        max: u32::MAX as usize,
    })?;
    Ok([&len.to_be_bytes()[..], body].concat())
}

/// Sends one frame of raw bytes.
pub fn send_frame(stream: &mut TcpStream, body: &[u8], deadline: Instant) -> Result<(), WireError> {
    let frame = framed(body)?;
    whole(frame.len(), deadline, |done, left| {
        stream.set_write_timeout(Some(left))?;
        stream.write(&frame[done..])
    })
}

/// Receives one frame of at most `max` bytes.
pub fn recv_frame(
    stream: &mut TcpStream,
    max: usize,
    deadline: Instant,
) -> Result<Vec<u8>, WireError> {
    let mut len = [0u8; 4];
    read_exact(stream, &mut len, deadline)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(WireError::TooLarge { len, max });
    }
    let mut body = vec![0u8; len];
    read_exact(stream, &mut body, deadline)?;
    Ok(body)
}

/// Parses a frame's body (separate so the parser can be fuzzed without sockets).
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, WireError> {
    serde_json::from_slice(body).map_err(|e| WireError::Malformed(e.to_string()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Receives one message of at most `max` bytes.
    pub(crate) fn recv<T: DeserializeOwned>(
        stream: &mut TcpStream,
        max: usize,
        deadline: Instant,
    ) -> Result<T, WireError> {
        decode(&recv_frame(stream, max, deadline)?)
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[test]
    fn a_message_goes_through_whole() {
        let (mut a, mut b) = pair();
        send(&mut a, &vec![1u32, 2, 3], soon(2000)).unwrap();
        let v: Vec<u32> = recv(&mut b, 100, soon(2000)).unwrap();
        assert_eq!(v, vec![1, 2, 3]);
    }

    #[test]
    fn an_oversized_length_is_refused_before_reading_the_body() {
        let (mut a, mut b) = pair();
        a.write_all(&(3u32 << 30).to_be_bytes()).unwrap();
        let t = Instant::now();
        let r: Result<Vec<u32>, _> = recv(&mut b, 4096, soon(5000));
        assert_eq!(
            r.unwrap_err(),
            WireError::TooLarge {
                len: 3 << 30,
                max: 4096
            }
        );
        assert!(t.elapsed() < Duration::from_secs(4));
    }

    #[test]
    fn a_slow_drip_ends_at_the_deadline_not_later() {
        let (mut a, mut b) = pair();
        let writer = std::thread::spawn(move || {
            // One byte every 150 ms: each read succeeds, the message never completes.
            a.write_all(&100u32.to_be_bytes()).unwrap();
            for _ in 0..20 {
                if a.write_all(b" ").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(150));
            }
        });
        let t = Instant::now();
        let r: Result<Vec<u32>, _> = recv(&mut b, 4096, soon(600));
        let took = t.elapsed();
        assert_eq!(r.unwrap_err(), WireError::Deadline);
        assert!(took >= Duration::from_millis(550), "{took:?}");
        assert!(took < Duration::from_millis(2500), "{took:?}");
        drop(b);
        writer.join().unwrap();
    }

    #[test]
    fn a_closed_peer_and_garbage_are_named() {
        let (mut a, mut b) = pair();
        a.write_all(&3u32.to_be_bytes()).unwrap();
        a.write_all(b"{{{").unwrap();
        let r: Result<Vec<u32>, _> = recv(&mut b, 4096, soon(2000));
        assert!(matches!(r, Err(WireError::Malformed(_))), "{r:?}");
        drop(a);
        let r: Result<Vec<u32>, _> = recv(&mut b, 4096, soon(2000));
        assert_eq!(r.unwrap_err(), WireError::Closed);
    }
}
