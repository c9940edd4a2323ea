//! The prolog's one time budget: `budget_seconds` from its start covers the worker, every
//! `scontrol` call and every lock wait, so slurmd sees the prolog end within `budget_seconds`
//! plus a moment (the test: + 2 s), whatever hangs. Each step gets what is left, never a fixed
//! allowance of its own. `budget_seconds` itself is cut below Slurm's `PrologEpilogTimeout`
//! ([`effective`]), read at every run from the slurm.conf slurmd uses and from the controller,
//! the stricter of the two ([`stricter`]).

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

/// Slurm's `PrologEpilogTimeout` as the gate goes by it ([`stricter`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmTimeout {
    /// Seconds; None = no limit.
    pub seconds: Option<u64>,
    /// Where it was read: `file:line`, or `scontrol show config`.
    pub source: String,
    /// Set when the controller and the file disagree: what that means, for the admin.
    pub differs: Option<String>,
}

/// The timeout slurmd kills the prolog at, as well as this node can tell: the stricter of the
/// slurm.conf it reads (`file`: value and `file:line`; a configless node's cache) and the
/// controller's (`live`, `scontrol show config`). They differ when the file was edited and
/// `scontrol reconfigure` has not run yet (slurmd still has the old value, as the controller
/// does), or when this node's file is not the controller's; either way the smaller one is the
/// one that may kill the gate. None: neither could be read.
pub fn stricter(
    file: &Result<(Option<u64>, String), String>,
    live: &Result<Option<u64>, String>,
) -> Option<SlurmTimeout> {
    let shown = |t: Option<u64>| t.map_or("unset (no limit)".to_string(), |t| format!("{t}"));
    let live_source = "scontrol show config".to_string();
    match (file, live) {
        (Ok((f, at)), Ok(l)) if f == l => Some(SlurmTimeout {
            seconds: *f,
            source: at.clone(),
            differs: None,
        }),
        (Ok((f, at)), Ok(l)) => {
            let live_wins = match (f, l) {
                (Some(f), Some(l)) => l < f,
                (None, Some(_)) => true,
                _ => false,
            };
            let (seconds, source) = if live_wins {
                (*l, live_source)
            } else {
                (*f, at.clone())
            };
            Some(SlurmTimeout {
                seconds,
                differs: Some(format!(
                    "PrologEpilogTimeout differs: the controller has {} (scontrol show config), \
                     this node's slurm.conf {} ({at}): a 'scontrol reconfigure' is pending (or \
                     this node's file is not the controller's); slurmd kills the prolog at the \
                     value it loaded, so the gate goes by the stricter, {}",
                    shown(*l),
                    shown(*f),
                    shown(seconds)
                )),
                source,
            })
        }
        (Ok((f, at)), Err(_)) => Some(SlurmTimeout {
            seconds: *f,
            source: at.clone(),
            differs: None,
        }),
        (Err(_), Ok(l)) => Some(SlurmTimeout {
            seconds: *l,
            source: live_source,
            differs: None,
        }),
        (Err(_), Err(_)) => None,
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Instant,
}

impl Deadline {
    pub fn after(d: Duration) -> Deadline {
        Deadline::since(Instant::now(), d)
    }

    /// `d` after `start` (the prolog's start: what it spent reading Slurm's timeout counts).
    pub fn since(start: Instant, d: Duration) -> Deadline {
        Deadline { at: start + d }
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

    /// The file raised before a reconfigure: slurmd still has the controller's value, the
    /// stricter one, and the difference is said.
    #[test]
    fn the_stricter_of_the_file_and_the_controller_is_the_timeout() {
        let file = |t: Option<u64>| Ok((t, "/etc/slurm/slurm.conf:3".to_string()));
        let t = stricter(&file(Some(60)), &Ok(Some(15))).expect("known");
        assert_eq!(
            (t.seconds, t.source.as_str()),
            (Some(15), "scontrol show config")
        );
        let why = t.differs.expect("differs");
        assert!(
            why.contains("controller has 15")
                && why.contains("slurm.conf 60")
                && why.contains("reconfigure' is pending")
                && why.ends_with("stricter, 15"),
            "{why}"
        );
        // Lowered in the file (a node whose file is not the controller's): the file's wins.
        let t = stricter(&file(Some(15)), &Ok(Some(60))).expect("known");
        assert_eq!(t.seconds, Some(15));
        assert_eq!(t.source, "/etc/slurm/slurm.conf:3");
        // Unset is no limit: any value is stricter.
        assert_eq!(
            stricter(&file(None), &Ok(Some(60))).map(|t| t.seconds),
            Some(Some(60))
        );
        assert_eq!(
            stricter(&file(Some(20)), &Ok(None)).map(|t| t.seconds),
            Some(Some(20))
        );
        let same = stricter(&file(Some(60)), &Ok(Some(60))).expect("known");
        assert!(
            same.differs.is_none() && same.source.ends_with(":3"),
            "{same:?}"
        );
        // One source alone decides; none is unknown.
        let t = stricter(&Err("no file".into()), &Ok(Some(30))).expect("live");
        assert_eq!(
            (t.seconds, t.source.as_str()),
            (Some(30), "scontrol show config")
        );
        assert_eq!(
            stricter(&file(Some(9)), &Err("down".into())).map(|t| t.seconds),
            Some(Some(9))
        );
        assert_eq!(stricter(&Err("a".into()), &Err("b".into())), None);
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
