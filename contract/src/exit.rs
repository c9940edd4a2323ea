//! The worker's exit codes and what each means: the one table that the worker's `--help`, the
//! callers' messages and the README's "Exit codes" table (checked by a test) are made from.
//!
//! Exit code 1 is the only FAIL: callers (the SPANK plugin, the prolog, scripts) may treat 0 as
//! PASS, 1 as "the hardware is slow or wrong" and anything else as an ERROR in the setup. Each
//! ERROR cause has its own code so a script can tell a missing library from a rendezvous timeout.

use crate::verdict::Verdict;
use serde::{Deserialize, Serialize};

/// What the worker's message for a missing NCCL library ([`ExitCode::NcclLibrary`]) ends with:
/// what its own command line's user can do. A caller that runs the worker for someone who has no
/// such command line (the SPANK plugin's srun user) replaces exactly this with its own hint.
pub const NCCL_LIB_HINT: &str = "give its path with --nccl-lib or NCCL_CHECK_NCCL_LIB";

/// What `nccl-check --check-config` says where the environment's `NCCL_CHECK_NCCL_LIB` names a
/// library that does not load: it wins over `nccl_lib` in any config file, so editing a file
/// fixes nothing. A caller that set it for the worker (the prolog's `env`) replaces exactly this
/// with where it set it.
pub const NCCL_LIB_FROM_ENV: &str = "NCCL_CHECK_NCCL_LIB in this environment names it and wins \
     over nccl_lib in any config file: correct it, or unset it, where it is set";

/// Documented exit codes of `nccl-check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitCode {
    Pass = 0,
    Fail = 1,
    Usage = 2,
    NcclLibrary = 3,
    NoGpu = 4,
    Rendezvous = 5,
    Timeout = 6,
    Runtime = 7,
    /// The node was busy (another process on a GPU, a starved worker, CPUs others kept busy)
    /// and nothing else was found: the hardware was not judged, so this is no FAIL.
    Busy = 8,
}

impl ExitCode {
    pub const ALL: [ExitCode; 9] = [
        ExitCode::Pass,
        ExitCode::Fail,
        ExitCode::Usage,
        ExitCode::NcclLibrary,
        ExitCode::NoGpu,
        ExitCode::Rendezvous,
        ExitCode::Timeout,
        ExitCode::Runtime,
        ExitCode::Busy,
    ];

    pub fn code(self) -> i32 {
        self as i32
    }

    /// The documented code with this number, if any.
    pub fn from_code(code: i32) -> Option<ExitCode> {
        ExitCode::ALL.into_iter().find(|c| c.code() == code)
    }

    pub fn verdict(self) -> Verdict {
        match self {
            ExitCode::Pass => Verdict::Pass,
            ExitCode::Fail => Verdict::Fail,
            _ => Verdict::Error,
        }
    }

    /// What the code means, in one line (the table).
    pub fn meaning(self) -> &'static str {
        match self {
            ExitCode::Pass => "every measurement passed",
            ExitCode::Fail => {
                "wrong data, a threshold or the outlier rule broken, or a transport fallback: \
                 the hardware is at fault"
            }
            ExitCode::Usage => "usage: invalid option, environment value or config file",
            ExitCode::NcclLibrary => "NCCL library missing, not NCCL, or older than 2.14",
            ExitCode::NoGpu => "no usable GPU (driver missing, no device visible)",
            ExitCode::Rendezvous => "rendezvous: a peer never came, refused, or went away",
            ExitCode::Timeout => "timeout: --timeout passed; the report says what was awaited",
            ExitCode::Runtime => "CUDA/NCCL run-time failure",
            ExitCode::Busy => {
                "busy: other processes kept a GPU or the CPUs busy and nothing else was found; \
                 the hardware was not judged (the report names the processes)"
            }
        }
    }

    /// The verdict a caller should read from a worker's exit status (`None` = killed by a signal).
    pub fn verdict_of_status(code: Option<i32>) -> Verdict {
        code.and_then(ExitCode::from_code)
            .map_or(Verdict::Error, ExitCode::verdict)
    }

    /// What an exit status means, for callers' messages: the table's line, or that the code is
    /// not one of the worker's.
    pub fn meaning_of(code: i32) -> &'static str {
        ExitCode::from_code(code).map_or("undocumented exit code", ExitCode::meaning)
    }

    /// One line per code, for `--help`.
    pub fn help_table() -> String {
        ExitCode::ALL
            .iter()
            .map(|c| format!("  {}  {:<5} {}\n", c.code(), c.verdict(), c.meaning()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exit_code_one_is_fail_and_unknown_codes_are_errors() {
        let fails: Vec<i32> = (-1..300)
            .filter(|&c| ExitCode::verdict_of_status(Some(c)) == Verdict::Fail)
            .collect();
        assert_eq!(fails, [1]);
        assert_eq!(ExitCode::verdict_of_status(Some(0)), Verdict::Pass);
        assert_eq!(ExitCode::verdict_of_status(Some(8)), Verdict::Error);
        assert_eq!(ExitCode::verdict_of_status(Some(9)), Verdict::Error);
        assert_eq!(ExitCode::verdict_of_status(None), Verdict::Error);
        for (i, c) in ExitCode::ALL.iter().enumerate() {
            assert_eq!(c.code(), i as i32);
            assert_eq!(ExitCode::from_code(i as i32), Some(*c));
        }
        assert_eq!(ExitCode::from_code(9), None);
    }

    #[test]
    fn callers_describe_a_status_from_the_table() {
        assert_eq!(
            ExitCode::meaning_of(4),
            "no usable GPU (driver missing, no device visible)"
        );
        assert_eq!(ExitCode::meaning_of(42), "undocumented exit code");
        assert_eq!(ExitCode::meaning_of(-1), "undocumented exit code");
        assert!(ExitCode::help_table().contains("\n  6  ERROR timeout: --timeout passed"));
    }

    /// The README's table says what this one says, row by row.
    #[test]
    fn the_readme_table_is_this_table() {
        let readme = include_str!("../../README.md");
        let start = readme
            .find("### Exit codes")
            .expect("README has Exit codes");
        let rows: Vec<(i32, String, String)> = readme[start..]
            .lines()
            .skip_while(|l| !l.starts_with("|---"))
            .skip(1)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
                (
                    cells[0].parse().expect("a code"),
                    cells[1].to_string(),
                    cells[2].replace('`', ""),
                )
            })
            .collect();
        let want: Vec<(i32, String, String)> = ExitCode::ALL
            .iter()
            .map(|c| (c.code(), c.verdict().to_string(), c.meaning().to_string()))
            .collect();
        assert_eq!(rows, want);
    }
}
