//! A problem line of the admin checks: `nccl-check --check-config` (the worker: `INVALID` config,
//! `NOT READY` node) and `nccl-check-plugstack --check` (the plugin's line: `INVALID`) print one
//! per problem among their `# ` notes; the prolog's `--check-config` runs both and reads them
//! back. Written (`Display`) and read ([`CheckProblem::read_line`]) in one place, so a reader
//! tells a problem by its kind, never by matching the words.

use std::fmt;

/// What a problem line says is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckProblemKind {
    /// The configuration, or the plugin's line, is invalid: every check would fail to start.
    Invalid,
    /// The configuration is valid but this node cannot run a check (NCCL does not load).
    NotReady,
}

impl CheckProblemKind {
    /// The word a problem line starts with.
    pub fn word(self) -> &'static str {
        match self {
            CheckProblemKind::Invalid => "INVALID",
            CheckProblemKind::NotReady => "NOT READY",
        }
    }
}

/// One problem line: its kind and what it says (`FILE:LINE: ...`, `NCCL (...): ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckProblem {
    pub kind: CheckProblemKind,
    pub text: String,
}

impl CheckProblem {
    pub fn invalid(text: impl Into<String>) -> CheckProblem {
        CheckProblem {
            kind: CheckProblemKind::Invalid,
            text: text.into(),
        }
    }

    pub fn not_ready(text: impl Into<String>) -> CheckProblem {
        CheckProblem {
            kind: CheckProblemKind::NotReady,
            text: text.into(),
        }
    }

    /// The problem `line` states, if it is a problem line: its kind's word, a space, the text.
    /// Notes (`# ...`) and the effective settings are not.
    pub fn read_line(line: &str) -> Option<CheckProblem> {
        [CheckProblemKind::Invalid, CheckProblemKind::NotReady]
            .into_iter()
            .find_map(|kind| {
                let text = line.strip_prefix(kind.word())?.strip_prefix(' ')?;
                Some(CheckProblem {
                    kind,
                    text: text.trim_end().to_string(),
                })
            })
    }
}

/// The line as the checks print it: `INVALID <text>` or `NOT READY <text>`.
impl fmt::Display for CheckProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.word(), self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_problem_reads_back_as_itself() {
        for p in [
            CheckProblem::invalid("/etc/nccl-check/nccl-check.toml:3: unknown field `x`"),
            CheckProblem::not_ready("NCCL (/nope/libnccl.so.2): no such file"),
        ] {
            assert_eq!(CheckProblem::read_line(&p.to_string()), Some(p));
        }
        assert_eq!(
            CheckProblem::invalid("f:1: bad").to_string(),
            "INVALID f:1: bad"
        );
        assert_eq!(
            CheckProblem::not_ready("NCCL (x): y").to_string(),
            "NOT READY NCCL (x): y"
        );
    }

    #[test]
    fn notes_settings_and_look_alikes_are_no_problem() {
        for line in [
            "# /etc/nccl-check/nccl-check.toml: valid",
            "outliers.fraction = 0.8    # built-in defaults",
            "INVALIDATED cache",
            "NOT READYNESS",
            " INVALID indented",
            "",
        ] {
            assert_eq!(CheckProblem::read_line(line), None, "{line:?}");
        }
    }
}
