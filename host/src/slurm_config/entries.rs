//! Which Prolog=, Epilog= and HealthCheckProgram= entries run a program (the path itself, a
//! wildcard or link that reaches it, a small wrapper script that calls it), what the admin
//! removes for each, and what slurmd would fail on when it runs them.

use super::{files, Settings, Sources};
use crate::read::not_runnable;
use std::path::{Path, PathBuf};

impl Settings {
    /// The Prolog= and Epilog= entries that run `program` (an installed path such as
    /// `/usr/sbin/nccl-check-prolog`): the path itself, a wildcard or link that reaches it, or
    /// a small script that calls it. `root` is `/` except in tests.
    pub fn entries_running(&self, program: &Path, root: &Path) -> Vec<String> {
        self.entries()
            .filter(|(_, e)| runs(e, program, root))
            .map(|(kind, e)| format!("{kind}={e}"))
            .collect()
    }

    /// Each Prolog= and Epilog= entry with its kind, the prologs first.
    fn entries(&self) -> impl Iterator<Item = (&'static str, &String)> {
        let prologs = self.prologs.iter().map(|e| ("Prolog", e));
        prologs.chain(self.epilogs.iter().map(|e| ("Epilog", e)))
    }

    /// `HealthCheckProgram=` when it runs `program` (the same tests as [`Self::entries_running`]).
    pub fn health_check_running(&self, program: &Path, root: &Path) -> Option<String> {
        let h = self.health_check_program.as_deref()?;
        runs(h, program, root).then(|| format!("HealthCheckProgram={h}"))
    }

    /// What slurmd would fail on when it runs each Prolog=/Epilog= entry as it will (wildcards
    /// expanded, links followed, a wrapper script's calls of nccl-check programs): a file that is
    /// missing or not executable fails every job's prolog and slurmd drains the node with
    /// 'Prolog error'. `program` names what the entries should reach (for a typo's hint); `root`
    /// is `/` except in tests. One line per problem, naming the entry and its source.
    pub fn entry_problems(&self, program: &Path, root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for (kind, e) in self.entries() {
            let at = self.origin_of(kind);
            let globbed = e.contains(['*', '?', '[']);
            let matched = files::expand(&crate::read::under(root, e));
            if globbed && matched.is_empty() {
                out.push(format!(
                    "{kind}={e} ({at}): {EMPTY_GLOB} {}",
                    empty_glob_does(kind)
                ));
            }
            for f in matched {
                let shown = if globbed {
                    format!("{kind}={e} ({})", shown_path(root, &f))
                } else {
                    format!("{kind}={e}")
                };
                if let Some(why) = not_runnable(&f) {
                    out.push(format!(
                        "{shown} ({at}): {why}{}; slurmd fails every job's {} on it and drains \
         the node ('Prolog error')",
                        hint(e, program),
                        kind.to_lowercase()
                    ));
                    continue;
                }
                for call in called_programs(&f) {
                    if let Some(why) = not_runnable(&crate::read::under(root, &call)) {
                        out.push(format!(
                            "{shown} ({at}) calls {call}: {why}{}; every job's {} fails and \
         slurmd drains the node ('Prolog error')",
                            hint(&call, program),
                            kind.to_lowercase()
                        ));
                    }
                }
            }
        }
        out
    }
}

/// Why a wildcard entry that matches no file is a problem (observed on 22.05: slurmd's
/// `run_script` takes glob(3)'s GLOB_NOMATCH as 'Unable to run' and fails the script).
const EMPTY_GLOB: &str = "matches no file:";

/// What slurmd does with a `kind` (Prolog, Epilog) entry it cannot run.
fn empty_glob_does(kind: &str) -> String {
    format!(
        "slurmd fails every job's {} on a pattern that matches nothing and drains the node \
         ('{kind} error')",
        kind.to_lowercase()
    )
}

/// `f` as the node names it (without the test root).
fn shown_path(root: &Path, f: &Path) -> String {
    let rel = f.strip_prefix(root).unwrap_or(f);
    format!("/{}", rel.display()).replace("//", "/")
}

