//! Slurm's config files as slurmd on this node reads them: which slurm.conf is in use (the
//! `$SLURM_CONF`, `/etc/slurm`, or a configless node's cache under `/run/slurm/conf` or
//! `<SlurmdSpoolDir>/conf-cache`), its `Include` lines followed (relative to the including
//! file's directory, wildcards expanded as Slurm does), and its global `Key=Value` settings.

use std::io;
use std::path::{Path, PathBuf};

/// Largest config file read; larger is an error, never read whole.
pub const FILE_MAX: u64 = 4 << 20;
/// Deepest `Include` chain followed (Slurm's own limit is smaller in practice).
const INCLUDE_DEPTH: usize = 8;
/// Most files one slurm.conf may pull in.
const FILES_MAX: usize = 256;

/// Spool directories a configless slurmd caches its config under when `SlurmdSpoolDir` is not
/// known: Slurm's built-in default, and the ones Debian's and RHEL's example configs use.
pub const DEFAULT_SPOOL_DIRS: &[&str] = &[
    "/var/spool/slurmd",
    "/var/spool/slurm/d",
    "/var/spool/slurm/slurmd",
    "/var/lib/slurm/slurmd",
    "/var/lib/slurm-llnl/slurmd",
];

/// One line of a config file, with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfLine {
    pub file: PathBuf,
    pub line: usize,
    pub text: String,
}

/// A slurm.conf with every `Include` in place.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfText {
    pub main: PathBuf,
    pub lines: Vec<ConfLine>,
    /// Every file read, the main one first.
    pub files: Vec<PathBuf>,
}

/// Lines whose first key opens a record (a node, a partition ...): their other keys belong to
/// that record, not to the global settings.
const RECORD_KEYS: &[&str] = &[
    "nodename",
    "partitionname",
    "nodeset",
    "frontendname",
    "downnodes",
    "switchname",
    "slurmctldhost",
];

impl ConfText {
    /// The text with the includes inlined (for readers of `NodeName=` lines).
    pub fn text(&self) -> String {
        self.lines.iter().map(|l| format!("{}\n", l.text)).collect()
    }

    /// Every global setting of `key` (case-insensitive), in file order: `(value, line)`.
    pub fn all(&self, key: &str) -> Vec<(String, &ConfLine)> {
        let mut out = Vec::new();
        for l in &self.lines {
            let pairs = pairs(&l.text);
            if pairs
                .first()
                .is_some_and(|(k, _)| RECORD_KEYS.contains(&k.to_ascii_lowercase().as_str()))
            {
                continue;
            }
            for (k, v) in pairs {
                if k.eq_ignore_ascii_case(key) {
                    out.push((v, l));
                }
            }
        }
        out
    }

    /// The effective value of `key`: the last one, as Slurm takes it.
    pub fn get(&self, key: &str) -> Option<(String, &ConfLine)> {
        self.all(key).pop()
    }
}

/// `Key=Value` pairs of one line, comments dropped; a value may be double-quoted.
fn pairs(line: &str) -> Vec<(String, String)> {
    let line = line.split('#').next().unwrap_or("");
    let mut out = Vec::new();
    let mut rest = line.trim();
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            break;
        }
        let after = rest[eq + 1..].trim_start();
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"').unwrap_or(q.len());
            (&q[..end], q.get(end + 1..).unwrap_or(""))
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        out.push((key.to_string(), value.to_string()));
        rest = next.trim_start();
    }
    out
}

/// The path an `Include` line names, when the line is one (`include FILE`, any case).
fn include_target(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let (word, rest) = t.split_at(t.find(char::is_whitespace)?);
    (word.eq_ignore_ascii_case("include") && !word.contains('='))
        .then(|| rest.split('#').next().unwrap_or("").trim())
        .filter(|p| !p.is_empty())
}

