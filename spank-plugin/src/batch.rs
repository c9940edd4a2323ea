//! `sbatch --nccl-check`: check the whole allocation in the batch step, before the batch
//! script's first command, whether or not the script ever calls srun (a script that runs
//! `torchrun` directly used to get no check at all).
//!
//! How: in the batch script's task (task_init, as the user, before exec), run
//! `srun --nccl-check=off --nodes=N --ntasks=N --ntasks-per-node=1 WORKER ARGS`: one worker per
//! node of the job, ranks, world and rendezvous from that step's Slurm environment, a fresh
//! secret for it, all under [`nccl_check_host::supervise`] with a deadline of the worker's timeout +
//! grace + `STEP_SETUP` for srun to create the step. `--nccl-check=off` keeps that srun's own
//! tasks from checking again. FAIL or ERROR fails the batch task (the script never starts) in
//! the enforcing modes; `warn` reports and runs the script. Steps the script starts with srun
//! inherit the option as before and are checked again (`srun --nccl-check=off` skips that);
//! plugstack `batch_check=0` turns this allocation check off.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use nccl_check_contract::args::PlanName;
use nccl_check_contract::exit::{ExitCode, NCCL_LIB_HINT};
use nccl_check_contract::outcome;
use nccl_check_contract::verdict::Verdict;
use nccl_check_host::supervise::{self, Ending, Spec};
use slurm_spank::SpankHandle;

use crate::callback_error::Error;
use crate::config::PluginConfig;
use crate::mode::Mode;
use crate::present::{nccl_lib_hint, say};
use crate::secret::fresh_secret;
use crate::worker::{last_words, one_line, tee_stderr, verdict_line, worker_args};
use crate::worker_env::{task_var, user_nccl_lib, worker_env};

/// Time allowed for srun to create the check's step, on top of the worker's deadline.
const STEP_SETUP: Duration = Duration::from_secs(30);
/// How long srun lets the other workers run after the first one ends (`srun --wait`). Real
/// workers share one verdict and end within milliseconds of each other; a peer stuck in NCCL
/// after a rank failed or crashed is killed this long after, not at the check's deadline. Not
/// `--kill-on-bad-exit`: srun then aborts the step as the failing task's exit arrives, and its
/// FAIL line, still in transit from that node, was lost in 4 of 8 runs on Slurm 22.05.
const PEERS_GRACE_S: u32 = 10;

/// Runs the allocation check in the batch step.
pub fn check_allocation(
    spank: &SpankHandle,
    config: &PluginConfig,
    mode: &Mode,
    verbose: bool,
) -> Result<(), Error> {
    // The batch step itself runs on one node; the job's node count is in its environment.
    let nnodes = task_var(spank, "SLURM_JOB_NUM_NODES")
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| Error::Check("SLURM_JOB_NUM_NODES is not set in the batch step".into()))?;
    let secret = fresh_secret()?;
    let env = worker_env(spank, config, Some(secret.into()))?;
    let plan = mode.plan().unwrap_or_else(PlanName::quick);
    let deadline = config.deadline() + STEP_SETUP;
    let spec = Spec {
        env: Some(env),
        cwd: None,
        stderr: tee_stderr(in_the_verdict),
        ..Spec::new("srun", srun_args(config, mode, nnodes, verbose), deadline)
    };
    say(&format!(
        "nccl-check: checking the allocation ({plan}, {nnodes} node(s), budget {} s) before the \
         batch script starts",
        config.timeout.as_secs()
    ));
    let t0 = Instant::now();
    let (verdict, mut detail) = match supervise::run(spec) {
        Ok(done) => verdict_of_srun(done.ending, &done.stderr, config),
        Err(e) => (Verdict::Error, format!("cannot start srun: {}", e.error)),
    };
    if detail.contains(NCCL_LIB_HINT) {
        detail = nccl_lib_hint(
            &detail,
            user_nccl_lib(spank).as_deref(),
            config.nccl_lib.as_deref(),
        );
    }
    let took = t0.elapsed().as_secs_f64();
    match (verdict, mode.enforcing()) {
        (Verdict::Pass, _) => {
            say(&format!(
                "nccl-check: PASS (allocation, {plan}, {nnodes} node(s), {took:.1} s)"
            ));
            Ok(())
        }
        (verdict, true) => {
            let msg = format!("{verdict} in the allocation check: {detail}");
            say(&format!("nccl-check: {msg}; the batch script does not run"));
            Err(Error::Reported(msg))
        }
        (verdict, false) => {
            say(&format!(
                "nccl-check: {verdict} in the allocation check: {detail} (warn mode: the batch \
                 script runs anyway)"
            ));
            Ok(())
        }
    }
}