/// The last component of `p`, as text.
fn file_name(p: &Path) -> Option<String> {
    p.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// A hint when the missing name looks like the program's with a typo.
fn hint(entry: &str, program: &Path) -> String {
    match (file_name(program), file_name(Path::new(entry))) {
        (Some(n), Some(b)) if b != n && b.starts_with("nccl-check") => {
            format!(" (did you mean {}?)", program.display())
        }
        _ => String::new(),
    }
}

/// The absolute paths of nccl-check programs a small script calls (a site's wrapper:
/// `exec /usr/sbin/nccl-check-prolog "$@"`); none for a binary or a large file.
pub(super) fn called_programs(f: &Path) -> Vec<String> {
    let Ok(text) = crate::read::text(f, SCRIPT_MAX) else {
        return Vec::new();
    };
    if !text.starts_with("#!") {
        return Vec::new();
    }
    let mut out: Vec<String> = Vec::new();
    for line in text.lines().skip(1) {
        let code = line.split('#').next().unwrap_or("");
        for w in code.split(|c: char| c.is_whitespace() || "\"';|&()`".contains(c)) {
            let named = file_name(Path::new(w)).is_some_and(|n| n.starts_with("nccl-check"));
            if w.starts_with('/') && named && !out.iter().any(|o| o == w) {
                out.push(w.to_string());
            }
        }
    }
    out
}

/// Largest script looked into for a call of the program (a wrapper script is small).
const SCRIPT_MAX: u64 = 256 * 1024;

/// The files of a wildcard or directory entry (`Prolog=/etc/slurm/prolog.d/*`) that run
/// `program`: a link to it or a script calling it, as paths on the node (without `root`). Empty
/// for an entry that names the program or one file: then the entry itself is what runs it.
pub(super) fn reaching(entry: &str, program: &Path, root: &Path) -> Vec<PathBuf> {
    if !entry.contains(['*', '?', '[']) {
        return Vec::new();
    }
    let under = |p: &str| crate::read::under(root, p);
    files::expand(&under(entry))
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(root).map(Path::to_path_buf).unwrap_or(f);
            Path::new("/").join(rel)
        })
        .filter(|f| runs(&f.display().to_string(), program, root))
        .collect()
}

/// The package's health check program, installed beside the prolog.
fn recheck_beside(prolog: &Path) -> PathBuf {
    prolog.with_file_name("nccl-check-recheck")
}

/// What the admin removes for an entry `Kind=value` that runs `program`: the link or file that
/// reaches it from a wildcard entry (the entry itself also runs the site's own), else the line.
fn what_to_remove(entry: &str, program: &Path, root: &Path) -> String {
    let (kind, value) = entry.split_once('=').unwrap_or((entry, ""));
    let through = reaching(value, program, root);
    if !through.is_empty() {
        let files: Vec<String> = through.iter().map(|p| p.display().to_string()).collect();
        let all = files::expand(&crate::read::under(root, value)).len();
        if all <= through.len() {
            // Removing only the link would leave a pattern that matches nothing.
            return format!(
                " -> through {}, the only file it matches: remove that file and the {kind}= line \
                 (or this entry of its list); a {kind}= pattern left matching nothing: {}",
                files.join(", "),
                empty_glob_does(kind)
            );
        }
        return format!(
            " -> through {}: remove that file, keep the {kind}= line (it runs the site's others)",
            files.join(", ")
        );
    }
    match kind {
        "HealthCheckProgram" => {
            " -> remove the HealthCheckProgram= line (and HealthCheckInterval=, \
                                 HealthCheckNodeState= if only it used them)"
                .to_string()
        }
        _ => format!(" -> remove that {kind}= line (or this entry of its list)"),
    }
}

/// Whether the Prolog entry `entry` runs `program`.
fn runs(entry: &str, program: &Path, root: &Path) -> bool {
    let name = file_name(program).unwrap_or_default();
    let name = name.as_str();
    if !name.is_empty() && entry.contains(name) {
        return true;
    }
    let under = |p: &str| crate::read::under(root, p);
    let want = std::fs::canonicalize(under(&program.display().to_string())).ok();
    files::expand(&under(entry)).iter().any(|f| {
        if want.is_some() && std::fs::canonicalize(f).ok() == want {
            return true;
        }
        // A link to the program that is already gone (a second removal attempt) still runs it.
        if std::fs::read_link(f).is_ok_and(|t| t.to_string_lossy().contains(name)) {
            return true;
        }
        crate::read::text(f, SCRIPT_MAX).is_ok_and(|t| !name.is_empty() && t.contains(name))
    })
}

impl Sources {
    /// Every place that runs `program` as Prolog= or Epilog=, as `source: Prolog=...`.
    pub fn running(&self, program: &Path, root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for s in self.live.iter().chain(&self.files) {
            let health = s.health_check_running(&recheck_beside(program), root);
            for e in s.entries_running(program, root).into_iter().chain(health) {
                let at = s.origin_of(e.split('=').next().unwrap_or_default());
                out.push(format!("{at}: {e}{}", what_to_remove(&e, program, root)));
            }
        }
        out
    }
}
