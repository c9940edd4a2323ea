//! The child's stdout and stderr read through non-blocking pipes: the tail of each kept, a live
//! copy (raw or by lines) and a capped log written as it comes, all pumped by one poll.

use super::capped::CappedLog;
use super::lines::LineCopy;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Where a live copy of a stream goes.
pub(super) enum Copy {
    Raw(File),
    Lines(LineCopy),
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    /// As a message names it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "standard output",
            Stream::Stderr => "standard error",
        }
    }
}

/// One pipe from the child, non-blocking, with the tail of what came through it.
pub(super) struct Pipe {
    reader: Box<dyn ReadFd>,
    pub(super) stream: Stream,
    pub(super) tail: Vec<u8>,
    max: usize,
    open: bool,
    copy: Option<Copy>,
    pub(super) log: Option<CappedLog>,
}

pub(super) trait ReadFd: Read + AsRawFd {}
impl<T: Read + AsRawFd> ReadFd for T {}

impl Pipe {
    pub(super) fn new(
        reader: Box<dyn ReadFd>,
        stream: Stream,
        max: usize,
        copy: Option<Copy>,
        log: Option<CappedLog>,
    ) -> Pipe {
        // SAFETY: fcntl on a pipe descriptor we own.
        unsafe {
            let fd = reader.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        Pipe {
            reader,
            stream,
            tail: Vec::new(),
            max,
            open: true,
            copy,
            log,
        }
    }

    /// Reads what is there now; marks the pipe closed at EOF.
    fn drain(&mut self) {
        let mut buf = [0u8; 8192];
        while self.open {
            match self.reader.read(&mut buf) {
                Ok(0) => self.close(),
                Ok(n) => {
                    match &mut self.copy {
                        // Best effort: a closed terminal must not end the supervision.
                        Some(Copy::Raw(c)) => {
                            use std::io::Write;
                            let _ = c.write_all(&buf[..n]);
                        }
                        Some(Copy::Lines(c)) => c.write(&buf[..n]),
                        None => {}
                    }
                    if let Some(log) = &mut self.log {
                        log.write(&buf[..n]);
                    }
                    push_tail(&mut self.tail, &buf[..n], self.max)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => self.close(),
            }
        }
    }

    pub(super) fn close(&mut self) {
        self.open = false;
        if let Some(Copy::Lines(c)) = &mut self.copy {
            c.finish();
        }
    }
}

/// Appends `bytes`, keeping the last `max`.
pub(super) fn push_tail(tail: &mut Vec<u8>, bytes: &[u8], max: usize) {
    tail.extend_from_slice(bytes);
    if tail.len() > max {
        tail.drain(..tail.len() - max);
    }
}

/// Waits up to `wait` for output on the open pipes and reads it; sleeps when none is open.
pub(super) fn pump(pipes: &mut [Pipe], wait: Duration) {
    let mut fds: Vec<libc::pollfd> = pipes
        .iter()
        .filter(|p| p.open)
        .map(|p| libc::pollfd {
            fd: p.reader.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    if fds.is_empty() {
        std::thread::sleep(wait);
        return;
    }
    let ms = wait.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is a valid array of fds.len() pollfds.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n > 0 || wait.is_zero() {
        for p in pipes.iter_mut().filter(|p| p.open) {
            p.drain();
        }
    }
}
