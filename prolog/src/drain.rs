//! Draining and resuming this node through `scontrol`, owning only our own drains (NHC's rule):
//! every reason we set starts with `nccl-check:`, and only such a drain is ever resumed.
//!
//! One drain request per node: under the state directory's lock, a drain requested in the last
//! `RECENT` seconds (the marker file `drained`) needs no scontrol call at all, and otherwise the
//! node's state is read first (`scontrol show node -o`), so a node already drained, by us or by
//! anyone, is never drained again (and an admin's reason is never overwritten).

use crate::budget::Deadline;
use crate::reason::PREFIX;
use crate::state::Lock;
use nccl_check_host::supervise::{self, Ending, Output, Spec};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The marker of our last drain request (time and reason).
pub const MARKER: &str = "drained";
/// A drain requested this recently is not requested again, and Slurm is not even asked.
pub const RECENT: f64 = 60.0;
/// Most of scontrol's stdout kept (one `show node -o` line) and of its stderr (the error).
const SCONTROL_OUTPUT_BYTES: usize = 64 << 10;
/// Most of a JSON answer kept (`squeue --json`: every job of the cluster on 22.05, which
/// ignores the filters with `--json`, about 8 KB a job). A longer answer is cut, so it does not
/// parse: then Slurm could not say.
pub const JSON_OUTPUT_BYTES: usize = 32 << 20;
/// What `scontrol listpids` says on a node where no job step runs (src/scontrol/info_job.c,
/// 22.05 to 26.05), with exit status 1 (22.05 after printing the table's header).
pub const NO_STEPS: &str = "No job steps exist on this node.";

/// This node's state as slurmctld sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// `IDLE+DRAIN`, `MIXED`, ...
    pub state: String,
    /// The reason without Slurm's ` [user@time]` suffix; empty when none.
    pub reason: String,
}

impl NodeState {
    pub fn drained(&self) -> bool {
        self.state.split('+').any(|s| s.starts_with("DRAIN"))
    }

    /// Jobs run on it, end on it or are about to start there (a recheck of every GPU would
    /// disturb them and could FAIL because of them).
    pub fn busy(&self) -> bool {
        self.state.split('+').any(|s| {
            ["ALLOC", "MIX", "COMPLETING", "PLANNED"]
                .iter()
                .any(|b| s.starts_with(b))
        })
    }

    /// Slurm says no job is on it: IDLE or DOWN (`IDLE*`, `IDLE+DRAIN`, `DOWN+DRAIN`, ...) and
    /// not [`busy`](Self::busy). Any other state (empty, `FUTURE`, `UNKNOWN`, a name this code
    /// does not know) does not say so.
    pub fn free_of_jobs(&self) -> bool {
        let base = self.state.split('+').next().unwrap_or("");
        let base = base.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
        matches!(base, "IDLE" | "DOWN") && !self.busy()
    }

    pub fn ours(&self) -> bool {
        self.reason.starts_with(PREFIX)
    }
}

/// Parses one line of `scontrol show node -o NAME`.
pub fn parse_show_node(line: &str) -> Option<NodeState> {
    let state = line
        .split_whitespace()
        .find_map(|t| t.strip_prefix("State="))?
        .to_string();
    // Reason= is free text with spaces: it runs to the next " Key=" of scontrol's fixed keys
    // that follow it, or to the end of the line.
    let reason = line
        .find(" Reason=")
        .map(|i| {
            let rest = &line[i + " Reason=".len()..];
            let end = [" Comment=", " Extra=", " ExtSensors", " CurrentWatts="]
                .iter()
                .filter_map(|k| rest.find(k))
                .min()
                .unwrap_or(rest.len());
            let r = rest[..end].trim();
            // Drop Slurm's " [user@2026-11-21T10:00:00]".
            match r.rfind(" [") {
                Some(j) if r.ends_with(']') => r[..j].trim().to_string(),
                _ => r.to_string(),
            }
        })
        .filter(|r| r != "(null)")
        .unwrap_or_default();
    Some(NodeState { state, reason })
}

