//! Slurm's configuration as this node's slurmd really uses it, read in one place: the live
//! settings from `scontrol show config` (every format of 22.05 to 26.05, [`show`]) and the files
//! slurmd reads (configless caches, `Include` lines, [`files`]); which Prolog=/Epilog= entries
//! run a program and what slurmd would fail on in them (`entries.rs`). Used by the package's refusal to
//! remove a prolog Slurm still runs, by `nccl-check-prolog --check-config` (PrologEpilogTimeout,
//! PrologFlags, GresTypes) and by the worker for the gres.conf/slurm.conf of the expected GPUs.

mod entries;
pub mod files;
pub mod show;

use files::ConfText;
use show::ShowConfig;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `PrologEpilogTimeout` as Slurm prints it when unset (NO_VAL16): slurmd then waits without
/// limit.
const NO_VAL16: u64 = 65534;

/// The settings this project depends on, from one source.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `scontrol show config`, or the file (with `file:line` per setting in `origin`).
    pub source: String,
    pub prologs: Vec<String>,
    pub epilogs: Vec<String>,
    /// Seconds; None = unset (no limit).
    pub prolog_epilog_timeout: Option<u64>,
    pub prolog_flags: Vec<String>,
    pub gres_types: Vec<String>,
    pub slurmd_spool_dir: Option<String>,
    /// `HealthCheckProgram` (one program; the package ships `nccl-check-recheck` for it).
    pub health_check_program: Option<String>,
    /// `BatchStartTimeout` (seconds; Slurm's default 10 when not set).
    pub batch_start_timeout: u64,
    /// `MessageTimeout` (seconds; default 10).
    pub message_timeout: u64,
    /// `HealthCheckTimeout` (26.05+; default 60). Before 26.05 there is no such setting and
    /// slurmd kills the health check at a fixed 60 s, the same number. None: the controller
    /// printed `0 sec` (seen on Debian sid's 26.05), which slurmd never runs with.
    pub health_check_timeout: Option<u64>,
    /// `ProctrackType` (`proctrack/cgroup`, `proctrack/linuxproc`, ...), when set: whether a
    /// job's processes lie in a job's cgroup, where the prolog looks when slurmd cannot say
    /// whose a process is.
    pub proctrack: Option<String>,
    /// Where each setting came from, for messages (`Prolog: /etc/slurm/conf.d/x.conf:3`).
    pub origin: Vec<(String, String)>,
}

/// Nothing read yet, the timeouts at Slurm's defaults: what an answer without any setting gives
/// (so the defaults are [`Settings::from_show`]'s, written once).
impl Default for Settings {
    fn default() -> Settings {
        Settings {
            source: String::new(),
            ..Settings::from_show(&ShowConfig::default())
        }
    }
}

fn timeout_value(v: &str) -> Option<u64> {
    let n: u64 = v.split_whitespace().next()?.parse().ok()?;
    (n != NO_VAL16 && n != 0).then_some(n)
}

/// Slurm's defaults for the timeouts read here (`read_config.h`: DEFAULT_BATCH_START_TIMEOUT,
/// DEFAULT_MSG_TIMEOUT; slurm.conf(5) for HealthCheckTimeout).
pub const DEFAULT_BATCH_START_TIMEOUT: u64 = 10;
pub const DEFAULT_MESSAGE_TIMEOUT: u64 = 10;
pub const DEFAULT_HEALTH_CHECK_TIMEOUT: u64 = 60;

/// A number of seconds as Slurm prints it (`10 sec`) or as slurm.conf has it (`10`); 0 is a
/// value here (`BatchStartTimeout=0` is allowed).
fn seconds_value(v: &str) -> Option<u64> {
    v.split_whitespace().next()?.parse().ok()
}

