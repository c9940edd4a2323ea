//! The prolog's own config (`/etc/nccl-check/prolog.toml`): every key, its default (here, in
//! `Default for Config`, and nowhere else) and its validation. `prolog/prolog.toml` is the shipped
//! copy with every key at its default; a test keeps the two equal.

use bench_core::config::file::{self, ConfigError};
use bench_core::contract::PlanName;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the config is read from when `--config` is not given. Absent = all defaults.
pub const DEFAULT_PATH: &str = "/etc/nccl-check/prolog.toml";

/// Which GPUs one prolog run checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuPolicy {
    /// The job's GPUs (`CUDA_VISIBLE_DEVICES` in the prolog's environment, physical indices); a
    /// job without GPUs is not checked. Never touches GPUs that other jobs may be using.
    Job,
    /// Every GPU of the node (exclusive nodes, or clusters without gres/gpu).
    All,
}

/// What a FAIL does to the job once the node is drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFail {
    /// Exit 1: slurmd requeues a batch job (held unless `nohold_on_prolog_fail`), kills srun/salloc.
    Requeue,
    /// Exit 0: the job runs on this node; no new job comes (the node is DRAINING).
    Run,
}

/// What an ERROR (a setup problem, not the hardware) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Exit 0: log it, never drain, the job runs.
    Run,
    /// Exit 1: the prolog still drains nothing itself, but slurmd drains the node with reason
    /// "Prolog error" and requeues the job (Slurm's own behaviour for any non-zero prolog exit).
    Fail,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The worker binary (absolute).
    pub worker: PathBuf,
    /// The worker's config (thresholds); passed as `--config` only when the file exists.
    pub worker_config: PathBuf,
    /// The worker's plan: `quick`, `full`, or any plan of the worker's config (the worker says
    /// which plans it has when it does not know this one).
    pub plan: PlanName,
    /// Seconds from worker start until its process group is killed. The worker gets
    /// `--timeout` a little less (see `worker_timeout`). Keep well under PrologEpilogTimeout.
    pub budget_seconds: u64,
    pub gpus: GpuPolicy,
    pub on_fail: OnFail,
    pub on_error: OnError,
    /// Resume a node drained by nccl-check (reason starts with `nccl-check:`) once every GPU of
    /// the node passes again. Drains by anyone else are never touched.
    pub auto_resume: bool,
    /// A PASS of the same GPUs within this many seconds skips the measurement; 0 = no cache.
    pub cache_seconds: u64,
    /// Reports, the validity cache, the drain marker and lock. `%n` = the Slurm node name.
    pub state_dir: String,
    /// `scontrol` (absolute; slurmd gives the prolog no PATH).
    pub scontrol: PathBuf,
    /// The NVIDIA driver's per-GPU directories (`<pci>/information`): the cheap GPU identity
    /// used by the cache and to map Slurm's GPU indices.
    pub gpu_info_dir: PathBuf,
    /// Syslog facility (`daemon`, `user`, `local0`..`local7`), or `none`.
    pub syslog_facility: String,
    /// The syslog daemon's socket (`/dev/log`; journald's syslog socket is linked there).
    pub syslog_socket: PathBuf,
    /// Prometheus textfile for node_exporter's textfile collector; empty = off. `%n` = node name.
    pub metrics_file: String,
    /// The only environment the worker gets besides a fixed PATH and `CUDA_DEVICE_ORDER`.
    pub env: BTreeMap<String, String>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            worker: PathBuf::from("/usr/bin/nccl-check"),
            worker_config: PathBuf::from("/etc/nccl-check/nccl-check.toml"),
            plan: PlanName::quick(),
            budget_seconds: 30,
            gpus: GpuPolicy::Job,
            on_fail: OnFail::Requeue,
            on_error: OnError::Run,
            auto_resume: false,
            cache_seconds: 600,
            state_dir: "/var/lib/nccl-check".into(),
            scontrol: PathBuf::from("/usr/bin/scontrol"),
            gpu_info_dir: PathBuf::from("/proc/driver/nvidia/gpus"),
            syslog_facility: "daemon".into(),
            syslog_socket: PathBuf::from("/dev/log"),
            metrics_file: String::new(),
            env: BTreeMap::new(),
        }
    }
}

/// The facilities `syslog_facility` accepts.
pub const FACILITIES: &[&str] = &[
    "none", "daemon", "user", "local0", "local1", "local2", "local3", "local4", "local5", "local6",
    "local7",
];

impl Config {
    /// Seconds passed to the worker's `--timeout`: the budget less a margin (a tenth, at least
    /// 2 s) so the worker's own watchdog reports before the group is killed.
    pub fn worker_timeout(&self) -> u64 {
        let margin = (self.budget_seconds / 10).max(2);
        self.budget_seconds.saturating_sub(margin).max(1)
    }

    /// `state_dir` with `%n` replaced by the node name.
    pub fn state_dir_for(&self, node: &str) -> PathBuf {
        PathBuf::from(self.state_dir.replace("%n", node))
    }

    /// `metrics_file` with `%n` replaced, or None when off.
    pub fn metrics_file_for(&self, node: &str) -> Option<PathBuf> {
        (!self.metrics_file.is_empty())
            .then(|| PathBuf::from(self.metrics_file.replace("%n", node)))
    }
}

/// Loads `path`, or the defaults when `path` is the default path and absent. An explicit
/// `--config` that does not exist is an error (a typo must not silently mean "defaults").
pub fn load(path: &Path, explicit: bool) -> Result<Config, ConfigError> {
    if !explicit && !path.exists() {
        return Ok(Config::default());
    }
    parse(path, &file::read(path)?)
}

