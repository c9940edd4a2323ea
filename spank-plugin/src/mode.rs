//! What a `--nccl-check` value asks for: the [`Mode`], how each is spelled, and the error for a
//! value that is none of them. Plain values, so the site's config (`default_mode=`) and the
//! option's parser ([`crate::options`]) can both use them without using each other.

use std::fmt;

use nccl_check_contract::args::{PlanName, PlanNameError};

/// Name of the option as users type it (`--nccl-check`); its errors and help say it.
pub const OPTION_NAME: &str = "nccl-check";

/// What each `--nccl-check` mode asks for; written (`Display`) as it is spelled.
#[derive(Debug, Clone, PartialEq, Eq, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum Mode {
    /// The short check; FAIL or ERROR fails the step.
    Quick,
    /// The long check; FAIL or ERROR fails the step.
    Full,
    /// The short check with SHARP (NCCL CollNet) on; FAIL when CollNet did not carry the
    /// collectives. Only where the site allows it (plugstack `allow_sharp=1`): SHARP takes
    /// aggregation resources of the switches.
    Sharp,
    /// The short check; FAIL or ERROR is reported and the tasks run anyway.
    Warn,
    /// No check (switches off a value inherited from sbatch/salloc).
    Off,
    /// `plan=NAME`: this plan of the worker's config; FAIL or ERROR fails the step. A plan the
    /// worker does not know is its usage ERROR, which lists the plans it has.
    #[strum(to_string = "plan={0}")]
    Plan(PlanName),
}

/// How `plan=NAME` is spelled (as `Mode::Plan` is written).
const PLAN_PREFIX: &str = "plan=";

impl Mode {
    /// The modes with a name of their own.
    pub const NAMED: [Mode; 5] = [Mode::Quick, Mode::Full, Mode::Sharp, Mode::Warn, Mode::Off];

    /// Exact names, in any case (`FULL` is `full`): a typo must not silently pick a mode. Plan
    /// names themselves are lower case (the worker's config defines them so).
    pub fn parse(value: &str) -> Result<Mode, ModeError> {
        let err = |plan: Option<PlanNameError>| ModeError {
            value: value.to_string(),
            plan,
        };
        let prefix = value.get(..PLAN_PREFIX.len());
        if prefix.is_some_and(|p| p.eq_ignore_ascii_case(PLAN_PREFIX)) {
            return PlanName::new(&value[PLAN_PREFIX.len()..])
                .map(Mode::Plan)
                .map_err(|e| err(Some(e)));
        }
        Mode::NAMED
            .into_iter()
            .find(|m| m.to_string().eq_ignore_ascii_case(value))
            .ok_or_else(|| err(None))
    }

    /// The worker's `--plan` for this mode; `None` when nothing runs.
    pub fn plan(&self) -> Option<PlanName> {
        match self {
            Mode::Quick | Mode::Warn | Mode::Sharp => Some(PlanName::quick()),
            Mode::Full => Some(PlanName::full()),
            Mode::Plan(p) => Some(p.clone()),
            Mode::Off => None,
        }
    }

    /// Whether the worker must prove that CollNet (SHARP) carried the collectives
    /// (`--expect-collnet`).
    pub fn expect_collnet(&self) -> bool {
        matches!(self, Mode::Sharp)
    }

    /// Whether a FAIL or ERROR fails the step (everything but warn).
    pub fn enforcing(&self) -> bool {
        !matches!(self, Mode::Warn)
    }
}

/// An unknown `--nccl-check` value, or `plan=` with a name that cannot be a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeError {
    pub value: String,
    pub plan: Option<PlanNameError>,
}

impl fmt::Display for ModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The value once, capped; the plan's error would repeat its name.
        write!(
            f,
            "invalid --{OPTION_NAME} value '{}': ",
            nccl_check_contract::args::echo(&self.value)
        )?;
        match &self.plan {
            Some(_) => write!(f, "invalid plan name: {}", PlanNameError::syntax()),
            None => write!(
                f,
                "expected one of quick, full, sharp, warn, off, or plan=NAME for a plan of the \
                 worker's config (or no value for the site default)"
            ),
        }
    }
}

impl std::error::Error for ModeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_name_parses_back_to_itself() {
        let names: Vec<String> = Mode::NAMED.iter().map(Mode::to_string).collect();
        assert_eq!(names, ["quick", "full", "sharp", "warn", "off"]);
        for m in Mode::NAMED {
            assert_eq!(Mode::parse(&m.to_string()), Ok(m));
        }
    }

    #[test]
    fn a_sites_own_plan_passes_through_by_name_and_enforces() {
        let m = Mode::parse("plan=nvlink_only-2").expect("valid");
        assert_eq!(m.to_string(), "plan=nvlink_only-2");
        assert_eq!(
            m.plan().map(|p| p.to_string()).as_deref(),
            Some("nvlink_only-2")
        );
        assert!(m.enforcing() && !m.expect_collnet());
        // `plan=quick` is the quick plan, spelled out.
        assert_eq!(
            Mode::parse("plan=quick").expect("valid").plan(),
            Mode::Quick.plan()
        );
    }

    #[test]
    fn a_plan_name_that_cannot_be_one_is_rejected_before_allocation() {
        for bad in ["plan=", "plan=Nvlink", "plan=-x", "plan=a b", "plan=a=b"] {
            let err = Mode::parse(bad).expect_err(bad).to_string();
            assert!(err.starts_with("invalid --nccl-check value"), "{err}");
            assert!(err.contains("invalid plan name"), "{err}");
        }
    }
    /// Regression: `--nccl-check=FULL` was refused.
    #[test]
    fn mode_names_are_case_insensitive_plan_names_are_not() {
        assert_eq!(Mode::parse("FULL"), Ok(Mode::Full));
        assert_eq!(Mode::parse("Quick"), Ok(Mode::Quick));
        assert_eq!(
            Mode::parse("PLAN=site").map(|m| m.to_string()),
            Ok("plan=site".into())
        );
        assert!(Mode::parse("plan=Site").is_err());
    }

    #[test]
    fn sharp_runs_the_quick_plan_expecting_collnet_and_enforces() {
        assert_eq!(Mode::parse("sharp"), Ok(Mode::Sharp));
        assert_eq!(Mode::Sharp.plan(), Some(PlanName::quick()));
        assert!(Mode::Sharp.expect_collnet());
        assert!(Mode::Sharp.enforcing());
        assert!(Mode::NAMED
            .iter()
            .filter(|m| m.expect_collnet())
            .eq([&Mode::Sharp]));
    }

    #[test]
    fn warn_runs_the_quick_plan_without_enforcing() {
        assert_eq!(Mode::Warn.plan(), Some(PlanName::quick()));
        assert!(!Mode::Warn.enforcing());
        assert_eq!(Mode::Full.plan(), Some(PlanName::full()));
        assert_eq!(Mode::Off.plan(), None);
    }
}
