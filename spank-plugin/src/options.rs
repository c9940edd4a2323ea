//! The `--nccl-check[=MODE]` option: registration with Slurm, the raw value Slurm hands over, and
//! the one place where that raw value, with the site's config, becomes the requested [`Mode`]
//! ([`requested`]: parse low, then high). The modes themselves are [`crate::mode`]'s; a
//! `plan=NAME` is checked for its syntax here, before any allocation; whether the worker knows
//! it, the worker says.
//!
//! slurm-spank 0.4.1's `register_option` can only declare "no value" or "value required"; a
//! required value would make `srun --nccl-check hostname` swallow `hostname` as the mode. So the
//! option is registered here with `has_arg = 2` (optional value, spank.h) and its own callback.

use std::ffi::{c_char, c_int, CStr};
use std::sync::Mutex;

use slurm_spank::spank_sys;

use crate::callback_error::Error;
use crate::config::{LoadedConfig, PluginConfig};
use crate::mode::{Mode, ModeError, OPTION_NAME};

const NAME_C: &CStr = c"nccl-check";
const ARGINFO_C: &CStr = c"mode";
const USAGE_C: &CStr = c"Before the tasks start, check the NCCL bandwidth of the step's GPUs \
and nodes; fail the step on FAIL or ERROR. mode: quick (the default when no =mode is given), \
full, sharp (also prove SHARP/CollNet carries the collectives; only where the site allows it), \
warn (report but never fail), off, or plan=NAME (a plan of the site's worker config); add \
,verbose (or verbose alone) for a per-node table. The mode follows an = sign: --nccl-check=full";

/// `has_arg` value meaning "optional argument" (spank.h: 0 none, 1 required, 2 optional).
const OPTIONAL_ARGUMENT: c_int = 2;

/// The option as Slurm handed it over, before any interpretation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Raw {
    /// `--nccl-check` was not given (nor inherited from sbatch/salloc).
    Absent,
    /// `--nccl-check` without a value (Slurm passes NULL, or "" through the environment).
    Bare,
    /// `--nccl-check=VALUE`.
    Value(String),
}

/// How `,verbose` (or `verbose` alone) is spelled.
const VERBOSE: &str = "verbose";

/// `MODE`, `MODE,verbose`, `verbose,MODE` or `verbose`: the mode part and whether verbose was asked.
fn split_verbose(value: &str) -> Result<(Option<&str>, bool), ModeError> {
    let mut mode = None;
    let mut verbose = false;
    for part in value.split(',') {
        if part.eq_ignore_ascii_case(VERBOSE) && !verbose {
            verbose = true;
        } else if mode.is_none() && !part.is_empty() {
            mode = Some(part);
        } else {
            return Err(ModeError {
                value: value.to_string(),
                plan: None,
            });
        }
    }
    Ok((mode, verbose))
}

/// Where sbatch and salloc leave the option for the job (sbatch.c "Propagate SPANK environment":
/// `SLURM_SPANK_` + plugstack.c's `_SLURM_SPANK_OPTION_<plugin>_<option>`).
pub const JOB_ENV_VAR: &str = "SLURM_SPANK__SLURM_SPANK_OPTION_nccl_check_nccl_check";

impl Raw {
    /// The option as the job's environment carries it ([`JOB_ENV_VAR`]).
    pub fn from_job_env(value: Option<String>) -> Raw {
        match value {
            None => Raw::Absent,
            Some(v) if is_bare(&v) => Raw::Bare,
            Some(v) => Raw::Value(v),
        }
    }

    /// The requested mode; `Ok(None)` when the option is absent. `default` is the site's mode for
    /// a bare `--nccl-check` (plugstack `default_mode=`), and for `verbose` alone.
    pub fn mode(&self, default: &Mode) -> Result<Option<Mode>, ModeError> {
        match self {
            Raw::Absent => Ok(None),
            Raw::Bare => Ok(Some(default.clone())),
            Raw::Value(v) => match split_verbose(v)? {
                (Some(m), _) => Mode::parse(m).map(Some),
                (None, _) => Ok(Some(default.clone())),
            },
        }
    }

