//! The prolog's own config (`/etc/nccl-check/prolog.toml`): every key, its default (here, in
//! `Default for Config`, and nowhere else) and its validation. `prolog/prolog.toml` is the shipped
//! copy with every key at its default; a test keeps the two equal.
//!
//! Keys land where the admin means them: the shipped file ends with no table (the worker's
//! environment is the inline `env = { ... }`), so a line appended to it is a top-level key, and
//! a prolog key that ended up inside an `[env]` table anyway is an error naming file, line and
//! field, never a worker environment variable.

use crate::faults::limits::{AerLimits, IbLimits};
use nccl_check_contract::args::PlanName;
use nccl_check_host::config_file::{self, ConfigError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the config is read from when `--config` is not given. Absent = all defaults.
pub const DEFAULT_PATH: &str = "/etc/nccl-check/prolog.toml";

/// Which GPUs one prolog run checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuPolicy {
    /// The job's GPUs (`CUDA_VISIBLE_DEVICES` in the prolog's environment, physical indices); a
    /// job without GPUs is not checked. Never touches GPUs that other jobs may be using.
    Job,
    /// Every GPU of the node (exclusive nodes, or clusters without gres/gpu).
    All,
}

/// What a FAIL does to the job once the node is drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFail {
    /// Exit 1: slurmd requeues a batch job (held unless `nohold_on_prolog_fail`), kills srun/salloc.
    Requeue,
    /// Exit 0: the job runs on this node; no new job comes (the node is DRAINING).
    Run,
}

/// What an ERROR (a setup problem, not the hardware) does. The default is `run`: an ERROR is
/// the site's or nccl-check's own problem (worker or library missing, timeout), and failing
/// the job would make slurmd drain every node with "Prolog error" over one setup mistake; the
/// ERROR is made visible instead (stderr line, `gate.json`, `nccl_check_gate_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum OnError {
    /// Exit 0: log it, never drain, the job runs.
    #[serde(rename = "run")]
    Run,
    /// Exit 1: the prolog still drains nothing itself, but slurmd drains the node with reason
    /// "Prolog error" and requeues the job (Slurm's own behaviour for any non-zero prolog exit).
    /// (`"fail"`, its old name, is still read.)
    #[serde(rename = "fail-job", alias = "fail")]
    FailJob,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GateConfig {
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
    /// The only environment the worker gets besides a fixed PATH, `CUDA_DEVICE_ORDER` and
    /// `TMPDIR` (the run's private directory).
    pub env: BTreeMap<String, String>,
    /// Read the node's hardware faults (Xid/SXid, PCIe AER, IB/RoCE port counters) before the
    /// bandwidth check; a fault over its limit FAILs (drains) without running the worker.
    pub fault_checks: bool,
    /// Where `dev/kmsg`, `proc/` (also the busy-CPU scan's) and `sys/` are: `/`, or a fixture
    /// tree in tests.
    pub fault_root: PathBuf,
    /// The most each AER counter of a GPU or NIC may grow between checks.
    pub aer_limits: AerLimits,
    /// The most each IB/RoCE port error counter may grow between checks.
    pub ib_limits: IbLimits,
    /// Another process on a GPU being checked that Slurm says is of no job: `fail` (default:
    /// the node is not clean, drain with a `busy` reason) or `warn` (logged; the measurement
    /// decides, and a FAIL it blames on a busy node does not drain). Busy CPUs never drain.
    pub stray_processes: crate::stray::Policy,
}

/// Every key of the file, in the shipped file's order (`--check-config` prints them all).
pub const KEYS: [&str; 21] = [
    "worker",
    "worker_config",
    "plan",
    "budget_seconds",
    "gpus",
    "on_fail",
    "on_error",
    "auto_resume",
    "cache_seconds",
    "state_dir",
    "scontrol",
    "gpu_info_dir",
    "syslog_facility",
    "syslog_socket",
    "metrics_file",
    "fault_checks",
    "fault_root",
    "aer_limits",
    "ib_limits",
    "stray_processes",
    "env",
];

/// Environment variables the prolog sets for the worker itself.
const RESERVED_ENV: [&str; 1] = ["TMPDIR"];

impl Default for GateConfig {
    fn default() -> GateConfig {
        GateConfig {
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
            fault_checks: true,
            fault_root: PathBuf::from("/"),
            aer_limits: AerLimits::default(),
            ib_limits: IbLimits::default(),
            stray_processes: crate::stray::Policy::Fail,
        }
    }
}

/// The facilities `syslog_facility` accepts.
pub const FACILITIES: &[&str] = &[
    "none", "daemon", "user", "local0", "local1", "local2", "local3", "local4", "local5", "local6",
    "local7",
];

