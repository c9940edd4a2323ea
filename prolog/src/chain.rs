//! What the gate depends on beyond its own file, for `--check-config`: Slurm's settings as this
//! node's slurmd uses them (PrologEpilogTimeout against the budget, GresTypes against
//! `gpus = "job"`, whether Prolog= runs this prolog) and the worker's own `--check-config` on
//! the worker config the prolog passes on (valid file, NCCL loadable where the node has GPUs).
//! Each finding is a problem (the gate would be a no-op or a drain: exit 2) or a note.

use crate::budget::{self, Limits, GRACE, MARGIN};
use crate::config::{GateConfig, GpuPolicy};
use crate::decide::Mode;
use crate::slurm_uses::INSTALLED;
use nccl_check_contract::check_line::{CheckProblem, CheckProblemKind};
use nccl_check_host::slurm_config::{Settings, Sources};
use nccl_check_host::supervise::{self, Ending, Output, Spec};
use std::path::Path;
use std::time::Duration;

/// How long the controller and the worker's check are waited for.
const WAIT: Duration = Duration::from_secs(15);

/// What a NOT READY line does to the next job on the node: the summary says each, so it never
/// contradicts a line above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Effect {
    /// slurmd fails the job's prolog or epilog and drains the node ('Prolog error').
    Drains,
    /// The gate runs but checks nothing or ends in ERROR: the job runs unchecked, no drain.
    Unchecked,
    /// Every `srun --nccl-check` step fails (the SPANK plugin's line).
    PluginFails,
    /// Slurm's configuration as slurmd has it cannot be told from here.
    Unknown,
}

impl Effect {
    /// The summary's words for it.
    pub fn says(self) -> &'static str {
        match self {
            Effect::Drains => {
                "slurmd drains the node at the next job (a Prolog= or Epilog= entry it cannot run)"
            }
            Effect::Unchecked => {
                "every job runs unchecked (its check ends in ERROR or checks nothing; not drained)"
            }
            Effect::PluginFails => "every srun --nccl-check step fails",
            Effect::Unknown => "what slurmd does with the next job cannot be told from this node",
        }
    }
}

/// One NOT READY line and what it does.
#[derive(Debug, Clone, PartialEq)]
pub struct NotReady {
    pub effect: Effect,
    pub text: String,
}

impl NotReady {
    pub fn new(effect: Effect, text: impl Into<String>) -> NotReady {
        NotReady {
            effect,
            text: text.into(),
        }
    }
}

/// Problems and notes, in the order they are printed.
#[derive(Debug, Default, PartialEq)]
pub struct Findings {
    pub problems: Vec<NotReady>,
    pub notes: Vec<String>,
}

/// Slurm's side as `--check-config` sees it.
pub struct SlurmView<'a> {
    /// The settings there are (the controller's, else the file in use); None: none, `why`.
    pub settings: Option<&'a Settings>,
    pub why: &'a str,
    /// Slurm's limits as the gate goes by them at run time ([`budget::stricter`] of the file
    /// and the controller, each); a None among them: taken from `settings`.
    pub limits: Limits,
    /// The slurm.conf in use when `settings` are the controller's: its entries are what the
    /// next reconfigure gives slurmd.
    pub file: Option<&'a Settings>,
    /// `/` except in tests: where the Prolog=/Epilog= entries are looked up.
    pub root: &'a Path,
}

