//! `nccl-check-prolog --check-config [--config FILE]`: validates the config before slurmd sees
//! it, prints every key with its effective value and where that came from (the default, or
//! `file:line`), then what would keep the gate from working on this node (worker not executable,
//! a directory the prolog refuses to write, and through `chain` the worker's config and NCCL and
//! Slurm's PrologEpilogTimeout and GresTypes). Exit 0: valid and ready; 2: invalid or not ready
//! (or Slurm's configuration unreadable); 3: valid, but nothing in Slurm runs the gate.
//! Also salvages `state_dir` and `metrics_file` from a broken file, so a disabled gate can still
//! say so where the admin looks.

use crate::chain::{Effect, NotReady};
use crate::config::{self, GateConfig, KEYS};
use crate::secure;
use crate::slurm_uses::INSTALLED;
use nccl_check_host::config_file::find_key_line;
use nccl_check_host::slurm_config::Settings;
use std::fmt::Write;
use std::path::Path;

/// A value as TOML writes it: tables inline (`{ a = 1, b = 2 }`, `{}` when empty).
fn toml_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) if m.is_empty() => "{}".into(),
        serde_json::Value::Object(m) => {
            let kv: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k} = {}", toml_text(v)))
                .collect();
            format!("{{ {} }}", kv.join(", "))
        }
        other => other.to_string(),
    }
}

/// Every key, its value and its source, one per line.
pub fn render(c: &GateConfig, file: Option<(&Path, &str)>) -> String {
    let mut out = String::new();
    // Each key's effective value, from the config's own serialization (the same names and
    // spellings the file is read with).
    let values = match serde_json::to_value(c) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    for key in KEYS {
        let from = file
            .and_then(|(path, text)| {
                find_key_line(text, key).map(|l| format!("{}:{l}", path.display()))
            })
            .unwrap_or_else(|| "default".into());
        let value = values.get(key).map_or("?".into(), toml_text);
        let _ = writeln!(out, "{key} = {value}    # {from}");
    }
    out
}

/// What would make every run of the gate on `node` an ERROR.
pub fn problems(c: &GateConfig, node: &str) -> Vec<NotReady> {
    let mut p = Vec::new();
    let mut add = |text: String| p.push(NotReady::new(Effect::Unchecked, text));
    for (what, program) in [("worker", &c.worker), ("scontrol", &c.scontrol)] {
        if nccl_check_host::read::not_runnable(program).is_some() {
            add(format!(
                "{what} {}: not an executable file",
                program.display()
            ));
        }
    }
    // A missing state_dir is created (root's, 0755) at the first run; an existing one must pass.
    match c.state_dir_for(node) {
        Ok(state) if state.exists() => {
            if let Err(e) = secure::check_dir(&state) {
                add(format!("state_dir {e}"));
            }
        }
        Ok(_) => {}
        Err(e) => add(e),
    }
    p
}

/// A `metrics_file` the gate will refuse: the check still runs (monitoring never turns the
/// gate off) and its metrics go to the state dir's fallback file, so this is said, not NOT READY.
pub fn metrics_note(c: &GateConfig, node: &str) -> Option<String> {
    let why = match c.metrics_file_for(node) {
        Ok(Some(m)) => secure::open_textfile_dir(m.parent().unwrap_or(Path::new("/")))
            .err()
            .map(|e| format!("metrics_file {e}"))?,
        Ok(None) => return None,
        Err(e) => e,
    };
    let fallback = c
        .state_dir_for(node)
        .map(|d| d.join(crate::metrics::FALLBACK).display().to_string())
        .unwrap_or_else(|_| "the state dir".into());
    Some(format!(
        "WARNING {why}: the gate runs all the same; its metrics go to {fallback} \
         (nccl_check_metrics_file_error 1) until this is fixed"
    ))
}