impl Settings {
    pub fn from_show(c: &ShowConfig) -> Settings {
        let seconds =
            |key: &str, default: u64| c.get(key).and_then(seconds_value).unwrap_or(default);
        Settings {
            source: "scontrol show config".into(),
            prologs: c.list("Prolog"),
            epilogs: c.list("Epilog"),
            prolog_epilog_timeout: c.get("PrologEpilogTimeout").and_then(timeout_value),
            prolog_flags: c.list("PrologFlags"),
            gres_types: c.list("GresTypes"),
            slurmd_spool_dir: c.get("SlurmdSpoolDir").map(str::to_string),
            health_check_program: c
                .get("HealthCheckProgram")
                .filter(|v| v.starts_with('/'))
                .map(str::to_string),
            batch_start_timeout: seconds("BatchStartTimeout", DEFAULT_BATCH_START_TIMEOUT),
            message_timeout: seconds("MessageTimeout", DEFAULT_MESSAGE_TIMEOUT),
            // Absent before 26.05: the fixed 60 s of those releases.
            health_check_timeout: match c.get("HealthCheckTimeout").map(seconds_value) {
                None => Some(DEFAULT_HEALTH_CHECK_TIMEOUT),
                Some(t) => t.filter(|t| *t > 0),
            },
            proctrack: c.get("ProctrackType").map(str::to_string),
            origin: Vec::new(),
        }
    }

    pub fn from_file(c: &ConfText) -> Settings {
        // `(key, file:line)` of a setting, for `origin`.
        let at = |key: &str, l: &files::ConfLine| {
            (key.to_string(), format!("{}:{}", l.file.display(), l.line))
        };
        let value = |key: &str| c.get(key).map(|(v, _)| v);
        // A list given once: its last line.
        let last_list = |key: &str| value(key).map(|v| show::split_list(&v)).unwrap_or_default();
        let mut origin = Vec::new();
        let mut list = |key: &str| -> Vec<String> {
            let all = c.all(key);
            origin.extend(all.iter().map(|(_, l)| at(key, l)));
            // Prolog= may be given more than once (24.11+) or as a comma list; each adds.
            all.iter().flat_map(|(v, _)| show::split_list(v)).collect()
        };
        let prologs = list("Prolog");
        let epilogs = list("Epilog");
        // The value Slurm takes (the last line's), its line noted in `origin`.
        let mut noted = |key: &str| {
            let (v, l) = c.get(key)?;
            origin.push(at(key, l));
            Some(v)
        };
        let health_check_program = noted("HealthCheckProgram");
        let prolog_flags = last_list("PrologFlags");
        let prolog_epilog_timeout = noted("PrologEpilogTimeout").and_then(|v| timeout_value(&v));
        let mut seconds = |key: &str, default: u64| {
            let v = noted(key);
            v.and_then(|v| seconds_value(&v)).unwrap_or(default)
        };
        let batch_start_timeout = seconds("BatchStartTimeout", DEFAULT_BATCH_START_TIMEOUT);
        let message_timeout = seconds("MessageTimeout", DEFAULT_MESSAGE_TIMEOUT);
        // Slurm resets 0 to the default ("A value of 0 is not allowed").
        let health_check_timeout = match seconds("HealthCheckTimeout", DEFAULT_HEALTH_CHECK_TIMEOUT)
        {
            0 => DEFAULT_HEALTH_CHECK_TIMEOUT,
            t => t,
        };
        Settings {
            source: c.main.display().to_string(),
            prologs,
            epilogs,
            prolog_epilog_timeout,
            prolog_flags,
            gres_types: last_list("GresTypes"),
            slurmd_spool_dir: value("SlurmdSpoolDir"),
            health_check_program,
            batch_start_timeout,
            message_timeout,
            health_check_timeout: Some(health_check_timeout),
            proctrack: value("ProctrackType"),
            origin,
        }
    }

    /// Where `key` was set (`file:line`), else this source (the file, or `scontrol show
    /// config`).
    pub fn origin_of(&self, key: &str) -> String {
        self.origin
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map_or_else(|| self.source.clone(), |(_, o)| o.clone())
    }

