//! The worker's command line as callers build it: [`WorkerArgs`], typed, turned into argv by
//! [`WorkerArgs::to_args`] and nowhere else. A test runs generated command lines through
//! the worker's own parser (`bench_core::settings::options::parse`, in bench-core's `contract/round_trip.rs`)
//! and checks that every field comes back.
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
        let name = name.to_string();
        match ok {
            true => Ok(PlanName(name)),
            false => Err(PlanNameError { name }),
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

impl PlanNameError {
    /// What a plan name must be, for messages that already show the name.
    pub fn syntax() -> String {
        format!(
            "a plan name is 1 to {MAX_PLAN_NAME} characters of a-z, 0-9, _ and -, starting with a \
             letter or digit"
        )
    }
}

impl fmt::Display for PlanNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid plan name '{}': {}",
            crate::args::echo(&self.name),
            PlanNameError::syntax()
        )
    }
}

/// Most characters of a caller's value that a message repeats.
pub const ECHO_CHARS: usize = 200;

/// A caller's value as a message repeats it: control characters escaped, at most
/// [`ECHO_CHARS`] characters, then `... (N bytes)` where it was longer (a 100 KB option value
/// must not make a 100 KB error line).
pub fn echo(value: &str) -> String {
    let head: String = value.chars().take(ECHO_CHARS).collect();
    let shown = head.escape_debug().to_string();
    if head.len() < value.len() {
        format!("{shown}... ({} bytes)", value.len())
    } else {
        shown
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
        // Per option: None not passed, Some(None) a switch that is on, Some(Some(v)) with `v`.
        let value = |v: Option<String>| v.map(|v| Some(OsString::from(v)));
        let path = |p: &Option<PathBuf>| p.clone().map(|p| Some(p.into_os_string()));
        let switch = |on: bool| on.then_some(None);
        let gpus = self.gpus.as_ref().map(|g| {
            let list: Vec<String> = g.iter().map(|i| i.to_string()).collect();
            list.join(",")
        });
        let options = [
            ("--plan", value(Some(self.plan.to_string()))),
            ("--json", path(&self.json)),
            ("--timeout", value(Some(self.timeout_s.max(1).to_string()))),
            ("--quiet", switch(self.quiet)),
            ("--config", path(&self.config)),
            ("--gpus", value(gpus)),
            ("--rank", value(self.rank.map(|r| r.to_string()))),
            ("--world", value(self.world.map(|w| w.to_string()))),
            ("--rendezvous", value(self.rendezvous.clone())),
            (
                "--port-range",
                value(self.port_range.map(|p| p.to_string())),
            ),
            ("--progress", switch(self.progress)),
            ("--expect-collnet", switch(self.expect_collnet)),
        ];
        let passed = options.into_iter().filter_map(|(name, v)| Some((name, v?)));
        passed
            .flat_map(|(name, v)| std::iter::once(OsString::from(name)).chain(v))
            .collect()
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