/// What a drain or resume request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainOutcome {
    Drained,
    Resumed,
    /// Requested less than RECENT seconds ago (no scontrol call).
    AlreadyRequested,
    /// Already drained, with this reason (ours or someone else's): left as it is.
    AlreadyDrained(String),
    /// Drained by someone else: never resumed by us.
    NotOurs(String),
    /// Nothing to do (not drained, or no drain of ours recorded).
    Nothing,
    Failed(String),
}

/// `scontrol` for one node. Its environment is cleared except `SLURM_CONF`, which slurmd sets
/// for its prolog (to its own config) and which scontrol needs to find the controller.
#[derive(Debug, Clone)]
pub struct Slurm {
    pub scontrol: PathBuf,
    pub node: String,
    pub slurm_conf: Option<String>,
    /// The prolog's budget: every call and lock wait ends by then ([`crate::budget`]).
    pub deadline: Deadline,
}

impl Slurm {
    /// The same calls, ending by `deadline` instead.
    pub fn until(&self, deadline: Deadline) -> Slurm {
        Slurm {
            deadline,
            ..self.clone()
        }
    }

    /// One scontrol call.
    fn call(&self, args: &[&str]) -> Result<String, String> {
        self.run(&self.scontrol, args, SCONTROL_OUTPUT_BYTES)
    }

    /// `squeue --json ARGS`: Slurm's structured answer, up to [`JSON_OUTPUT_BYTES`]. squeue is
    /// run from the directory of `scontrol` (Slurm's client commands are installed together; a
    /// second config key would only be a second path to keep root's).
    pub fn squeue_json(&self, args: &[&str]) -> Result<String, String> {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        self.run(
            &self.scontrol.with_file_name("squeue"),
            &a,
            JSON_OUTPUT_BYTES,
        )
    }

    /// `scontrol ARGS` read-only (`show ...`), for the other modules that ask Slurm.
    pub fn scontrol_show(&self, args: &[&str]) -> Result<String, String> {
        debug_assert_eq!(args.first(), Some(&"show"));
        self.call(args)
    }

    /// One Slurm client call, supervised: at the timeout its whole process group is killed, and
    /// nothing it leaves behind (holding its output open or not) is waited for or kept.
    fn run(&self, program: &Path, args: &[&str], max_bytes: usize) -> Result<String, String> {
        let left = self.deadline.remaining();
        let (what, done) = self.spawn(program, args, max_bytes)?;
        answer(&what, left, &done)
    }

    /// [`Slurm::run`]'s child, started with only `PATH` and `SLURM_CONF` (never the job's or
    /// the user's environment) and ended by the deadline; its command line for messages.
    fn spawn(
        &self,
        program: &Path,
        args: &[&str],
        max_bytes: usize,
    ) -> Result<(String, supervise::Finished), String> {
        let what = format!("{} {}", program.display(), args.join(" "));
        let left = self.deadline.remaining();
        if left.is_zero() {
            return Err(format!("{what}: not run, the budget is spent"));
        }
        let argv = args.iter().map(Into::into).collect();
        let mut spec = Spec::new(program, argv, left).env("PATH", crate::worker::WORKER_PATH);
        if let Some(c) = &self.slurm_conf {
            spec = spec.env("SLURM_CONF", c);
        }
        spec.stdout = Output::Tail { max_bytes };
        spec.stderr = Output::Tail {
            max_bytes: SCONTROL_OUTPUT_BYTES,
        };
        let done = supervise::run(spec).map_err(|e| format!("{what}: {}", e.error))?;
        Ok((what, done))
    }

