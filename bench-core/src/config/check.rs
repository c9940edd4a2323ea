//! `nccl-check --check-config [FILE]` (FILE: else $NCCL_CHECK_CONFIG, else the default path when
//! it exists): validates the worker's config over the built-in defaults and says what it sets and
//! where, then whether this node can run a check. Exit 0 valid, 2 invalid or not ready. Needs no
//! GPU and no NCCL.

use super::worker::WorkerConfig;
use crate::settings::environment::Environment;
use nccl_check_contract::check_line::CheckProblem;
use nccl_check_host::config_file::find_key_line;
use std::path::Path;

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
    let mut lines = effective(&cfg);
    // Whether this node can run a check: GPUs listed, NCCL loadable (none: cannot tell).
    let ready = crate::facts::node_ready::probe_node(
        root,
        crate::facts::node_ready::nccl_lib(env, cfg.nccl_lib.clone()).as_deref(),
    );
    lines.extend(ready.lines);
    Checked {
        lines,
        code: if ready.not_ready { 2 } else { 0 },
    }
}

/// Where a key of the file is set, for the comment after each value.
struct Source<'a> {
    file: Option<String>,
    cfg: &'a WorkerConfig,
}

impl Source<'_> {
    fn of(&self, field: &str) -> String {
        match (&self.file, find_key_line(&self.cfg.text, field)) {
            (Some(f), Some(l)) => format!("{f}:{l}"),
            _ => "built-in defaults".into(),
        }
    }
}

/// The effective configuration, one key a line with where it comes from.
fn effective(cfg: &WorkerConfig) -> Vec<String> {
    let from = Source {
        file: cfg.path.as_ref().map(|p| p.display().to_string()),
        cfg,
    };
    let mut lines = vec![match &from.file {
        Some(f) => {
            format!("# {f}: valid; the effective configuration (over the built-in defaults):")
        }
        None => "# no config file: the built-in defaults apply:".into(),
    }];
    lines.push(format!(
        "outliers.fraction = {}    # {}",
        cfg.outliers.fraction,
        from.of("outliers.fraction")
    ));
    lines.push(format!(
        "outliers.retest = {}    # {}",
        cfg.outliers.retest,
        from.of("outliers.retest")
    ));
    lines.push(thresholds(cfg, from.file.as_deref()));
    for (name, plan) in &cfg.plans {
        lines.push(format!(
            "plans.{name} = {} steps    # {}",
            plan.steps.len(),
            from.of(&format!("plans.{name}"))
        ));
    }
    lines.push(format!(
        "nccl_lib = {}    # {}",
        cfg.nccl_lib.as_ref().map_or(
            "(unset: libnccl.so.2 on the library path)".to_string(),
            |p| format!("{:?}", p.display().to_string())
        ),
        from.of("nccl_lib")
    ));
    lines.extend(network(cfg, &from));
    lines.extend(expected_gpus(cfg, &from));
    lines
}

/// How many threshold rules apply, and how many of them the file adds.
fn thresholds(cfg: &WorkerConfig, file: Option<&str>) -> String {
    let admin_rules = cfg
        .text
        .parse::<toml::Table>()
        .ok()
        .and_then(|t| t.get("thresholds").and_then(|v| v.as_array()).map(Vec::len))
        .unwrap_or(0);
    format!(
        "thresholds = {} rules    # {admin_rules} from {}, then the built-in defaults (first match wins)",
        cfg.thresholds.len(),
        file.unwrap_or("no file")
    )
}

/// A selector's list, or "any" when empty.
fn list(v: &[String]) -> String {
    if v.is_empty() {
        "any".to_string()
    } else {
        v.join(",")
    }
}

fn network(cfg: &WorkerConfig, from: &Source) -> Vec<String> {
    cfg.network
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let env: Vec<String> = n.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!(
                "network[{i}] = {:?}: partitions {}, nodes {}, env {}    # {}",
                n.name,
                list(&n.partitions),
                list(&n.nodes),
                if env.is_empty() {
                    "none".into()
                } else {
                    env.join(" ")
                },
                from.of(&format!("network[{i}]"))
            )
        })
        .collect()
}

fn expected_gpus(cfg: &WorkerConfig, from: &Source) -> Vec<String> {
    cfg.expected_gpus
        .iter()
        .enumerate()
        .map(|(i, e)| {
            format!(
                "expected_gpus[{i}] = {} GPUs: partitions {}, nodes {}{}    # {}",
                e.count,
                list(&e.partitions),
                list(&e.nodes),
                if e.bus_ids.is_empty() {
                    String::new()
                } else {
                    format!(", at {}", e.bus_ids.join(","))
                },
                from.of(&format!("expected_gpus[{i}]"))
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