/// Slurm's side: the budget each run of the gate gets (the gate's own rule), the entries slurmd
/// runs (missing or not executable, a pattern matching nothing: a problem), the epilog gate,
/// GresTypes. Slurm's configuration unreadable is a problem: nothing here could be checked.
pub fn slurm(c: &GateConfig, v: &SlurmView, file: &Path) -> Findings {
    let mut f = Findings::default();
    let Some(s) = v.settings else {
        f.problems.push(NotReady::new(
            Effect::Unknown,
            format!(
                "Slurm's configuration could not be read ({}): PrologEpilogTimeout, GresTypes and \
                 the Prolog= entries not checked",
                v.why
            ),
        ));
        return f;
    };
    // The gate's own reading, so what is said here is what the next run does.
    let limits = v.limits.or_from(s);
    let (timeout, source) = match &limits.prolog_epilog {
        Some(t) => (t.seconds, t.source.clone()),
        None => (s.prolog_epilog_timeout, s.source.clone()),
    };
    f.notes
        .extend(limits.differences().into_iter().map(str::to_string));
    let b = budget::effective(c.budget_seconds, timeout, &source);
    let runs_at = gate_entries(s, v.root);
    match (&b.cut, timeout) {
        (Some(why), _) if b.seconds == 0 => f.problems.push(NotReady::new(
            Effect::Unchecked,
            format!(
                "{why}: no time is left for a check, so every job's check ends in ERROR at once \
                 (not drained); raise PrologEpilogTimeout above {} s or remove the gate",
                (Duration::from_secs(c.budget_seconds) + GRACE + MARGIN)
                    .as_secs_f64()
                    .ceil()
            ),
        )),
        (Some(why), _) => f.notes.push(format!(
            "{why}. Each run of the gate ({runs_at}) gets {} s: a slower check ends in the gate's \
             ERROR (not drained). Set budget_seconds <= {} in {} or raise PrologEpilogTimeout to \
             have the budget as written",
            b.seconds,
            b.seconds,
            file.display()
        )),
        (None, Some(t)) => f.notes.push(format!(
            "PrologEpilogTimeout = {t} ({source}): each run of the gate ({runs_at}) gets its \
             budget_seconds = {} s (+ {:.1} s for a drain)",
            c.budget_seconds,
            GRACE.as_secs_f64()
        )),
        (None, None) => f.notes.push(format!(
            "PrologEpilogTimeout is unset ({source}): slurmd waits for the prolog without limit; \
             each run of the gate ({runs_at}) gets budget_seconds = {} s",
            c.budget_seconds
        )),
    }
    batch_start(c, &limits, b.seconds, file, &mut f);
    if s.health_check_running(
        &Path::new(INSTALLED).with_file_name("nccl-check-recheck"),
        v.root,
    )
    .is_some()
    {
        health_check(c, &limits, &mut f);
    }
    f.problems.extend(
        s.entry_problems(Path::new(INSTALLED), v.root)
            .into_iter()
            .map(|p| NotReady::new(Effect::Drains, p)),
    );
    if let Some(p) = v.file {
        pending_entries(s, p, v.root, &mut f);
    }
    if c.gpus == GpuPolicy::Job && !s.has_gres_gpu() {
        f.problems.push(NotReady::new(
            Effect::Unchecked,
            format!(
                "gpus = \"job\" but Slurm has no GresTypes=gpu ({}): no job is given GPUs, so every \
                 prolog checks nothing and the gate is off; set gpus = \"all\" in {} (check every \
                 GPU of the node) or configure gres/gpu",
                s.source,
                file.display()
            ),
        ));
    }
    if let Some(proctrack) = &s.proctrack {
        f.notes.push(proctrack_note(proctrack, &s.source));
    }
    if !s.prolog_flags.is_empty() || !s.prologs.is_empty() {
        f.notes.push(format!(
            "Prolog = {}, Epilog = {}, PrologFlags = {} ({})",
            listed(&s.prologs),
            listed(&s.epilogs),
            listed(&s.prolog_flags),
            s.source
        ));
    }
    f
}

/// What the proctrack plugin means for whose a process is (`stray::owner`): slurmd's own list
/// (`scontrol listpids`) decides under every plugin; the job's cgroup is read only where slurmd
/// cannot answer, and only `proctrack/cgroup` puts a job's processes there.
fn proctrack_note(proctrack: &str, source: &str) -> String {
    let fallback = if proctrack.eq_ignore_ascii_case("proctrack/cgroup") {
        "else by the job's cgroup"
    } else {
        "its processes lie in no job's cgroup, so where slurmd cannot answer their owner is \
         unknown, which never drains"
    };
    format!(
        "ProctrackType = {proctrack} ({source}): another job's processes are told by \
         `scontrol listpids`; {fallback}"
    )
}

