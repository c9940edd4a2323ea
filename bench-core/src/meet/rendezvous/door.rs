//! The coordinator's door: connections wait here, without a thread or a handshake slot, until
//! their first frame (a member's opening, sent as soon as it connects) is in whole, so idle or
//! dripping connections, however many, cost the real members nothing but a descriptor each;
//! one that has not sent it within a handshake's time is closed. The coordinator then checks
//! the opening (its version, under MUNGE its proof of the job's ticket) before it gives the
//! connection a thread.

use nix::poll::{poll, PollFd, PollFlags};
use std::collections::VecDeque;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Most connections waiting for their first frame; past it the oldest is closed.
pub const MAX_WAITING: usize = 4096;
/// Most connections taken from the listener's queue in one pass.
const ACCEPTS_PER_PASS: usize = 512;

/// What one pass through the door gives.
#[derive(Default)]
pub struct Pass {
    /// Connections whose first frame is in, with its body (the stream is non-blocking).
    pub ready: Vec<(TcpStream, Vec<u8>)>,
    /// Connections closed for not sending it within the wait, or pushed out by newer ones.
    pub silent: usize,
    /// Connections that closed before it was whole, or announced one over the size limit.
    pub broken: usize,
}

/// A connection at the door and what it sent so far.
struct Waiting {
    stream: TcpStream,
    since: Instant,
    buf: Vec<u8>,
}

/// Where a waiting connection's first frame stands after a read.
enum Frame {
    Partial,
    Whole(Vec<u8>),
    Broken,
}

impl Waiting {
    /// Reads what has arrived, never past the first frame.
    fn read(&mut self, max_frame: usize) -> Frame {
        let mut chunk = [0u8; 4096];
        loop {
            let want = if self.buf.len() < 4 {
                4 - self.buf.len()
            } else {
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]])
                    as usize;
                if len > max_frame {
                    return Frame::Broken;
                }
                4 + len - self.buf.len()
            };
            if want == 0 {
                return Frame::Whole(self.buf.split_off(4));
            }
            match self.stream.read(&mut chunk[..want.min(4096)]) {
                Ok(0) => return Frame::Broken,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Frame::Partial,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Frame::Broken,
            }
        }
    }
}

pub struct Door {
    listener: TcpListener,
    waiting: VecDeque<Waiting>,
    silence: Duration,
    max_waiting: usize,
    max_frame: usize,
}

impl Door {
    /// `listener` must be non-blocking; a connection that has not sent its first frame (of at
    /// most `max_frame` bytes) within `silence` is closed.
    pub fn new(
        listener: TcpListener,
        silence: Duration,
        max_waiting: usize,
        max_frame: usize,
    ) -> Door {
        Door {
            listener,
            waiting: VecDeque::new(),
            silence,
            max_waiting: max_waiting.max(1),
            max_frame,
        }
    }

    /// Waits up to `wait` (at most 1 s) for new connections or bytes, then takes what came; an
    /// error only from the listener itself.
    pub fn pass(&mut self, wait: Duration) -> Result<Pass, std::io::Error> {
        let mut fds: Vec<PollFd> = std::iter::once(self.listener.as_fd())
            .chain(self.waiting.iter().map(|w| w.stream.as_fd()))
            .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
            .collect();
        let n = poll(&mut fds, wait.as_millis().min(1000) as u16).unwrap_or(0);
        let ready: Vec<bool> = fds.iter().map(|f| f.any() == Some(true)).collect();
        let mut pass = Pass::default();
        if n > 0 {
            // Readable ones read (indices shift by one for the listener's entry); whole or
            // broken ones leave the queue.
            let mut kept = VecDeque::with_capacity(self.waiting.len());
            for (i, mut w) in self.waiting.drain(..).enumerate() {
                if !ready[i + 1] {
                    kept.push_back(w);
                    continue;
                }
                match w.read(self.max_frame) {
                    Frame::Partial => kept.push_back(w),
                    Frame::Whole(body) => pass.ready.push((w.stream, body)),
                    Frame::Broken => pass.broken += 1,
                }
            }
            self.waiting = kept;
        }
        let now = Instant::now();
        while self
            .waiting
            .front()
            .is_some_and(|w| now.duration_since(w.since) >= self.silence)
        {
            self.waiting.pop_front();
            pass.silent += 1;
        }
        if n > 0 && ready[0] {
            self.accept_all(now, &mut pass)?;
        }
        Ok(pass)
    }