    /// Whether the user asked for the per-node table (`,verbose`).
    pub fn verbose(&self) -> bool {
        match self {
            Raw::Value(v) => split_verbose(v).is_ok_and(|(_, verbose)| verbose),
            _ => false,
        }
    }
}

/// `srun --nccl-check quick true`: the option takes its value only after `=`, so `quick` became
/// the program to run. Returns the word when a bare `--nccl-check` is followed by a mode's name,
/// so srun and sbatch can refuse before any allocation ("did you mean --nccl-check=quick?").
pub fn detached_value(argv: &[String]) -> Option<String> {
    let at = argv.iter().position(|a| a == "--nccl-check")?;
    let next = argv.get(at + 1)?;
    let (mode, _) = split_verbose(next).ok()?;
    // `verbose` alone reads as a mode too.
    mode.is_none_or(|m| Mode::parse(m).is_ok())
        .then(|| next.clone())
}

/// This process's command line (srun's or sbatch's own), bounded; empty when unreadable.
pub fn own_argv() -> Vec<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let _ = std::fs::File::open("/proc/self/cmdline")
        .and_then(|f| f.take(1 << 20).read_to_end(&mut bytes));
    bytes
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Checks the option given in this process (srun, sbatch, salloc) against the site config.
/// Absent option: nothing is checked, so a broken config cannot break plain jobs.
pub fn validate(config: &LoadedConfig) -> Result<(), Error> {
    let raw = raw();
    if raw == Raw::Absent {
        return Ok(());
    }
    let site = site(config)?;
    if raw == Raw::Bare {
        if let Some(word) = detached_value(&own_argv()) {
            return Err(Error::Check(format!(
                "'--{OPTION_NAME} {word}' would run the check and then a program named '{word}': \
                 did you mean --{OPTION_NAME}={word}?"
            )));
        }
    }
    if matches!(&raw, Raw::Value(v) if v.eq_ignore_ascii_case("help")) {
        return Err(Error::Help(help(site)));
    }
    requested(config, &raw).map(drop)
}

/// The mode that runs and the site config it runs under, or `None` when nothing is to run (the
/// option absent, or `off`); cheap: no IO. The site's policy applies here (`check_allowed`:
/// `sharp` only with `allow_sharp=1`), so srun, sbatch and salloc refuse before any allocation,
/// and the step again in case the option came through the environment from elsewhere.
pub fn requested<'a>(
    config: &'a LoadedConfig,
    raw: &Raw,
) -> Result<Option<(Mode, &'a PluginConfig)>, Error> {
    if *raw == Raw::Absent {
        return Ok(None);
    }
    let config = site(config)?;
    let mode = raw.mode(&config.default_mode).map_err(Error::Mode)?;
    check_allowed(mode.as_ref(), config)?;
    match mode {
        Some(Mode::Off) | None => Ok(None),
        Some(mode) => Ok(Some((mode, config))),
    }
}

/// The site config, or the plugstack argument that broke it.
fn site(config: &LoadedConfig) -> Result<&PluginConfig, Error> {
    config.as_ref().map_err(|e| Error::PluginConfig(e.clone()))
}

/// `--nccl-check=help`: the modes, the suffix, what the site set and the user's variables.
/// Printed instead of running anything (the command stops: it was a question).
pub fn help(config: &PluginConfig) -> String {
    let usage = USAGE_C.to_string_lossy();
    format!(
        "--{OPTION_NAME}[=MODE][,verbose]: {usage}.\n\
         nccl-check: modes: quick, full, warn, off{}, plan=NAME; a bare --{OPTION_NAME} is {} here.\n\
         nccl-check: environment: NCCL_CHECK_REPORT_DIR=DIR keeps every rank's JSON report; \
         NCCL_CHECK_NCCL_LIB=PATH names the NCCL library the check loads.\n\
         nccl-check: nothing was run (this was --{OPTION_NAME}=help)",
        if config.allow_sharp {
            ", sharp"
        } else {
            " (sharp: not allowed on this cluster)"
        },
        config.default_mode
    )
}

