//! The three verdicts. The exit codes that carry them are [`crate::exit`]'s.

use serde::{Deserialize, Serialize};

/// PASS, FAIL (hardware slow or wrong) or ERROR (setup problem). Only FAIL may drain a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "UPPERCASE")]
#[strum(serialize_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    Fail,
    Error,
}

impl Verdict {
    /// `PASS`, `FAIL`, `ERROR`: serde's spelling, by the same rule.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}