/// The prolog's cut below BatchStartTimeout ([`budget::batch_start_limit`]), as the gate makes
/// it at every prolog run; `after_timeout`: the budget PrologEpilogTimeout leaves.
fn batch_start(c: &GateConfig, limits: &Limits, after_timeout: u64, file: &Path, f: &mut Findings) {
    let Some((t, bst, msg)) = &limits.batch_start else {
        return;
    };
    let Some(limit) = t.seconds else {
        return;
    };
    let b = budget::within(c.budget_seconds, &limits.for_mode(Mode::Prolog));
    let counted = (*msg).min(budget::MESSAGE_TIMEOUT_COUNTED);
    // The smallest BatchStartTimeout that leaves budget_seconds as written.
    let needed = ((Duration::from_secs(c.budget_seconds) + GRACE + MARGIN)
        .as_secs_f64()
        .ceil() as u64)
        .saturating_sub(counted);
    let what = "slurmctld ends a batch job whose prolog has run longer than that when the job's \
                node registers (every 20th ping, SlurmdTimeout/3 s apart; on 22.05 also at each \
                'scontrol reconfigure') as missing, NODE_FAIL, requeued where it may be";
    match &b.cut {
        Some(why) if b.seconds < after_timeout && b.seconds == 0 => f.problems.push(NotReady::new(
            Effect::Unchecked,
            format!(
                "{why}: no time is left for a check in the prolog, so every job's check ends in \
                 ERROR at once (not drained); raise BatchStartTimeout to {needed} or more"
            ),
        )),
        Some(why) if b.seconds < after_timeout => f.notes.push(format!(
            "{why}. The prolog gate gets {} s ({what}): a slower check ends in the gate's ERROR \
             (not drained). Set budget_seconds <= {} in {} or raise BatchStartTimeout to {needed} \
             to have the budget as written",
            b.seconds,
            b.seconds,
            file.display()
        )),
        _ => f.notes.push(format!(
            "BatchStartTimeout = {bst} + MessageTimeout = {msg} (at most {} counts) = {limit} s \
             ({}): {what}; the prolog gate's {} s fit",
            budget::MESSAGE_TIMEOUT_COUNTED,
            t.source,
            b.seconds
        )),
    }
}

/// The recheck's cut below HealthCheckTimeout, where HealthCheckProgram runs it.
fn health_check(c: &GateConfig, limits: &Limits, f: &mut Findings) {
    let Some(t) = limits
        .health_check
        .as_ref()
        .and_then(|t| t.seconds.map(|s| (s, t)))
    else {
        return;
    };
    let b = budget::within(c.budget_seconds, &limits.for_mode(Mode::Recheck));
    f.notes.push(match &b.cut {
        Some(why) => format!(
            "{why}. Each recheck (HealthCheckProgram) gets {} s: a slower one ends in ERROR, \
             nothing drained or resumed",
            b.seconds
        ),
        None => format!(
            "HealthCheckTimeout = {} ({}): each recheck (HealthCheckProgram) gets its \
             budget_seconds = {} s",
            t.0, t.1.source, c.budget_seconds
        ),
    });
}

/// The file's Prolog=/Epilog= when they are not the controller's: what the next reconfigure
/// gives slurmd, said and checked too.
fn pending_entries(live: &Settings, file: &Settings, root: &Path, f: &mut Findings) {
    if file.prologs == live.prologs && file.epilogs == live.epilogs {
        return;
    }
    f.notes.push(format!(
        "Prolog/Epilog differ: the controller has Prolog = {}, Epilog = {}; this node's {} has \
         Prolog = {}, Epilog = {}: a 'scontrol reconfigure' is pending (or this node's file is not \
         the controller's)",
        listed(&live.prologs),
        listed(&live.epilogs),
        file.source,
        listed(&file.prologs),
        listed(&file.epilogs)
    ));
    f.problems.extend(
        file.entry_problems(Path::new(INSTALLED), root)
            .into_iter()
            .map(|e| NotReady::new(Effect::Drains, format!("after a reconfigure: {e}"))),
    );
}

/// `a,b`, or `(none)`.
fn listed(v: &[String]) -> String {
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(",")
    }
}

/// Which entries run the gate: `Prolog=X` (the prolog gate) and `Epilog=Y` (the epilog gate,
/// timed by slurmd on its own against the same PrologEpilogTimeout), or that none does.
fn gate_entries(s: &Settings, root: &Path) -> String {
    let e = s.entries_running(Path::new(INSTALLED), root);
    if e.is_empty() {
        format!("no Prolog= or Epilog= runs {INSTALLED} yet")
    } else {
        e.join(", ")
    }
}

/// Slurm's configuration for this node, as `--check-config` reads it.
pub struct SlurmRead {
    /// The controller's settings, else the slurm.conf in use.
    pub settings: Option<Settings>,
    /// The slurm.conf in use, when the controller answered too (for what a reconfigure brings).
    pub file: Option<Settings>,
    /// Why there are no settings.
    pub why: String,
    /// The controller's settings, or why there are none.
    pub live: Result<Settings, String>,
    /// The layout's problems: a local slurm.conf shadowing a configless cache.
    pub problems: Vec<NotReady>,
    pub notes: Vec<String>,
}

