//! The environment variables the worker's options read, and the refusal of a value that is not
//! UTF-8 (never read as unset).

/// Every environment variable [`super::parse`] reads.
pub const ENV_READ: &[&str] = &[
    "NCCL_CHECK_CONFIG",
    "NCCL_CHECK_MUNGE_SOCKET",
    "NCCL_CHECK_NCCL_LIB",
    "NCCL_CHECK_RENDEZVOUS",
    "NCCL_CHECK_SECRET",
    "SLURMD_NODENAME",
    "SLURM_JOB_ID",
    "SLURM_JOB_NODELIST",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_STEP_ID",
    "SLURM_STEP_NODELIST",
];

/// The first variable of [`ENV_READ`] whose value is not UTF-8, as an error: such a value is
/// invalid, never read as unset (a secret that "is absent" would switch to MUNGE; a rank that
/// "is absent" would be 0).
pub fn non_utf8_env(get: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> Option<String> {
    ENV_READ.iter().find_map(|k| {
        let v = get(k)?;
        v.to_str().is_none().then(|| {
            format!(
                "invalid {k} '{}': not UTF-8 text",
                nccl_check_host::text::escape_control(&v.to_string_lossy())
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_that_is_not_utf8_is_invalid_not_unset() {
        use std::os::unix::ffi::OsStringExt;
        let bad = |k: &str| {
            (k == "SLURM_PROCID").then(|| std::ffi::OsString::from_vec(vec![b'1', 0xff, 0x1b]))
        };
        let e = non_utf8_env(&bad).unwrap();
        assert_eq!(e, "invalid SLURM_PROCID '1\u{fffd}\\u{1b}': not UTF-8 text");
        let fine = |k: &str| (k == "NCCL_CHECK_SECRET").then(|| "x".into());
        assert_eq!(non_utf8_env(&fine), None);
    }
}
