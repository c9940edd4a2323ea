//! The prolog's one time budget: `budget_seconds` from its start covers the worker, every
//! `scontrol` call and every lock wait, so slurmd sees the prolog end within `budget_seconds`
//! plus a moment (the test: + 2 s), whatever hangs. Each step gets what is left, never a fixed
//! allowance of its own. `budget_seconds` itself is cut below the limits Slurm sets on the run
//! ([`Limits`]): `PrologEpilogTimeout` (slurmd kills the prolog or epilog, [`effective`]), for the
//! prolog also `BatchStartTimeout` (slurmctld ends a batch job whose prolog outlasts it as
//! missing, [`batch_start_limit`]), for `--recheck` `HealthCheckTimeout` (slurmd kills its
//! HealthCheckProgram). Each is read at every run from the slurm.conf slurmd uses and from the
//! controller, the stricter of the two ([`stricter`]).

use crate::decide::Mode;
use nccl_check_host::slurm_config::Settings;
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
    let limit = timeout.map(|t| SlurmLimit::prolog_epilog(t, source));
    within(budget_seconds, limit.as_slice())
}

/// One limit Slurm sets on a run of the gate: past `seconds` from its start, Slurm acts.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmLimit {
    pub seconds: u64,
    /// The setting and where it was read, as the cut says it.
    pub said: String,
    /// What the cut spares: `slurmd never kills the gate`.
    pub spares: &'static str,
}

impl SlurmLimit {
    pub fn prolog_epilog(t: u64, source: &str) -> SlurmLimit {
        SlurmLimit {
            seconds: t,
            said: format!("PrologEpilogTimeout = {t} ({source})"),
            spares: "slurmd never kills the gate",
        }
    }
}

/// `budget_seconds` against the smallest of `limits`: cut to it less [`GRACE`] and [`MARGIN`].
pub fn within(budget_seconds: u64, limits: &[SlurmLimit]) -> Budget {
    let cut = limits.iter().min_by_key(|l| l.seconds).and_then(|l| {
        let most = Duration::from_secs(l.seconds)
            .saturating_sub(GRACE + MARGIN)
            .as_secs();
        (budget_seconds > most).then(|| Budget {
            seconds: most,
            cut: Some(format!(
                "budget_seconds = {budget_seconds} cut to {most} s by {}: {:.1} s kept for a drain \
                 and the exit, so {}",
                l.said,
                (GRACE + MARGIN).as_secs_f64(),
                l.spares
            )),
        })
    });
    cut.unwrap_or(Budget {
        seconds: budget_seconds,
        cut: None,
    })
}

/// Slurm's `DEFAULT_MSG_TIMEOUT`: slurmctld gives a batch job's launch `BatchStartTimeout` plus
/// `MessageTimeout`, at most this much of it (`src/slurmctld/job_mgr.c`, `_purge_missing_jobs`,
/// the same in 22.05, 24.11 and 26.05).
pub const MESSAGE_TIMEOUT_COUNTED: u64 = 10;

/// How long a batch job's prolog may run before slurmctld may end the job: when the job's node
/// registers (every 20th ping of SlurmdTimeout/3 s, and on 22.05 at each reconfigure) and the
/// job has been allocated longer than this without its batch step reported, slurmctld logs
/// `Batch JobId=N missing from batch node` and ends it (NODE_FAIL; requeued where it may be).
/// `BatchStartTimeout + min(MessageTimeout, 10)` seconds.
pub fn batch_start_limit(s: &Settings) -> u64 {
    s.batch_start_timeout + s.message_timeout.min(MESSAGE_TIMEOUT_COUNTED)
}

/// Slurm's limits on a run of the gate, each as the gate goes by it ([`stricter`] of this node's
/// file and the controller's); None: neither source could say.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Limits {
    pub prolog_epilog: Option<SlurmTimeout>,
    /// [`batch_start_limit`], with the two settings as the chosen source has them.
    pub batch_start: Option<(SlurmTimeout, u64, u64)>,
    pub health_check: Option<SlurmTimeout>,
}

impl Limits {
    /// From the file slurmd uses and the controller's answer.
    pub fn read(file: &Result<Settings, String>, live: &Result<Settings, String>) -> Limits {
        let on_file = |key: &str, v: fn(&Settings) -> Option<u64>| {
            file.as_ref()
                .map(|s| (v(s), s.origin_of(key)))
                .map_err(Clone::clone)
        };
        let on_live = |v: fn(&Settings) -> Option<u64>| live.as_ref().map(v).map_err(Clone::clone);
        let pet = |s: &Settings| s.prolog_epilog_timeout;
        let batch = |s: &Settings| Some(batch_start_limit(s));
        let health = |s: &Settings| s.health_check_timeout;
        let batch_start = stricter_of(
            BATCH_START,
            &on_file("BatchStartTimeout", batch),
            &on_live(batch),
        )
        .and_then(|t| {
            let from = if t.source == LIVE { live } else { file };
            let s = from.as_ref().ok()?;
            Some((t, s.batch_start_timeout, s.message_timeout))
        });
        // 26.05's controller may print `HealthCheckTimeout = 0 sec`, which no slurmd runs with:
        // then the file's (or the default) is the one.
        let live_health = match live {
            Ok(s) if s.health_check_timeout.is_none() => Err("not shown".to_string()),
            l => l.as_ref().map(health).map_err(Clone::clone),
        };
        Limits {
            prolog_epilog: stricter(&on_file("PrologEpilogTimeout", pet), &on_live(pet)),
            batch_start,
            health_check: stricter_of(
                HEALTH_CHECK,
                &on_file("HealthCheckTimeout", health),
                &live_health,
            ),
        }
    }

