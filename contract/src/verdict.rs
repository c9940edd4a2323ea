//! The three verdicts. The exit codes that carry them are [`crate::exit`]'s.

use serde::{Deserialize, Serialize};

/// PASS, FAIL (hardware slow or wrong) or ERROR (setup problem). Only FAIL may drain a node.
/// Written (`Display`, padded like any `str`) as serde spells it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::Display,
)]
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
