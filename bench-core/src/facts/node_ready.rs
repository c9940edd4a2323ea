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

/// Where the library a check loads is named, so that a NOT READY says the one setting that
/// changes it: the environment's `NCCL_CHECK_NCCL_LIB` wins over the config's `nccl_lib`, so
/// telling the admin to edit the config while the environment names the library fixes nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum LibFrom {
    /// `NCCL_CHECK_NCCL_LIB` of the environment the check starts with.
    Env(PathBuf),
    /// `nccl_lib` of the config file, and where in it (`FILE:LINE`).
    Config { lib: PathBuf, at: String },
    /// Named nowhere: `libnccl.so.2` on the library path; the config file a check reads
    /// (the one given, else the default path), where `nccl_lib` would go.
    Nowhere { config: PathBuf },
}

impl LibFrom {
    /// From the environment and the loaded config, in the order a check takes them.
    pub fn of(env: &Environment, cfg: &WorkerConfig) -> LibFrom {
        if let Some(lib) = env.get_os("NCCL_CHECK_NCCL_LIB").filter(|v| !v.is_empty()) {
            return LibFrom::Env(PathBuf::from(lib));
        }
        let config = cfg
            .path
            .clone()
            .unwrap_or_else(|| PathBuf::from(crate::config::worker::DEFAULT_PATH));
        match &cfg.nccl_lib {
            Some(lib) => LibFrom::Config {
                lib: lib.clone(),
                at: nccl_check_host::config_file::find_key_line(&cfg.text, "nccl_lib").map_or_else(
                    || config.display().to_string(),
                    |l| format!("{}:{l}", config.display()),
                ),
            },
            None => LibFrom::Nowhere { config },
        }
    }

    fn lib(&self) -> Option<&Path> {
        match self {
            LibFrom::Env(l) | LibFrom::Config { lib: l, .. } => Some(l),
            LibFrom::Nowhere { .. } => None,
        }
    }

    /// What the admin changes so that the check finds NCCL.
    pub fn fix(&self) -> String {
        match self {
            LibFrom::Env(_) => nccl_check_contract::exit::NCCL_LIB_FROM_ENV.to_string(),
            LibFrom::Config { at, .. } => {
                format!("correct nccl_lib at {at} to the library's path")
            }
            LibFrom::Nowhere { config } => format!(
                "set nccl_lib = \"/path/libnccl.so.2\" in {}",
                config.display()
            ),
        }
    }
}