/// The command: prints the report, returns the exit code.
pub fn run(path: &Path, explicit: bool, node: &str, slurm_conf: Option<&str>) -> i32 {
    let exists = explicit || path.exists();
    let read = exists.then(|| nccl_check_host::config_file::read(path));
    let text = match read.transpose() {
        Ok(t) => t,
        Err(e) => {
            nccl_check_host::outln!("INVALID {e}");
            return NOT_READY;
        }
    };
    let cfg = match text.as_deref().map(|t| config::parse(path, t)).transpose() {
        Ok(c) => c.unwrap_or_default(),
        Err(e) => {
            nccl_check_host::outln!("INVALID {e}");
            nccl_check_host::outln!("The gate is off while this stands: every job runs unchecked.");
            return NOT_READY;
        }
    };
    match &text {
        Some(_) => {
            nccl_check_host::outln!("# {}: valid; the effective configuration:", path.display())
        }
        None => nccl_check_host::outln!(
            "# {} is absent: the defaults apply; the effective configuration:",
            path.display()
        ),
    }
    nccl_check_host::out!("{}", render(&cfg, text.as_deref().map(|t| (path, t))));
    let mut problems = problems(&cfg, node);
    // The chain beyond this file: the worker's config and NCCL, then Slurm's settings.
    let (worker_lines, w) = crate::chain::worker(&cfg, path);
    for l in &worker_lines {
        nccl_check_host::outln!("{l}");
    }
    let read = crate::chain::read_slurm(&cfg, slurm_conf);
    let root = Path::new("/");
    let in_file = nccl_check_host::slurm_config::settings_now(root, slurm_conf);
    let view = crate::chain::SlurmView {
        settings: read.settings.as_ref(),
        why: &read.why,
        limits: crate::budget::Limits::read(&in_file, &read.live),
        file: read.file.as_ref(),
        root,
    };
    let sl = crate::chain::slurm(&cfg, &view, path);
    let (plugin_lines, pl) =
        crate::chain::plugin_line(&crate::chain::plugstack_program(), slurm_conf);
    for l in &plugin_lines {
        nccl_check_host::outln!("{l}");
    }
    for n in read
        .notes
        .iter()
        .chain(&w.notes)
        .chain(&sl.notes)
        .chain(&pl.notes)
    {
        nccl_check_host::outln!("# {n}");
    }
    if let Some(n) = metrics_note(&cfg, node) {
        nccl_check_host::outln!("# {n}");
    }
    problems.extend([read.problems, w.problems, sl.problems, pl.problems].concat());
    let (code, last) = verdict(node, &problems, view.settings, root);
    for l in &last {
        nccl_check_host::outln!("{l}");
    }
    code
}

/// `--check-config`'s exit codes (documented in `--help` and prolog/README.md).
pub const READY: i32 = 0;
pub const NOT_READY: i32 = 2;
/// Valid and nothing wrong, but no Prolog=, Epilog= or HealthCheckProgram= runs the gate: the
/// state right after the package's install, before the admin enables it.
pub const NOT_ENABLED: i32 = 3;

/// The last lines and the exit code: every NOT READY line, then a summary made of what each of
/// them does (so it never contradicts one); else ready or installed-not-enabled.
fn verdict(
    node: &str,
    problems: &[NotReady],
    s: Option<&Settings>,
    root: &Path,
) -> (i32, Vec<String>) {
    if !problems.is_empty() {
        let mut lines: Vec<String> = problems
            .iter()
            .map(|p| format!("NOT READY {}", p.text))
            .collect();
        let mut effects: Vec<Effect> = problems.iter().map(|p| p.effect).collect();
        effects.sort();
        effects.dedup();
        let said: Vec<&str> = effects.iter().map(|e| e.says()).collect();
        lines.push(format!(
            "Until this is fixed on {node}: {}.",
            said.join("; ")
        ));
        return (NOT_READY, lines);
    }
    let program = Path::new(INSTALLED);
    let runs = s.is_some_and(|s| {
        !s.entries_running(program, root).is_empty()
            || s.health_check_running(&program.with_file_name("nccl-check-recheck"), root)
                .is_some()
    });
    if !runs {
        return (
            NOT_ENABLED,
            vec![format!(
                "# installed, not enabled on {node}: the config is valid, but no Prolog=, Epilog= \
                 or HealthCheckProgram= of this node's Slurm runs {INSTALLED}, so no job is \
                 checked; set Prolog={INSTALLED} (and PrologFlags=Alloc) on the controller, run \
                 'scontrol reconfigure' (exit {NOT_ENABLED})"
            )],
        );
    }
    (
        READY,
        vec![format!(
            "# ready on {node}: the worker and scontrol are executable, the directories safe, \
             the worker's config valid, Slurm's settings fit"
        )],
    )
}