    pub fn has_gres_gpu(&self) -> bool {
        self.gres_types
            .iter()
            .any(|g| g.eq_ignore_ascii_case("gpu"))
    }
}

/// What this node's Slurm says, from every source there is: the controller's live settings
/// when scontrol answers, and each slurm.conf this node may read (with its includes).
#[derive(Debug, Default)]
pub struct Sources {
    pub live: Option<Settings>,
    /// Why there are no live settings.
    pub live_error: Option<String>,
    pub files: Vec<Settings>,
    /// Files that could not be read, with why.
    pub file_errors: Vec<String>,
    /// The slurm.conf in use on this node ([`in_use`]), with its includes.
    pub conf: Option<ConfText>,
    /// What the admin should know about the files: a local slurm.conf that shadows a
    /// configless cache or breaks scontrol.
    pub notes: Vec<String>,
}

/// Which of `candidates` ([`files::candidates`]) slurmd uses, and notes on the others.
/// `$SLURM_CONF` (slurmd sets it for its prologs) wins; else a configless cache wins over a local
/// `/etc/slurm/slurm.conf`: a node with a cache runs a configless slurmd, and a local file beside
/// it only shadows the cache for scontrol, srun and sinfo on this node (admin steps that add
/// lines to a local file are the usual cause). Else the first candidate.
pub fn in_use(
    root: &Path,
    slurm_conf: Option<&str>,
    candidates: &[PathBuf],
) -> (Option<PathBuf>, Vec<String>) {
    let mut notes = Vec::new();
    let given = slurm_conf.map(|c| crate::read::under(root, c));
    if let Some(c) = given.filter(|c| candidates.contains(c)) {
        return (Some(c), notes);
    }
    let local = crate::read::under(root, "/etc/slurm/slurm.conf");
    let cache = candidates
        .iter()
        .find(|p| {
            let s = p.display().to_string();
            s.contains("/conf-cache/") || p.starts_with(crate::read::under(root, "/run/slurm/conf"))
        })
        .cloned();
    match cache {
        Some(cache) if candidates.contains(&local) => {
            let named = files::read(&local).is_ok_and(|c| c.get("ClusterName").is_some());
            let breaks = if named {
                ""
            } else {
                " It has no ClusterName, so scontrol, srun and sinfo on this node fail \
                 ('ClusterName needs to be specified')."
            };
            notes.push(format!(
                "{} shadows the configless cache {}: slurmd uses the cache (its controller's \
             slurm.conf), while scontrol, srun and sinfo on this node read the local file.{breaks} \
             Put Slurm settings in the controller's slurm.conf (or an Include there) and \
             remove {}; read here: the cache",
                local.display(),
                cache.display(),
                local.display()
            ));
            (Some(cache), notes)
        }
        _ => (candidates.first().cloned(), notes),
    }
}

/// The settings of the slurm.conf slurmd on this node uses now (with its includes; a configless
/// node's cache, which slurmd rewrites at each reconfigure), with no call to the controller: the
/// prolog reads it at every run. Err: no slurm.conf could be read.
pub fn settings_now(root: &Path, slurm_conf: Option<&str>) -> Result<Settings, String> {
    let all = files::candidates(root, slurm_conf, &[]);
    let (path, _) = in_use(root, slurm_conf, &all);
    let path = path.ok_or_else(|| "no slurm.conf found on this node".to_string())?;
    let conf = files::read(&path).map_err(|e| e.to_string())?;
    Ok(Settings::from_file(&conf))
}

/// The controller's settings (`scontrol show config`, bounded by `deadline`): what slurmd and
/// slurmctld have since the last `scontrol reconfigure`, whatever the files say now.
pub fn settings_live(
    scontrol: &Path,
    slurm_conf: Option<&str>,
    deadline: Duration,
) -> Result<Settings, String> {
    show::scontrol_show_config(scontrol, slurm_conf, deadline).map(|c| Settings::from_show(&c))
}