    /// The limits a run in `mode` is held to: the prolog by PrologEpilogTimeout and
    /// BatchStartTimeout, the epilog by PrologEpilogTimeout, `--recheck` (slurmd's
    /// HealthCheckProgram, or by hand: one rule) by HealthCheckTimeout.
    pub fn for_mode(&self, mode: Mode) -> Vec<SlurmLimit> {
        let mut out = Vec::new();
        if mode != Mode::Recheck {
            if let Some(t) = &self.prolog_epilog {
                out.extend(t.seconds.map(|s| SlurmLimit::prolog_epilog(s, &t.source)));
            }
        }
        if let (Mode::Prolog, Some((t, bst, msg))) = (mode, &self.batch_start) {
            out.extend(t.seconds.map(|s| SlurmLimit {
                seconds: s,
                said: format!(
                    "BatchStartTimeout = {bst} + MessageTimeout = {msg} (at most \
                     {MESSAGE_TIMEOUT_COUNTED} counts) = {s} s ({})",
                    t.source
                ),
                spares: "slurmctld never ends a batch job as missing (NODE_FAIL) while its gate \
                         runs",
            }));
        }
        if let (Mode::Recheck, Some(t)) = (mode, &self.health_check) {
            out.extend(t.seconds.map(|s| SlurmLimit {
                seconds: s,
                said: format!("HealthCheckTimeout = {s} ({})", t.source),
                spares: "slurmd never kills the recheck (its worker would be left running)",
            }));
        }
        out
    }

    /// Each limit not known here taken from `s`, the one source there is (the controller's
    /// settings or the file's, as `s.source` says).
    pub fn or_from(&self, s: &Settings) -> Limits {
        let none = Err(String::new());
        let one = if s.source == LIVE {
            Limits::read(&none, &Ok(s.clone()))
        } else {
            Limits::read(&Ok(s.clone()), &none)
        };
        Limits {
            prolog_epilog: self.prolog_epilog.clone().or(one.prolog_epilog),
            batch_start: self.batch_start.clone().or(one.batch_start),
            health_check: self.health_check.clone().or(one.health_check),
        }
    }

    /// Every difference between the file and the controller, for the log and `--check-config`.
    pub fn differences(&self) -> Vec<&str> {
        [
            self.prolog_epilog.as_ref(),
            self.batch_start.as_ref().map(|(t, _, _)| t),
            self.health_check.as_ref(),
        ]
        .into_iter()
        .flatten()
        .filter_map(|t| t.differs.as_deref())
        .collect()
    }
}

const LIVE: &str = "scontrol show config";

/// What each limit is called and who acts on it, for [`stricter_of`]'s message.
pub struct LimitName {
    name: &'static str,
    acts: &'static str,
}

const PROLOG_EPILOG: LimitName = LimitName {
    name: "PrologEpilogTimeout",
    acts: "slurmd kills the prolog at the value it loaded",
};
const BATCH_START: LimitName = LimitName {
    name: "BatchStartTimeout + MessageTimeout",
    acts: "slurmctld ends a batch job by the values it loaded",
};
const HEALTH_CHECK: LimitName = LimitName {
    name: "HealthCheckTimeout",
    acts: "slurmd kills its HealthCheckProgram at the value it loaded",
};

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
    stricter_of(PROLOG_EPILOG, file, live)
}