/// `state_dir` and `metrics_file` read from a config that does not validate, when those keys
/// themselves are usable (absolute strings), else the defaults; None when the file cannot be
/// read at all (a wrong `--config` path: nothing says where this gate's state belongs).
pub fn salvage(path: &Path) -> Option<(String, String)> {
    let d = GateConfig::default();
    let text = std::fs::read_to_string(path).ok()?;
    let table = text.parse::<toml::Table>().ok();
    let get = |key: &str, default: String| {
        table
            .as_ref()
            .and_then(|t| t.get(key))
            .and_then(|v| v.as_str())
            .filter(|s| s.starts_with('/'))
            .map(str::to_string)
            .unwrap_or(default)
    };
    Some((
        get("state_dir", d.state_dir.clone()),
        get("metrics_file", d.metrics_file.clone()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn every_key_is_printed_with_its_value_and_source() {
        let text = "# site\nplan = \"full\"\nenv = { NCCL_IB_HCA = \"mlx5\" }\n";
        let p = Path::new("/etc/nccl-check/prolog.toml");
        let c = config::parse(p, text).expect("valid");
        let out = render(&c, Some((p, text)));
        assert_eq!(out.lines().count(), KEYS.len());
        assert!(
            out.contains("plan = \"full\"    # /etc/nccl-check/prolog.toml:2\n"),
            "{out}"
        );
        assert!(
            out.contains("env = { NCCL_IB_HCA = \"mlx5\" }    # /etc/nccl-check/prolog.toml:3\n"),
            "{out}"
        );
        assert!(out.contains("budget_seconds = 30    # default\n"), "{out}");
        assert!(out.contains("on_error = \"run\"    # default\n"), "{out}");
        // What is printed parses back to the same configuration.
        assert_eq!(config::parse(p, &out).expect("round trip"), c);
    }

    #[test]
    fn a_missing_worker_or_an_unsafe_directory_is_a_problem() {
        let d = nccl_check_host::test_support::scratch_dir("check-config");
        let c = GateConfig {
            worker: d.join("nccl-check"),
            scontrol: "/bin/sh".into(),
            state_dir: d.display().to_string(),
            metrics_file: d.join("m/x.prom").display().to_string(),
            ..GateConfig::default()
        };
        std::fs::create_dir(d.join("m")).expect("mkdir");
        std::fs::set_permissions(d.join("m"), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        let p = problems(&c, "n1");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].text.contains("not an executable"), "{p:?}");
        // A refused metrics path is said, never NOT READY: the gate runs all the same.
        let n = metrics_note(&c, "n1").expect("a note");
        assert!(
            n.starts_with("WARNING metrics_file ") && n.contains("0777"),
            "{n}"
        );
        assert!(
            n.contains("nccl_check.prom") && n.contains("the gate runs"),
            "{n}"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    /// Regression (issue 46): a NOT READY saying the node drains was followed by "Every job
    /// would end in ERROR (not drained)"; and "ready" was said with nothing running the gate.
    #[test]
    fn the_summary_says_what_each_problem_does_and_not_enabled_has_its_own_code() {
        let root = Path::new("/nonexistent-root");
        let p = [
            NotReady::new(Effect::Drains, "Prolog=/x (f:1): no such file"),
            NotReady::new(Effect::Unchecked, "worker /w: not an executable file"),
        ];
        let (code, lines) = verdict("n1", &p, None, root);
        assert_eq!(code, NOT_READY);
        assert_eq!(lines.len(), 3, "{lines:?}");
        let last = &lines[2];
        assert!(
            last.contains("slurmd drains the node") && last.contains("runs unchecked"),
            "{last}"
        );
        assert!(
            !last.contains("every job would end in ERROR (not drained)"),
            "{last}"
        );
        let only_drain = verdict("n1", &p[..1], None, root).1;
        assert!(!only_drain[1].contains("not drained"), "{only_drain:?}");
        let none = Settings::default();
        let (code, lines) = verdict("n1", &[], Some(&none), root);
        assert_eq!(code, NOT_ENABLED);
        assert!(
            lines[0].starts_with("# installed, not enabled on n1"),
            "{lines:?}"
        );
        let on = Settings {
            prologs: vec![INSTALLED.into()],
            ..Settings::default()
        };
        assert_eq!(verdict("n1", &[], Some(&on), root).0, READY);
        let health = Settings {
            health_check_program: Some("/usr/sbin/nccl-check-recheck".into()),
            ..Settings::default()
        };
        assert_eq!(verdict("n1", &[], Some(&health), root).0, READY);
    }

    #[test]
    fn a_broken_file_still_gives_its_state_dir_and_metrics_file() {
        let d = nccl_check_host::test_support::scratch_dir("salvage");
        let f = d.join("p.toml");
        std::fs::write(
            &f,
            "state_dir = \"/s/%n\"\nmetrics_file = \"/m.prom\"\nbudget = 1\n",
        )
        .expect("write");
        assert_eq!(salvage(&f), Some(("/s/%n".into(), "/m.prom".into())));
        std::fs::write(&f, "state_dir = [\n").expect("write");
        assert_eq!(
            salvage(&f),
            Some(("/var/lib/nccl-check".into(), String::new()))
        );
        assert_eq!(salvage(&d.join("absent.toml")), None);
        std::fs::remove_dir_all(&d).ok();
    }
}
