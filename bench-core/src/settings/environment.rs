//! The process's environment, read once (`Environment::of_process`, by `main`) and handed to
//! whatever needs a variable: the options, the node's facts, the step's layout, NCCL's settings.
//! Tests build one from pairs (`Environment::of_pairs`): setting process variables in a
//! multi-threaded test binary races every other test that reads them.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// A variable by name, when set and UTF-8 (as [`Environment::get`] answers it).
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A snapshot of the environment; values as the OS gave them (a value that is not UTF-8 reads
/// as unset through [`Environment::get`]; `options::env::non_utf8_env` refuses it where that
/// would change what a check does).
#[derive(Clone, Default)]
pub struct Environment {
    vars: BTreeMap<OsString, OsString>,
}

/// The variables' names only: a value may be the rendezvous secret (as `Credential`'s).
impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

impl Environment {
    /// The process's environment now: the one read of it in the worker.
    pub fn of_process() -> Environment {
        Environment {
            vars: std::env::vars_os().collect(),
        }
    }

    /// `key`'s value when set and UTF-8 (as `std::env::var(key).ok()`).
    pub fn get(&self, key: &str) -> Option<String> {
        self.get_os(key)?.to_str().map(str::to_string)
    }

    /// `key`'s value as the OS gave it (as `std::env::var_os(key)`).
    pub fn get_os(&self, key: &str) -> Option<&OsStr> {
        self.vars.get(OsStr::new(key)).map(OsString::as_os_str)
    }

    /// Every variable, in name order.
    pub fn vars(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.vars
            .iter()
            .map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }

    /// The directory for temporary files (as `std::env::temp_dir`: `$TMPDIR`, else `/tmp`).
    pub fn temp_dir(&self) -> PathBuf {
        self.get_os("TMPDIR")
            .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
    }

    /// Sets `key` for NCCL, which reads the process's environment itself at its first call,
    /// and in this snapshot (the report records NCCL's variables from it). Called only before
    /// NCCL loads and before the worker starts its threads.
    pub fn set_for_nccl(&mut self, key: &str, value: impl AsRef<OsStr>) {
        std::env::set_var(key, value.as_ref());
        self.vars.insert(key.into(), value.as_ref().into());
    }

    /// Removes `key` for NCCL and from this snapshot (see [`Environment::set_for_nccl`]).
    pub fn remove_for_nccl(&mut self, key: &str) {
        std::env::remove_var(key);
        self.vars.remove(OsStr::new(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    impl Environment {
        /// An environment of exactly these variables (for the tests of every stage).
        pub(crate) fn of_pairs<'a>(
            pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
        ) -> Environment {
            Environment {
                vars: pairs
                    .into_iter()
                    .map(|(k, v)| (k.into(), v.into()))
                    .collect(),
            }
        }
    }

    #[test]
    fn a_value_that_is_not_utf8_reads_as_unset_but_stays_visible_raw() {
        let mut env = Environment::of_pairs([("A", "1")]);
        env.vars
            .insert("B".into(), OsString::from_vec(vec![b'x', 0xff]));
        assert_eq!(env.get("A").as_deref(), Some("1"));
        assert_eq!(env.get("B"), None);
        assert!(env.get_os("B").is_some());
        assert_eq!(env.get("C"), None);
    }

    /// The options keep the snapshot and print with `{:?}`: never the rendezvous secret.
    #[test]
    fn debug_output_names_the_variables_but_shows_no_value() {
        let env = Environment::of_pairs([("NCCL_CHECK_SECRET", "f00df00d"), ("A", "1")]);
        let shown = format!("{env:?}");
        assert!(!shown.contains("f00df00d"), "{shown}");
        assert!(shown.contains("NCCL_CHECK_SECRET"), "{shown}");
    }

    #[test]
    fn temp_dir_is_tmpdir_else_tmp() {
        assert_eq!(Environment::default().temp_dir(), PathBuf::from("/tmp"));
        let env = Environment::of_pairs([("TMPDIR", "/scratch/u1")]);
        assert_eq!(env.temp_dir(), PathBuf::from("/scratch/u1"));
    }
}