/// `main` and every file it includes, each read bounded.
pub fn read(main: &Path) -> io::Result<ConfText> {
    let mut conf = ConfText {
        main: main.to_path_buf(),
        lines: Vec::new(),
        files: Vec::new(),
    };
    read_into(main, 0, &mut conf)?;
    Ok(conf)
}

fn read_into(path: &Path, depth: usize, conf: &mut ConfText) -> io::Result<()> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
    if depth > INCLUDE_DEPTH {
        return Err(bad(format!(
            "{}: Include nested deeper than {INCLUDE_DEPTH}",
            path.display()
        )));
    }
    if conf.files.len() >= FILES_MAX {
        return Err(bad(format!("more than {FILES_MAX} included files")));
    }
    let text = crate::read::text(path, FILE_MAX)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    conf.files.push(path.to_path_buf());
    let dir = path.parent().unwrap_or(Path::new("/"));
    for (i, line) in text.lines().enumerate() {
        if let Some(target) = include_target(line) {
            // An absolute target replaces `dir` (Path::join), a relative one is under it.
            for f in expand(&dir.join(target)) {
                read_into(&f, depth + 1, conf)?;
            }
            continue;
        }
        conf.lines.push(ConfLine {
            file: path.to_path_buf(),
            line: i + 1,
            text: line.to_string(),
        });
    }
    Ok(())
}

