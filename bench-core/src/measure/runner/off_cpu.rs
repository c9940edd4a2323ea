//! Whether this process could run while it measured: a thread that wakes every
//! [`TICK`] and counts the wall time it could not (gaps over [`GAP`]). A worker that is off the
//! CPU for long stretches cannot feed its GPUs or its NICs: NCCL's proxy threads, which move a
//! network collective's data, stop with it. Seen on one H100 with 16 emulated nodes
//! (bench-core/benchmarks/results/2026-11-24-h100x1-fabric-visit7-n16-starved): a worker
//! stopped 60% of every 0.5 s cut the allocation's all_reduce to 0.44x, yet every pair round
//! cleared it (a shared bridge lets a late pair catch up), and the check passed.
//!
//! The judgement ([`finding`]) is deliberately coarse: only stretches over 100 ms count (a
//! scheduler's normal wake-up delay, even on an oversubscribed host, is milliseconds), and only
//! a process that lost at least half of a window of at least 2 s is named. Less than that is
//! reported (the report's `facts.off_cpu`), never judged.

use crate::model::finding::Finding;
use nccl_check_contract::report::reason::ReasonCode;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the watch wakes.
const TICK: Duration = Duration::from_millis(10);
/// A wake-up later than this (beyond the tick) is time the process could not run.
pub const GAP: Duration = Duration::from_millis(100);
/// The share of the window a process must have lost to be named.
pub const STARVED_SHARE: f64 = 0.5;
/// Windows shorter than this are not judged (too few ticks to tell a stop from noise).
pub const MIN_WINDOW: Duration = Duration::from_secs(2);

/// A watch's reading while it runs, for the localizer's rounds, which read it at their end:
/// when the watch started and the nanoseconds it lost so far.
#[derive(Debug, Default)]
pub struct SoFar {
    started: OnceLock<Instant>,
    off_nanos: AtomicU64,
}

impl SoFar {
    /// The share of its time so far that this process could not run; None before the watch
    /// started or within [`MIN_WINDOW`] of its start.
    pub fn share(&self) -> Option<f64> {
        let window = self.started.get()?.elapsed().as_secs_f64();
        let off = self.off_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        (window >= MIN_WINDOW.as_secs_f64()).then(|| off / window)
    }
}

/// What the watch saw: the window it covered and the time lost in gaps over [`GAP`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OffCpu {
    pub window_s: f64,
    pub off_s: f64,
    pub longest_gap_s: f64,
    pub gaps: u32,
}

impl OffCpu {
    /// The share of the window the process could not run.
    pub fn share(&self) -> f64 {
        if self.window_s > 0.0 {
            self.off_s / self.window_s
        } else {
            0.0
        }
    }
}

/// A running watch; [`Watch::stop`] ends it and says what it saw.
pub struct Watch {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<OffCpu>>,
}

impl Watch {
    /// Starts the watch on its own thread, its reading so far kept in `so_far` (one watch each);
    /// None when no thread can be started (then nothing is judged: the check goes on without it).
    pub fn start(so_far: Arc<SoFar>) -> Option<Watch> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let _ = so_far.started.set(Instant::now());
        let handle = std::thread::Builder::new()
            .name("off-cpu".into())
            .spawn(move || watch(&flag, TICK, std::thread::sleep, &so_far.off_nanos))
            .ok()?;
        Some(Watch {
            stop,
            handle: Some(handle),
        })
    }

    /// Ends the watch (within one tick) and returns what it saw.
    pub fn stop(mut self) -> Option<OffCpu> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take()?.join().ok()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Ticks until `stop`, adding up the lateness of every wake-up later than `tick + GAP`.
