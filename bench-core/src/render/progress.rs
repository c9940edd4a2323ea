//! `--progress`: while a check runs, rank 0 writes to stderr one line as each phase begins (what
//! the first GPU's thread, or the process before the threads, does now, and since when), and one
//! line every few seconds saying what the check waits for (the GPU threads' status), how long it
//! has run and its budget, so a user never stares at a silent terminal and a slow check says
//! which phase it is slow in. The interval and the writer are parameters, so the ticker is tested
//! as it runs in the worker.

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

/// How often the ticker looks for a new phase.
const LOOK: Duration = Duration::from_millis(20);

/// The phase a status entry names, without its GPU: `GPU 0 (rank 0): sendrecv with rank 1` is
/// `sendrecv with rank 1`; an entry of the process itself is whole.
pub fn phase_of(entry: &str) -> &str {
    match entry.split_once(": ") {
        Some((who, what)) if who.starts_with("GPU ") => what,
        _ => entry,
    }
}

/// The line that says a phase began `at` after the process started.
pub fn phase_line(at: Duration, phase: &str) -> String {
    let phase: String = phase.chars().take(MAX_CHARS).collect();
    format!("nccl-check: phase at {:.1} s: {phase}", at.as_secs_f64())
}

/// The running ticker; dropping it stops the thread at its next tick (the worker never drops it:
/// the process ends with `_exit`).
pub struct Ticker {
    _stop: Sender<()>,
}

/// Starts the ticker thread: a [`phase_line`] whenever the first busy status entry names another
/// phase, and every `every` a [`line`], for the time since `t0`, each written to `out` in one
/// write (a line never interleaves with the verdict line printed by another thread).
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
        let mut shown = String::new();
        let mut next_tick = Instant::now() + every;
        loop {
            let wait = next_tick
                .saturating_duration_since(Instant::now())
                .min(LOOK);
            match stopped.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            let (phase, tick) = {
                let s = status.lock().unwrap_or_else(|p| p.into_inner());
                let first = s.iter().find(|e| !e.is_empty()).map(|e| phase_of(e));
                let phase = first
                    .filter(|p| *p != shown)
                    .map(|p| (p.to_string(), phase_line(t0.elapsed(), p)));
                let tick = (Instant::now() >= next_tick).then(|| line(t0.elapsed(), budget, &s));
                (phase, tick)
            };
            if let Some((p, text)) = phase {
                shown = p;
                let _ = out.write_all(format!("{text}\n").as_bytes());
            }
            if let Some(text) = tick {
                next_tick = Instant::now() + every;
                let _ = out.write_all(format!("{text}\n").as_bytes());
            }
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
        let ticks = |l: &[String]| -> Vec<String> {
            l.iter()
                .filter(|x| x.starts_with("nccl-check: running "))
                .cloned()
                .collect()
        };
        let first = ticks(&out.wait_for(|l| ticks(l).len() >= 2));
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
    fn before_the_first_interval_only_the_phase_is_written() {
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
        let lines = out.wait_for(|l| !l.is_empty());
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(out.lines(), lines);
        // The phase's time is the machine's (0.0 s idle; a loaded CI host once wrote 0.1 s):
        // the line, one, is the phase.
        let [line] = lines.as_slice() else {
            panic!("not one line: {lines:?}")
        };
        assert!(
            line.starts_with("nccl-check: phase at ") && line.ends_with(" s: x"),
            "{line}"
        );
    }

    #[test]
    fn a_phase_is_the_status_without_its_gpu() {
        assert_eq!(
            phase_of("GPU 3 (rank 7): sendrecv with rank 6"),
            "sendrecv with rank 6"
        );
        assert_eq!(
            phase_of("GPU 0: NCCL init (rank 0 of 4)"),
            "NCCL init (rank 0 of 4)"
        );
        assert_eq!(
            phase_of("loading NCCL and the CUDA driver"),
            "loading NCCL and the CUDA driver"
        );
        assert_eq!(
            phase_of("rendezvous: 3 of 4 joined"),
            "rendezvous: 3 of 4 joined"
        );
        assert_eq!(
            phase_line(Duration::from_millis(1_234), "local probe"),
            "nccl-check: phase at 1.2 s: local probe"
        );
    }

    /// A slow check says which phase it is in, one line as each phase begins (the
    /// first busy GPU's), never the same phase twice in a row, whatever the other GPUs do.
    #[test]
    fn each_phase_of_the_first_gpu_is_one_line_as_it_begins() {
        let out = Shared::default();
        let st = Arc::new(Mutex::new(status(&["loading NCCL and the CUDA driver"])));
        let _t = start(
            Instant::now(),
            st.clone(),
            Duration::from_secs(60),
            Duration::from_secs(3600),
            out.clone(),
        )
        .expect("thread");
        let set = |v: &[&str], want: usize| {
            *st.lock().expect("lock") = status(v);
            out.wait_for(|l| l.len() >= want);
            std::thread::sleep(Duration::from_millis(60));
        };
        out.wait_for(|l| !l.is_empty());
        set(&["", ""], 1);
        set(
            &[
                "GPU 0: creating its CUDA context",
                "GPU 1: creating its CUDA context",
            ],
            2,
        );
        set(
            &["GPU 0: creating its CUDA context", "GPU 1: local probe"],
            2,
        );
        set(&["GPU 0: NCCL init (rank 0 of 2)", "GPU 1: local probe"], 3);
        set(
            &[
                "GPU 0 (rank 0): all_reduce warm-up",
                "GPU 1 (rank 1): all_reduce warm-up",
            ],
            4,
        );
        let phases: Vec<String> = out
            .lines()
            .iter()
            .map(|l| {
                l.split_once(" s: ")
                    .map_or(l.clone(), |(_, p)| p.to_string())
            })
            .collect();
        assert_eq!(
            phases,
            [
                "loading NCCL and the CUDA driver",
                "creating its CUDA context",
                "NCCL init (rank 0 of 2)",
                "all_reduce warm-up"
            ],
            "{:?}",
            out.lines()
        );
    }
}