/// Reads this node's Slurm configuration from every source ([`Sources::read`]).
pub fn read_slurm(c: &GateConfig, slurm_conf: Option<&str>) -> SlurmRead {
    let sc = c.scontrol.is_file().then_some(c.scontrol.as_path());
    let s = Sources::read(Path::new("/"), slurm_conf, sc, WAIT);
    let live_error = s.live_error.clone().unwrap_or_else(|| "no scontrol".into());
    let why = match s.file_errors.first() {
        Some(e) => format!("{live_error}; {e}"),
        None => format!("{live_error}; no slurm.conf found"),
    };
    let mut notes = Vec::new();
    if s.live.is_none() && !s.files.is_empty() {
        notes.push(format!(
            "the controller did not answer ({live_error}): the file's settings are checked, not \
             the ones slurmd has since the last reconfigure"
        ));
    }
    SlurmRead {
        settings: s.effective().cloned(),
        file: s.live.as_ref().and(s.files.first().cloned()),
        why,
        live: s.live.clone().ok_or(live_error),
        problems: s
            .notes
            .iter()
            .map(|n| NotReady::new(Effect::Unknown, n.clone()))
            .collect(),
        notes,
    }
}

/// The worker's `--check-config` on the config the prolog passes on, run as the prolog runs the
/// worker (fixed PATH, the config's `env` table). Its lines come back prefixed `worker: `.
/// Where it says the environment's NCCL_CHECK_NCCL_LIB names a library that fails, that is this
/// prolog's `env` in `config`, its file: said so ([`crate::words::missing_nccl_fix`]).
pub fn worker(c: &GateConfig, config: &Path) -> (Vec<String>, Findings) {
    let mut f = Findings::default();
    let mut args = vec!["--check-config".into()];
    if c.worker_config.exists() {
        args.push(c.worker_config.clone().into_os_string());
    }
    let spec = Spec::new(&c.worker, args, WAIT).env("PATH", crate::worker::WORKER_PATH);
    let spec = c.env.iter().fold(spec, |spec, (k, v)| spec.env(k, v));
    let what = format!("{} --check-config", c.worker.display());
    let Some((text, ending)) = captured(spec, &what, Effect::Unchecked, &mut f) else {
        return (Vec::new(), f);
    };
    let text = text.replace(
        nccl_check_contract::exit::NCCL_LIB_FROM_ENV,
        &crate::words::missing_nccl_fix(c, config),
    );
    let lines: Vec<String> = text.lines().map(|l| format!("worker: {l}")).collect();
    let bad: Vec<CheckProblem> = text.lines().filter_map(CheckProblem::read_line).collect();
    match ending {
        Ending::Exited(0) if bad.is_empty() => {}
        Ending::KilledAtDeadline => f.problems.push(no_answer(Effect::Unchecked, &what)),
        _ => f.problems.push(NotReady::new(
            Effect::Unchecked,
            format!(
                "{what}: {} (every job's check would end in ERROR: the gate is off)",
                bad.first()
                    .map_or("failed".to_string(), CheckProblem::to_string)
            ),
        )),
    }
    (lines, f)
}

/// The admin's check of the SPANK plugin's line (`nccl-check-plugstack --check`, installed beside
/// this program, the plugin's own parser): a typo on that line fails every `--nccl-check` job.
/// Its lines come back prefixed `plugin line: `; not installed is a note.
pub fn plugin_line(program: &Path, slurm_conf: Option<&str>) -> (Vec<String>, Findings) {
    let mut f = Findings::default();
    if !program.is_file() {
        f.notes.push(format!(
            "{} is not installed: the SPANK plugin's line is not checked",
            program.display()
        ));
        return (Vec::new(), f);
    }
    let mut spec =
        Spec::new(program, vec!["--check".into()], WAIT).env("PATH", crate::worker::WORKER_PATH);
    if let Some(c) = slurm_conf {
        spec = spec.env("SLURM_CONF", c);
    }
    let what = format!("{} --check", program.display());
    let Some((text, ending)) = captured(spec, &what, Effect::PluginFails, &mut f) else {
        return (Vec::new(), f);
    };
    let lines = text.lines().map(|l| format!("plugin line: {l}")).collect();
    for bad in text.lines().filter_map(CheckProblem::read_line) {
        if bad.kind == CheckProblemKind::Invalid {
            f.problems.push(NotReady::new(
                Effect::PluginFails,
                format!("plugin line: {}", bad.text),
            ));
        }
    }
    match ending {
        Ending::Exited(0) => {}
        Ending::Exited(_) if !f.problems.is_empty() => {}
        Ending::KilledAtDeadline => f.problems.push(no_answer(Effect::PluginFails, &what)),
        other => f.problems.push(NotReady::new(
            Effect::PluginFails,
            format!("{what}: {other:?}"),
        )),
    }
    (lines, f)
}