/// [`stricter`] for any of Slurm's limits (`key` names it in the message).
pub fn stricter_of(
    key: LimitName,
    file: &Result<(Option<u64>, String), String>,
    live: &Result<Option<u64>, String>,
) -> Option<SlurmTimeout> {
    let shown = |t: Option<u64>| t.map_or("unset (no limit)".to_string(), |t| format!("{t}"));
    let (seconds, source, differs) = match (file, live) {
        (Ok((f, at)), Ok(l)) if f != l => {
            let live_wins = match (f, l) {
                (Some(f), Some(l)) => l < f,
                (None, Some(_)) => true,
                _ => false,
            };
            let (seconds, source) = if live_wins {
                (*l, LIVE.to_string())
            } else {
                (*f, at.clone())
            };
            let differs = format!(
                "{} differs: the controller has {} (scontrol show config), this node's \
                 slurm.conf {} ({at}): a 'scontrol reconfigure' is pending (or this node's \
                 file is not the controller's); {}, so the gate goes by the stricter, {}",
                key.name,
                shown(*l),
                shown(*f),
                key.acts,
                shown(seconds)
            );
            (seconds, source, Some(differs))
        }
        (Ok((f, at)), _) => (*f, at.clone(), None),
        (Err(_), Ok(l)) => (*l, LIVE.to_string(), None),
        (Err(_), Err(_)) => return None,
    };
    Some(SlurmTimeout {
        seconds,
        source,
        differs,
    })
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

    fn with(bst: u64, msg: u64, pet: Option<u64>, health: Option<u64>, source: &str) -> Settings {
        Settings {
            source: source.into(),
            batch_start_timeout: bst,
            message_timeout: msg,
            prolog_epilog_timeout: pet,
            health_check_timeout: health,
            ..Settings::default()
        }
    }

    /// slurmctld's rule (`_purge_missing_jobs`): BatchStartTimeout plus MessageTimeout, of
    /// which 10 s at most.
    #[test]
    fn a_batch_job_s_launch_gets_batch_start_timeout_and_at_most_10_s_of_message_timeout() {
        assert_eq!(batch_start_limit(&with(10, 10, None, None, "x")), 20);
        assert_eq!(batch_start_limit(&with(1, 10, None, None, "x")), 11);
        assert_eq!(batch_start_limit(&with(1, 60, None, None, "x")), 11);
        assert_eq!(batch_start_limit(&with(0, 3, None, None, "x")), 3);
    }

    /// The prolog is held to PrologEpilogTimeout and BatchStartTimeout (the smaller cuts), the
    /// epilog to PrologEpilogTimeout alone, the recheck to HealthCheckTimeout alone.
    #[test]
    fn each_run_is_held_to_its_own_limits_and_the_smallest_cuts() {
        let live = with(1, 10, Some(60), Some(60), "scontrol show config");
        let l = Limits::read(&Err("no file".into()), &Ok(live));
        let b = within(36, &l.for_mode(Mode::Prolog));
        assert_eq!(b.seconds, 4);
        let why = b.cut.expect("cut");
        assert!(
            why.starts_with(
                "budget_seconds = 36 cut to 4 s by BatchStartTimeout = 1 + MessageTimeout = 10 \
                 (at most 10 counts) = 11 s (scontrol show config): 6.5 s kept"
            ) && why.ends_with(
                "slurmctld never ends a batch job as missing (NODE_FAIL) while its gate runs"
            ),
            "{why}"
        );
        let e = within(36, &l.for_mode(Mode::Epilog));
        assert_eq!(
            e,
            Budget {
                seconds: 36,
                cut: None
            }
        );
        let r = within(60, &l.for_mode(Mode::Recheck));
        assert_eq!(r.seconds, 53);
        assert!(r
            .cut
            .expect("cut")
            .contains("by HealthCheckTimeout = 60 (scontrol show config)"));
        // PrologEpilogTimeout the stricter: its cut, in its own words.
        let l = Limits::read(&Err("x".into()), &Ok(with(30, 10, Some(15), None, LIVE)));
        assert_eq!(
            within(36, &l.for_mode(Mode::Prolog)),
            effective(36, Some(15), "scontrol show config")
        );
        // Slurm's defaults (10 + 10): the default budget of 30 s is cut to 13.
        let l = Limits::read(
            &Ok(Settings {
                source: "/etc/slurm/slurm.conf".into(),
                ..Settings::default()
            }),
            &Err("down".into()),
        );
        assert_eq!(within(30, &l.for_mode(Mode::Prolog)).seconds, 13);
        assert_eq!(within(13, &l.for_mode(Mode::Prolog)).cut, None);
        assert_eq!(
            within(30, &[]),
            Budget {
                seconds: 30,
                cut: None
            }
        );
    }

    /// BatchStartTimeout raised in the file before a reconfigure: slurmctld still goes by the
    /// controller's, the stricter; 26.05's `HealthCheckTimeout = 0 sec` leaves the file's.
    #[test]
    fn the_controller_s_batch_start_timeout_wins_until_the_reconfigure_and_is_said() {
        let file = Ok(Settings {
            origin: vec![("BatchStartTimeout".into(), "/etc/slurm/slurm.conf:9".into())],
            ..with(40, 10, Some(120), Some(45), "/etc/slurm/slurm.conf")
        });
        let live = Ok(with(10, 10, Some(120), None, LIVE));
        let l = Limits::read(&file, &live);
        let (t, bst, msg) = l.batch_start.clone().expect("known");
        assert_eq!(
            (t.seconds, t.source.as_str(), bst, msg),
            (Some(20), LIVE, 10, 10)
        );
        let d = l.differences();
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].starts_with(
                "BatchStartTimeout + MessageTimeout differs: the controller has 20 \
                 (scontrol show config), this node's slurm.conf 50 (/etc/slurm/slurm.conf:9)"
            ) && d[0].ends_with("stricter, 20"),
            "{d:?}"
        );
        let h = l.health_check.expect("file's");
        assert_eq!(
            (h.seconds, h.source.as_str(), h.differs),
            (Some(45), "/etc/slurm/slurm.conf", None)
        );
        assert_eq!(
            Limits::read(&Err("a".into()), &Err("b".into())),
            Limits::default()
        );
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
