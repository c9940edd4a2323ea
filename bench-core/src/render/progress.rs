//! `--progress`: while a check runs, rank 0 writes one line every few seconds to stderr saying what
//! the check waits for (the GPU threads' status), how long it has run and its budget, so a user
//! never stares at a silent terminal. The interval and the writer are parameters, so the ticker
//! is tested as it runs in the worker.

use std::io::Write;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Seconds between two progress lines in the worker.
pub const EVERY: Duration = Duration::from_secs(3);
/// Longest "what it does" part: the per-GPU status can be long on 8 GPUs.
const MAX_CHARS: usize = 160;

/// Whether this process prints progress lines: asked for, and the first rank only (the others
/// would repeat it from every node).
pub fn wanted(progress: bool, rank: u32) -> bool {
    progress && rank == 0
}

/// One progress line (without its newline): elapsed and budget in whole seconds, then what the
/// GPU threads are doing (empty entries skipped, repeats next to each other once).
pub fn line(elapsed: Duration, budget: Duration, status: &[String]) -> String {
    let mut doing: Vec<&str> = status
        .iter()
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .collect();
    doing.dedup();
    let doing: String = doing.join("; ").chars().take(MAX_CHARS).collect();
    format!(
        "nccl-check: running {:.0} s of {:.0} s budget: {}",
        elapsed.as_secs_f64(),
        budget.as_secs_f64(),
        if doing.is_empty() {
            "measuring"
        } else {
            &doing
        }
    )
}

/// The running ticker; dropping it stops the thread at its next tick (the worker never drops it:
/// the process ends with `_exit`).
pub struct Ticker {
    _stop: Sender<()>,
}

/// Starts the ticker thread: every `every`, [`line`] for the time since `t0`, written to `out`
/// in one write (a line never interleaves with the verdict line printed by another thread).
/// `None` when the thread cannot be started (the check runs without progress lines).
pub fn start<W: Write + Send + 'static>(
    t0: Instant,
    status: Arc<Mutex<Vec<String>>>,
    budget: Duration,
    every: Duration,
    mut out: W,
) -> Option<Ticker> {
    let (stop, stopped) = mpsc::channel::<()>();
    crate::measure::running_thread::spawn("progress", move |ready| {
        // A blocking receive sets up the channel's thread-local: do it once before saying it
        // runs, so it never waits on the loader's lock during a stuck dlopen (running_thread.rs).
        let _ = stopped.recv_timeout(Duration::from_millis(1));
        ready.running();
        loop {
            match stopped.recv_timeout(every) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            let text = {
                let s = status.lock().unwrap_or_else(|p| p.into_inner());
                line(t0.elapsed(), budget, &s)
            };
            let _ = out.write_all(format!("{text}\n").as_bytes());
            let _ = out.flush();
        }
    })
    .ok()
    .map(|_| Ticker { _stop: stop })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_line_says_elapsed_budget_and_what_the_threads_do() {
        let l = line(
            Duration::from_millis(6_400),
            Duration::from_secs(120),
            &status(&[
                "GPU 0: rendezvous",
                "",
                "GPU 0: rendezvous",
                "GPU 1: warm-up",
            ]),
        );
        assert_eq!(
            l,
            "nccl-check: running 6 s of 120 s budget: GPU 0: rendezvous; GPU 1: warm-up"
        );
        let idle = line(Duration::ZERO, Duration::from_secs(60), &status(&["", ""]));
        assert_eq!(idle, "nccl-check: running 0 s of 60 s budget: measuring");
    }

    #[test]
    fn a_long_status_is_cut() {
        let long = "x".repeat(500);
        let l = line(Duration::ZERO, Duration::from_secs(1), &status(&[&long]));
        assert!(l.ends_with(&"x".repeat(MAX_CHARS)), "{l}");
        assert!(!l.ends_with(&"x".repeat(MAX_CHARS + 1)), "{l}");
    }

    #[test]
    fn only_rank_0_and_only_when_asked() {
        assert!(wanted(true, 0));
        assert!(!wanted(false, 0));
        assert!(!wanted(true, 1));
    }

    /// A writer the test can read while the ticker writes.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Shared {
        fn lines(&self) -> Vec<String> {
            let text = String::from_utf8(self.0.lock().expect("lock").clone()).expect("utf-8");
            text.lines().map(str::to_string).collect()
        }
        /// Waits (at most 5 s) until `pred` holds for the lines written so far.
        fn wait_for(&self, pred: impl Fn(&[String]) -> bool) -> Vec<String> {
            let until = Instant::now() + Duration::from_secs(5);
            loop {
                let l = self.lines();
                if pred(&l) || Instant::now() > until {
                    return l;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    #[test]
    fn the_ticker_writes_a_line_each_interval_with_the_current_status_and_stops_when_dropped() {
        let out = Shared::default();
        let st = Arc::new(Mutex::new(status(&["loading NCCL and the CUDA driver"])));
        // Started 6.8 s ago: elapsed must count from t0, not from the ticker's start (the first
        // tick, 20 ms later, says 7 s unless it is more than 0.68 s late).
        let t0 = Instant::now()
            .checked_sub(Duration::from_millis(6_800))
            .expect("6.8 s ago");
        let ticker = start(
            t0,
            st.clone(),
            Duration::from_secs(60),
            Duration::from_millis(20),
            out.clone(),
        )
        .expect("thread");
        let first = out.wait_for(|l| l.len() >= 2);
        assert!(first.len() >= 2, "{first:?}");
        assert_eq!(
            first[0],
            "nccl-check: running 7 s of 60 s budget: loading NCCL and the CUDA driver"
        );
        *st.lock().expect("lock") = status(&["GPU 0: timed loop"]);
        let later = out.wait_for(|l| l.iter().any(|x| x.ends_with("GPU 0: timed loop")));
        assert!(
            later.iter().any(|x| x.starts_with("nccl-check: running ")
                && x.ends_with(" s of 60 s budget: GPU 0: timed loop")),
            "{later:?}"
        );
        drop(ticker);
        // After the drop at most one tick already under way may still land.
        std::thread::sleep(Duration::from_millis(60));
        let n = out.lines().len();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(out.lines().len(), n, "the ticker went on after the drop");
    }

    #[test]
    fn nothing_is_written_before_the_first_interval() {
        let out = Shared::default();
        let st = Arc::new(Mutex::new(status(&["x"])));
        let _t = start(
            Instant::now(),
            st,
            Duration::from_secs(5),
            Duration::from_secs(3600),
            out.clone(),
        )
        .expect("thread");
        std::thread::sleep(Duration::from_millis(50));
        assert!(out.lines().is_empty(), "{:?}", out.lines());
    }
}