    /// Takes the listener's queue; a full door closes its oldest.
    fn accept_all(&mut self, now: Instant, pass: &mut Pass) -> Result<(), std::io::Error> {
        for _ in 0..ACCEPTS_PER_PASS {
            match self.listener.accept() {
                Ok((s, _)) => {
                    // Accepted sockets do not inherit the listener's O_NONBLOCK.
                    if s.set_nonblocking(true).is_err() {
                        pass.broken += 1;
                        continue;
                    }
                    if self.waiting.len() >= self.max_waiting {
                        self.waiting.pop_front();
                        pass.silent += 1;
                    }
                    self.waiting.push_back(Waiting {
                        stream: s,
                        since: now,
                        buf: Vec::new(),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // Out of descriptors: close the oldest waiting and leave the rest queued.
                Err(e) if e.raw_os_error() == Some(libc::EMFILE) && !self.waiting.is_empty() => {
                    self.waiting.pop_front();
                    pass.silent += 1;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    impl Door {
        /// Connections waiting now.
        fn waiting(&self) -> usize {
            self.waiting.len()
        }
    }

    fn door(silence_ms: u64, max: usize) -> (Door, std::net::SocketAddr) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let a = l.local_addr().unwrap();
        (Door::new(l, Duration::from_millis(silence_ms), max, 100), a)
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    /// Passes until `until`, gathering what they give.
    fn passes(d: &mut Door, ms: u64) -> Pass {
        let mut all = Pass::default();
        let until = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < until {
            let p = d.pass(Duration::from_millis(10)).unwrap();
            all.ready.extend(p.ready);
            all.silent += p.silent;
            all.broken += p.broken;
        }
        all
    }

    #[test]
    fn a_connection_that_speaks_goes_through_and_idle_ones_wait_then_close() {
        let (mut d, a) = door(400, 100);
        let idle: Vec<TcpStream> = (0..50).map(|_| TcpStream::connect(a).unwrap()).collect();
        let mut talker = TcpStream::connect(a).unwrap();
        talker.write_all(&frame(b"hello")).unwrap();
        let p = passes(&mut d, 150);
        assert_eq!(p.ready.len(), 1, "only the one that spoke");
        assert_eq!(
            p.ready[0].0.peer_addr().unwrap(),
            talker.local_addr().unwrap()
        );
        assert_eq!(p.ready[0].1, b"hello");
        assert_eq!(d.waiting(), 50);
        let p = passes(&mut d, 500);
        assert!(p.ready.is_empty());
        assert_eq!(p.silent, 50, "closed after the silence");
        assert_eq!(d.waiting(), 0);
        drop(idle);
    }

    /// A frame that comes a byte at a time waits at the door (no thread) until whole; one that
    /// announces more than the limit, or closes half-way, is broken.
    #[test]
    fn a_first_frame_is_taken_whole_and_oversized_or_cut_ones_are_broken() {
        let (mut d, a) = door(2000, 100);
        let mut drip = TcpStream::connect(a).unwrap();
        let mut big = TcpStream::connect(a).unwrap();
        big.write_all(&1000u32.to_be_bytes()).unwrap();
        let mut cut = TcpStream::connect(a).unwrap();
        cut.write_all(&frame(b"0123456789")[..8]).unwrap();
        drop(cut);
        let f = frame(b"opening");
        for b in &f[..f.len() - 1] {
            drip.write_all(&[*b]).unwrap();
            let p = passes(&mut d, 20);
            assert!(p.ready.is_empty(), "passed before its last byte");
        }
        drip.write_all(&f[f.len() - 1..]).unwrap();
        let p = passes(&mut d, 100);
        assert_eq!(p.ready.len(), 1);
        assert_eq!(p.ready[0].1, b"opening");
        assert_eq!(d.waiting(), 0, "the oversized and the cut one are gone");
        drop(big);
    }

    #[test]
    fn a_full_door_closes_its_oldest() {
        let (mut d, a) = door(5000, 10);
        let idle: Vec<TcpStream> = (0..15).map(|_| TcpStream::connect(a).unwrap()).collect();
        let p = passes(&mut d, 200);
        assert_eq!(d.waiting(), 10);
        assert_eq!(p.silent, 5);
        drop(idle);
    }
}