/// Parses and validates the text of `path`.
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let c: Config = file::parse(path, text)?;
    let bad = |field: &str, msg: String| Err(file::invalid(path, text, field, msg));
    for (field, p) in [
        ("worker", &c.worker),
        ("worker_config", &c.worker_config),
        ("scontrol", &c.scontrol),
        ("gpu_info_dir", &c.gpu_info_dir),
        ("syslog_socket", &c.syslog_socket),
    ] {
        if !p.is_absolute() {
            return bad(
                field,
                format!(
                    "must be an absolute path (slurmd gives the prolog no PATH), got {:?}",
                    p.display().to_string()
                ),
            );
        }
    }
    for (field, p) in [
        ("state_dir", &c.state_dir),
        ("metrics_file", &c.metrics_file),
    ] {
        if !p.is_empty() && !p.starts_with('/') {
            return bad(field, format!("must be an absolute path, got {p:?}"));
        }
    }
    if c.state_dir.is_empty() {
        return bad("state_dir", "must not be empty".into());
    }
    if !(5..=3600).contains(&c.budget_seconds) {
        return bad(
            "budget_seconds",
            format!("must be 5..=3600, got {}", c.budget_seconds),
        );
    }
    if !FACILITIES.contains(&c.syslog_facility.as_str()) {
        return bad(
            "syslog_facility",
            format!(
                "must be one of {}, got {:?}",
                FACILITIES.join(", "),
                c.syslog_facility
            ),
        );
    }
    for key in c.env.keys() {
        let ok = !key.is_empty()
            && !key.starts_with(|ch: char| ch.is_ascii_digit())
            && key
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
        if !ok {
            return bad(
                &format!("env.{key}"),
                format!("{key:?} is not an environment variable name"),
            );
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "/etc/nccl-check/prolog.toml";

    fn parse_str(text: &str) -> Result<Config, ConfigError> {
        parse(Path::new(FILE), text)
    }

    #[test]
    fn the_shipped_file_holds_exactly_the_defaults() {
        let text = include_str!("../prolog.toml");
        let c = parse(Path::new("prolog/prolog.toml"), text).expect("shipped file parses");
        assert_eq!(c, Config::default());
    }

    #[test]
    fn an_empty_file_means_all_defaults() {
        assert_eq!(parse_str("").expect("empty is valid"), Config::default());
    }

    #[test]
    fn an_unknown_key_is_rejected_with_file_line_and_name() {
        let e = parse_str("plan = \"quick\"\nbudget_secs = 20\n").unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("/etc/nccl-check/prolog.toml:2: "), "{s}");
        assert!(s.contains("budget_secs"), "{s}");
    }

    #[test]
    fn a_wrong_type_names_the_field_and_line() {
        let e = parse_str("\n\ncache_seconds = \"ten\"\n").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert_eq!(e.field, "cache_seconds", "{e}");
    }

    #[test]
    fn a_bad_enum_value_names_the_field() {
        let e = parse_str("gpus = \"some\"\n").unwrap_err();
        assert_eq!(e.field, "gpus", "{e}");
        assert_eq!(e.line, Some(1), "{e}");
    }

    #[test]
    fn relative_paths_are_rejected_because_the_prolog_has_no_path() {
        let e = parse_str("budget_seconds = 20\nworker = \"nccl-check\"\n").unwrap_err();
        assert_eq!(e.field, "worker");
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("absolute"), "{e}");
    }

    #[test]
    fn budget_out_of_range_is_rejected() {
        let e = parse_str("budget_seconds = 1\n").unwrap_err();
        assert_eq!(e.field, "budget_seconds");
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn env_keys_must_be_variable_names() {
        let e = parse_str("[env]\nNCCL_IB_HCA = \"mlx5\"\n\"BAD-NAME\" = \"x\"\n").unwrap_err();
        assert_eq!(e.field, "env.BAD-NAME", "{e}");
        let c = parse_str("[env]\nNCCL_IB_HCA = \"mlx5\"\n").expect("valid");
        assert_eq!(c.env["NCCL_IB_HCA"], "mlx5");
    }

    #[test]
    fn any_plan_name_passes_through_and_a_malformed_one_names_the_line() {
        let c = parse_str("plan = \"site_nvlink\"\n").expect("valid");
        assert_eq!(c.plan.as_str(), "site_nvlink");
        let e = parse_str("\nplan = \"Quick plan\"\n").unwrap_err();
        assert_eq!((e.field.as_str(), e.line), ("plan", Some(2)), "{e}");
        assert!(e.message.contains("invalid plan name"), "{e}");
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let e = parse_str("plan = \"quick\"\n[env\n").unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
    }

    #[test]
    fn worker_timeout_leaves_a_margin_before_the_kill() {
        let mut c = Config::default();
        assert_eq!(c.worker_timeout(), 27);
        c.budget_seconds = 5;
        assert_eq!(c.worker_timeout(), 3);
        c.budget_seconds = 120;
        assert_eq!(c.worker_timeout(), 108);
    }

    #[test]
    fn percent_n_becomes_the_node_name() {
        let c =
            parse_str("state_dir = \"/var/lib/nccl-check/%n\"\nmetrics_file = \"/m/%n.prom\"\n")
                .expect("valid");
        assert_eq!(
            c.state_dir_for("n7"),
            PathBuf::from("/var/lib/nccl-check/n7")
        );
        assert_eq!(c.metrics_file_for("n7"), Some(PathBuf::from("/m/n7.prom")));
        assert_eq!(Config::default().metrics_file_for("n7"), None);
    }

    #[test]
    fn an_absent_default_file_means_defaults_but_an_explicit_one_is_an_error() {
        let p = Path::new("/nonexistent/prolog.toml");
        assert_eq!(load(p, false).expect("defaults"), Config::default());
        let e = load(p, true).unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
    }
}