/// The check's srun command line (after `srun`).
fn srun_args(config: &PluginConfig, mode: &Mode, nnodes: u32, verbose: bool) -> Vec<OsString> {
    let n = nnodes.to_string();
    let mut a: Vec<OsString> = [
        "--nccl-check=off",
        "--job-name=nccl-check",
        "--nodes",
        &n,
        "--ntasks",
        &n,
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",
        &format!("--wait={PEERS_GRACE_S}"),
    ]
    .iter()
    .map(OsString::from)
    .collect();
    if verbose {
        a.push("--label".into());
    }
    a.push(config.worker.clone().into_os_string());
    a.extend(worker_args(config, mode, true).to_args());
    a
}

/// The verdict of the check's srun (pure). Exit 0 is PASS. Otherwise a FAIL decides: a
/// worker's FAIL line, or srun's own "task N: Exited with exit code 1" (the worker's FAIL exit)
/// when the line itself did not arrive. srun's exit is the highest of its tasks', so a peer
/// that srun killed (137) or that ended in ERROR after the failing rank left would otherwise
/// turn the FAIL into an ERROR. Without a FAIL the exit decides (1 FAIL, else ERROR). The
/// detail is the deciding line, else srun's exit and its last line.
fn verdict_of_srun(ending: Ending, stderr: &[u8], config: &PluginConfig) -> (Verdict, String) {
    let text = String::from_utf8_lossy(stderr);
    match ending {
        Ending::Exited(0) => (Verdict::Pass, String::new()),
        Ending::Exited(code) => {
            let exited_with_fail = || text.lines().rev().find_map(task_exited_with_fail);
            let fail = last_summary(&text, Verdict::Fail).or_else(|| {
                let task = one_line(exited_with_fail()?);
                Some(format!(
                    "{task} (the worker's FAIL; its message did not reach srun)"
                ))
            });
            if let Some(fail) = fail {
                return (Verdict::Fail, fail);
            }
            // No worker's FAIL: srun's exit alone decides, by the contract's rule.
            let verdict = outcome::of_run(Ending::Exited(code), None).verdict;
            let detail = last_summary(&text, Verdict::Error).unwrap_or_else(|| {
                format!(
                    "srun exited with code {code} ({}); last output: {}",
                    ExitCode::meaning_of(code),
                    last_words(&text).unwrap_or_default()
                )
            });
            (verdict, detail)
        }
        Ending::Signaled(sig) => (Verdict::Error, format!("srun killed by signal {sig}")),
        Ending::KilledAtDeadline => (
            Verdict::Error,
            format!(
                "the check did not finish within {} s (--timeout {} s + grace + {} s for srun)",
                (config.deadline() + STEP_SETUP).as_secs(),
                config.timeout.as_secs(),
                STEP_SETUP.as_secs()
            ),
        ),
    }
}

/// Lines of the check's srun that the one verdict line after it says (the batch log
/// showed the worker's FAIL, srun's `task 1: Exited with exit code 1` and then the plugin's line):
/// each worker's verdict line and srun's line about how a task of the check ended.
fn in_the_verdict(line: &[u8]) -> bool {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    verdict_line(text).is_some()
        || text.strip_prefix("srun: error: ").is_some_and(|t| {
            t.contains(": task ")
                && (t.contains(": Exited with exit code ")
                    || t.ends_with(": Killed")
                    || t.ends_with(": Terminated"))
        })
}

/// The summary of the last worker verdict line with this verdict, as one printable line.
fn last_summary(text: &str, want: Verdict) -> Option<String> {
    text.lines().rev().find_map(|l| {
        verdict_line(l)
            .filter(|(v, _)| *v == want)
            .map(|(_, s)| one_line(s))
    })
}

