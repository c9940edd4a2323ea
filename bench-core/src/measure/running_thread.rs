//! Threads that must keep working while another thread is stuck inside `dlopen` (NCCL's path on a
//! FIFO or a hung NFS mount): glibc's `dlopen` holds the dynamic loader's lock while it opens the
//! file, and a thread's first thread-local with a destructor (Rust's spawn hooks at every thread
//! start, a channel's blocking receive) registers it through `__cxa_thread_atexit_impl`, which
//! takes the same lock. A watchdog spawned just before such a `dlopen` then never ran (seen: 1 run
//! in 8 hung past `--timeout` with the watchdog waiting on `_rtld_global`). [`spawn`] returns only
//! once the thread says it has done that set-up ([`Ready::running`]).

use std::sync::mpsc;
use std::time::Duration;

/// Longest wait for a new thread to say it runs (a thread starts in microseconds).
const START_WAIT: Duration = Duration::from_secs(2);

/// The new thread's word that its thread-locals are set up.
pub struct Ready(mpsc::Sender<()>);

impl Ready {
    pub fn running(self) {
        let _ = self.0.send(());
    }
}

/// Spawns `f` on a thread named `name` and waits (at most [`START_WAIT`]) until it calls
/// [`Ready::running`]. `Err` if the thread cannot be created or never says so in time.
pub fn spawn(name: &str, f: impl FnOnce(Ready) + Send + 'static) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || f(Ready(tx)))
        .map_err(|e| format!("{name} thread: {e}"))?;
    rx.recv_timeout(START_WAIT)
        .map_err(|_| format!("{name} thread did not start within {START_WAIT:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn spawn_returns_after_the_thread_said_it_runs() {
        let said = Arc::new(AtomicBool::new(false));
        let s = said.clone();
        spawn("t", move |ready| {
            std::thread::sleep(Duration::from_millis(100));
            s.store(true, Ordering::SeqCst);
            ready.running();
        })
        .unwrap();
        assert!(said.load(Ordering::SeqCst));
    }

    #[test]
    fn a_thread_that_never_says_so_is_an_error_within_the_wait() {
        let t = std::time::Instant::now();
        let e = spawn("silent", drop).unwrap_err();
        assert!(e.contains("silent thread did not start"), "{e}");
        assert!(t.elapsed() < START_WAIT + Duration::from_millis(500));
    }
}
