//! The three verdicts and the process exit codes that carry them.
//!
//! Exit code 1 is the only FAIL: callers (the SPANK plugin, the prolog, scripts) may treat 0 as
//! PASS, 1 as "the hardware is slow or wrong" and anything else as an ERROR in the setup. Each
//! ERROR cause has its own code so a script can tell a missing library from a rendezvous timeout.

use serde::{Deserialize, Serialize};

/// PASS, FAIL (hardware slow or wrong) or ERROR (setup problem). Only FAIL may drain a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    Fail,
    Error,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Error => "ERROR",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Documented exit codes of `nccl-check` (README "Exit codes" and `--help` list the same table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitCode {
    /// 0: every measurement passed.
    Pass = 0,
    /// 1: wrong data, or bandwidth below the threshold: the hardware is at fault.
    Fail = 1,
    /// 2: invalid command line or environment (unknown collective, malformed size, bad rank/world).
    Usage = 2,
    /// 3: the NCCL library is missing, is not NCCL, or is too old.
    NcclLibrary = 3,
    /// 4: no usable GPU: CUDA driver missing, or no device visible.
    NoGpu = 4,
    /// 5: the processes could not meet: rendezvous refused, a peer never came, or a peer went away.
    Rendezvous = 5,
    /// 6: the overall `--timeout` (or a phase deadline) passed; the report says what was awaited.
    Timeout = 6,
    /// 7: a CUDA or NCCL call failed at run time (out of memory, NCCL internal or remote error).
    Runtime = 7,
}

impl ExitCode {
    pub fn code(self) -> i32 {
        self as i32
    }

    pub fn verdict(self) -> Verdict {
        match self {
            ExitCode::Pass => Verdict::Pass,
            ExitCode::Fail => Verdict::Fail,
            _ => Verdict::Error,
        }
    }

    /// The verdict a caller should read from a worker's exit status (`None` = killed by a signal).
    pub fn verdict_of_status(code: Option<i32>) -> Verdict {
        match code {
            Some(0) => Verdict::Pass,
            Some(1) => Verdict::Fail,
            _ => Verdict::Error,
        }
    }

    /// One line per code, for `--help` and the README.
    pub const TABLE: &'static str = concat!(
        "  0  PASS: every measurement passed\n",
        "  1  FAIL: wrong data, bandwidth below a threshold or its peers, or a transport fallback\n",
        "  2  ERROR usage: invalid option, environment value or config file\n",
        "  3  ERROR NCCL library missing, not NCCL, or too old\n",
        "  4  ERROR no usable GPU (CUDA driver missing or no device visible)\n",
        "  5  ERROR rendezvous: a peer never came, refused, or went away\n",
        "  6  ERROR timeout: --timeout passed; the report says what was awaited\n",
        "  7  ERROR CUDA/NCCL runtime failure (out of memory, NCCL internal error)\n",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exit_code_one_is_fail() {
        for c in [
            ExitCode::Pass,
            ExitCode::Fail,
            ExitCode::Usage,
            ExitCode::NcclLibrary,
            ExitCode::NoGpu,
            ExitCode::Rendezvous,
            ExitCode::Timeout,
            ExitCode::Runtime,
        ] {
            assert_eq!(ExitCode::verdict_of_status(Some(c.code())), c.verdict());
            assert!(ExitCode::TABLE.contains(&format!("  {}  ", c.code())));
        }
        assert_eq!(ExitCode::verdict_of_status(None), Verdict::Error);
    }
}