/// Whether this node can run a check with the library `from` names (else the library path).
pub fn probe_node(root: &Path, from: &LibFrom) -> NodeReady {
    let gpus = inventory::driver_gpus(root).unwrap_or_default();
    let lib = from.lib();
    let shown = lib.map_or("libnccl.so.2 on the library path".to_string(), |p| {
        p.display().to_string()
    });
    let ready = |lines: Vec<String>| NodeReady {
        lines,
        not_ready: false,
    };
    let not_ready = |what: String| NodeReady {
        lines: vec![CheckProblem::not_ready(what).to_string()],
        not_ready: true,
    };
    // A named library that is not there fails every check on every node; this needs no GPU
    // to tell (a file check only: nothing is loaded on a node without GPUs).
    if let Some(l) = lib.filter(|l| !l.is_file()) {
        let why = if l.exists() {
            "not a file"
        } else {
            "no such file"
        };
        let (l, fix) = (l.display(), from.fix());
        return not_ready(format!(
            "NCCL ({l}): {why}; every check would end in ERROR: {fix}"
        ));
    }
    if gpus.is_empty() {
        return ready(vec![format!(
            "# no GPU listed by the driver on this node: NCCL ({shown}) not loaded; \
             a check here ends in ERROR (no GPU), never FAIL. Run this on a GPU node too"
        )]);
    }
    let listed = format!("# {} GPUs listed by the driver", gpus.len());
    match Nccl::load(lib) {
        Ok(n) => {
            let (version, path) = (n.version_string(), n.path.display());
            ready(vec![listed, format!("# NCCL {version} loads from {path}")])
        }
        Err(e) => {
            // The loader's own hint is for a command line: what to change follows instead.
            let e = e.to_string().replace(
                &format!("; {}", nccl_check_contract::exit::NCCL_LIB_HINT),
                "",
            );
            let mut r = not_ready(format!(
                "NCCL ({shown}): {e}; every check on this node would end in ERROR: {}",
                from.fix()
            ));
            r.lines.insert(0, listed);
            r
        }
    }
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
    let ready = probe_node(root, &LibFrom::of(env, &cfg));
    lines.extend(ready.lines);
    Checked {
        lines,
        code: if ready.not_ready { 2 } else { 0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nowhere() -> LibFrom {
        LibFrom::Nowhere {
            config: PathBuf::from(crate::config::worker::DEFAULT_PATH),
        }
    }

    fn named(lib: &Path) -> LibFrom {
        LibFrom::Config {
            lib: lib.to_path_buf(),
            at: "/etc/nccl-check/nccl-check.toml:3".into(),
        }
    }

    #[test]
    fn a_node_without_gpus_cannot_tell_and_is_not_failed() {
        let r = probe_node(Path::new("/nonexistent-root"), &nowhere());
        assert!(!r.not_ready, "{r:?}");
        assert!(r.lines[0].contains("no GPU listed by the driver"), "{r:?}");
    }

    /// Regression: `nccl_lib = "/nope/libnccl.so.2"` is named as missing on a node
    /// without GPUs too.
    #[test]
    fn a_named_library_that_is_not_there_is_not_ready_without_gpus() {
        let r = probe_node(
            Path::new("/nonexistent-root"),
            &named(Path::new("/nope/libnccl.so.2")),
        );
        assert!(r.not_ready, "{r:?}");
        assert!(
            r.lines[0].starts_with("NOT READY NCCL (/nope/libnccl.so.2): no such file"),
            "{r:?}"
        );
        assert!(
            r.lines[0].ends_with(
                ": correct nccl_lib at /etc/nccl-check/nccl-check.toml:3 to the library's path"
            ),
            "{r:?}"
        );
        let r = probe_node(Path::new("/nonexistent-root"), &named(Path::new("/")));
        assert!(r.not_ready && r.lines[0].contains("not a file"), "{r:?}");
    }

    #[test]
    fn a_gpu_node_whose_nccl_does_not_load_is_not_ready() {
        let root = nccl_check_host::test_support::scratch_dir("node-ready");
        std::fs::create_dir_all(root.join("proc/driver/nvidia/gpus/0000:19:00.0")).expect("mkdir");
        // A file that is there but no library: only loading it tells.
        let lib = root.join("libnccl.so.2");
        std::fs::write(&lib, "not an ELF").expect("write");
        let r = probe_node(&root, &named(&lib));
        assert!(r.not_ready, "{r:?}");
        assert!(
            r.lines[1].starts_with(&format!("NOT READY NCCL ({}): ", lib.display())),
            "{r:?}"
        );
        std::fs::remove_dir_all(&root).ok();
    }

    /// Regression (issue 46): the hint said `Set nccl_lib = ... in
    /// /etc/nccl-check/nccl-check.toml` whatever named the library. Where the environment's
    /// NCCL_CHECK_NCCL_LIB names it (the prolog's `env`), that file changes nothing (the
    /// variable wins); where the config given is another file, the default path is not read.
    /// The hint names the setting that wins, in the file that is read.
    #[test]
    fn the_hint_names_the_setting_that_wins_in_the_file_that_is_read() {
        let d = nccl_check_host::test_support::scratch_dir("node-ready-hint");
        let f = d.join("site.toml");
        std::fs::write(&f, "# site\n\nnccl_lib = \"/opt/nope/libnccl.so.2\"\n").expect("write");
        let c = check_file(Some(&f), &d, &Environment::default());
        let last = c.lines.last().expect("a line");
        assert_eq!(c.code, 2, "{c:?}");
        assert!(
            last.ends_with(&format!(
                "no such file; every check would end in ERROR: correct nccl_lib at {}:3 to the \
                 library's path",
                f.display()
            )),
            "{last}"
        );
        let env = Environment::of_pairs([("NCCL_CHECK_NCCL_LIB", "/env/nope/libnccl.so.2")]);
        let c = check_file(Some(&f), &d, &env);
        let last = c.lines.last().expect("a line");
        assert!(
            last.starts_with("NOT READY NCCL (/env/nope/libnccl.so.2): no such file"),
            "{last}"
        );
        assert!(
            last.ends_with(nccl_check_contract::exit::NCCL_LIB_FROM_ENV) && !last.contains(".toml"),
            "{last}"
        );
        // Named nowhere, on a GPU node whose library path has no NCCL: the file given.
        std::fs::create_dir_all(d.join("proc/driver/nvidia/gpus/0000:19:00.0")).expect("mkdir");
        std::fs::write(&f, "# site\n").expect("write");
        let from = LibFrom::of(
            &Environment::default(),
            &WorkerConfig::load(Some(&f)).expect("load"),
        );
        assert_eq!(from, LibFrom::Nowhere { config: f.clone() });
        assert_eq!(
            from.fix(),
            format!("set nccl_lib = \"/path/libnccl.so.2\" in {}", f.display())
        );
        std::fs::remove_dir_all(&d).ok();
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
