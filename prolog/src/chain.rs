//! What the gate depends on beyond its own file, for `--check-config`: Slurm's settings as this
//! node's slurmd uses them (PrologEpilogTimeout against the budget, GresTypes against
//! `gpus = "job"`, whether Prolog= runs this prolog) and the worker's own `--check-config` on
//! the worker config the prolog passes on (valid file, NCCL loadable where the node has GPUs).
//! Each finding is a problem (the gate would be a no-op or a drain: exit 2) or a note.

use crate::budget::GRACE;
use crate::config::{GateConfig, GpuPolicy};
use nccl_check_contract::slurm_config::{Settings, Sources};
use nccl_check_contract::supervise::{self, Ending, Output, Spec};
use std::path::Path;
use std::time::Duration;

/// Time kept free below PrologEpilogTimeout beyond the budget and the drain's grace: slurmd's
/// own start of the prolog, a loaded node.
pub const MARGIN: Duration = Duration::from_secs(5);
/// How long the controller and the worker's check are waited for.
const WAIT: Duration = Duration::from_secs(15);

/// Problems and notes, in the order they are printed.
#[derive(Debug, Default, PartialEq)]
pub struct Findings {
    pub problems: Vec<String>,
    pub notes: Vec<String>,
}

/// Slurm's side, from the settings there are (None: none could be read, `why`).
pub fn slurm(c: &GateConfig, s: Option<&Settings>, why: &str, file: &Path) -> Findings {
    let mut f = Findings::default();
    let Some(s) = s else {
        f.notes.push(format!(
            "Slurm's configuration could not be read ({why}): PrologEpilogTimeout and GresTypes not checked"
        ));
        return f;
    };
    let needed = Duration::from_secs(c.budget_seconds) + GRACE + MARGIN;
    match s.prolog_epilog_timeout {
        Some(t) if needed > Duration::from_secs(t) => {
            let most = Duration::from_secs(t)
                .saturating_sub(GRACE + MARGIN)
                .as_secs();
            f.problems.push(format!(
                "budget_seconds = {} is not below PrologEpilogTimeout = {t} ({}) with {:.1} s to spare \
                 (a drain's {:.1} s and a {} s margin): slurmd would kill a slow check at {t} s and drain \
                 the node with 'Prolog error'; set budget_seconds <= {most} in {} or raise PrologEpilogTimeout",
                c.budget_seconds,
                s.source,
                (GRACE + MARGIN).as_secs_f64(),
                GRACE.as_secs_f64(),
                MARGIN.as_secs(),
                file.display()
            ));
        }
        Some(t) => f.notes.push(format!(
            "PrologEpilogTimeout = {t} ({}): the budget ({} s + {:.1} s) fits",
            s.source,
            c.budget_seconds,
            GRACE.as_secs_f64()
        )),
        None => f.notes.push(format!(
            "PrologEpilogTimeout is unset ({}): slurmd waits for the prolog without limit",
            s.source
        )),
    }
    if c.gpus == GpuPolicy::Job && !s.has_gres_gpu() {
        f.problems.push(format!(
            "gpus = \"job\" but Slurm has no GresTypes=gpu ({}): no job is given GPUs, so every prolog \
             checks nothing and the gate is off; set gpus = \"all\" in {} (check every GPU of the node) \
             or configure gres/gpu",
            s.source,
            file.display()
        ));
    }
    if !s.prolog_flags.is_empty() || !s.prologs.is_empty() {
        f.notes.push(format!(
            "Prolog = {}, PrologFlags = {} ({})",
            if s.prologs.is_empty() {
                "(none)".to_string()
            } else {
                s.prologs.join(",")
            },
            if s.prolog_flags.is_empty() {
                "(none)".to_string()
            } else {
                s.prolog_flags.join(",")
            },
            s.source
        ));
    }
    f
}

/// Slurm's settings for this node: the controller's, else the slurm.conf in use.
pub fn read_slurm(c: &GateConfig, slurm_conf: Option<&str>) -> (Option<Settings>, String) {
    let sc = c.scontrol.is_file().then_some(c.scontrol.as_path());
    let s = Sources::read(Path::new("/"), slurm_conf, sc, WAIT);
    let why = s.live_error.clone().unwrap_or_else(|| "no scontrol".into());
    let why = match s.file_errors.first() {
        Some(e) => format!("{why}; {e}"),
        None => format!("{why}; no slurm.conf found"),
    };
    (s.effective().cloned(), why)
}

