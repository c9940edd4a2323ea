//! Why a run ended in ERROR, by kind: the kind picks the exit code and the reason code, the
//! text says where.

use crate::meet::rendezvous::PlaneError;
use crate::meet::team::TeamError;
use nccl_check_contract::exit::ExitCode;
use nccl_check_contract::report::reason::ReasonCode;

/// Why a run ended in ERROR. The variant picks the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    Library(String),
    NoGpu(String),
    Rendezvous(String),
    Timeout(String),
    Runtime(String),
    /// This thread stopped because another one failed; never the reason shown if a real one exists.
    Stopped(String),
}

impl RunError {
    /// A failed barrier or sum of rank `rank`: a deadline is a timeout, a peer that went away
    /// or gave up is a rendezvous error, and a team that had failed already stops this thread.
    pub fn from_team(rank: u32, e: TeamError) -> RunError {
        match e {
            TeamError::Stopped(_) => RunError::Stopped(e.to_string()),
            TeamError::LocalDeadline(_) | TeamError::Plane(PlaneError::Deadline(_)) => {
                RunError::Timeout(format!("rank {rank}: {e}"))
            }
            TeamError::Plane(
                PlaneError::Peer(_) | PlaneError::Aborted(_) | PlaneError::Lost(_),
            ) => RunError::Rendezvous(format!("rank {rank}: {e}")),
        }
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            RunError::Library(_) => ExitCode::NcclLibrary,
            RunError::NoGpu(_) => ExitCode::NoGpu,
            RunError::Rendezvous(_) => ExitCode::Rendezvous,
            RunError::Timeout(_) => ExitCode::Timeout,
            RunError::Runtime(_) | RunError::Stopped(_) => ExitCode::Runtime,
        }
    }

    /// The report's reason code for this error.
    pub fn reason_code(&self) -> ReasonCode {
        match self {
            RunError::Library(_) => ReasonCode::NcclLibrary,
            RunError::NoGpu(_) => ReasonCode::NoGpu,
            RunError::Rendezvous(_) => ReasonCode::Rendezvous,
            RunError::Timeout(_) => ReasonCode::Timeout,
            RunError::Runtime(_) | RunError::Stopped(_) => ReasonCode::Runtime,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            RunError::Library(m)
            | RunError::NoGpu(m)
            | RunError::Rendezvous(m)
            | RunError::Timeout(m)
            | RunError::Runtime(m)
            | RunError::Stopped(m) => m,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn team_errors_are_classified_by_kind_not_by_their_words() {
        let e = |t| RunError::from_team(3, t);
        assert_eq!(
            e(TeamError::Stopped("GPU 1: CUDA error".into())),
            RunError::Stopped("stopped: GPU 1: CUDA error".into())
        );
        assert_eq!(
            e(TeamError::LocalDeadline("1 of 2 arrived".into())),
            RunError::Timeout("rank 3: 1 of 2 arrived".into())
        );
        assert_eq!(
            e(TeamError::Plane(PlaneError::Deadline(
                "from rank 0: deadline passed".into()
            ))),
            RunError::Timeout("rank 3: from rank 0: deadline passed".into())
        );
        assert_eq!(
            e(TeamError::Plane(PlaneError::Peer(
                "connection closed".into()
            ))),
            RunError::Rendezvous("rank 3: connection closed".into())
        );
        // A peer's reason that mentions a deadline is still a peer that gave up (the old text
        // match called this a timeout of this process).
        let gave_up = "another process gave up: no answer before the deadline";
        assert_eq!(
            e(TeamError::Plane(PlaneError::Aborted(gave_up.into()))),
            RunError::Rendezvous(format!("rank 3: {gave_up}"))
        );
    }

    #[test]
    fn each_error_has_its_exit_code_and_reason_code() {
        let all = [
            (
                RunError::Library(String::new()),
                ExitCode::NcclLibrary,
                "nccl_library",
            ),
            (RunError::NoGpu(String::new()), ExitCode::NoGpu, "no_gpu"),
            (
                RunError::Rendezvous(String::new()),
                ExitCode::Rendezvous,
                "rendezvous",
            ),
            (
                RunError::Timeout(String::new()),
                ExitCode::Timeout,
                "timeout",
            ),
            (
                RunError::Runtime(String::new()),
                ExitCode::Runtime,
                "runtime",
            ),
            (
                RunError::Stopped(String::new()),
                ExitCode::Runtime,
                "runtime",
            ),
        ];
        for (e, code, reason) in all {
            assert_eq!((e.exit_code(), e.reason_code().as_str()), (code, reason));
        }
    }
}