    /// `scontrol listpids '*' NODE`: every job step's processes on this node, as the
    /// slurmstepds themselves track them (whatever the proctrack plugin). `Ok("")` when no step
    /// runs here, which scontrol says with exit status 1 and [`NO_STEPS`]; any other failure
    /// (a step that did not answer included) is an `Err`: the list is not known to be whole.
    pub fn scontrol_listpids(&self) -> Result<String, String> {
        let left = self.deadline.remaining();
        let args = ["listpids", "*", self.node.as_str()];
        let (what, done) = self.spawn(&self.scontrol, &args, SCONTROL_OUTPUT_BYTES)?;
        // 22.05 prints the table's header first, later versions nothing.
        let rows = String::from_utf8_lossy(&done.stdout)
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("PID "));
        let none = !rows && String::from_utf8_lossy(&done.stderr).trim() == NO_STEPS;
        match done.ending {
            Ending::Exited(1) if none => Ok(String::new()),
            _ => answer(&what, left, &done),
        }
    }

    pub fn show(&self) -> Result<NodeState, String> {
        let out = self.call(&["show", "node", "-o", &self.node])?;
        out.lines().find_map(parse_show_node).ok_or_else(|| {
            format!(
                "scontrol show node {}: no State in {:?}",
                self.node,
                out.trim()
            )
        })
    }

    fn update(&self, args: &[&str]) -> Result<(), String> {
        let node = format!("nodename={}", self.node);
        let mut a = vec!["update", node.as_str()];
        a.extend_from_slice(args);
        self.call(&a).map(|_| ())
    }

    /// Drains this node with `reason` (which must start with PREFIX) unless it is drained
    /// already or we asked less than RECENT seconds ago.
    pub fn drain(&self, state_dir: &Path, reason: &str, now: f64) -> DrainOutcome {
        debug_assert!(reason.starts_with(PREFIX));
        let reason = &escaped(reason);
        let _lock = match Lock::acquire(state_dir, self.deadline) {
            Ok(l) => Some(l),
            // Held by another prolog to the end of the budget: that one asks.
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return DrainOutcome::Failed(format!("lock: {e}"))
            }
            // The lock and the marker only keep concurrent prologs from asking twice; a state
            // dir that cannot be written (read-only, full) must not keep a FAIL from draining.
            Err(_) => None,
        };
        if let Some((t, _)) = read_marker(state_dir) {
            if (0.0..RECENT).contains(&(now - t)) {
                return DrainOutcome::AlreadyRequested;
            }
        }
        // If the state cannot be read, still ask once (the marker keeps it to once).
        if let Ok(n) = self.show() {
            if n.drained() {
                return DrainOutcome::AlreadyDrained(n.reason);
            }
        }
        let r = format!("reason={reason}");
        match self.update(&["state=drain", &r]) {
            Ok(()) => {
                write_marker(state_dir, now, reason);
                DrainOutcome::Drained
            }
            Err(e) => DrainOutcome::Failed(e),
        }
    }

    /// Resumes this node if nccl-check drained it and the drain is older than the passing
    /// measurement (`pass_started`). With `ask_anyway` (recheck), Slurm is asked even without
    /// our marker (the state dir may have been wiped); otherwise no marker means no call.
    pub fn resume_own(
        &self,
        state_dir: &Path,
        pass_started: f64,
        ask_anyway: bool,
    ) -> DrainOutcome {
        let _lock = match Lock::acquire(state_dir, self.deadline) {
            Ok(l) => l,
            Err(e) => return DrainOutcome::Failed(format!("lock: {e}")),
        };
        match read_marker(state_dir) {
            // Drained after this measurement started (by a concurrent prolog): that one knows
            // better.
            Some((t, _)) if t > pass_started => return DrainOutcome::Nothing,
            None if !ask_anyway => return DrainOutcome::Nothing,
            _ => {}
        }
        let node = match self.show() {
            Ok(n) => n,
            Err(e) => return DrainOutcome::Failed(e),
        };
        let out = if !node.drained() {
            DrainOutcome::Nothing
        } else if !node.ours() {
            DrainOutcome::NotOurs(node.reason)
        } else {
            match self.update(&["state=resume"]) {
                Ok(()) => DrainOutcome::Resumed,
                Err(e) => return DrainOutcome::Failed(e),
            }
        };
        let _ = std::fs::remove_file(state_dir.join(MARKER));
        out
    }
}

