//! Site policy from the plugin's plugstack.conf arguments: one strict `key=value` parser, the
//! defaults in one place ([`PluginConfig::default`]), unknown keys rejected by name.
//!
//! ```text
//! required /usr/lib/x86_64-linux-gnu/slurm/nccl_check.so worker=/usr/libexec/nccl-check/nccl-check timeout=120
//! ```
//! Keys (each at most once):
//! - `worker=PATH`: absolute path of the `nccl-check` worker binary, run once per task.
//! - `timeout=SECS`: 1..=3600. The worker gets `--timeout SECS`; the plugin kills the worker's
//!   whole process group [`KILL_GRACE_SECS`] seconds later if it is still running.
//! - `port_range=LO-HI`: TCP ports for the worker's rendezvous on the step's first node,
//!   1024 <= LO <= HI <= 65535, default 29501-29999. The worker draws 8 candidate ports per step
//!   from the step's secret (`nccl_check_contract::slurm_rendezvous::secret_candidates`); PyTorch's
//!   29500 is never chosen.
//! - `default_mode=quick|full|sharp|warn|off|plan=NAME`: the mode of a bare `--nccl-check` (no
//!   `=mode`); `sharp` needs `allow_sharp=1`; `plan=NAME` runs the worker config's plan NAME.
//! - `allow_sharp=0|1`: 0 forces `NCCL_COLLNET_ENABLE=0` in the worker's environment, so a check
//!   never takes SHARP aggregation resources, and refuses `--nccl-check=sharp` before allocation;
//!   1 allows `--nccl-check=sharp` (the worker gets `--expect-collnet`) and leaves the job's own
//!   NCCL/SHARP settings alone in the other modes.
//! - `allow_container=0|1`: 0 skips the check (with a note to the user) in steps whose tasks run
//!   inside a container (pyxis/enroot), e.g. where the worker is not mounted into containers.
//! - `nccl_lib=PATH`: the site's libnccl.so.2 (absolute), given to the worker as
//!   `NCCL_CHECK_NCCL_LIB` unless the user's environment sets that variable (the user's wins).
//! - `verbose=0|1`: 1 prints the per-node result table for every check (as `,verbose` does).
//! - `report_dir=PATH`: keep every rank's JSON report there (absolute; the user must be able to
//!   write it), as `$NCCL_CHECK_REPORT_DIR` does for one user's jobs (the user's wins).
//! - `batch_check=0|1`: 1 (default) checks the allocation in `sbatch --nccl-check` jobs before the
//!   batch script's first command (one worker per node through `srun`), whether or not the
//!   script calls srun itself.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::mode::Mode;
use nccl_check_contract::slurm_rendezvous::PortRange;

/// Seconds between the worker's own `--timeout` and the plugin's SIGKILL of its process group.
pub const KILL_GRACE_SECS: u64 = 5;
const MAX_TIMEOUT_SECS: u64 = 3600;
/// What `default_mode=` takes.
const MODES: &str = "default_mode must be one of quick, full, sharp, warn, off, plan=NAME";
/// Every argument the plugin line takes.
pub const KEYS: [&str; 10] = [
    "worker",
    "timeout",
    "port_range",
    "default_mode",
    "allow_sharp",
    "allow_container",
    "nccl_lib",
    "verbose",
    "report_dir",
    "batch_check",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginConfig {
    pub worker: PathBuf,
    pub timeout: Duration,
    pub ports: PortRange,
    pub default_mode: Mode,
    pub allow_sharp: bool,
    pub allow_container: bool,
    pub nccl_lib: Option<PathBuf>,
    pub verbose: bool,
    pub report_dir: Option<PathBuf>,
    pub batch_check: bool,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            worker: PathBuf::from("/usr/libexec/nccl-check/nccl-check"),
            timeout: Duration::from_secs(120),
            ports: PortRange::DEFAULT,
            default_mode: Mode::Quick,
            allow_sharp: false,
            allow_container: true,
            nccl_lib: None,
            verbose: false,
            report_dir: None,
            batch_check: true,
        }
    }
}

impl PluginConfig {
    /// The worker's hard deadline: its `--timeout` plus the grace period.
    pub fn deadline(&self) -> Duration {
        self.timeout + Duration::from_secs(KILL_GRACE_SECS)
    }