impl GateConfig {
    /// The fault pass's settings, with the real driver (NVML).
    pub fn fault_settings(&self) -> crate::faults::Settings {
        crate::faults::Settings {
            root: self.fault_root.clone(),
            gpu_info_dir: self.gpu_info_dir.clone(),
            aer: self.aer_limits,
            ib: self.ib_limits,
            driver: std::sync::Arc::new(crate::faults::nvml_driver::Nvml),
        }
    }

    /// Seconds passed to the worker's `--timeout`: the budget less a margin (a tenth, at least
    /// 2 s) so the worker's own watchdog reports before the group is killed.
    pub fn worker_timeout(&self) -> u64 {
        let margin = (self.budget_seconds / 10).max(2);
        self.budget_seconds.saturating_sub(margin).max(1)
    }

    /// `state_dir` with `%n` replaced by the node name, which must be a valid Slurm node name.
    pub fn state_dir_for(&self, node: &str) -> Result<PathBuf, String> {
        expand("state_dir", &self.state_dir, node)
    }

    /// `metrics_file` with `%n` replaced, or None when off.
    pub fn metrics_file_for(&self, node: &str) -> Result<Option<PathBuf>, String> {
        if self.metrics_file.is_empty() {
            return Ok(None);
        }
        expand("metrics_file", &self.metrics_file, node).map(Some)
    }
}

/// `template` with `%n` replaced by `node`, refused unless `node` is a valid Slurm node name:
/// the name comes from slurmd's environment (`SLURMD_NODENAME`) and must not lead a path out of
/// its directory (`../x`).
fn expand(key: &str, template: &str, node: &str) -> Result<PathBuf, String> {
    if template.contains("%n") {
        check_node_name(node).map_err(|e| format!("{key} '{template}': %n: {e}"))?;
    }
    Ok(PathBuf::from(template.replace("%n", node)))
}

/// Longest node name `%n` accepts (Linux host names are at most 64 bytes).
pub const MAX_NODE_NAME: usize = 64;

/// A Slurm node name as a path part: 1 to 64 letters, digits, `-`, `_` and `.`, not starting
/// with `.` or `-` (so never `..`, never a `/`).
pub fn check_node_name(node: &str) -> Result<(), String> {
    let ok = !node.is_empty()
        && node.len() <= MAX_NODE_NAME
        && !node.starts_with(['.', '-'])
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{}' is not a valid Slurm node name (1 to {MAX_NODE_NAME} letters, digits, '-', '_' or '.', not starting with '.' or '-')",
            node.escape_debug()
        ))
    }
}

/// Loads `path`, or the defaults when `path` is the default path and absent. An explicit
/// `--config` that does not exist is an error (a typo must not silently mean "defaults").
pub fn load(path: &Path, explicit: bool) -> Result<GateConfig, ConfigError> {
    if !explicit && !path.exists() {
        return Ok(GateConfig::default());
    }
    parse(path, &config_file::read(path)?)
}