impl Sources {
    /// Reads them all. `scontrol`: None skips the controller (tests, or no Slurm client).
    pub fn read(
        root: &Path,
        slurm_conf: Option<&str>,
        scontrol: Option<&Path>,
        deadline: Duration,
    ) -> Sources {
        let mut s = Sources::default();
        if let Some(sc) = scontrol {
            match settings_live(sc, slurm_conf, deadline) {
                Ok(live) => s.live = Some(live),
                Err(e) => s.live_error = Some(e),
            }
        }
        let spool = s.live.as_ref().map(|l| l.slurmd_spool_dir.as_slice());
        let all = files::candidates(root, slurm_conf, spool.unwrap_or_default());
        let (in_use, notes) = in_use(root, slurm_conf, &all);
        s.notes = notes;
        // The file in use first, so `effective` and `conf` are that file's.
        let ordered = in_use
            .iter()
            .chain(all.iter().filter(|p| Some(*p) != in_use.as_ref()));
        for path in ordered {
            match files::read(path) {
                Ok(c) => {
                    s.files.push(Settings::from_file(&c));
                    s.conf.get_or_insert(c);
                }
                Err(e) => s.file_errors.push(e.to_string()),
            }
        }
        s
    }

    /// The settings to go by: the controller's, else the file in use.
    pub fn effective(&self) -> Option<&Settings> {
        self.live.as_ref().or_else(|| self.files.first())
    }
}

#[cfg(test)]
mod tests {
    use super::entries::{called_programs, reaching};
    use super::*;
    use crate::test_support::scratch_dir;