/// Runs another program's admin check (`what`): its stdout (64 KiB at most) then its stderr
/// (8 KiB) as one text, and how it ended; None: it could not be started, a problem of `effect`.
fn captured(
    mut spec: Spec,
    what: &str,
    effect: Effect,
    f: &mut Findings,
) -> Option<(String, Ending)> {
    spec.stdout = Output::Tail {
        max_bytes: 64 * 1024,
    };
    spec.stderr = Output::Tail {
        max_bytes: 8 * 1024,
    };
    let done = supervise::run(spec)
        .map_err(|e| {
            f.problems
                .push(NotReady::new(effect, format!("{what}: {}", e.error)))
        })
        .ok()?;
    let text =
        String::from_utf8_lossy(&done.stdout).into_owned() + &String::from_utf8_lossy(&done.stderr);
    Some((text, done.ending))
}

/// An admin check (`what`) that gave no answer in [`WAIT`].
fn no_answer(effect: Effect, what: &str) -> NotReady {
    NotReady::new(effect, format!("{what}: no answer in {} s", WAIT.as_secs()))
}

/// `nccl-check-plugstack` beside this program (both in /usr/sbin when installed).
pub fn plugstack_program() -> std::path::PathBuf {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| "/usr/sbin".into());
    dir.join("nccl-check-plugstack")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(timeout: Option<u64>, gres: &[&str]) -> Settings {
        Settings {
            source: "scontrol show config".into(),
            prolog_epilog_timeout: timeout,
            gres_types: gres.iter().map(|s| s.to_string()).collect(),
            ..Settings::default()
        }
    }

    fn view<'a>(s: Option<&'a Settings>, why: &'a str) -> SlurmView<'a> {
        SlurmView {
            settings: s,
            why,
            limits: Limits::default(),
            file: None,
            root: Path::new("/nonexistent-root"),
        }
    }

    /// `--check-config` says what the proctrack plugin means for whose a process is (issue 46's
    /// audit: it said nothing, and linuxproc left every job's process in no job's cgroup).
    #[test]
    fn the_proctrack_plugin_is_said_with_what_it_means_for_ownership() {
        let c = GateConfig::default();
        let note = |proctrack: Option<&str>| {
            let s = Settings {
                proctrack: proctrack.map(str::to_string),
                ..settings(None, &[])
            };
            let f = slurm(
                &c,
                &view(Some(&s), ""),
                Path::new("/etc/nccl-check/prolog.toml"),
            );
            (f.notes.into_iter()).find(|n| n.starts_with("ProctrackType"))
        };
        let linuxproc = note(Some("proctrack/linuxproc")).expect("said");
        assert!(
            linuxproc.contains("scontrol listpids") && linuxproc.contains("never drains"),
            "{linuxproc}"
        );
        let cgroup = note(Some("proctrack/cgroup")).expect("said");
        assert!(
            cgroup.contains("job's cgroup") && !cgroup.contains("never drains"),
            "{cgroup}"
        );
        assert_eq!(note(None), None);
    }

    /// A budget above PrologEpilogTimeout is what the gate does with it (cut
    /// by the same rule), not an ERROR prediction the gate does not keep; only a timeout that
    /// leaves no time at all is a problem.
    #[test]
    fn a_budget_above_prolog_epilog_timeout_is_said_as_the_gate_cuts_it() {
        let file = Path::new("/etc/nccl-check/prolog.toml");
        let c = GateConfig {
            budget_seconds: 40,
            gpus: GpuPolicy::All,
            ..GateConfig::default()
        };
        let s15 = settings(Some(15), &[]);
        let f = slurm(&c, &view(Some(&s15), ""), file);
        assert!(f.problems.is_empty(), "{f:?}");
        let cut = budget::effective(40, Some(15), "scontrol show config");
        assert!(
            f.notes[0].starts_with(cut.cut.as_deref().expect("cut"))
                && f.notes[0].contains("gets 8 s")
                && f.notes[0].contains("budget_seconds <= 8"),
            "{f:?}"
        );
        // The file raised to 60 before a reconfigure: the controller's 15 is what slurmd
        // has, the stricter; the cut is the same and the pending reconfigure is said.
        let v = SlurmView {
            limits: Limits {
                prolog_epilog: budget::stricter(
                    &Ok((Some(60), "/run/slurm/conf/slurm.conf:4".into())),
                    &Ok(Some(15)),
                ),
                ..Limits::default()
            },
            ..view(Some(&s15), "")
        };
        let f = slurm(&c, &v, file);
        assert!(
            f.notes[0].contains("the controller has 15")
                && f.notes[0].contains("reconfigure' is pending")
                && f.notes[1].starts_with(
                    "budget_seconds = 40 cut to 8 s by PrologEpilogTimeout = 15 (scontrol show config)"
                ),
            "{f:?}"
        );
        assert!(f.problems.is_empty(), "{f:?}");
        let s5 = settings(Some(5), &[]);
        let f = slurm(&c, &view(Some(&s5), ""), file);
        assert_eq!(f.problems.len(), 1, "{f:?}");
        assert!(f.problems[0].text.contains("no time is left"), "{f:?}");
        let s_unset = settings(None, &[]);
        assert!(slurm(&c, &view(Some(&s_unset), ""), file)
            .problems
            .is_empty());
    }

    /// The prolog's cut below BatchStartTimeout (+ MessageTimeout, at most 10) is said with
    /// the value that gives the budget back; none left is NOT READY (every check an ERROR); a
    /// budget that fits says so. The recheck's HealthCheckTimeout, where HealthCheckProgram
    /// runs it.
    #[test]
    fn a_budget_above_batch_start_timeout_is_said_as_the_prolog_cuts_it() {
        let file = Path::new("/etc/nccl-check/prolog.toml");
        let c = GateConfig {
            budget_seconds: 36,
            gpus: GpuPolicy::All,
            ..GateConfig::default()
        };
        let s = Settings {
            batch_start_timeout: 1,
            health_check_program: Some("/usr/sbin/nccl-check-recheck".into()),
            ..settings(Some(60), &[])
        };
        let f = slurm(&c, &view(Some(&s), ""), file);
        assert!(f.problems.is_empty(), "{f:?}");
        let n = f
            .notes
            .iter()
            .find(|n| n.contains("BatchStartTimeout"))
            .expect("said");
        assert!(
            n.starts_with(
                "budget_seconds = 36 cut to 4 s by BatchStartTimeout = 1 + MessageTimeout = 10"
            ) && n.contains("The prolog gate gets 4 s")
                && n.contains("missing, NODE_FAIL")
                && n.contains("raise BatchStartTimeout to 33 to have the budget as written"),
            "{n}"
        );
        // The epilog is not held to it: the PrologEpilogTimeout line gives the whole budget.
        assert!(
            f.notes[0].contains("gets its budget_seconds = 36 s"),
            "{f:?}"
        );
        let h = f
            .notes
            .iter()
            .find(|n| n.contains("HealthCheckTimeout"))
            .expect("said");
        assert!(
            h.starts_with("HealthCheckTimeout = 60 (scontrol show config): each recheck"),
            "{h}"
        );
        let fits = Settings {
            batch_start_timeout: 33,
            ..s.clone()
        };
        let f = slurm(&c, &view(Some(&fits), ""), file);
        assert!(
            f.notes.iter().any(|n| n.starts_with(
                "BatchStartTimeout = 33 + MessageTimeout = 10 (at most 10 counts) = 43 s (scontrol show config)"
            ) && n.ends_with("the prolog gate's 36 s fit")),
            "{f:?}"
        );
        let none = Settings {
            batch_start_timeout: 0,
            message_timeout: 3,
            ..s.clone()
        };
        let f = slurm(&c, &view(Some(&none), ""), file);
        assert_eq!(f.problems.len(), 1, "{f:?}");
        assert!(
            f.problems[0].effect == Effect::Unchecked
                && f.problems[0]
                    .text
                    .contains("no time is left for a check in the prolog")
                && f.problems[0]
                    .text
                    .contains("raise BatchStartTimeout to 40 or more"),
            "{f:?}"
        );
        let long = GateConfig {
            budget_seconds: 90,
            ..c.clone()
        };
        let fits = Settings {
            batch_start_timeout: 100,
            ..s.clone()
        };
        let f = slurm(&long, &view(Some(&fits), ""), file);
        assert!(
            f.notes.iter().any(|n| n.starts_with(
                "budget_seconds = 90 cut to 53 s by HealthCheckTimeout = 60 (scontrol show config)"
            ) && n.contains("Each recheck (HealthCheckProgram) gets 53 s")),
            "{f:?}"
        );
    }

    #[test]
    fn gpus_job_without_gres_gpu_and_unreadable_slurm_are_problems() {
        let file = Path::new("/etc/nccl-check/prolog.toml");
        let c = GateConfig::default();
        assert_eq!(c.gpus, GpuPolicy::Job);
        let s = settings(Some(120), &[]);
        let f = slurm(&c, &view(Some(&s), ""), file);
        assert_eq!(f.problems.len(), 1, "{f:?}");
        assert!(f.problems[0].text.contains("gpus = \"all\""), "{f:?}");
        let s = settings(Some(120), &["gpu"]);
        assert!(slurm(&c, &view(Some(&s), ""), file).problems.is_empty());
        // Nothing readable is NOT READY: nothing could be checked.
        let f = slurm(&c, &view(None, "no controller"), file);
        assert_eq!(f.problems.len(), 1, "{f:?}");
        assert!(
            f.problems[0].effect == Effect::Unknown && f.problems[0].text.contains("no controller"),
            "{f:?}"
        );
    }

    /// A Prolog= typo is NOT READY; the epilog gate is named with the
    /// budget it gets.
    #[test]
    fn a_missing_prolog_entry_is_a_problem_and_the_epilog_gate_is_shown() {
        use std::os::unix::fs::PermissionsExt;
        let d = nccl_check_host::test_support::scratch_dir("chain-entries");
        std::fs::create_dir_all(d.join("usr/sbin")).expect("mkdir");
        let prog = d.join("usr/sbin/nccl-check-prolog");
        std::fs::write(&prog, "bin").expect("w");
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let file = Path::new("/etc/nccl-check/prolog.toml");
        let c = GateConfig {
            gpus: GpuPolicy::All,
            ..GateConfig::default()
        };
        let s = Settings {
            prologs: vec!["/usr/sbin/nccl-check-prolg".into()],
            epilogs: vec![INSTALLED.into()],
            ..settings(Some(120), &[])
        };
        let v = SlurmView {
            root: &d,
            ..view(Some(&s), "")
        };
        let f = slurm(&c, &v, file);
        assert_eq!(f.problems.len(), 1, "{f:?}");
        assert!(
            f.problems[0].text.starts_with(
                "Prolog=/usr/sbin/nccl-check-prolg (scontrol show config): no such file"
            ),
            "{f:?}"
        );
        assert!(
            f.notes[0]
                .contains("(Epilog=/usr/sbin/nccl-check-prolog) gets its budget_seconds = 30 s"),
            "{f:?}"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    /// The file's Prolog= edited before a reconfigure: what slurmd gets next is checked and
    /// the pending reconfigure said; the same entries say nothing.
    #[test]
    fn a_prolog_edited_in_the_file_before_a_reconfigure_is_checked_too() {
        let live = Settings {
            prologs: vec![INSTALLED.into()],
            ..settings(Some(120), &[])
        };
        let file = Settings {
            source: "/etc/slurm/slurm.conf".into(),
            prologs: vec!["/usr/sbin/nccl-check-prolg".into()],
            ..Settings::default()
        };
        let mut f = Findings::default();
        pending_entries(&live, &file, Path::new("/nonexistent-root"), &mut f);
        assert!(
            f.notes[0].contains("reconfigure' is pending")
                && f.notes[0].contains("Prolog = /usr/sbin/nccl-check-prolg"),
            "{f:?}"
        );
        assert_eq!(f.problems.len(), 1, "{f:?}");
        assert!(
            f.problems[0]
                .text
                .starts_with("after a reconfigure: Prolog=/usr/sbin/nccl-check-prolg")
                && f.problems[0].effect == Effect::Drains,
            "{f:?}"
        );
        let mut same = Findings::default();
        pending_entries(&live, &live, Path::new("/"), &mut same);
        assert_eq!(same, Findings::default());
    }

    #[test]
    fn a_worker_that_rejects_its_config_is_a_problem() {
        let d = nccl_check_host::test_support::scratch_dir("chain-worker");
        let w = d.join("worker");
        let ok = d.join("worker-ok");
        std::fs::write(
            &w,
            "#!/bin/sh\necho \"INVALID $2:3: unknown field 'fracton'\"\nexit 2\n",
        )
        .expect("w");
        std::fs::write(d.join("w.toml"), "x").expect("w");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let c = GateConfig {
            worker: w,
            worker_config: d.join("w.toml"),
            ..GateConfig::default()
        };
        let (lines, f) = worker(&c, Path::new("/p.toml"));
        assert_eq!(f.problems.len(), 1, "{f:?}");
        // A note that mentions ERROR (a node without GPUs) from a worker that exits 0 is fine.
        std::fs::write(
            &ok,
            "#!/bin/sh\necho '# no GPU listed by the driver: a check here ends in ERROR (no GPU)'\n",
        )
        .expect("w");
        std::fs::set_permissions(&ok, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let c2 = GateConfig {
            worker: ok.clone(),
            ..c.clone()
        };
        assert_eq!(worker(&c2, Path::new("/p.toml")).1, Findings::default());
        assert!(
            f.problems[0].text.contains("unknown field 'fracton'"),
            "{f:?}"
        );
        assert!(lines[0].starts_with("worker: INVALID "), "{lines:?}");
        std::fs::remove_dir_all(&d).ok();
    }

    /// Regression (issue 46): the worker said to set nccl_lib in its config where the prolog's
    /// own `env` names NCCL_CHECK_NCCL_LIB, which wins over any config: the prolog names its
    /// `env`, in the file it read.
    #[test]
    fn a_library_the_prologs_env_names_is_said_to_be_the_prologs_env() {
        use std::os::unix::fs::PermissionsExt;
        let d = nccl_check_host::test_support::scratch_dir("chain-worker-env");
        let w = d.join("nccl-check");
        std::fs::write(
            &w,
            format!(
                "#!/bin/sh\necho \"NOT READY NCCL ($NCCL_CHECK_NCCL_LIB): no such file; every check \
                 would end in ERROR: {}\"\nexit 2\n",
                nccl_check_contract::exit::NCCL_LIB_FROM_ENV
            ),
        )
        .expect("w");
        std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut c = GateConfig {
            worker: w,
            worker_config: d.join("absent.toml"),
            ..GateConfig::default()
        };
        c.env.insert(
            "NCCL_CHECK_NCCL_LIB".into(),
            "/opt/gone/libnccl.so.2".into(),
        );
        let (lines, f) = worker(&c, Path::new("/site/prolog.toml"));
        let want =
            "NCCL_CHECK_NCCL_LIB in `env` of /site/prolog.toml names it and wins over nccl_lib";
        assert!(
            lines[0].starts_with("worker: NOT READY NCCL (/opt/gone/libnccl.so.2): no such file")
                && lines[0].contains(want),
            "{lines:?}"
        );
        assert!(f.problems[0].text.contains(want), "{f:?}");
        std::fs::remove_dir_all(&d).ok();
    }

    /// --check-config runs the plugin line's check and takes its INVALID
    /// lines as problems; without the program it says so and goes on.
    #[test]
    fn the_plugin_lines_problems_are_the_gates_problems() {
        use std::os::unix::fs::PermissionsExt;
        let d = nccl_check_host::test_support::scratch_dir("chain-plugstack");
        let p = d.join("nccl-check-plugstack");
        std::fs::write(
            &p,
            "#!/bin/sh\n[ \"$1\" = --check ] || exit 9\necho \"# plugstack: $SLURM_CONF\"\n\
             echo \"INVALID /etc/slurm/plugstack.conf.d/zz-nccl-check.conf:1: unknown argument 'timout' (did you mean 'timeout'?)\"\nexit 2\n",
        )
        .expect("w");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let (lines, f) = plugin_line(&p, Some("/x/slurm.conf"));
        assert_eq!(lines[0], "plugin line: # plugstack: /x/slurm.conf");
        assert_eq!(
            f.problems,
            [NotReady::new(
                Effect::PluginFails,
                "plugin line: /etc/slurm/plugstack.conf.d/zz-nccl-check.conf:1: unknown argument \
              'timout' (did you mean 'timeout'?)"
            )]
        );
        let (lines, f) = plugin_line(&d.join("absent"), None);
        assert!(lines.is_empty() && f.problems.is_empty(), "{f:?}");
        assert!(f.notes[0].contains("is not installed"), "{f:?}");
        std::fs::remove_dir_all(&d).ok();
    }
}