/// The worker's `--check-config` on the config the prolog passes on, run as the prolog runs the
/// worker (fixed PATH, the config's `env` table). Its lines come back prefixed `worker: `.
pub fn worker(c: &GateConfig) -> (Vec<String>, Findings) {
    let mut f = Findings::default();
    let mut args = vec!["--check-config".into()];
    if c.worker_config.exists() {
        args.push(c.worker_config.clone().into_os_string());
    }
    let mut spec = Spec::new(&c.worker, args, WAIT).env("PATH", crate::worker::WORKER_PATH);
    for (k, v) in &c.env {
        spec = spec.env(k, v);
    }
    spec.stdout = Output::Tail {
        max_bytes: 64 * 1024,
    };
    spec.stderr = Output::Tail {
        max_bytes: 8 * 1024,
    };
    let what = format!("{} --check-config", c.worker.display());
    let done = match supervise::run(spec) {
        Ok(d) => d,
        Err(e) => {
            f.problems.push(format!("{what}: {}", e.error));
            return (Vec::new(), f);
        }
    };
    let text =
        String::from_utf8_lossy(&done.stdout).into_owned() + &String::from_utf8_lossy(&done.stderr);
    let lines: Vec<String> = text.lines().map(|l| format!("worker: {l}")).collect();
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("INVALID") || l.starts_with("NOT READY"))
        .collect();
    match done.ending {
        Ending::Exited(0) if bad.is_empty() => {}
        Ending::KilledAtDeadline => f
            .problems
            .push(format!("{what}: no answer in {} s", WAIT.as_secs())),
        _ => f.problems.push(format!(
            "{what}: {} (every job's check would end in ERROR: the gate is off)",
            bad.first().copied().unwrap_or("failed")
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
    spec.stdout = Output::Tail {
        max_bytes: 64 * 1024,
    };
    spec.stderr = Output::Tail {
        max_bytes: 8 * 1024,
    };
    let what = format!("{} --check", program.display());
    let done = match supervise::run(spec) {
        Ok(d) => d,
        Err(e) => {
            f.problems.push(format!("{what}: {}", e.error));
            return (Vec::new(), f);
        }
    };
    let text =
        String::from_utf8_lossy(&done.stdout).into_owned() + &String::from_utf8_lossy(&done.stderr);
    let lines = text.lines().map(|l| format!("plugin line: {l}")).collect();
    for bad in text.lines().filter_map(|l| l.strip_prefix("INVALID ")) {
        f.problems.push(format!("plugin line: {bad}"));
    }
    match done.ending {
        Ending::Exited(0) => {}
        Ending::Exited(_) if !f.problems.is_empty() => {}
        Ending::KilledAtDeadline => f
            .problems
            .push(format!("{what}: no answer in {} s", WAIT.as_secs())),
        other => f.problems.push(format!("{what}: {other:?}")),
    }
    (lines, f)
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

    #[test]
    fn a_budget_at_or_above_prolog_epilog_timeout_is_a_problem() {
        let file = Path::new("/etc/nccl-check/prolog.toml");
        let c = GateConfig {
            budget_seconds: 40,
            gpus: GpuPolicy::All,
            ..GateConfig::default()
        };
        let f = slurm(&c, Some(&settings(Some(15), &[])), "", file);
        assert_eq!(f.problems.len(), 1, "{f:?}");
        assert!(f.problems[0].contains("PrologEpilogTimeout = 15"), "{f:?}");
        assert!(f.problems[0].contains("budget_seconds <= 8"), "{f:?}");
        // Within the margin: 30 + 1.5 + 5 > 36.
        let c = GateConfig {
            budget_seconds: 30,
            ..c
        };
        assert_eq!(
            slurm(&c, Some(&settings(Some(36), &[])), "", file)
                .problems
                .len(),
            1
        );
        assert!(slurm(&c, Some(&settings(Some(37), &[])), "", file)
            .problems
            .is_empty());
        assert!(slurm(&c, Some(&settings(None, &[])), "", file)
            .problems
            .is_empty());
    }

    #[test]
    fn gpus_job_without_gres_gpu_is_a_problem_and_unknown_slurm_a_note() {
        let file = Path::new("/etc/nccl-check/prolog.toml");
        let c = GateConfig::default();
        assert_eq!(c.gpus, GpuPolicy::Job);
        let f = slurm(&c, Some(&settings(Some(120), &[])), "", file);
        assert_eq!(f.problems.len(), 1, "{f:?}");
        assert!(f.problems[0].contains("gpus = \"all\""), "{f:?}");
        assert!(slurm(&c, Some(&settings(Some(120), &["gpu"])), "", file)
            .problems
            .is_empty());
        let f = slurm(&c, None, "no controller", file);
        assert!(
            f.problems.is_empty() && f.notes[0].contains("no controller"),
            "{f:?}"
        );
    }

    #[test]
    fn a_worker_that_rejects_its_config_is_a_problem() {
        let d = nccl_check_contract::test_support::scratch_dir("chain-worker");
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
        let (lines, f) = worker(&c);
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
        assert_eq!(worker(&c2).1, Findings::default());
        assert!(f.problems[0].contains("unknown field 'fracton'"), "{f:?}");
        assert!(lines[0].starts_with("worker: INVALID "), "{lines:?}");
        std::fs::remove_dir_all(&d).ok();
    }

    /// Issue 25 finding 8: --check-config runs the plugin line's check and takes its INVALID
    /// lines as problems; without the program it says so and goes on.
    #[test]
    fn the_plugin_lines_problems_are_the_gates_problems() {
        use std::os::unix::fs::PermissionsExt;
        let d = nccl_check_contract::test_support::scratch_dir("chain-plugstack");
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
            [
                "plugin line: /etc/slurm/plugstack.conf.d/zz-nccl-check.conf:1: unknown argument \
              'timout' (did you mean 'timeout'?)"
            ]
        );
        let (lines, f) = plugin_line(&d.join("absent"), None);
        assert!(lines.is_empty() && f.problems.is_empty(), "{f:?}");
        assert!(f.notes[0].contains("is not installed"), "{f:?}");
        std::fs::remove_dir_all(&d).ok();
    }
}