    fn data(name: &str) -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/slurm-config")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn nothing_read_is_slurm_s_defaults() {
        let d = Settings::default();
        assert_eq!(d.source, "");
        assert_eq!(d.prolog_epilog_timeout, None);
        assert_eq!((d.batch_start_timeout, d.message_timeout), (10, 10));
        assert_eq!(d.health_check_timeout, Some(60));
        assert!(d.prologs.is_empty() && d.origin.is_empty() && d.proctrack.is_none());
    }
    #[test]
    fn every_major_s_output_gives_the_timeout_flags_and_prologs() {
        for mm in ["22.05", "24.11", "26.05"] {
            let s = Settings::from_show(&ShowConfig::parse(&data(&format!("{mm}-single.txt"))));
            assert_eq!(s.prolog_epilog_timeout, Some(120), "{mm}");
            assert_eq!(s.prolog_flags, ["Alloc"], "{mm}");
            assert_eq!(s.prologs, ["/usr/sbin/nccl-check-prolog"], "{mm}");
            let prog = Path::new("/usr/sbin/nccl-check-prolog");
            assert_eq!(
                s.entries_running(prog, Path::new("/")),
                ["Prolog=/usr/sbin/nccl-check-prolog"],
                "{mm}"
            );
            let s = Settings::from_show(&ShowConfig::parse(&data(&format!("{mm}-list.txt"))));
            assert_eq!(s.prolog_epilog_timeout, None, "{mm}: unset = no limit");
            assert_eq!(s.entries_running(prog, Path::new("/")).len(), 1, "{mm}");
        }
    }

    /// BatchStartTimeout and MessageTimeout as every major prints them (`10 sec`); no
    /// HealthCheckTimeout before 26.05 is Slurm's fixed 60 s; 26.05's `0 sec` is not a value
    /// slurmd runs with (unknown).
    #[test]
    fn every_major_s_output_gives_the_batch_start_message_and_health_check_timeouts() {
        for mm in ["22.05", "24.11", "26.05"] {
            let s = Settings::from_show(&ShowConfig::parse(&data(&format!("{mm}-single.txt"))));
            assert_eq!((s.batch_start_timeout, s.message_timeout), (10, 10), "{mm}");
            let health = if mm == "26.05" { None } else { Some(60) };
            assert_eq!(s.health_check_timeout, health, "{mm}");
        }
        let s = Settings::from_show(&ShowConfig::parse(
            "BatchStartTimeout       = 0 sec\nMessageTimeout          = 30 sec\n\
             HealthCheckTimeout      = 20 sec\n",
        ));
        assert_eq!(
            (
                s.batch_start_timeout,
                s.message_timeout,
                s.health_check_timeout
            ),
            (0, 30, Some(20))
        );
    }

    /// In a slurm.conf: each value with its file:line; unset are Slurm's defaults; a
    /// HealthCheckTimeout of 0 is reset to 60 as Slurm does.
    #[test]
    fn the_file_s_timeouts_come_with_their_lines_and_slurm_s_defaults() {
        let d = scratch_dir("slurm-config-timeouts");
        std::fs::create_dir_all(d.join("etc/slurm")).expect("mkdir");
        let conf = d.join("etc/slurm/slurm.conf");
        std::fs::write(
            &conf,
            "ClusterName=c\nBatchStartTimeout=1\nHealthCheckTimeout=0\nPrologEpilogTimeout=90\n",
        )
        .expect("w");
        let s = settings_now(&d, None).expect("read");
        assert_eq!(
            (
                s.batch_start_timeout,
                s.message_timeout,
                s.health_check_timeout
            ),
            (1, 10, Some(60))
        );
        assert!(s
            .origin_of("BatchStartTimeout")
            .ends_with("etc/slurm/slurm.conf:2"));
        assert!(s.origin_of("PrologEpilogTimeout").ends_with("slurm.conf:4"));
        assert_eq!(s.origin_of("MessageTimeout"), s.source, "unset: the file");
        std::fs::write(&conf, "ClusterName=c\n").expect("w");
        let s = settings_now(&d, None).expect("read");
        assert_eq!(
            s,
            Settings {
                source: s.source.clone(),
                ..Settings::default()
            }
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_wildcard_prolog_dir_with_a_link_or_a_wrapper_script_runs_the_program() {
        let d = scratch_dir("slurm-config-runs");
        std::fs::create_dir_all(d.join("usr/sbin")).expect("mkdir");
        std::fs::create_dir_all(d.join("etc/slurm/prolog.d")).expect("mkdir");
        std::fs::write(d.join("usr/sbin/nccl-check-prolog"), "bin").expect("w");
        let prog = Path::new("/usr/sbin/nccl-check-prolog");
        let s = Settings {
            prologs: vec!["/etc/slurm/prolog.d/*".into()],
            ..Settings::default()
        };
        assert!(s.entries_running(prog, &d).is_empty());
        std::os::unix::fs::symlink(
            "/usr/sbin/nccl-check-prolog",
            d.join("etc/slurm/prolog.d/50-gate"),
        )
        .expect("symlink");
        assert_eq!(
            s.entries_running(prog, &d),
            ["Prolog=/etc/slurm/prolog.d/*"]
        );
        // The refusal must name the link, never ask to remove the site's glob.
        assert_eq!(
            reaching("/etc/slurm/prolog.d/*", prog, &d),
            [PathBuf::from("/etc/slurm/prolog.d/50-gate")]
        );
        assert!(reaching("/usr/sbin/nccl-check-prolog", prog, &d).is_empty());
        std::fs::write(d.join("etc/slurm/prolog.d/10-site.sh"), "#!/bin/sh\ntrue\n").expect("w");
        assert_eq!(reaching("/etc/slurm/prolog.d/*", prog, &d).len(), 1);
        std::fs::remove_file(d.join("etc/slurm/prolog.d/50-gate")).expect("rm");
        std::fs::write(
            d.join("etc/slurm/prolog.d/50-gate.sh"),
            "#!/bin/sh\nexec /usr/sbin/nccl-check-prolog \"$@\"\n",
        )
        .expect("w");
        assert_eq!(s.entries_running(prog, &d).len(), 1);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_configless_node_s_included_prolog_is_found_without_a_controller() {
        let d = scratch_dir("slurm-config-configless");
        let cache = d.join("var/spool/slurmd/conf-cache");
        std::fs::create_dir_all(&cache).expect("mkdir");
        std::fs::write(
            cache.join("slurm.conf"),
            "ClusterName=c\nInclude prolog.conf\nGresTypes=gpu\n",
        )
        .expect("w");
        std::fs::write(
            cache.join("prolog.conf"),
            "Prolog=/usr/sbin/nccl-check-prolog\nPrologFlags=Alloc\n",
        )
        .expect("w");
        let s = Sources::read(&d, None, None, Duration::from_secs(1));
        assert!(s.live.is_none() && s.file_errors.is_empty(), "{s:?}");
        let prog = Path::new("/usr/sbin/nccl-check-prolog");
        let r = s.running(prog, &d);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(
            r[0].contains("conf-cache/prolog.conf:1: Prolog=/usr/sbin/nccl-check-prolog"),
            "{r:?}"
        );
        let e = s.effective().expect("settings");
        assert!(e.has_gres_gpu() && e.prolog_flags == ["Alloc"]);
        assert_eq!(
            s.conf.as_ref().map(|c| c.main.clone()),
            Some(cache.join("slurm.conf"))
        );
        std::fs::remove_dir_all(&d).ok();
    }

    /// A Prolog= with a one-letter typo, a glob whose link points nowhere, a
    /// non-executable epilog and a wrapper that calls a missing program are each named.
    #[test]
    fn entries_slurm_cannot_run_are_named_with_a_hint() {
        use std::os::unix::fs::PermissionsExt;
        let d = scratch_dir("slurm-config-entries");
        std::fs::create_dir_all(d.join("usr/sbin")).expect("mkdir");
        std::fs::create_dir_all(d.join("etc/slurm/prolog.d")).expect("mkdir");
        let prog = d.join("usr/sbin/nccl-check-prolog");
        std::fs::write(&prog, "bin").expect("w");
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let program = Path::new("/usr/sbin/nccl-check-prolog");
        let ok = Settings {
            prologs: vec!["/usr/sbin/nccl-check-prolog".into()],
            ..Settings::default()
        };
        assert!(ok.entry_problems(program, &d).is_empty());
        let typo = Settings {
            source: "scontrol show config".into(),
            prologs: vec!["/usr/sbin/nccl-check-prolg".into()],
            ..Settings::default()
        };
        let p = typo.entry_problems(program, &d);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("Prolog=/usr/sbin/nccl-check-prolg (scontrol show config): no such file (did you mean /usr/sbin/nccl-check-prolog?)"),
            "{p:?}"
        );
        std::os::unix::fs::symlink(
            "/usr/sbin/nccl-check-prolog-gone",
            d.join("etc/slurm/prolog.d/50-gate"),
        )
        .expect("symlink");
        std::fs::write(
            d.join("etc/epilog.sh"),
            "#!/bin/sh
",
        )
        .expect("w");
        std::fs::write(
            d.join("etc/slurm/prolog.d/60-wrap.sh"),
            "#!/bin/sh
exec /usr/sbin/nccl-check-prolg --epilog \"$@\"\n",
        )
        .expect("w");
        std::fs::set_permissions(
            d.join("etc/slurm/prolog.d/60-wrap.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        let s = Settings {
            prologs: vec!["/etc/slurm/prolog.d/*".into()],
            epilogs: vec!["/etc/epilog.sh".into()],
            ..Settings::default()
        };
        let p = s.entry_problems(program, &d);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(
            p[0].contains("Prolog=/etc/slurm/prolog.d/* (/etc/slurm/prolog.d/50-gate)")
                && p[0].contains("a link to nothing"),
            "{p:?}"
        );
        assert!(
            p[1].contains("calls /usr/sbin/nccl-check-prolg: no such file (did you mean"),
            "{p:?}"
        );
        assert!(
            p[2].starts_with("Epilog=/etc/epilog.sh") && p[2].contains("not executable"),
            "{p:?}"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    /// The admin page's three lines in a local /etc/slurm/slurm.conf on a configless
    /// node are not read as the config in use; the cache is, and the local file is named.
    #[test]
    fn a_local_slurm_conf_beside_a_configless_cache_is_named_and_the_cache_read() {
        let d = scratch_dir("slurm-config-shadow");
        let cache = d.join("run/slurm/conf");
        std::fs::create_dir_all(&cache).expect("mkdir");
        std::fs::create_dir_all(d.join("etc/slurm")).expect("mkdir");
        std::fs::write(
            cache.join("slurm.conf"),
            "ClusterName=c\nGresTypes=gpu\nPrologEpilogTimeout=15\n",
        )
        .expect("w");
        std::fs::write(
            d.join("etc/slurm/slurm.conf"),
            "Prolog=/usr/sbin/nccl-check-prolog\nPrologFlags=Alloc\nPrologEpilogTimeout=120\n",
        )
        .expect("w");
        let s = Sources::read(&d, None, None, Duration::from_secs(1));
        assert_eq!(
            s.conf.as_ref().map(|c| c.main.clone()),
            Some(cache.join("slurm.conf"))
        );
        assert!(s.effective().is_some_and(Settings::has_gres_gpu), "{s:?}");
        assert_eq!(s.notes.len(), 1, "{s:?}");
        assert!(
            s.notes[0].contains("etc/slurm/slurm.conf shadows the configless cache")
                && s.notes[0].contains("no ClusterName"),
            "{s:?}"
        );
        // The run-time read takes the same file.
        let now = settings_now(&d, None).expect("read");
        assert_eq!(now.prolog_epilog_timeout, Some(15));
        let at = now.origin_of("PrologEpilogTimeout");
        assert!(at.ends_with("run/slurm/conf/slurm.conf:3"), "{at}");
        // Without a cache the local file is the one in use, and nothing is said.
        std::fs::remove_dir_all(&cache).expect("rm");
        let s = Sources::read(&d, None, None, Duration::from_secs(1));
        assert!(s.notes.is_empty(), "{s:?}");
        let now = settings_now(&d, None).expect("read");
        assert_eq!(now.prolog_epilog_timeout, Some(120));
        std::fs::remove_dir_all(&d).ok();
    }

    /// slurmd sets SLURM_CONF for its prologs to the file it uses: that file wins, cache or not.
    #[test]
    fn slurm_conf_names_the_file_in_use_and_a_wrapper_s_comment_is_no_call() {
        let d = scratch_dir("slurm-config-in-use");
        let cache = d.join("var/spool/slurmd/conf-cache");
        std::fs::create_dir_all(&cache).expect("mkdir");
        std::fs::create_dir_all(d.join("etc/slurm")).expect("mkdir");
        std::fs::write(cache.join("slurm.conf"), "PrologEpilogTimeout=15\n").expect("w");
        std::fs::write(
            d.join("etc/slurm/slurm.conf"),
            "ClusterName=c\nPrologEpilogTimeout=65534\n",
        )
        .expect("w");
        let t = settings_now(&d, Some("/etc/slurm/slurm.conf")).expect("read");
        assert_eq!(t.prolog_epilog_timeout, None, "65534 is unset: no limit");
        let t = settings_now(&d, None).expect("read");
        let why = "without SLURM_CONF the cache is in use";
        assert_eq!(t.prolog_epilog_timeout, Some(15), "{why}");
        let w = d.join("wrap.sh");
        std::fs::write(
            &w,
            "#!/bin/sh\n# was /usr/sbin/nccl-check-old\nexec /usr/sbin/nccl-check-prolog --epilog\n",
        )
        .expect("w");
        assert_eq!(called_programs(&w), ["/usr/sbin/nccl-check-prolog"]);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_missing_scontrol_is_an_error_message() {
        let e = show::scontrol_show_config(
            Path::new("/nonexistent/scontrol"),
            None,
            Duration::from_secs(2),
        )
        .expect_err("no scontrol");
        assert!(e.contains("/nonexistent/scontrol"), "{e}");
    }
}
