//! The one error type of the plugin's callbacks, and how it reads: every message once, with one
//! `nccl-check:` lead (`lib.rs` shows it, in the log or on the user's stderr).

use std::fmt;

use crate::config::ConfigError;
use crate::mode::ModeError;

/// Everything that can stop a callback; shown once, prefixed `nccl-check:`.
#[derive(Debug)]
pub enum Error {
    /// A plugstack.conf argument is invalid.
    PluginConfig(ConfigError),
    /// An invalid `--nccl-check` value.
    Mode(ModeError),
    /// A valid mode the site's policy does not allow (`sharp` without `allow_sharp=1`).
    NotAllowed(String),
    /// Slurm refused a SPANK call.
    Spank(String),
    /// The check could not be prepared.
    Check(String),
    /// The check ran and did not pass; the user has already been told on the task's stderr.
    Reported(String),
    /// `--nccl-check=help`: the text to show; the command stops there.
    Help(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text: &dyn fmt::Display = match self {
            Error::PluginConfig(e) => e,
            Error::Mode(e) => e,
            Error::NotAllowed(e)
            | Error::Spank(e)
            | Error::Check(e)
            | Error::Reported(e)
            | Error::Help(e) => e,
        };
        write!(f, "nccl-check: {text}")
    }
}

impl std::error::Error for Error {}

/// A SPANK item that Slurm would not give (`S_JOB_ID`, ...), as a [`Error::Check`].
pub fn spank_err(item: &'static str) -> impl Fn(slurm_spank::SpankError) -> Error {
    move |e| Error::Check(format!("cannot read {item}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PluginConfig;
    use crate::mode::Mode;

    /// The user sees each message once, with one `nccl-check:` lead, whatever its source.
    #[test]
    fn every_error_is_shown_with_exactly_one_lead() {
        let mode = Mode::parse("bogus").expect_err("invalid");
        let config = PluginConfig::parse(&["treshold=3"]).expect_err("invalid");
        for e in [
            Error::PluginConfig(config),
            Error::Mode(mode),
            Error::NotAllowed("x".into()),
            Error::Spank("x".into()),
            Error::Check("x".into()),
            Error::Reported("FAIL on n1: busbw 1.0 < 2.0 GB/s".into()),
        ] {
            let text = e.to_string();
            assert!(text.starts_with("nccl-check: "), "{text}");
            assert_eq!(text.matches("nccl-check:").count(), 1, "{text}");
        }
    }
}
