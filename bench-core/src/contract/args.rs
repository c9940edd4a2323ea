//! The worker's command line as callers build it: [`WorkerArgs`], typed, turned into argv by
//! [`WorkerArgs::to_args`] and nowhere else. A test below runs generated command lines through
//! the worker's own parser (`crate::options::parse`) and checks that every field comes back.
//!
//! Plans are passed through by name ([`PlanName`]): the caller checks the syntax, the worker
//! checks that its config defines the plan (and lists the plans when it does not).

use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

/// Longest plan name a caller may ask for.
pub const MAX_PLAN_NAME: usize = 64;

/// A plan name as callers may pass it: 1 to [`MAX_PLAN_NAME`] characters of `a-z`, `0-9`, `_`
/// and `-`, starting with a letter or digit (so it can never read as an option). In config
/// files it is a string checked the same way.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PlanName(String);

impl TryFrom<String> for PlanName {
    type Error = PlanNameError;
    fn try_from(s: String) -> Result<PlanName, PlanNameError> {
        PlanName::new(&s)
    }
}

impl From<PlanName> for String {
    fn from(p: PlanName) -> String {
        p.0
    }
}

impl PlanName {
    pub fn new(name: &str) -> Result<PlanName, PlanNameError> {
        let ok = (1..=MAX_PLAN_NAME).contains(&name.len())
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if ok {
            Ok(PlanName(name.to_string()))
        } else {
            Err(PlanNameError {
                name: name.to_string(),
            })
        }
    }

    /// The built-in short plan.
    pub fn quick() -> PlanName {
        PlanName("quick".into())
    }

    /// The built-in long plan.
    pub fn full() -> PlanName {
        PlanName("full".into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PlanName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A plan name that breaks the syntax of [`PlanName`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanNameError {
    pub name: String,
}

impl fmt::Display for PlanNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid plan name '{}': 1 to {MAX_PLAN_NAME} characters of a-z, 0-9, _ and -, \
             starting with a letter or digit",
            self.name.escape_debug()
        )
    }
}

impl std::error::Error for PlanNameError {}

/// One run of the worker, as a caller asks for it. Fields left `None`/`false` are not passed,
/// so the worker's own defaults (and Slurm's environment) apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerArgs {
    /// `--plan`: a plan of the worker's config.
    pub plan: PlanName,
    /// `--json`: where the worker writes its report.
    pub json: Option<PathBuf>,
    /// `--timeout`, whole seconds (at least 1).
    pub timeout_s: u64,
    /// `--quiet`: the verdict line only, no table.
    pub quiet: bool,
    /// `--config`: the worker's config file.
    pub config: Option<PathBuf>,
    /// `--gpus`: device indices; `None` = every visible GPU.
    pub gpus: Option<Vec<usize>>,
    /// `--rank` and `--world`: this process among the processes of one check.
    pub rank: Option<u32>,
    pub world: Option<u32>,
    /// `--rendezvous HOST:PORT` where rank 0 listens; `None` under Slurm lets the worker derive
    /// host, candidate ports and coordinator from the task's environment.
    pub rendezvous: Option<String>,
    /// `--port-range LO-HI`: the ports the worker derives its candidates from (Slurm only).
    pub port_range: Option<crate::slurm_rendezvous::PortRange>,
    /// `--progress`: a line on stderr every few seconds (phase, elapsed, budget).
    pub progress: bool,
    /// `--expect-collnet`: turn CollNet (SHARP) on and FAIL when it did not carry the collectives.
    pub expect_collnet: bool,
}

impl WorkerArgs {
    /// The plan with a timeout and nothing else.
    pub fn new(plan: PlanName, timeout_s: u64) -> WorkerArgs {
        WorkerArgs {
            plan,
            json: None,
            timeout_s,
            quiet: false,
            config: None,
            gpus: None,
            rank: None,
            world: None,
            rendezvous: None,
            port_range: None,
            progress: false,
            expect_collnet: false,
        }
    }

