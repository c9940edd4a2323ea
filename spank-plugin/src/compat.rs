//! What differs between the Slurm majors the plugin supports (22.05 to 26.05), kept in one place.
//! Read in SchedMD's CHANGELOG/slurm-*.md, `slurm/spank.h` and `src/common/spank.c`; proven by
//! tests/matrix/run.sh on real 22.05, 24.11 and 26.05 daemons (spank-plugin/README.md).
//!
//! - **Return values.** Before 25.05 only a negative return was an error; from 25.05 on every
//!   non-zero return is. The hooks in `lib.rs` and the option callback return 0 or
//!   [`SPANK_FAILURE`] (-1) and nothing else, which means the same on every release.
//! - **Init failure mode (25.05+).** A failing `slurm_spank_init` of a `required` plugin in
//!   slurmstepd used to fail the batch job with a node failure, and slurmctld drained the node
//!   ("batch job complete failure"). From 25.05 Slurm reads the plugin's exported
//!   [`slurm_spank_init_failure_mode`]; `ESPANK_JOB_FAILURE` fails only the job. Older releases do
//!   not look the symbol up, so exporting it is harmless there.
//! - **Remote option callback (before 24.05).** slurmstepd ran the option callback once for the
//!   value in the launch message and again for the same option in the job environment; from
//!   24.05 the second call is skipped. [`keep_remote_value`] keeps the first value, so every
//!   release sees the value srun sent.
//! - **23.11:** most callback failures fail the step (srun exits 1); the plugin fails only in
//!   `task_init`, which failed the step on every release.

use std::ffi::c_int;

/// What every hook returns on failure: negative, an error on every release.
pub const SPANK_FAILURE: c_int = -1;

/// `ESPANK_JOB_FAILURE` of `spank_err_t` (slurm/slurm_errno.h, 25.05+: `ESPANK_ERROR` = 3000,
/// then one per name; `ESPANK_NODE_FAILURE` = 3011). tests/matrix/run.sh checks it against the
/// headers of every release that has it.
pub const ESPANK_JOB_FAILURE: c_int = 3012;

/// Read by Slurm 25.05+ when `slurm_spank_init` fails (spank.c `_do_call_stack`): the step fails
/// with this code, and `ESPANK_JOB_FAILURE` makes slurmctld fail the job without draining the
/// node (proc_req.c). Only FAIL from the prolog gate may drain a node, never this plugin.
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static slurm_spank_init_failure_mode: c_int = ESPANK_JOB_FAILURE;

/// Whether the option callback should record a value. `remote`: the callback's `remote`
/// argument (slurmstepd); `already_set`: a value was recorded earlier in this process.
///
/// In slurmstepd the first call carries the launch message's value and a repeat (before 24.05)
/// the environment's, so the first one is kept. In srun, sbatch and salloc the environment's
/// value (`SLURM_SPANK_*`) comes first and the command line after it, and the last one wins, as
/// spank(8) documents.
pub fn keep_remote_value(remote: bool, already_set: bool) -> bool {
    !(remote && already_set)
}

/// Test builds only (feature `fault-injection`, built by tests/matrix/run.sh, never packaged):
/// `slurm_spank_init` in slurmstepd fails when slurmstepd's own environment, inherited from the
/// slurmd an admin started, has `NCCL_CHECK_FAULT_REMOTE_INIT=1`. Jobs cannot set it. This is
/// how the suite proves that an init failure drains no node on 25.05+.
pub fn injected_init_failure(remote: bool) -> Result<(), String> {
    init_fault(
        remote,
        std::env::var_os("NCCL_CHECK_FAULT_REMOTE_INIT").as_deref(),
    )
}

/// [`injected_init_failure`]'s rule, given the variable's value (tests pass it: setting a
/// process variable races the other tests of the binary).
fn init_fault(remote: bool, var: Option<&std::ffi::OsStr>) -> Result<(), String> {
    if cfg!(feature = "fault-injection") && remote && var.is_some_and(|v| v == "1") {
        return Err("slurm_spank_init failed on purpose (fault-injection build)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurmstepd_keeps_the_first_value_clients_the_last() {
        assert!(keep_remote_value(true, false));
        assert!(!keep_remote_value(true, true));
        assert!(keep_remote_value(false, false));
        assert!(keep_remote_value(false, true));
    }

    #[test]
    fn failure_is_negative_on_every_release() {
        const { assert!(SPANK_FAILURE < 0) };
    }

    /// The value Slurm reads must be the headers' ESPANK_JOB_FAILURE where the headers the plugin
    /// is built against have it (25.05+), and absent only on older releases.
    #[test]
    fn job_failure_code_matches_the_headers() {
        let dir = std::env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
        let Ok(errno) = std::fs::read_to_string(format!("{dir}/slurm/slurm_errno.h")) else {
            return; // no headers here: the build read slurm_version.h elsewhere (build.rs)
        };
        let mut code = None;
        let mut next = None::<c_int>;
        for line in errno.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("ESPANK_ERROR") {
                next = rest
                    .trim_start_matches([' ', '\t', '='])
                    .trim_end_matches(',')
                    .trim()
                    .parse()
                    .ok();
                continue;
            }
            if let Some(n) = next.as_mut() {
                if line.starts_with("ESPANK_") {
                    *n += 1;
                    if line.trim_end_matches(',') == "ESPANK_JOB_FAILURE" {
                        code = Some(*n);
                    }
                }
            }
        }
        match code {
            Some(c) => assert_eq!(c, ESPANK_JOB_FAILURE),
            None => assert!(
                // black_box: the version is a build-time constant, the headers are read now.
                std::hint::black_box(crate::SLURM_VERSION_NUMBER) < 0x190500,
                "Slurm 25.05+ headers without ESPANK_JOB_FAILURE"
            ),
        }
    }

    #[test]
    fn a_fault_needs_the_feature_the_variable_and_slurmstepd() {
        let one = Some(std::ffi::OsStr::new("1"));
        assert_eq!(init_fault(false, one), Ok(()));
        assert_eq!(
            init_fault(true, one).is_err(),
            cfg!(feature = "fault-injection")
        );
        assert_eq!(init_fault(true, None), Ok(()));
        assert_eq!(init_fault(true, Some(std::ffi::OsStr::new("0"))), Ok(()));
    }
}
