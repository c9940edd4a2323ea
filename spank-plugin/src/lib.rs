//! The `--nccl-check` SPANK plugin: the Slurm entry points, and the one place that dispatches on
//! the SPANK context to the module of the Slurm process we run in (pyxis style):
//! [`srun`] (Local), [`alloc`] (Allocator: sbatch/salloc), [`slurmstepd`] (Remote).
//!
//! The entry points are exported here rather than through slurm-spank's `SPANK_PLUGIN!`, which
//! always exports all 12 `slurm_spank_*` hooks. Exporting only the 4 hooks we use means slurmd
//! does not fork a `slurmstepd spank prolog/epilog` for every job on every node (it does when a
//! plugin has `slurm_spank_job_prolog`), and it lets `--nccl-check` take an optional value (see
//! [`options`]). The crate still provides the safe handle ([`slurm_spank::SpankHandle`]) and
//! the bindings. Every hook catches panics: nothing unwinds into Slurm.
//!
//! With the option absent every hook returns at once: no process is spawned and no file is
//! touched, so listing the plugin as `required` costs plain jobs nothing measurable.

use std::ffi::{c_char, c_int, c_uint};
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;

use slurm_spank::{spank_sys, Context, LogLevel, OptionCache, SpankHandle};

pub mod alloc;
pub mod batch;
pub mod callback_error;
pub mod compat;
pub mod config;
pub mod container;
pub mod mode;
pub mod options;
pub mod plugstack;
pub mod present;
pub mod secret;
pub mod slurmstepd;
pub mod srun;
pub mod worker;
pub mod worker_env;

use callback_error::Error;
use config::{ConfigError, LoadedConfig, PluginConfig};

mod version {
    include!(concat!(env!("OUT_DIR"), "/slurm_version.rs"));
}

/// The Slurm version (from the build host's `slurm/slurm_version.h`) this plugin was built for.
pub use version::SLURM_VERSION_NUMBER;

#[allow(non_upper_case_globals)]
#[no_mangle]
pub static plugin_name: [u8; 11] = *b"nccl_check\0";
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static plugin_type: [u8; 6] = *b"spank\0";
/// The loader requires major.minor to match the running Slurm (`plugin.c: _verify_syms`).
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static plugin_version: c_uint = SLURM_VERSION_NUMBER;