    /// The argv after the program name, in one fixed order (logs and the suites show it).
    pub fn to_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec!["--plan".into(), self.plan.as_str().into()];
        if let Some(j) = &self.json {
            a.extend(["--json".into(), j.clone().into_os_string()]);
        }
        a.extend(["--timeout".into(), self.timeout_s.max(1).to_string().into()]);
        if self.quiet {
            a.push("--quiet".into());
        }
        if let Some(c) = &self.config {
            a.extend(["--config".into(), c.clone().into_os_string()]);
        }
        if let Some(g) = &self.gpus {
            let list: Vec<String> = g.iter().map(|i| i.to_string()).collect();
            a.extend(["--gpus".into(), list.join(",").into()]);
        }
        if let Some(r) = self.rank {
            a.extend(["--rank".into(), r.to_string().into()]);
        }
        if let Some(w) = self.world {
            a.extend(["--world".into(), w.to_string().into()]);
        }
        if let Some(r) = &self.rendezvous {
            a.extend(["--rendezvous".into(), r.into()]);
        }
        if let Some(p) = &self.port_range {
            a.extend(["--port-range".into(), p.to_string().into()]);
        }
        if self.progress {
            a.push("--progress".into());
        }
        if self.expect_collnet {
            a.push("--expect-collnet".into());
        }
        a
    }

    /// The argv as one line, for logs.
    pub fn display(&self) -> String {
        self.to_args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_names_are_lowercase_words_that_cannot_read_as_options() {
        for good in [
            "quick",
            "full",
            "nvlink_only",
            "ib-2nodes",
            "0day",
            &"x".repeat(64),
        ] {
            assert_eq!(
                PlanName::new(good).map(|p| p.to_string()),
                Ok(good.to_string())
            );
        }
        for bad in [
            "",
            "-x",
            "_x",
            "Quick",
            "a b",
            "a=b",
            "a/b",
            "ü",
            &"x".repeat(65),
        ] {
            let e = PlanName::new(bad).expect_err(bad);
            assert!(e.to_string().contains("invalid plan name"), "{e}");
        }
    }

    #[test]
    fn the_prolog_order_is_fixed_and_unset_fields_are_not_passed() {
        let mut a = WorkerArgs::new(PlanName::quick(), 8);
        assert_eq!(a.display(), "--plan quick --timeout 8");
        a.json = Some("/s/report.json".into());
        a.quiet = true;
        a.config = Some("/etc/nccl-check/nccl-check.toml".into());
        a.gpus = Some(vec![1, 3]);
        assert_eq!(
            a.display(),
            "--plan quick --json /s/report.json --timeout 8 --quiet \
             --config /etc/nccl-check/nccl-check.toml --gpus 1,3"
        );
        a.timeout_s = 0;
        assert!(a.display().contains("--timeout 1 "), "{}", a.display());
        a.port_range = Some(crate::slurm_rendezvous::PortRange::new(40000, 40010).expect("ok"));
        a.progress = true;
        assert!(
            a.display()
                .ends_with("--gpus 1,3 --port-range 40000-40010 --progress"),
            "{}",
            a.display()
        );
    }
}

/// Generated command lines through the worker's real parser.
#[cfg(all(test, feature = "gpu"))]
mod round_trip {
    use super::*;
    use crate::options::{parse, Options, ParseExit};

    fn parse_args(args: &WorkerArgs) -> Options {
        let mut argv = vec!["nccl-check".to_string()];
        argv.extend(
            args.to_args()
                .into_iter()
                .map(|a| a.into_string().expect("utf-8")),
        );
        // No environment but the shared secret a multi-process check needs outside Slurm:
        // everything else must come from the command line.
        let env = |k: &str| (k == "NCCL_CHECK_SECRET").then(|| "0123456789abcdef0123".to_string());
        match parse(argv, &env) {
            Ok(o) => o,
            Err(ParseExit::Usage(e) | ParseExit::Info(e)) => panic!("{args:?}: {e}"),
        }
    }

    #[test]
    fn every_field_survives_the_workers_parser() {
        let dir = std::env::temp_dir().join(format!("nccl-check-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let config = dir.join("site.toml");
        // A plan only this file defines: it parses only if --config reached the worker.
        std::fs::write(
            &config,
            "[plans.site_nvlink-2]\nsteps = [{ collective = \"sendrecv\", bytes = \"1M\" }]\n",
        )
        .expect("write config");
        for bits in 0u32..64 {
            let on = |b: u32| bits & (1 << b) != 0;
            let mut a = WorkerArgs::new(
                if on(0) {
                    PlanName::new("site_nvlink-2").expect("valid")
                } else {
                    PlanName::full()
                },
                7 + bits as u64,
            );
            if on(0) {
                a.config = Some(config.clone());
            }
            if on(1) {
                a.json = Some(dir.join(format!("r{bits}.json")));
            }
            a.quiet = on(2);
            if on(3) {
                a.gpus = Some(vec![3, 0, 2]);
            }
            if on(4) {
                a.rank = Some(1);
                a.world = Some(3);
                a.rendezvous = Some("node-a07:29511".into());
            }
            a.expect_collnet = on(5);
            a.progress = on(2);
            if on(1) {
                a.port_range =
                    Some(crate::slurm_rendezvous::PortRange::new(40000, 40100).expect("valid"));
            }
            let o = parse_args(&a);
            assert_eq!(o.plan, a.plan.as_str(), "{bits}");
            assert!(o.config.plans.contains_key(a.plan.as_str()), "{bits}");
            assert_eq!(o.json, a.json, "{bits}");
            assert_eq!(o.timeout, std::time::Duration::from_secs(a.timeout_s));
            assert_eq!(o.quiet, a.quiet, "{bits}");
            assert_eq!(o.gpus, a.gpus, "{bits}");
            assert_eq!(o.rank, a.rank.unwrap_or(0), "{bits}");
            assert_eq!(o.world, a.world.unwrap_or(1), "{bits}");
            assert_eq!(o.rendezvous, a.rendezvous, "{bits}");
            assert_eq!(o.expect_collnet, a.expect_collnet, "{bits}");
            assert_eq!(o.progress, a.progress, "{bits}");
            assert_eq!(o.port_range, a.port_range.unwrap_or_default(), "{bits}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