/// A path with Slurm's wildcards (`*`, `?`, `[...]`) expanded, sorted; a plain path as is
/// (whether or not it exists: reading it then says what is wrong).
pub fn expand(p: &Path) -> Vec<PathBuf> {
    let s = p.display().to_string();
    if !s.contains(['*', '?', '[']) {
        return vec![p.to_path_buf()];
    }
    let mut v: Vec<PathBuf> = glob::glob(&s)
        .map(|g| g.filter_map(Result::ok).take(FILES_MAX).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Every slurm.conf this node may be using, in the order slurmd would take them: `$SLURM_CONF`,
/// `/etc/slurm/slurm.conf`, a configless node's cache (`/run/slurm/conf`, then
/// `<spool>/conf-cache` for each spool directory given and the defaults), Debian's old
/// `/etc/slurm-llnl`. Only the existing ones; `root` is `/` except in tests.
pub fn candidates(root: &Path, slurm_conf: Option<&str>, spool_dirs: &[String]) -> Vec<PathBuf> {
    let under = |abs: &str| crate::read::under(root, abs);
    let mut all: Vec<PathBuf> = Vec::new();
    if let Some(c) = slurm_conf.filter(|c| c.starts_with('/')) {
        all.push(under(c));
    }
    all.push(under("/etc/slurm/slurm.conf"));
    all.push(under("/run/slurm/conf/slurm.conf"));
    for d in spool_dirs
        .iter()
        .map(String::as_str)
        .chain(DEFAULT_SPOOL_DIRS.iter().copied())
        .filter(|d| d.starts_with('/'))
    {
        all.push(under(&format!(
            "{}/conf-cache/slurm.conf",
            d.trim_end_matches('/')
        )));
    }
    all.push(under("/etc/slurm-llnl/slurm.conf"));
    // Each file once (/run/slurm/conf links to the spool's cache), under the name slurmd uses.
    let (mut seen, mut out): (Vec<PathBuf>, Vec<PathBuf>) = (Vec::new(), Vec::new());
    for p in all {
        let real = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        if p.is_file() && !seen.contains(&real) {
            seen.push(real);
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::scratch_dir;

    #[test]
    fn pairs_split_a_line_into_settings() {
        assert_eq!(
            pairs("Prolog=/a/b PrologFlags=Alloc,Contain # comment"),
            [
                ("Prolog".to_string(), "/a/b".to_string()),
                ("PrologFlags".to_string(), "Alloc,Contain".to_string())
            ]
        );
        assert_eq!(
            pairs("Prolog = \"/a b\""),
            [("Prolog".to_string(), "/a b".to_string())]
        );
        assert!(pairs("# Prolog=/x").is_empty());
    }

    /// `origin_of` says `file:line`: a file's leading blank lines count, and a FIFO planted
    /// where an Include points is an error, never a read that blocks.
    #[test]
    fn line_numbers_are_the_file_s_and_only_regular_files_are_read() {
        let d = scratch_dir("slurm-conf-lines");
        std::fs::write(d.join("slurm.conf"), "\n\n# c\nPrologEpilogTimeout=5\n").expect("w");
        let c = read(&d.join("slurm.conf")).expect("reads");
        assert_eq!(c.get("PrologEpilogTimeout").expect("set").1.line, 4);
        let fifo = d.join("fifo.conf");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        std::fs::write(d.join("slurm.conf"), "Include fifo.conf\n").expect("w");
        let e = read(&d.join("slurm.conf")).expect_err("a FIFO is no config file");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn includes_are_followed_relative_to_the_including_file_and_with_wildcards() {
        let d = scratch_dir("slurm-conf-include");
        std::fs::create_dir_all(d.join("conf.d")).expect("mkdir");
        std::fs::write(
            d.join("slurm.conf"),
            "ClusterName=c\nInclude conf.d/*.conf\ninclude /nonexistent-is-read-below\n",
        )
        .expect("write");
        std::fs::write(
            d.join("conf.d/10-prolog.conf"),
            "Prolog=/usr/sbin/nccl-check-prolog\nPrologEpilogTimeout=120\n",
        )
        .expect("write");
        std::fs::write(
            d.join("conf.d/20-nodes.conf"),
            "NodeName=n[1-2] Gres=gpu:4 Prolog=/not/global\n",
        )
        .expect("write");
        let err = read(&d.join("slurm.conf")).expect_err("a missing include is an error");
        assert!(err.to_string().contains("/nonexistent"), "{err}");
        std::fs::write(
            d.join("slurm.conf"),
            "ClusterName=c\nInclude conf.d/*.conf\n",
        )
        .expect("write");
        let c = read(&d.join("slurm.conf")).expect("reads");
        assert_eq!(c.files.len(), 3);
        let (v, l) = c.get("prolog").expect("prolog");
        assert_eq!(v, "/usr/sbin/nccl-check-prolog");
        assert_eq!((l.file.ends_with("10-prolog.conf"), l.line), (true, 1));
        assert_eq!(
            c.all("Prolog").len(),
            1,
            "a NodeName line's keys are not global"
        );
        assert!(c.text().contains("NodeName=n[1-2] Gres=gpu:4"));
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn an_include_loop_is_an_error_not_a_hang() {
        let d = scratch_dir("slurm-conf-loop");
        std::fs::write(d.join("slurm.conf"), "Include slurm.conf\n").expect("write");
        assert!(read(&d.join("slurm.conf")).is_err());
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_configless_node_s_cache_is_a_candidate() {
        let d = scratch_dir("slurm-conf-candidates");
        assert!(candidates(&d, None, &[]).is_empty());
        std::fs::create_dir_all(d.join("var/spool/slurmd/conf-cache")).expect("mkdir");
        std::fs::write(d.join("var/spool/slurmd/conf-cache/slurm.conf"), "x=1\n").expect("w");
        std::fs::create_dir_all(d.join("run/slurm")).expect("mkdir");
        std::os::unix::fs::symlink(
            d.join("var/spool/slurmd/conf-cache"),
            d.join("run/slurm/conf"),
        )
        .expect("symlink");
        // /run/slurm/conf is the same file as the spool cache: listed once.
        let c = candidates(&d, None, &[]);
        assert_eq!(c.len(), 1, "{c:?}");
        std::fs::create_dir_all(d.join("etc/slurm")).expect("mkdir");
        std::fs::write(d.join("etc/slurm/slurm.conf"), "x=1\n").expect("w");
        let c = candidates(&d, Some("/etc/slurm/slurm.conf"), &[]);
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(c[0].ends_with("etc/slurm/slurm.conf"));
        std::fs::remove_dir_all(&d).ok();
    }
}