    /// Every argument with its effective value, as a plugin line would say it.
    pub fn describe(&self) -> String {
        let path = |p: &Option<PathBuf>| {
            p.as_ref()
                .map_or("(unset)".to_string(), |p| p.display().to_string())
        };
        format!(
            "worker={} timeout={} port_range={}-{} default_mode={} allow_sharp={} \
             allow_container={} nccl_lib={} verbose={} report_dir={} batch_check={}",
            self.worker.display(),
            self.timeout.as_secs(),
            self.ports.lo(),
            self.ports.hi(),
            self.default_mode,
            u8::from(self.allow_sharp),
            u8::from(self.allow_container),
            path(&self.nccl_lib),
            u8::from(self.verbose),
            path(&self.report_dir),
            u8::from(self.batch_check)
        )
    }

    /// Parses the plugstack.conf arguments (`spank.plugin_argv()`).
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<PluginConfig, ConfigError> {
        let mut config = PluginConfig::default();
        let mut seen: Vec<&str> = Vec::new();
        for arg in args {
            let arg = arg.as_ref();
            let err = |reason: String| ConfigError {
                arg: arg.to_string(),
                reason,
            };
            let Some((key, value)) = arg.split_once('=') else {
                return Err(err(format!(
                    "expected key=value (arguments: {})",
                    KEYS.join(", ")
                )));
            };
            if seen.contains(&key) {
                return Err(err(format!("'{key}' given twice")));
            }
            let flag = || match value {
                "0" => Ok(false),
                "1" => Ok(true),
                _ => Err(err(format!("{key} must be 0 or 1"))),
            };
            let path = || {
                Some(PathBuf::from(value))
                    .filter(|p| p.is_absolute())
                    .ok_or_else(|| err(format!("{key} must be an absolute path")))
            };
            match key {
                "timeout" => {
                    let secs = value
                        .parse::<u64>()
                        .ok()
                        .filter(|s| (1..=MAX_TIMEOUT_SECS).contains(s))
                        .ok_or_else(|| {
                            err(format!(
                                "timeout must be whole seconds, 1 to {MAX_TIMEOUT_SECS}"
                            ))
                        })?;
                    config.timeout = Duration::from_secs(secs);
                }
                "port_range" => {
                    config.ports = PortRange::parse(value).map_err(|e| err(e.to_string()))?
                }
                "default_mode" => {
                    config.default_mode = Mode::parse(value).map_err(|_| err(MODES.into()))?
                }
                "allow_sharp" => config.allow_sharp = flag()?,
                "allow_container" => config.allow_container = flag()?,
                "verbose" => config.verbose = flag()?,
                "batch_check" => config.batch_check = flag()?,
                "worker" => config.worker = path()?,
                "nccl_lib" => config.nccl_lib = Some(path()?),
                "report_dir" => config.report_dir = Some(path()?),
                _ => return Err(err(unknown(key))),
            }
            seen.push(key);
        }
        if config.default_mode == Mode::Sharp && !config.allow_sharp {
            return Err(ConfigError {
                arg: String::from("default_mode=sharp"),
                reason: "default_mode=sharp needs allow_sharp=1".into(),
            });
        }
        Ok(config)
    }
}

/// An unknown argument, with the one it most likely meant (a typo: `timout`) or else the list.
fn unknown(key: &str) -> String {
    let near = KEYS
        .iter()
        .map(|k| (strsim::damerau_levenshtein(key, k), *k))
        .filter(|(d, _)| *d <= 2 && *d < key.len())
        .min();
    match near {
        Some((_, k)) => format!("unknown argument '{key}' (did you mean '{k}'?)"),
        None => format!("unknown argument '{key}' (arguments: {})", KEYS.join(", ")),
    }
}

/// The plugstack arguments as `slurm_spank_init` read them: a rejected one is kept as its error
/// and reported where a check is asked for, so a broken line never stops a plain job.
pub type LoadedConfig = Result<PluginConfig, ConfigError>;