/// Per-process state. Each Slurm process (srun, sbatch, slurmstepd, each task child) has its own
/// copy; the task child inherits slurmstepd's through fork.
#[derive(Debug, Default)]
struct State {
    config: Option<LoadedConfig>,
    task: slurmstepd::TaskState,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

#[derive(Debug, Clone, Copy)]
enum Hook {
    Init,
    InitPostOpt,
    TaskInitPrivileged,
    TaskInit,
}

fn dispatch(hook: Hook, raw: spank_sys::spank_t, spank: &mut SpankHandle) -> Result<(), Error> {
    let ctx = spank.context().map_err(|e| Error::Spank(e.to_string()))?;
    let mut guard = STATE
        .try_lock()
        .map_err(|_| Error::Spank("plugin state is busy or poisoned".into()))?;
    let state = guard.get_or_insert_with(State::default);
    match (hook, ctx) {
        (Hook::Init, Context::Local | Context::Allocator | Context::Remote) => {
            compat::injected_init_failure(matches!(ctx, Context::Remote)).map_err(Error::Check)?;
            // SAFETY: `raw` is the handle of the slurm_spank_init call running now.
            unsafe { options::register(raw) }.map_err(Error::Spank)?;
            state.config = Some(load_config(spank));
            Ok(())
        }
        (Hook::Init, Context::Slurmd) => {
            // A broken config must not stop slurmd (the plugin is `required`); say it in the log.
            if let Err(e) = load_config(spank) {
                slurm_spank::spank_log(LogLevel::Error, &format!("nccl-check: {e}"));
            }
            Ok(())
        }
        (Hook::InitPostOpt, Context::Local) => srun::init_post_opt(config_ref(&state.config)),
        (Hook::InitPostOpt, Context::Allocator) => alloc::init_post_opt(config_ref(&state.config)),
        (Hook::TaskInitPrivileged, Context::Remote) => {
            let State { config, task } = state;
            slurmstepd::task_init_privileged(config_ref(config), task)
        }
        (Hook::TaskInit, Context::Remote) => {
            slurmstepd::task_init(spank, config_ref(&state.config), &state.task)
        }
        _ => Ok(()),
    }
}

fn load_config(spank: &SpankHandle) -> LoadedConfig {
    match spank.plugin_argv() {
        Ok(args) => PluginConfig::parse(&args),
        Err(e) => Err(ConfigError {
            arg: String::from("<argv>"),
            reason: format!("unreadable plugstack.conf arguments: {e}"),
        }),
    }
}

static NOT_LOADED: LoadedConfig = Err(ConfigError {
    arg: String::new(),
    reason: String::new(),
});

fn config_ref(config: &Option<LoadedConfig>) -> &LoadedConfig {
    config.as_ref().unwrap_or(&NOT_LOADED)
}

fn hook(which: Hook, raw: spank_sys::spank_t, ac: c_int, av: *const *const c_char) -> c_int {
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut cache = OptionCache::default();
        let mut spank = slurm_spank::init_spank_handle(raw, ac, av, &mut cache);
        dispatch(which, raw, &mut spank)
    }));
    match result {
        Ok(Ok(())) => 0,
        Ok(Err(Error::Reported(msg))) => {
            // Already on the user's stderr; keep a copy in the slurmd log for the admin.
            slurm_spank::spank_log(LogLevel::Info, &format!("nccl-check: {msg}"));
            -1
        }
        Ok(Err(Error::Help(text))) => answer_help(&text),
        Ok(Err(e)) => {
            slurm_spank::spank_log(LogLevel::Error, &e.to_string());
            -1
        }
        Err(_) => {
            slurm_spank::spank_log(
                LogLevel::Error,
                &format!("nccl-check: internal error (panic) in {which:?}; please report it"),
            );
            -1
        }
    }
}

/// `--nccl-check=help` in srun, sbatch or salloc (init_post_opt: before any allocation, job or
/// step). SPANK has no "stop, successfully" answer: -1 would make srun print it as `error:` lines
/// and exit 1. So the text goes to stdout as any `--help` does, and the command ends with 0 here,
/// where nothing has been created yet that an exit would leave behind.
fn answer_help(text: &str) -> c_int {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let written = writeln!(out, "nccl-check: {text}").and_then(|()| out.flush());
    if written.is_err() {
        // stdout is closed: say it the only other way left, and stop as before.
        slurm_spank::spank_log(LogLevel::Info, &format!("nccl-check: {text}"));
        return -1;
    }
    std::process::exit(0)
}

macro_rules! export_hook {
    ($c_name:ident, $hook:expr) => {
        #[no_mangle]
        #[doc(hidden)]
        pub extern "C" fn $c_name(
            spank: spank_sys::spank_t,
            ac: c_int,
            av: *const *const c_char,
        ) -> c_int {
            hook($hook, spank, ac, av)
        }
    };
}

export_hook!(slurm_spank_init, Hook::Init);
export_hook!(slurm_spank_init_post_opt, Hook::InitPostOpt);
export_hook!(slurm_spank_task_init_privileged, Hook::TaskInitPrivileged);
export_hook!(slurm_spank_task_init, Hook::TaskInit);

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    /// What Slurm's plugin loader reads (plugin.c `_verify_syms`): a NUL-terminated name, the
    /// type `spank`, and a version; the plugstack line names the library file, `nccl_check.so`.
    #[test]
    fn the_loader_symbols_name_this_library_as_a_spank_plugin() {
        let name = CStr::from_bytes_with_nul(&plugin_name).expect("NUL-terminated name");
        assert_eq!(name.to_str(), Ok(env!("CARGO_CRATE_NAME")));
        let ty = CStr::from_bytes_with_nul(&plugin_type).expect("NUL-terminated type");
        assert_eq!(ty.to_str(), Ok("spank"));
        // The calls used here exist unchanged from Slurm 22.05 on (README: Building).
        assert!(plugin_version >= 0x16_05_00, "{plugin_version:#x}");
    }
}
