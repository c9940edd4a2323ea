//! The environment the worker gets, in a step's task and in the batch step's allocation check:
//! the task's own, with the site's SHARP policy, the step's secret under the worker's name for
//! it, and the site's NCCL library unless the user names one.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use slurm_spank::SpankHandle;

use crate::callback_error::{spank_err, Error};
use crate::config::PluginConfig;
use crate::secret::{SECRET_TRANSPORT, SECRET_VAR};

/// The worker's variable for the NCCL library (the user's wins over plugstack `nccl_lib=`).
pub const NCCL_LIB_VAR: &str = "NCCL_CHECK_NCCL_LIB";

/// The worker's environment for this task; `secret` is the step's, when this task has one.
pub fn worker_env(
    spank: &SpankHandle,
    config: &PluginConfig,
    secret: Option<OsString>,
) -> Result<Vec<(OsString, OsString)>, Error> {
    let mut env: Vec<(OsString, OsString)> = spank
        .job_env_os()
        .map_err(spank_err("S_JOB_ENV"))?
        .into_iter()
        .filter_map(|kv| {
            let bytes = kv.as_bytes();
            let eq = bytes.iter().position(|&b| b == b'=')?;
            Some((
                OsStr::from_bytes(&bytes[..eq]).to_os_string(),
                OsStr::from_bytes(&bytes[eq + 1..]).to_os_string(),
            ))
        })
        .collect();
    adjust_env(&mut env, config, secret);
    Ok(env)
}

/// The NCCL library the user's environment names, if any: what the worker tried when it could
/// not load NCCL (`crate::present::nccl_lib_hint` says so).
pub fn user_nccl_lib(spank: &SpankHandle) -> Option<String> {
    task_var(spank, NCCL_LIB_VAR).filter(|v| !v.is_empty())
}

/// A variable of the task's environment; None where it is unset or unreadable.
pub fn task_var(spank: &SpankHandle, name: &str) -> Option<String> {
    spank.getenv(name).ok().flatten()
}

/// The policy part of [`worker_env`] (pure).
fn adjust_env(
    env: &mut Vec<(OsString, OsString)>,
    config: &PluginConfig,
    secret: Option<OsString>,
) {
    let set = |env: &mut Vec<(OsString, OsString)>, key: &str, value: OsString| {
        env.retain(|(k, _)| k != key);
        env.push((key.into(), value));
    };
    if !config.allow_sharp {
        set(env, "NCCL_COLLNET_ENABLE", "0".into());
    }
    let transported = env
        .iter()
        .position(|(k, _)| k == SECRET_TRANSPORT)
        .map(|i| env.remove(i).1);
    if let Some(secret) = secret.or(transported) {
        set(env, SECRET_VAR, secret);
    }
    let user_lib = env.iter().any(|(k, v)| k == NCCL_LIB_VAR && !v.is_empty());
    if let (Some(lib), false) = (&config.nccl_lib, user_lib) {
        set(env, NCCL_LIB_VAR, lib.clone().into_os_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn get<'a>(env: &'a [(OsString, OsString)], k: &str) -> Option<&'a str> {
        env.iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.to_str())
    }

    /// srun's per-step secret reaches the worker under the worker's name, and only there; so
    /// does the site's NCCL library, unless the user names one.
    #[test]
    fn the_worker_gets_the_steps_secret_and_the_sites_library_unless_the_user_names_one() {
        let mut config = PluginConfig {
            nccl_lib: Some(PathBuf::from("/opt/nccl/libnccl.so.2")),
            ..PluginConfig::default()
        };
        let mut env: Vec<(OsString, OsString)> = vec![
            (SECRET_TRANSPORT.into(), "feed".into()),
            (SECRET_VAR.into(), "users-own".into()),
            ("NCCL_COLLNET_ENABLE".into(), "1".into()),
        ];
        adjust_env(&mut env, &config, Some("cafe".into()));
        assert_eq!(get(&env, SECRET_VAR), Some("cafe"));
        assert_eq!(get(&env, SECRET_TRANSPORT), None);
        assert_eq!(get(&env, NCCL_LIB_VAR), Some("/opt/nccl/libnccl.so.2"));
        assert_eq!(get(&env, "NCCL_COLLNET_ENABLE"), Some("0"));
        assert_eq!(env.iter().filter(|(k, _)| k == SECRET_VAR).count(), 1);

        let mut env: Vec<(OsString, OsString)> = vec![
            (SECRET_TRANSPORT.into(), "feed".into()),
            (NCCL_LIB_VAR.into(), "/home/me/libnccl.so.2".into()),
        ];
        config.allow_sharp = true;
        adjust_env(&mut env, &config, None);
        assert_eq!(get(&env, SECRET_VAR), Some("feed"));
        assert_eq!(get(&env, NCCL_LIB_VAR), Some("/home/me/libnccl.so.2"));
        assert_eq!(get(&env, "NCCL_COLLNET_ENABLE"), None);
    }
}
