//! The coordinator's door: connections wait here, without a thread or a handshake slot, until
//! their first bytes arrive (a member sends its opening as soon as it connects), so idle
//! connections, however many, cost the real members nothing but a descriptor each; one that
//! says nothing for a handshake's time is closed.

use std::collections::VecDeque;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Most connections waiting for their first bytes; past it the oldest is closed.
pub const MAX_WAITING: usize = 4096;
/// Most connections taken from the listener's queue in one pass.
const ACCEPTS_PER_PASS: usize = 512;

/// What one pass through the door gives.
#[derive(Default)]
pub struct Pass {
    /// Connections whose first bytes arrived (or that closed: the handshake says so).
    pub ready: Vec<TcpStream>,
    /// Connections closed for saying nothing within the wait, or pushed out by newer ones.
    pub silent: usize,
}

pub struct Door {
    listener: TcpListener,
    waiting: VecDeque<(TcpStream, Instant)>,
    silence: Duration,
    max_waiting: usize,
}

impl Door {
    /// `listener` must be non-blocking; a connection that says nothing for `silence` is closed.
    pub fn new(listener: TcpListener, silence: Duration, max_waiting: usize) -> Door {
        Door {
            listener,
            waiting: VecDeque::new(),
            silence,
            max_waiting: max_waiting.max(1),
        }
    }

    /// Connections waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Waits up to `wait` (at most 1 s) for new connections or first bytes, then takes what
    /// came; an error only from the listener itself.
    pub fn pass(&mut self, wait: Duration) -> Result<Pass, std::io::Error> {
        let mut fds: Vec<libc::pollfd> = std::iter::once(self.listener.as_raw_fd())
            .chain(self.waiting.iter().map(|(s, _)| s.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = wait.as_millis().min(1000) as libc::c_int;
        // SAFETY: a valid array of pollfd of the length given, alive for the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        let mut pass = Pass::default();
        if n > 0 {
            // Ready ones leave the queue (indices shift by one for the listener's entry).
            let mut kept = VecDeque::with_capacity(self.waiting.len());
            for (i, w) in self.waiting.drain(..).enumerate() {
                if fds[i + 1].revents != 0 {
                    pass.ready.push(w.0);
                } else {
                    kept.push_back(w);
                }
            }
            self.waiting = kept;
        }
        let now = Instant::now();
        while self
            .waiting
            .front()
            .is_some_and(|(_, at)| now.duration_since(*at) >= self.silence)
        {
            self.waiting.pop_front();
            pass.silent += 1;
        }
        if n > 0 && fds[0].revents != 0 {
            self.accept_all(now, &mut pass)?;
        }
        Ok(pass)
    }

    /// Takes the listener's queue; a full door closes its oldest.
    fn accept_all(&mut self, now: Instant, pass: &mut Pass) -> Result<(), std::io::Error> {
        for _ in 0..ACCEPTS_PER_PASS {
            match self.listener.accept() {
                Ok((s, _)) => {
                    if self.waiting.len() >= self.max_waiting {
                        self.waiting.pop_front();
                        pass.silent += 1;
                    }
                    self.waiting.push_back((s, now));
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

    fn door(silence_ms: u64, max: usize) -> (Door, std::net::SocketAddr) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let a = l.local_addr().unwrap();
        (Door::new(l, Duration::from_millis(silence_ms), max), a)
    }

    /// Passes until `until`, gathering what they give.
    fn passes(d: &mut Door, ms: u64) -> Pass {
        let mut all = Pass::default();
        let until = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < until {
            let p = d.pass(Duration::from_millis(10)).unwrap();
            all.ready.extend(p.ready);
            all.silent += p.silent;
        }
        all
    }

    #[test]
    fn a_connection_that_speaks_goes_through_and_idle_ones_wait_then_close() {
        let (mut d, a) = door(400, 100);
        let idle: Vec<TcpStream> = (0..50).map(|_| TcpStream::connect(a).unwrap()).collect();
        let mut talker = TcpStream::connect(a).unwrap();
        talker.write_all(b"hello").unwrap();
        let p = passes(&mut d, 150);
        assert_eq!(p.ready.len(), 1, "only the one that spoke");
        assert_eq!(
            p.ready[0].peer_addr().unwrap(),
            talker.local_addr().unwrap()
        );
        assert_eq!(d.waiting(), 50);
        let p = passes(&mut d, 500);
        assert!(p.ready.is_empty());
        assert_eq!(p.silent, 50, "closed after the silence");
        assert_eq!(d.waiting(), 0);
        drop(idle);
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