/// srun's own line for a task that exited 1, the worker's FAIL exit, without its "srun: error: "
/// prefix: `n1: task 0: Exited with exit code 1`. Exact, so 12 or 127 (a task that could not
/// start its program) is not taken for a FAIL.
fn task_exited_with_fail(line: &str) -> Option<&str> {
    let task = line.trim().strip_prefix("srun: error: ")?;
    task.ends_with(": Exited with exit code 1").then_some(task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_worker_per_node_with_the_check_of_its_own_step_off() {
        let config = PluginConfig::default();
        let a: Vec<String> = srun_args(&config, &Mode::Full, 3, false)
            .into_iter()
            .map(|s| s.into_string().expect("utf-8"))
            .collect();
        assert_eq!(
            a.join(" "),
            "--nccl-check=off --job-name=nccl-check --nodes 3 --ntasks 3 --ntasks-per-node=1 \
             --kill-on-bad-exit=0 --wait=10 /usr/libexec/nccl-check/nccl-check --plan full --timeout 120 \
             --port-range 29501-29999 --progress"
        );
    }

    /// Regression: the batch log showed the worker's line and srun's task exit besides ours.
    #[test]
    fn the_batch_log_leaves_out_what_the_verdict_line_says() {
        for said in [
            "nccl-check: FAIL busbw 12.3 < 300.0 GB/s\n",
            "0: nccl-check: ERROR rendezvous: no peer\n",
            "srun: error: n2: task 1: Exited with exit code 1\n",
            "srun: error: n1: task 0: Killed\n",
        ] {
            assert!(in_the_verdict(said.as_bytes()), "{said}");
        }
        for kept in [
            "nccl-check: running 3 s of 4 s budget: loading NCCL\n",
            "srun: error: Unable to create step for job 7: Invalid generic resource\n",
            "fake worker: hanging\n",
        ] {
            assert!(!in_the_verdict(kept.as_bytes()), "{kept}");
        }
    }

    #[test]
    fn the_exit_decides_and_the_workers_verdict_line_explains() {
        let c = PluginConfig::default();
        let err = b"nccl-check: running 3 s\nnccl-check: FAIL all_reduce 12 < 300 GB/s on n2\nsrun: error: n2: task 1: Exited with exit code 1\n";
        let (v, d) = verdict_of_srun(Ending::Exited(1), err, &c);
        assert_eq!(v, Verdict::Fail);
        assert_eq!(d, "all_reduce 12 < 300 GB/s on n2");
        let (v, d) = verdict_of_srun(Ending::Exited(0), b"", &c);
        assert_eq!(v, Verdict::Pass, "{d}");
        let (v, d) = verdict_of_srun(Ending::Exited(2), b"srun: error: bad thing\n", &c);
        assert_eq!(v, Verdict::Error);
        assert!(d.contains("last output: srun: error: bad thing"), "{d}");
        let (v, d) = verdict_of_srun(Ending::KilledAtDeadline, b"", &c);
        assert_eq!(v, Verdict::Error);
        assert!(d.contains("did not finish within 155 s"), "{d}");
    }

    /// CI saw this (with --kill-on-bad-exit): rank 0 FAILs, srun ends rank 1, srun exits 143.
    #[test]
    fn a_fail_stays_a_fail_when_srun_ended_its_peers() {
        let c = PluginConfig::default();
        let err = b"fake worker: hanging\nsrun: error: n1: task 0: Exited with exit code 1\n\
            srun: launch/slurm: _step_signal: Terminating StepId=3.0\n\
            nccl-check: FAIL all_reduce 256 MiB busbw 12.3 < 300.0 GB/s; responsible: n1 GPU0\n\
            srun: error: n2: task 1: Killed\n";
        for code in [143, 137, 1] {
            let (v, d) = verdict_of_srun(Ending::Exited(code), err, &c);
            assert_eq!(v, Verdict::Fail, "exit {code}: {d}");
            assert!(d.ends_with("responsible: n1 GPU0"), "{d}");
        }
        // The worker's line lost in transit: srun's own line about the task still says FAIL.
        let err = b"srun: error: n1: task 0: Exited with exit code 1\n\
            srun: error: n2: task 1: Terminated\nsrun: Force Terminated StepId=3.0\n";
        let (v, d) = verdict_of_srun(Ending::Exited(143), err, &c);
        assert_eq!(v, Verdict::Fail, "{d}");
        assert_eq!(
            d,
            "n1: task 0: Exited with exit code 1 (the worker's FAIL; its message did not reach srun)"
        );
        // A peer's ERROR after the failing rank left does not hide the FAIL.
        let err = b"1: nccl-check: FAIL busbw 12.3 < 300.0 GB/s; responsible: n2 GPU3\n\
            0: nccl-check: ERROR control plane: process 1 left\n";
        assert_eq!(verdict_of_srun(Ending::Exited(5), err, &c).0, Verdict::Fail);
        // A task that could not start its program (127) is no FAIL.
        let err = b"srun: error: n2: task 1: Exited with exit code 127\n";
        assert_eq!(
            verdict_of_srun(Ending::Exited(127), err, &c).0,
            Verdict::Error
        );
        // Without a FAIL a killed step is an ERROR, explained by the worker's own line.
        let err = b"nccl-check: ERROR rendezvous: no peer\nsrun: error: n2: task 1: Exited with exit code 5\n\
            srun: error: n1: task 0: Killed\n";
        let (v, d) = verdict_of_srun(Ending::Exited(137), err, &c);
        assert_eq!(v, Verdict::Error);
        assert_eq!(d, "rendezvous: no peer");
    }
}