/// `reason` as it may reach `scontrol update ... reason=`: each side of its first `|` through
/// the one escaping function (`host::text`), so whatever text of a process's got into it can
/// neither put a control character into `sinfo -R` nor add a field. Text escaped before stays
/// as it was.
pub fn escaped(reason: &str) -> String {
    use nccl_check_host::text::escape_control;
    match reason.split_once('|') {
        Some((short, sentence)) => {
            format!("{}|{}", escape_control(short), escape_control(sentence))
        }
        None => escape_control(reason),
    }
}

/// A finished client call's stdout, or why it has none (`what`: its command line; `left`: the
/// time it had).
fn answer(what: &str, left: Duration, done: &supervise::Finished) -> Result<String, String> {
    let stderr = String::from_utf8_lossy(&done.stderr);
    match done.ending {
        Ending::Exited(0) => Ok(String::from_utf8_lossy(&done.stdout).into_owned()),
        Ending::KilledAtDeadline => Err(format!(
            "{what}: no answer within the {:.1} s left of the budget; killed",
            left.as_secs_f64()
        )),
        Ending::Exited(c) => Err(format!("{what}: exit status {c}: {}", stderr.trim())),
        Ending::Signaled(s) => Err(format!("{what}: killed by signal {s}: {}", stderr.trim())),
    }
}

fn read_marker(state_dir: &Path) -> Option<(f64, String)> {
    let text = std::fs::read_to_string(state_dir.join(MARKER)).ok()?;
    let (t, reason) = text.split_once(' ').unwrap_or((text.trim(), ""));
    Some((t.trim().parse().ok()?, reason.trim().to_string()))
}

