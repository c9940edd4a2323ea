//! `nccl-check --check-config [FILE]` (FILE: else $NCCL_CHECK_CONFIG, else the default path when
//! it exists): validates the worker's config over the built-in defaults and says what it sets and
//! where (`config::check`), then whether this node can run a check at all: the GPUs its driver
//! lists and, where there are some, whether NCCL loads from where the worker would load it. A node
//! without a GPU (a login node, the controller) cannot tell: that is a note, never a failure.
//! Exit 0 valid, 2 invalid or not ready. Needs no GPU and no NCCL.

use crate::config::worker::WorkerConfig;
use crate::facts::inventory;
use crate::measure::nccl::Nccl;
use crate::settings::environment::Environment;
use nccl_check_contract::check_line::CheckProblem;
use std::path::{Path, PathBuf};

/// The outcome: lines to print, and whether the node is not ready.
#[derive(Debug, PartialEq)]
pub struct NodeReady {
    pub lines: Vec<String>,
    pub not_ready: bool,
}

/// `nccl_lib`: `NCCL_CHECK_NCCL_LIB`, else the config's, else the library path (as a check loads it).
pub fn probe_node(root: &Path, nccl_lib: Option<&Path>) -> NodeReady {
    let gpus = inventory::driver_gpus(root).unwrap_or_default();
    let lib = nccl_lib.map(Path::to_path_buf);
    let shown = lib
        .as_ref()
        .map_or("libnccl.so.2 on the library path".to_string(), |p| {
            p.display().to_string()
        });
    // A named library that is not there fails every check on every node; this needs no GPU
    // to tell (a file check only: nothing is loaded on a node without GPUs).
    if let Some(l) = lib.as_ref().filter(|l| !l.is_file()) {
        let why = if l.exists() {
            "not a file"
        } else {
            "no such file"
        };
        return NodeReady {
            lines: vec![CheckProblem::not_ready(format!(
                "NCCL ({}): {why}; every check would end in ERROR. Set nccl_lib = \
                 \"/path/libnccl.so.2\" in /etc/nccl-check/nccl-check.toml to the library's path",
                l.display()
            ))
            .to_string()],
            not_ready: true,
        };
    }
    if gpus.is_empty() {
        return NodeReady {
            lines: vec![format!(
                "# no GPU listed by the driver on this node: NCCL ({shown}) not loaded; \
                 a check here ends in ERROR (no GPU), never FAIL. Run this on a GPU node too"
            )],
            not_ready: false,
        };
    }
    let mut lines = vec![format!("# {} GPUs listed by the driver", gpus.len())];
    let (line, not_ready) = match Nccl::load(lib.as_deref()) {
        Ok(n) => {
            let path = n.path.display();
            (
                format!("# NCCL {} loads from {path}", n.version_string()),
                false,
            )
        }
        Err(e) => {
            let problem = CheckProblem::not_ready(format!(
                "NCCL ({shown}): {e}; every check on this node would end in ERROR. \
                 Set nccl_lib = \"/path/libnccl.so.2\" in /etc/nccl-check/nccl-check.toml"
            ));
            (problem.to_string(), true)
        }
    };
    lines.push(line);
    NodeReady { lines, not_ready }
}

/// The library a check would load: the environment's, else the config's.
pub fn nccl_lib(env: &Environment, config: Option<PathBuf>) -> Option<PathBuf> {
    env.get_os("NCCL_CHECK_NCCL_LIB")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or(config)
}

/// What `--check-config` prints (stdout) and its exit code.
#[derive(Debug)]
pub struct Checked {
    pub lines: Vec<String>,
    pub code: i32,
}

/// Checks the config at `path` (else the default path) and this node (`root`: `/`; `env`: the
/// environment a check would start with, for `NCCL_CHECK_NCCL_LIB`).
pub fn check_file(path: Option<&Path>, root: &Path, env: &Environment) -> Checked {
    let cfg = match WorkerConfig::load(path) {
        Ok(c) => c,
        Err(e) => {
            return Checked {
                lines: vec![CheckProblem::invalid(e.to_string()).to_string()],
                code: 2,
            }
        }
    };
    let mut lines = crate::config::check::effective_lines(&cfg);
    // Whether this node can run a check: GPUs listed, NCCL loadable (none: cannot tell).
    let ready = probe_node(root, nccl_lib(env, cfg.nccl_lib.clone()).as_deref());
    lines.extend(ready.lines);
    Checked {
        lines,
        code: if ready.not_ready { 2 } else { 0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_without_gpus_cannot_tell_and_is_not_failed() {
        let r = probe_node(Path::new("/nonexistent-root"), None);
        assert!(!r.not_ready, "{r:?}");
        assert!(r.lines[0].contains("no GPU listed by the driver"), "{r:?}");
    }

    /// Regression: `nccl_lib = "/nope/libnccl.so.2"` is named as missing on a node
    /// without GPUs too.
    #[test]
    fn a_named_library_that_is_not_there_is_not_ready_without_gpus() {
        let r = probe_node(
            Path::new("/nonexistent-root"),
            Some(Path::new("/nope/libnccl.so.2")),
        );
        assert!(r.not_ready, "{r:?}");
        assert!(
            r.lines[0].starts_with("NOT READY NCCL (/nope/libnccl.so.2): no such file"),
            "{r:?}"
        );
        let r = probe_node(Path::new("/nonexistent-root"), Some(Path::new("/")));
        assert!(r.not_ready && r.lines[0].contains("not a file"), "{r:?}");
    }

    #[test]
    fn a_gpu_node_whose_nccl_does_not_load_is_not_ready() {
        let root = nccl_check_host::test_support::scratch_dir("node-ready");
        std::fs::create_dir_all(root.join("proc/driver/nvidia/gpus/0000:19:00.0")).expect("mkdir");
        // A file that is there but no library: only loading it tells.
        let lib = root.join("libnccl.so.2");
        std::fs::write(&lib, "not an ELF").expect("write");
        let r = probe_node(&root, Some(&lib));
        assert!(r.not_ready, "{r:?}");
        assert!(
            r.lines[1].starts_with(&format!("NOT READY NCCL ({}): ", lib.display())),
            "{r:?}"
        );
        std::fs::remove_dir_all(&root).ok();
    }

    #[test]
    fn a_broken_file_is_one_invalid_line_and_exit_2() {
        let d = nccl_check_host::test_support::scratch_dir("worker-check-config");
        let f = d.join("w.toml");
        std::fs::write(&f, "[outliers]\nfracton = 0.9\n").expect("write");
        let c = check_file(Some(&f), &d, &Environment::default());
        assert_eq!(c.code, 2);
        assert_eq!(c.lines.len(), 1);
        assert!(
            c.lines[0].starts_with(&format!("INVALID {}:2", f.display())),
            "{c:?}"
        );
    }

    #[test]
    fn every_key_says_where_it_comes_from() {
        let d = nccl_check_host::test_support::scratch_dir("worker-check-config-ok");
        let f = d.join("w.toml");
        std::fs::write(&f, "[outliers]\nfraction = 0.8\n").expect("write");
        let c = check_file(Some(&f), &d, &Environment::default());
        let g = f.display();
        assert!(c.lines[0].starts_with(&format!("# {g}: valid")), "{c:?}");
        assert!(
            c.lines
                .contains(&format!("outliers.fraction = 0.8    # {g}:2")),
            "{c:?}"
        );
        assert!(c
            .lines
            .contains(&"outliers.retest = true    # built-in defaults".to_string()));
    }
}
