//! The watcher of a guarded run: a forked process that leads the child's process group and kills
//! it when this process dies (its socket closes), so nothing the child started outlives us.

use std::time::{Duration, Instant};

/// The watcher of [`super::run_guarded`]: a forked process that leads a new process group, blocked
/// reading its end of a socket pair whose other end only we hold. The child is then started in
/// that group, so the watcher knows the group before the child exists. Our death closes the
/// socket: the watcher then kills the group, itself and the child's descendants included. At a
/// normal end we kill the group ourselves and reap the watcher ([`Guard::dismiss`]).
pub(super) struct Guard {
    pub(super) pid: libc::pid_t,
    fd: libc::c_int,
}

impl Guard {
    pub(super) fn arm() -> Option<Guard> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: socketpair fills two descriptors; CLOEXEC keeps them from later children.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return None;
        }
        // SAFETY: between fork and _exit the watcher makes only async-signal-safe calls.
        match unsafe { libc::fork() } {
            0 => unsafe {
                libc::close(fds[1]);
                // Nothing else of ours stays open in the watcher: a copy of a descriptor keeps
                // its file's flock and its pipe's write end alive for as long as the child runs
                // (another thread's lock seemed held; another child's output never ended).
                close_all_but(fds[0]);
                // A group of its own (the parent sets it too, whichever runs first): a kill of
                // our group (slurmd's) does not reach it, and the child joins it.
                libc::setpgid(0, 0);
                let mut b = 0u8;
                let n = loop {
                    let n = libc::read(fds[0], (&mut b as *mut u8).cast(), 1);
                    if n < 0 && *libc::__errno_location() == libc::EINTR {
                        continue;
                    }
                    break n;
                };
                if n <= 0 {
                    libc::kill(0, libc::SIGKILL);
                }
                libc::_exit(0)
            },
            -1 => {
                // SAFETY: closing the descriptors we just made.
                unsafe {
                    libc::close(fds[0]);
                    libc::close(fds[1]);
                }
                None
            }
            pid => {
                // SAFETY: the watcher's own group before the child is told to join it (EACCES
                // cannot happen: the watcher has not exec'd); closing its end in our process.
                unsafe {
                    libc::setpgid(pid, pid);
                    libc::close(fds[0]);
                }
                Some(Guard { pid, fd: fds[1] })
            }
        }
    }

    /// The end, normal or not: the group has been killed (or the child never started); tells
    /// the watcher to leave, if it is still there, and reaps it (bounded by `within`).
    pub(super) fn dismiss(self, within: Duration) {
        // SAFETY: send on our socket (MSG_NOSIGNAL: a watcher already gone is no SIGPIPE), then
        // close it and reap the watcher without blocking past `within`.
        unsafe {
            libc::send(self.fd, b"x".as_ptr().cast(), 1, libc::MSG_NOSIGNAL);
            libc::close(self.fd);
            let until = Instant::now() + within;
            while libc::waitpid(self.pid, std::ptr::null_mut(), libc::WNOHANG) == 0
                && Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Closes every descriptor from 3 up except `keep` (in a forked child: close_range(2) and
/// close(2) are async-signal-safe). Without close_range (Linux before 5.9) each is closed in turn.
unsafe fn close_all_but(keep: libc::c_int) {
    let range = |lo: libc::c_int, hi: libc::c_uint| {
        // SAFETY: closes descriptors of this (forked) process only.
        unsafe { libc::syscall(libc::SYS_close_range, lo as libc::c_uint, hi, 0) == 0 }
    };
    let below = keep <= 3 || range(3, (keep - 1) as libc::c_uint);
    let above = range(keep + 1, libc::c_uint::MAX);
    if !(below && above) {
        for fd in 3..65536 {
            if fd != keep {
                // SAFETY: as above; EBADF for a descriptor not open is fine.
                unsafe { libc::close(fd) };
            }
        }
    }
}