fn write_marker(state_dir: &Path, now: f64, reason: &str) {
    let _ = crate::secure::write_atomic(
        &state_dir.join(MARKER),
        format!("{now:.3} {reason}\n").as_bytes(),
        0o644,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    #[test]
    fn only_idle_or_down_without_jobs_is_free_of_jobs() {
        let st = |s: &str| NodeState {
            state: s.into(),
            reason: String::new(),
        };
        for free in [
            "IDLE",
            "IDLE*",
            "IDLE+DRAIN",
            "DOWN+DRAIN",
            "DOWN*+NOT_RESPONDING",
        ] {
            assert!(st(free).free_of_jobs() && !st(free).busy(), "{free}");
        }
        for busy in [
            "ALLOCATED",
            "MIXED+DRAIN",
            "IDLE+COMPLETING",
            "IDLE+PLANNED",
        ] {
            assert!(st(busy).busy() && !st(busy).free_of_jobs(), "{busy}");
        }
        for unknown in ["", "FUTURE", "UNKNOWN", "idle", "IDLEX", "+IDLE"] {
            assert!(!st(unknown).free_of_jobs(), "{unknown:?}");
        }
    }

    #[test]
    fn show_node_gives_state_and_reason_without_the_user_stamp() {
        let line = "NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=1 \
            Partitions=debug BootTime=2026-11-21T10:00:00 LastBusyTime=2026-11-21T10:01:00 \
            Reason=nccl-check: GPU2: busbw 12.3 < 300.0 GB/s (job 4) [root@2026-11-21T10:02:00]";
        let n = parse_show_node(line).expect("parses");
        assert_eq!(n.state, "IDLE+DRAIN");
        assert_eq!(
            n.reason,
            "nccl-check: GPU2: busbw 12.3 < 300.0 GB/s (job 4)"
        );
        assert!(n.drained() && n.ours());
        let n = parse_show_node("NodeName=n2 State=MIXED+DRAIN Reason=admin: hw ticket [root@x]")
            .expect("parses");
        assert!(n.drained() && !n.ours());
        let n = parse_show_node("NodeName=n2 State=IDLE CPUTot=2").expect("parses");
        assert!(!n.drained() && n.reason.is_empty());
        let n = parse_show_node(
            "NodeName=n2 State=ALLOCATED+DRAINING Reason=Prolog error [root@x] Comment=(null)",
        )
        .expect("parses");
        assert!(n.drained() && !n.ours() && n.reason == "Prolog error");
        assert!(n.busy());
        let n = parse_show_node("NodeName=n2 State=IDLE+DRAIN Reason=x").expect("parses");
        assert!(!n.busy());
        let n = parse_show_node("NodeName=n2 State=MIXED CPUTot=2").expect("parses");
        assert!(n.busy());
        assert_eq!(parse_show_node("Node n9 not found"), None);
    }

    /// A fake scontrol: `show` prints $STATE_LINE from a file, `update` appends its args to a log.
    fn fake(dir: &Path, show: &str) -> Slurm {
        std::fs::write(dir.join("show"), show).expect("write");
        let p = dir.join("scontrol");
        let body = format!(
            "#!/bin/sh\nif [ \"$1\" = show ]; then cat {d}/show; else echo \"$*\" >> {d}/calls; fi\n",
            d = dir.display()
        );
        nccl_check_host::test_support::write_executable(&p, &body);
        Slurm {
            scontrol: p,
            node: "n1".into(),
            slurm_conf: None,
            deadline: Deadline::after(Duration::from_secs(30)),
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("nccl-check-drain-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    }

    fn calls(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("calls")).unwrap_or_default()
    }

    #[test]
    fn one_drain_request_per_node_and_never_over_someone_elses_drain() {
        let d = scratch("once");
        let s = fake(&d, "NodeName=n1 State=IDLE\n");
        let r = "nccl-check: GPU1: busbw 1.0 < 2.0 GB/s";
        assert_eq!(s.drain(&d, r, 1000.0), DrainOutcome::Drained);
        assert_eq!(
            calls(&d),
            format!("update nodename=n1 state=drain reason={r}\n")
        );
        // A second FAIL moments later: no scontrol call at all.
        assert_eq!(s.drain(&d, r, 1010.0), DrainOutcome::AlreadyRequested);
        // Later, with the node drained by an admin: left alone.
        std::fs::write(
            d.join("show"),
            "NodeName=n1 State=IDLE+DRAIN Reason=admin: psu [root@x]\n",
        )
        .expect("write");
        assert_eq!(
            s.drain(&d, r, 2000.0),
            DrainOutcome::AlreadyDrained("admin: psu".into())
        );
        assert_eq!(calls(&d).lines().count(), 1);
        std::fs::remove_dir_all(&d).ok();
    }

    /// A process's text with an escape sequence and a `|` in a drain reason reaches scontrol's
    /// argument escaped, with the reason's one `|` kept.
    #[test]
    fn an_escape_in_a_reason_never_reaches_scontrol() {
        let d = scratch("escape");
        let s = fake(&d, "NodeName=n1 State=IDLE\n");
        let r = "nccl-check:GPU0 busy|GPU0: busy: 1 other process (pid 7, user x\x1b[2J|y)";
        assert_eq!(s.drain(&d, r, 1000.0), DrainOutcome::Drained);
        let call = calls(&d);
        assert!(!call.contains('\x1b'), "{call:?}");
        assert_eq!(
            call,
            "update nodename=n1 state=drain reason=nccl-check:GPU0 busy|GPU0: busy: 1 other \
             process (pid 7, user x\\u{1b}[2J\\u{7c}y)\n"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    /// `scontrol listpids`: its table; no step on the node (exit 1 and Slurm's own sentence) is
    /// an empty list; any other failure is not an answer.
    #[test]
    fn listpids_without_steps_is_an_empty_answer_and_a_failure_is_none() {
        let d = scratch("listpids");
        let s = fake(&d, "");
        let script = |body: &str| {
            nccl_check_host::test_support::write_executable(
                &s.scontrol,
                &format!("#!/bin/sh\n{body}\n"),
            )
        };
        script("[ \"$*\" = 'listpids * n1' ] || exit 9\necho 'PID JOBID STEPID LOCALID GLOBALID'\necho '42 7 0 0 0'");
        assert_eq!(
            s.scontrol_listpids().as_deref(),
            Ok("PID JOBID STEPID LOCALID GLOBALID\n42 7 0 0 0\n")
        );
        script(&format!("echo '{NO_STEPS}' >&2; exit 1"));
        assert_eq!(s.scontrol_listpids().as_deref(), Ok(""));
        // 22.05: the header on stdout before the sentence.
        script(&format!(
            "echo 'PID      JOBID    STEPID   LOCALID GLOBALID'; echo '{NO_STEPS}' >&2; exit 1"
        ));
        assert_eq!(s.scontrol_listpids().as_deref(), Ok(""));
        script(&format!("echo '42 7 0 0 0'; echo '{NO_STEPS}' >&2; exit 1"));
        assert!(
            s.scontrol_listpids().is_err(),
            "rows and a failure: not whole"
        );
        script("echo 'Unable to connect to slurmstepd: Permission denied' >&2; exit 1");
        let e = s.scontrol_listpids().expect_err("a step did not answer");
        assert!(e.contains("exit status 1: Unable to connect"), "{e}");
        std::fs::remove_dir_all(&d).ok();
    }

    /// A hung scontrol, and one that exits leaving a child that holds its output open: neither
    /// holds the prolog, and nothing of either survives (the old code killed scontrol only, and
    /// then waited for its stdout to close).
    #[test]
    fn a_hung_or_leaky_scontrol_is_killed_with_its_whole_group() {
        let d = scratch("hung");
        let mut s = fake(&d, "");
        let body = format!(
            "#!/bin/sh\nsleep 300 & echo $! > {d}/child\n[ \"$1\" = show ] && exec sleep 300\n\
             echo 'NodeName=n1 State=IDLE'\n",
            d = d.display()
        );
        nccl_check_host::test_support::write_executable(&s.scontrol, &body);
        s.deadline = Deadline::after(Duration::from_millis(400));
        let t = std::time::Instant::now();
        let e = s.show().expect_err("hung");
        assert!(e.contains("no answer within the 0.4 s left"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        nccl_check_host::test_support::assert_process_gone(
            &d.join("child"),
            Duration::from_millis(100),
        );
        s.deadline = Deadline::after(Duration::from_secs(10));
        let t = std::time::Instant::now();
        assert!(s.update(&["state=resume"]).is_ok());
        assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
        nccl_check_host::test_support::assert_process_gone(
            &d.join("child"),
            Duration::from_millis(100),
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn only_our_own_drains_are_resumed() {
        let d = scratch("resume");
        let s = fake(
            &d,
            "NodeName=n1 State=IDLE+DRAIN Reason=nccl-check: GPU1 slow [root@x]\n",
        );
        // No marker and not a recheck: Slurm is not even asked.
        assert_eq!(s.resume_own(&d, 100.0, false), DrainOutcome::Nothing);
        assert_eq!(calls(&d), "");
        write_marker(&d, 50.0, "nccl-check: GPU1 slow");
        // A drain newer than the passing measurement stands.
        assert_eq!(s.resume_own(&d, 40.0, true), DrainOutcome::Nothing);
        assert_eq!(s.resume_own(&d, 100.0, false), DrainOutcome::Resumed);
        assert_eq!(calls(&d), "update nodename=n1 state=resume\n");
        // Someone else's drain is never touched, even on a recheck.
        std::fs::write(
            d.join("show"),
            "NodeName=n1 State=IDLE+DRAIN Reason=admin: psu [root@x]\n",
        )
        .expect("write");
        assert_eq!(
            s.resume_own(&d, 200.0, true),
            DrainOutcome::NotOurs("admin: psu".into())
        );
        assert_eq!(calls(&d).lines().count(), 1);
        std::fs::remove_dir_all(&d).ok();
    }
}