/// Site policy on modes: `sharp` only with plugstack `allow_sharp=1`. Checked in srun, sbatch
/// and salloc (before any allocation) and again in the step.
fn check_allowed(mode: Option<&Mode>, config: &PluginConfig) -> Result<(), Error> {
    if mode == Some(&Mode::Sharp) && !config.allow_sharp {
        return Err(Error::NotAllowed(format!(
            "--{OPTION_NAME}=sharp is not allowed on this cluster (the site's plugstack.conf has \
             allow_sharp=0); use --{OPTION_NAME} or --{OPTION_NAME}=full"
        )));
    }
    Ok(())
}

/// How a bare `--nccl-check` arrives: NULL from the command line, "" through the environment, or
/// the literal "(null)" in the `SLURM_SPANK__SLURM_SPANK_OPTION_*` variable that sbatch/salloc
/// export to the job (plugstack.c `_option_setenv` passes the NULL optarg to
/// `dyn_spank_set_job_env`, which formats it as "(null)"; observed on 22.05.8).
fn is_bare(value: &str) -> bool {
    value.is_empty() || value == "(null)"
}

/// Filled by [`on_option`], which Slurm calls outside of any other plugin callback.
static SEEN: Mutex<Option<Option<String>>> = Mutex::new(None);

/// The raw option value seen so far in this process.
pub fn raw() -> Raw {
    match SEEN.lock() {
        // A NULL optarg is bare, as an empty value is.
        Ok(seen) => match seen.as_ref() {
            None => Raw::Absent,
            Some(v) => Raw::from_job_env(Some(v.clone().unwrap_or_default())),
        },
        // Only a panic while holding the lock poisons it; treat the value as unreadable.
        Err(_) => Raw::Value(String::from("<unreadable>")),
    }
}

/// Option callback (`spank_opt_cb_f`): record the value; validation happens in init_post_opt,
/// where the message can say what was wrong. Never unwinds into Slurm.
extern "C" fn on_option(_val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    // SAFETY: Slurm passes a NUL-terminated string that lives for the duration of the call.
    let value = (!optarg.is_null()).then(|| {
        unsafe { CStr::from_ptr(optarg) }
            .to_string_lossy()
            .into_owned()
    });
    let stored = std::panic::catch_unwind(move || match SEEN.lock() {
        Ok(mut seen) => {
            if crate::compat::keep_remote_value(remote != 0, seen.is_some()) {
                *seen = Some(value);
            }
            true
        }
        Err(_) => false,
    });
    match stored {
        Ok(true) => 0,
        _ => -1,
    }
}