/// One rejected plugstack.conf argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub arg: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "plugstack.conf argument '{}': {}",
            self.arg.escape_debug(),
            self.reason
        )
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_arguments_give_the_documented_defaults() {
        let c = PluginConfig::parse::<&str>(&[]).expect("defaults");
        assert_eq!(c, PluginConfig::default());
        assert_eq!((c.ports.lo(), c.ports.hi()), (29501, 29999));
        assert_eq!(c.default_mode, Mode::Quick);
        assert_eq!(c.deadline(), Duration::from_secs(125));
    }

    #[test]
    fn every_key_is_parsed() {
        let c = PluginConfig::parse(&[
            "worker=/opt/nc/nccl-check",
            "timeout=30",
            "port_range=40000-40010",
            "default_mode=plan=site_nvlink",
            "allow_sharp=1",
            "allow_container=0",
            "nccl_lib=/opt/nccl/lib/libnccl.so.2",
            "verbose=1",
            "report_dir=/var/tmp/nccl-reports",
            "batch_check=0",
        ])
        .expect("valid");
        assert_eq!(
            c.nccl_lib.as_deref(),
            Some(std::path::Path::new("/opt/nccl/lib/libnccl.so.2"))
        );
        assert!(c.verbose && !c.batch_check);
        assert_eq!(
            c.report_dir.as_deref(),
            Some(std::path::Path::new("/var/tmp/nccl-reports"))
        );
        assert_eq!(c.worker, PathBuf::from("/opt/nc/nccl-check"));
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert_eq!((c.ports.lo(), c.ports.hi()), (40000, 40010));
        assert_eq!(
            c.default_mode,
            Mode::parse("plan=site_nvlink").expect("valid")
        );
        assert!(c.allow_sharp);
        assert!(!c.allow_container);
    }

    #[test]
    fn unknown_keys_are_rejected_by_name() {
        let err = PluginConfig::parse(&["treshold=3"]).expect_err("unknown");
        assert_eq!(err.arg, "treshold=3");
        assert!(
            err.to_string()
                .contains("unknown argument 'treshold' (arguments: worker, timeout"),
            "{err}"
        );
    }

    /// A typo is named with what it most likely meant.
    #[test]
    fn a_typo_is_named_with_the_argument_it_meant() {
        let err = PluginConfig::parse(&["timout=120"]).expect_err("typo");
        assert_eq!(
            err.reason,
            "unknown argument 'timout' (did you mean 'timeout'?)"
        );
        let err = PluginConfig::parse(&["nccllib=/x"]).expect_err("typo");
        assert!(err.reason.contains("did you mean 'nccl_lib'"), "{err}");
        let err = PluginConfig::parse(&["verbos=1"]).expect_err("typo");
        assert!(err.reason.contains("did you mean 'verbose'"), "{err}");
    }

    #[test]
    fn malformed_values_are_rejected() {
        for bad in [
            "worker=relative/path",
            "timeout=0",
            "timeout=3601",
            "timeout=1.5",
            "port_range=80-90",
            "port_range=30000-29000",
            "port_range=30000",
            "port_range=30000-70000",
            "port_range=29500-29500",
            "default_mode=fast",
            "default_mode=plan=Fast",
            "allow_sharp=yes",
            "allow_container=true",
            "nccl_lib=libnccl.so.2",
            "report_dir=reports",
            "verbose=yes",
            "batch_check=2",
            "novalue",
        ] {
            assert!(PluginConfig::parse(&[bad]).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn default_mode_sharp_needs_allow_sharp() {
        let err = PluginConfig::parse(&["default_mode=sharp"]).expect_err("sharp without allow");
        assert!(err.to_string().contains("needs allow_sharp=1"), "{err}");
        let c = PluginConfig::parse(&["allow_sharp=1", "default_mode=sharp"]).expect("allowed");
        assert_eq!(c.default_mode, Mode::Sharp);
    }

    /// `nccl-check-plugstack --check` prints what is in force; it parses back to the same.
    #[test]
    fn the_description_names_every_argument_and_parses_back() {
        let c = PluginConfig::parse(&["timeout=30", "nccl_lib=/opt/libnccl.so.2", "verbose=1"])
            .expect("valid");
        let d = c.describe();
        for k in KEYS {
            assert!(d.contains(&format!("{k}=")), "{k}: {d}");
        }
        let args: Vec<&str> = d.split(' ').filter(|a| !a.ends_with("=(unset)")).collect();
        assert_eq!(PluginConfig::parse(&args).expect("parses back"), c);
    }

    #[test]
    fn duplicate_keys_are_rejected() {
        let err = PluginConfig::parse(&["timeout=5", "timeout=6"]).expect_err("dup");
        assert!(err.to_string().contains("given twice"));
    }
}