/// Parses and validates the text of `path`.
pub fn parse(path: &Path, text: &str) -> Result<GateConfig, ConfigError> {
    let c: GateConfig = config_file::parse(path, text)?;
    let bad = |field: &str, msg: String| Err(config_file::invalid(path, text, field, msg));
    for (field, p) in [
        ("worker", &c.worker),
        ("worker_config", &c.worker_config),
        ("scontrol", &c.scontrol),
        ("gpu_info_dir", &c.gpu_info_dir),
        ("syslog_socket", &c.syslog_socket),
        ("fault_root", &c.fault_root),
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
        let name = !key.is_empty()
            && !key.starts_with(|ch: char| ch.is_ascii_digit())
            && key
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
        let why = if KEYS.contains(&key.as_str()) {
            format!(
                "{key:?} is a prolog setting, not a worker environment variable: it is \
                 inside the env table (a line after an [env] header?); move it above [env], \
                 or write the environment as env = {{ NAME = \"value\" }}"
            )
        } else if RESERVED_ENV.contains(&key.as_str()) {
            format!("{key} is set by the prolog (the run's private directory)")
        } else if !name {
            format!("{key:?} is not an environment variable name")
        } else {
            continue;
        };
        return bad(&format!("env.{key}"), why);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "/etc/nccl-check/prolog.toml";

    fn parse_str(text: &str) -> Result<GateConfig, ConfigError> {
        parse(Path::new(FILE), text)
    }

    const SHIPPED: &str = include_str!("../prolog.toml");

    /// The shipped file with every `#key = value` line uncommented.
    fn uncommented() -> String {
        SHIPPED
            .lines()
            .map(|l| match l.strip_prefix('#') {
                Some(k) if KEYS.iter().any(|key| k.starts_with(&format!("{key} = "))) => k,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_shipped_file_shows_every_key_at_its_default_and_ends_with_no_table() {
        let c = parse(Path::new("prolog/prolog.toml"), SHIPPED).expect("shipped file parses");
        assert_eq!(c, GateConfig::default());
        let all = uncommented();
        for key in KEYS {
            assert!(all.contains(&format!("\n{key} = ")), "{key} not shown");
        }
        assert_eq!(
            parse_str(&all).expect("uncommented parses"),
            GateConfig::default()
        );
        assert!(
            !SHIPPED.lines().any(|l| l.trim_start().starts_with('[')),
            "a [table] in the shipped file would catch appended lines"
        );
    }

    /// Regression: `printf 'on_fail = "drain"\n' >> prolog.toml` became a worker environment
    /// variable, and `budget_seconds = 2` an "invalid type" inside env.
    #[test]
    fn a_line_appended_to_the_shipped_file_is_a_prolog_setting() {
        let c = parse_str(&format!("{SHIPPED}on_fail = \"run\"\n")).expect("valid");
        assert_eq!(c.on_fail, OnFail::Run);
        assert!(c.env.is_empty());
        let last = SHIPPED.lines().count() + 1;
        let e = parse_str(&format!("{SHIPPED}on_fail = \"drain\"\n")).unwrap_err();
        assert_eq!((e.field.as_str(), e.line), ("on_fail", Some(last)), "{e}");
        let e = parse_str(&format!("{SHIPPED}budget_seconds = 2\n")).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.line),
            ("budget_seconds", Some(last)),
            "{e}"
        );
        // Edited in place and appended: a key set twice names its line.
        let e = parse_str(&format!("{}\non_fail = \"run\"\n", uncommented())).unwrap_err();
        assert!(e.line.is_some() && e.message.contains("duplicate"), "{e}");
    }

    #[test]
    fn a_prolog_key_inside_an_env_table_is_an_error_not_a_variable() {
        let text = "plan = \"quick\"\n[env]\nNCCL_IB_HCA = \"mlx5\"\non_fail = \"run\"\n";
        let e = parse_str(text).unwrap_err();
        assert_eq!((e.field.as_str(), e.line), ("env.on_fail", Some(4)), "{e}");
        assert!(e.message.contains("prolog setting"), "{e}");
        let e = parse_str("env = { TMPDIR = \"/tmp\" }\n").unwrap_err();
        assert_eq!(e.field, "env.TMPDIR", "{e}");
    }

    #[test]
    fn on_error_is_run_or_fail_job_and_the_old_name_still_reads() {
        assert_eq!(GateConfig::default().on_error, OnError::Run);
        for v in ["fail-job", "fail"] {
            let c = parse_str(&format!("on_error = \"{v}\"\n")).expect("valid");
            assert_eq!(c.on_error, OnError::FailJob);
        }
        assert_eq!(
            parse_str("on_error = \"drain\"\n").unwrap_err().field,
            "on_error"
        );
    }

    #[test]
    fn an_empty_file_means_all_defaults() {
        assert_eq!(
            parse_str("").expect("empty is valid"),
            GateConfig::default()
        );
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
        let c = parse_str("env = { NCCL_IB_HCA = \"mlx5\" }\n").expect("valid");
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
        let mut c = GateConfig::default();
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
            c.state_dir_for("n7").unwrap(),
            PathBuf::from("/var/lib/nccl-check/n7")
        );
        assert_eq!(
            c.metrics_file_for("n7").unwrap(),
            Some(PathBuf::from("/m/n7.prom"))
        );
        assert_eq!(GateConfig::default().metrics_file_for("n7").unwrap(), None);
        // SLURMD_NODENAME=../x must not lead out of the state root.
        for bad in [
            "../x",
            "..",
            "a/b",
            "",
            ".hidden",
            "-n",
            "n\n1",
            &"n".repeat(65),
        ] {
            let e = c.state_dir_for(bad).unwrap_err();
            assert!(e.contains("is not a valid Slurm node name"), "{bad:?}: {e}");
            assert!(c.metrics_file_for(bad).is_err(), "{bad:?}");
        }
        for good in ["n7", "gpu-a100_01", "node.rack2", &"n".repeat(64)] {
            assert!(c.state_dir_for(good).is_ok(), "{good:?}");
        }
        // Without %n the node name is not used, so not checked.
        assert!(GateConfig::default().state_dir_for("../x").is_ok());
    }

    #[test]
    fn an_absent_default_file_means_defaults_but_an_explicit_one_is_an_error() {
        let p = Path::new("/nonexistent/prolog.toml");
        assert_eq!(load(p, false).expect("defaults"), GateConfig::default());
        let e = load(p, true).unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
    }
}