/// `sleep` is `std::thread::sleep` (a test's stands in for a stop); `lost` counts the same
/// lateness in nanoseconds as it happens.
fn watch(stop: &AtomicBool, tick: Duration, sleep: impl Fn(Duration), lost: &AtomicU64) -> OffCpu {
    let start = Instant::now();
    let mut last = start;
    let (mut off, mut longest, mut gaps) = (Duration::ZERO, Duration::ZERO, 0u32);
    while !stop.load(Ordering::Relaxed) {
        sleep(tick);
        let now = Instant::now();
        let late = now.duration_since(last).saturating_sub(tick);
        if late > GAP {
            off += late;
            lost.fetch_add(late.as_nanos() as u64, Ordering::Relaxed);
            longest = longest.max(late);
            gaps = gaps.saturating_add(1);
        }
        last = now;
    }
    OffCpu {
        window_s: start.elapsed().as_secs_f64(),
        off_s: off.as_secs_f64(),
        longest_gap_s: longest.as_secs_f64(),
        gaps,
    }
}

/// `worker_starved` naming `node` when the process lost at least [`STARVED_SHARE`] of a
/// window of at least [`MIN_WINDOW`]; None otherwise.
pub fn finding(node: &str, seen: &OffCpu) -> Option<Finding> {
    if seen.window_s < MIN_WINDOW.as_secs_f64() || seen.share() < STARVED_SHARE {
        return None;
    }
    Some(
        Finding::new(
            ReasonCode::WorkerStarved,
            node,
            format!(
                "node {node}: the check's worker could not run for {:.1} s of the {:.1} s it \
                 measured ({:.0}%, in {} stretches over {} ms, the longest {:.2} s): its CPUs \
                 are taken or the process is stopped, and NCCL's proxy threads, which move the \
                 network's data, stop with it",
                seen.off_s,
                seen.window_s,
                100.0 * seen.share(),
                seen.gaps,
                GAP.as_millis(),
                seen.longest_gap_s
            ),
        )
        .with_values(seen.share(), STARVED_SHARE),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(window_s: f64, off_s: f64) -> OffCpu {
        OffCpu {
            window_s,
            off_s,
            longest_gap_s: 0.3,
            gaps: 5,
        }
    }

    #[test]
    fn a_process_that_lost_half_of_a_long_window_is_named_and_less_is_not() {
        let f = finding("fab07", &seen(10.0, 6.0)).expect("60% of 10 s is starved");
        assert_eq!(f.code, ReasonCode::WorkerStarved);
        assert_eq!(f.subject, "fab07");
        assert!(f.message.contains("node fab07") && f.message.contains("60%"));
        assert_eq!(f.measured, Some(0.6));
        assert!(finding("fab07", &seen(10.0, 4.9)).is_none());
        // A short window is not judged, however much of it was lost.
        assert!(finding("fab07", &seen(1.5, 1.4)).is_none());
    }

    #[test]
    fn a_stretch_the_thread_could_not_run_is_counted_and_ordinary_ticks_are_not() {
        // The third tick oversleeps by 300 ms, as a SIGSTOPped process does; the test stops
        // the watch after the sixth.
        let stop = AtomicBool::new(false);
        let calls = std::sync::atomic::AtomicU32::new(0);
        let lost = AtomicU64::new(0);
        let seen = watch(
            &stop,
            Duration::from_millis(5),
            |tick| {
                let n = calls.fetch_add(1, Ordering::Relaxed) + 1;
                std::thread::sleep(if n == 3 {
                    tick + Duration::from_millis(300)
                } else {
                    tick
                });
                if n == 6 {
                    stop.store(true, Ordering::Relaxed);
                }
            },
            &lost,
        );
        assert_eq!(lost.load(Ordering::Relaxed) as f64 / 1e9, seen.off_s);
        assert_eq!(seen.gaps, 1, "{seen:?}");
        assert!((0.3..0.6).contains(&seen.off_s), "{seen:?}");
        assert_eq!(seen.off_s, seen.longest_gap_s);
        assert!(seen.window_s >= 0.32, "{seen:?}");
    }

    #[test]
    fn a_running_watch_in_an_idle_process_sees_no_stretch() {
        let w = Watch::start(Arc::default()).expect("thread");
        std::thread::sleep(Duration::from_millis(300));
        let quiet = w.stop().expect("joined");
        assert_eq!(quiet.gaps, 0, "{quiet:?}");
        assert!(quiet.window_s >= 0.29, "{quiet:?}");
    }
}