/// Registers `--nccl-check[=mode]` in the current context (call from `slurm_spank_init`).
///
/// # Safety
/// `spank` must be the handle Slurm passed to the running `slurm_spank_init`.
pub unsafe fn register(spank: spank_sys::spank_t) -> Result<(), String> {
    let mut opt = spank_sys::spank_option {
        name: NAME_C.as_ptr(),
        arginfo: ARGINFO_C.as_ptr(),
        usage: USAGE_C.as_ptr(),
        has_arg: OPTIONAL_ARGUMENT,
        val: 0,
        cb: Some(on_option),
    };
    // SAFETY: the caller passes Slurm's handle; Slurm copies the struct and the strings
    // (plugstack.c `_spank_option_copy`), which are 'static anyway.
    let rc = unsafe { spank_sys::spank_option_register(spank, &mut opt) };
    (rc == spank_sys::ESPANK_SUCCESS)
        .then_some(())
        .ok_or_else(|| {
            format!("cannot register --{OPTION_NAME}: spank_option_register returned {rc}")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_the_modes_the_default_and_the_variables() {
        let c = PluginConfig::parse::<&str>(&[]).expect("defaults");
        let h = help(&c);
        for w in [
            "quick, full, warn, off",
            "plan=NAME",
            ",verbose",
            "is quick here",
            "NCCL_CHECK_REPORT_DIR",
            "sharp: not allowed",
        ] {
            assert!(h.contains(w), "{w}: {h}");
        }
    }

    /// Regression: a 100 KB value was echoed whole, twice (once as the value, once as the plan
    /// name): now once, capped, with its size.
    #[test]
    fn a_huge_value_is_echoed_once_and_capped() {
        for value in [
            format!("plan=x{}", "Y".repeat(100_000)),
            format!("fastest{}", "z".repeat(100_000)),
        ] {
            let err = Raw::Value(value.clone())
                .mode(&Mode::Quick)
                .expect_err("invalid")
                .to_string();
            assert!(err.len() < 600, "{} bytes", err.len());
            assert!(
                err.contains(&format!("... ({} bytes)", value.len())),
                "{err}"
            );
            assert_eq!(err.matches(&value[..7]).count(), 1, "{err}");
        }
    }

    #[test]
    fn unknown_or_miscased_values_are_rejected_with_the_value_named() {
        for bad in [
            "fast",
            " quick",
            "quick,full",
            "1",
            "nvlink",
            "plans=x",
            "verbose,verbose",
            "quick,,verbose",
        ] {
            let err = Raw::Value(bad.into()).mode(&Mode::Quick).expect_err(bad);
            assert!(
                err.to_string().contains("invalid --nccl-check value"),
                "{err}"
            );
        }
        for bad in ["fast", " quick", "1", "nvlink", "plans=x"] {
            let err = Mode::parse(bad).expect_err(bad);
            assert!(
                err.to_string().contains("invalid --nccl-check value"),
                "{err}"
            );
            assert!(err
                .to_string()
                .contains("expected one of quick, full, sharp, warn, off"));
        }
    }

    #[test]
    fn verbose_rides_along_with_any_mode_or_alone() {
        let v = |s: &str| Raw::Value(s.into());
        assert_eq!(v("full,verbose").mode(&Mode::Quick), Ok(Some(Mode::Full)));
        assert!(v("full,verbose").verbose() && v("VERBOSE,warn").verbose());
        assert_eq!(v("verbose").mode(&Mode::Warn), Ok(Some(Mode::Warn)));
        assert!(v("verbose").verbose());
        assert!(!v("full").verbose() && !Raw::Bare.verbose());
    }

    /// Regression: `srun --nccl-check quick true` ran the check and then tried to exec `quick`.
    #[test]
    fn a_mode_given_as_the_next_word_is_caught() {
        let argv = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        for (line, want) in [
            ("srun -N2 --nccl-check quick true", Some("quick")),
            ("srun --nccl-check FULL hostname", Some("FULL")),
            ("srun --nccl-check plan=site true", Some("plan=site")),
            ("sbatch --nccl-check verbose job.sh", Some("verbose")),
            ("srun --nccl-check hostname", None),
            ("srun --nccl-check -N2 quick", None),
            ("srun --nccl-check=quick quick", None),
            ("srun -N2 true", None),
        ] {
            assert_eq!(detached_value(&argv(line)).as_deref(), want, "{line}");
        }
    }

    #[test]
    fn bare_option_takes_the_site_default_and_absent_means_nothing() {
        assert_eq!(Raw::Absent.mode(&Mode::Full), Ok(None));
        assert_eq!(Raw::Bare.mode(&Mode::Full), Ok(Some(Mode::Full)));
        assert_eq!(
            Raw::Value("off".into()).mode(&Mode::Quick),
            Ok(Some(Mode::Off))
        );
        assert!(Raw::Value("bogus".into()).mode(&Mode::Quick).is_err());
    }

    #[test]
    fn the_batch_step_reads_sbatchs_option_from_the_jobs_environment() {
        assert_eq!(Raw::from_job_env(None), Raw::Absent);
        assert_eq!(Raw::from_job_env(Some("(null)".into())), Raw::Bare);
        assert_eq!(
            Raw::from_job_env(Some("full,verbose".into())),
            Raw::Value("full,verbose".into())
        );
    }

    #[test]
    fn slurm_spellings_of_a_bare_option_are_bare() {
        assert!(is_bare(""));
        assert!(is_bare("(null)"));
        assert!(!is_bare("quick"));
    }

    #[test]
    fn sharp_is_refused_unless_the_site_allows_it() {
        let mut config = PluginConfig::default();
        let err = check_allowed(Some(&Mode::Sharp), &config).expect_err("not allowed");
        assert!(
            err.to_string()
                .starts_with("nccl-check: --nccl-check=sharp is not allowed on this cluster"),
            "{err}"
        );
        assert!(check_allowed(Some(&Mode::Quick), &config).is_ok());
        assert!(check_allowed(None, &config).is_ok());
        config.allow_sharp = true;
        assert!(check_allowed(Some(&Mode::Sharp), &config).is_ok());
    }
}
