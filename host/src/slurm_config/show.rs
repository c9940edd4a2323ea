//! `scontrol show config` as text, in each format Slurm 22.05 to 26.05 prints: `Key = value`
//! lines after a `Configuration data as of ...` header, lists either as one comma-separated
//! value (22.05: `Prolog = /a,/b`) or one line per item (24.11+: `Prolog[0] = /a`), `(null)` for
//! unset, and sections of plugin settings after a blank line (the first occurrence of a key wins);
//! and the one bounded call that asks the controller for it ([`scontrol_show_config`]).

use crate::supervise::{self, Ending, Output, Spec};
use std::path::Path;
use std::time::Duration;

/// The parsed output: keys in their order, values as printed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShowConfig {
    entries: Vec<(String, String)>,
}

/// Longest output read (a real one is about 10 KB).
pub const SHOW_MAX: usize = 1 << 20;

impl ShowConfig {
    /// Every `Key = value` line; other lines (header, section titles, `Slurmctld(primary) at
    /// ... is UP`) are skipped.
    pub fn parse(text: &str) -> ShowConfig {
        let entries = text
            .lines()
            .filter_map(|line| {
                let (k, v) = line.split_once('=')?;
                let k = k.trim();
                let ok = !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_[]().".contains(c));
                ok.then(|| (k.to_string(), v.trim().to_string()))
            })
            .collect();
        ShowConfig { entries }
    }

    /// True when the text held no setting (scontrol failed, or printed an error).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of `key` (case-insensitive); None when absent or `(null)`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
            .filter(|v| !is_unset(v))
    }

    /// The items of a list setting: `Key = a,b` (22.05) or `Key[0] = a`, `Key[1] = b` (24.11+).
    pub fn list(&self, key: &str) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(k, v)| {
                let base = k.split('[').next().unwrap_or(k);
                let plain_or_indexed = k.len() == base.len() || k.ends_with(']');
                base.eq_ignore_ascii_case(key) && plain_or_indexed && !is_unset(v)
            })
            .flat_map(|(_, v)| split_list(v))
            .collect()
    }
}

/// `(null)` and the empty string: how scontrol prints an unset value.
fn is_unset(v: &str) -> bool {
    v.is_empty() || v == "(null)"
}

/// A comma-separated list, items trimmed, empty items dropped.
pub fn split_list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// `scontrol show config`, bounded by `deadline`, with only `SLURM_CONF` (when given) in its
/// environment. Err: why there is no answer (no controller, no scontrol, timeout).
pub fn scontrol_show_config(
    scontrol: &Path,
    slurm_conf: Option<&str>,
    deadline: Duration,
) -> Result<ShowConfig, String> {
    let what = format!("{} show config", scontrol.display());
    let mut spec = Spec::new(scontrol, vec!["show".into(), "config".into()], deadline)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    if let Some(c) = slurm_conf {
        spec = spec.env("SLURM_CONF", c);
    }
    spec.stdout = Output::Tail {
        max_bytes: SHOW_MAX,
    };
    spec.stderr = Output::Tail { max_bytes: 4096 };
    let done = supervise::run(spec).map_err(|e| format!("{what}: {}", e.error))?;
    let stderr = String::from_utf8_lossy(&done.stderr);
    let last = stderr.lines().last().unwrap_or("").trim().to_string();
    match done.ending {
        Ending::Exited(0) => Some(ShowConfig::parse(&String::from_utf8_lossy(&done.stdout)))
            .filter(|c| !c.is_empty())
            .ok_or_else(|| format!("{what}: printed no setting")),
        Ending::KilledAtDeadline => {
            Err(format!("{what}: no answer in {} s", deadline.as_secs_f64()))
        }
        Ending::Exited(c) => Err(format!("{what}: exit status {c}: {last}")),
        Ending::Signaled(s) => Err(format!("{what}: killed by signal {s}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/slurm-config")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn the_22_05_format_gives_single_and_comma_separated_prologs() {
        let c = ShowConfig::parse(&data("22.05-single.txt"));
        assert_eq!(c.list("Prolog"), ["/usr/sbin/nccl-check-prolog"]);
        assert_eq!(c.get("PrologEpilogTimeout"), Some("120"));
        assert_eq!(c.list("PrologFlags"), ["Alloc"]);
        assert!(c.list("Epilog").is_empty(), "(null) is unset");
        let c = ShowConfig::parse(&data("22.05-list.txt"));
        assert_eq!(
            c.list("Prolog"),
            ["/etc/slurm/prolog.d/*", "/usr/sbin/nccl-check-prolog"]
        );
        assert_eq!(c.list("Epilog"), ["/etc/slurm/epilog.sh"]);
        assert_eq!(c.list("PrologFlags"), ["Alloc", "Contain"]);
        assert_eq!(c.get("PrologEpilogTimeout"), Some("65534"));
        assert!(c.get("SlurmdSpoolDir").is_some_and(|s| s.ends_with("/%n")));
        // PrologSlurmctld and SrunProlog are other settings, not Prolog.
        assert_eq!(c.list("Prolog").len(), 2);
    }

    #[test]
    fn the_indexed_list_format_of_24_11_and_26_05_gives_every_prolog() {
        for mm in ["24.11", "26.05"] {
            let c = ShowConfig::parse(&data(&format!("{mm}-single.txt")));
            assert_eq!(c.list("Prolog"), ["/usr/sbin/nccl-check-prolog"], "{mm}");
            assert_eq!(c.get("PrologEpilogTimeout"), Some("120"), "{mm}");
            let c = ShowConfig::parse(&data(&format!("{mm}-list.txt")));
            assert_eq!(
                c.list("Prolog"),
                ["/etc/slurm/prolog.d/*", "/usr/sbin/nccl-check-prolog"],
                "{mm}"
            );
            assert_eq!(c.list("Epilog"), ["/etc/slurm/epilog.sh"], "{mm}");
            assert_eq!(c.list("PrologFlags"), ["Alloc", "Contain"], "{mm}");
        }
    }

    #[test]
    fn an_error_or_an_empty_output_holds_no_setting() {
        assert!(ShowConfig::parse("").is_empty());
        assert!(ShowConfig::parse(
            "scontrol: error: fetch_config: DNS SRV lookup failed\nslurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)\n"
        )
        .is_empty());
    }
}
