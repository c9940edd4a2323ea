//! The prolog's one time budget: `budget_seconds` from its start covers the worker, every
//! `scontrol` call and every lock wait, so slurmd sees the prolog end within `budget_seconds`
//! plus a moment (the test: + 2 s), whatever hangs. Each step gets what is left, never a fixed
//! allowance of its own. `budget_seconds` itself is cut below Slurm's `PrologEpilogTimeout`
//! ([`effective`]), read at every run from the slurm.conf slurmd uses.

use std::time::{Duration, Instant};

/// The smallest time a step that must still happen (a drain after a FAIL) is given, even when
/// the worker used the whole budget: within the + 2 s the budget promises.
pub const GRACE: Duration = Duration::from_millis(1500);

/// Time kept free below PrologEpilogTimeout beyond the budget and the drain's grace: slurmd's
/// own start of the prolog, the exit, a loaded node.
pub const MARGIN: Duration = Duration::from_secs(5);

/// The budget a run gets: `budget_seconds`, cut where Slurm's `PrologEpilogTimeout` would kill
/// the prolog first, so a slow check ends as the gate's own ERROR (in `gate.json`) and never as
/// slurmd's 'Prolog error' drain. The prolog and the epilog are timed by slurmd each on its own,
/// so each run of the gate gets this whole cut. The one rule for the gate and `--check-config`.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub seconds: u64,
    /// Why it is below `budget_seconds`: the timeout and where it was read.
    pub cut: Option<String>,
}

/// `budget_seconds` against `timeout` (seconds, None = no limit) read at `source`.
pub fn effective(budget_seconds: u64, timeout: Option<u64>, source: &str) -> Budget {
    let Some(t) = timeout else {
        return Budget {
            seconds: budget_seconds,
            cut: None,
        };
    };
    let most = Duration::from_secs(t)
        .saturating_sub(GRACE + MARGIN)
        .as_secs();
    if budget_seconds <= most {
        return Budget {
            seconds: budget_seconds,
            cut: None,
        };
    }
    Budget {
        seconds: most,
        cut: Some(format!(
            "budget_seconds = {budget_seconds} cut to {most} s by PrologEpilogTimeout = {t} ({source}): \
             {:.1} s kept for a drain and the exit, so slurmd never kills the gate",
            (GRACE + MARGIN).as_secs_f64()
        )),
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Instant,
}

impl Deadline {
    pub fn after(d: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + d,
        }
    }

    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    pub fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    /// This deadline, but at least [`GRACE`] from now (for the drain that must follow a FAIL).
    pub fn with_grace(&self) -> Deadline {
        Deadline {
            at: self.at.max(Instant::now() + GRACE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_above_prolog_epilog_timeout_is_cut_below_it() {
        let b = effective(40, Some(15), "/etc/slurm/slurm.conf:7");
        assert_eq!(b.seconds, 8);
        let why = b.cut.expect("cut");
        assert!(
            why.contains("PrologEpilogTimeout = 15 (/etc/slurm/slurm.conf:7)"),
            "{why}"
        );
        // What is left plus the grace and the margin stays below the timeout.
        assert!(Duration::from_secs(b.seconds) + GRACE + MARGIN <= Duration::from_secs(15));
        assert_eq!(
            effective(30, Some(37), "x"),
            Budget {
                seconds: 30,
                cut: None
            }
        );
        assert_eq!(effective(30, Some(36), "x").seconds, 29);
        assert_eq!(
            effective(30, None, "x"),
            Budget {
                seconds: 30,
                cut: None
            }
        );
        // A timeout too short for any check leaves nothing: the run ends in ERROR at once.
        assert_eq!(effective(30, Some(5), "x").seconds, 0);
    }

    #[test]
    fn what_is_left_shrinks_to_zero_and_grace_gives_a_little_more() {
        let d = Deadline::after(Duration::from_millis(30));
        assert!(!d.passed() && d.remaining() <= Duration::from_millis(30));
        std::thread::sleep(Duration::from_millis(40));
        assert!(d.passed());
        assert_eq!(d.remaining(), Duration::ZERO);
        let g = d.with_grace();
        assert!(g.remaining() > Duration::from_millis(1000), "{g:?}");
        let far = Deadline::after(Duration::from_secs(60));
        assert!(far.with_grace().remaining() > Duration::from_secs(59));
    }
}
