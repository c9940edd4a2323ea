//! The plugin's lines as Slurm reads them, for `nccl-check-plugstack --check` on any node (a
//! login node too: no slurmd, no GPU) and `nccl-check-prolog --check-config`: plugstack.conf where
//! this node's Slurm config puts it, every `include` followed as Slurm's spank.c does, and each
//! `nccl_check.so` line's arguments checked by the plugin's own parser ([`PluginConfig::parse`]), so
//! an admin finds `timout=120` before a user's `--nccl-check` does.
//!
//! The file format (Slurm `src/common/spank.c`, `_plugin_stack_parse_line`,
//! `_spank_conf_include`): text from `#` on is a comment; words are split on spaces and tabs;
//! the first is `required`, `optional` or `include`; a plugin line's second word is the plugin
//! (absolute, or a name searched in `PluginDir`), the rest its arguments; an `include` pattern
//! is a glob, relative to the including file's directory; a missing plugstack.conf is empty.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nccl_check_host::read::{not_runnable, under};
use nccl_check_host::slurm_config::{files, Sources};

use crate::config::{ConfigError, PluginConfig};

/// The plugin's file name on a plugin line (`plugin_name` is `nccl_check`, the file the package
/// installs is `nccl_check.so`).
pub const PLUGIN_FILE: &str = "nccl_check.so";
/// Largest plugstack file read.
const FILE_MAX: u64 = 1 << 20;
/// Deepest `include` chain and most files followed (a loop ends here, never hangs).
const DEPTH_MAX: usize = 8;
const FILES_MAX: usize = 256;

/// One `required`/`optional` line naming this plugin, enabled or commented out.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub file: PathBuf,
    pub line: usize,
    pub required: bool,
    pub plugin: String,
    pub args: Vec<String>,
    /// False: the line is commented out (`#required ...`, as the package installs it).
    pub enabled: bool,
}

impl Entry {
    fn at(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }
}

/// Everything read from one plugstack.conf.
#[derive(Debug, Default)]
pub struct Stack {
    /// Every file read, the main one first.
    pub files: Vec<PathBuf>,
    pub entries: Vec<Entry>,
    /// Lines Slurm ignores with "Invalid line", and files that could not be read.
    pub notes: Vec<String>,
}

/// The words of a line as Slurm splits them, comment cut off.
fn words(text: &str) -> Vec<&str> {
    text.split('#')
        .next()
        .unwrap_or("")
        .split([' ', '\t', '\r'])
        .filter(|w| !w.is_empty())
        .collect()
}

/// A line of this plugin: the file the package installs, or a build of it under cargo's name
/// (`libnccl_check.so`) or a test twin (`nccl_check_fault.so`).
fn is_ours(plugin: &str) -> bool {
    Path::new(plugin)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".so") && n.contains("nccl_check"))
}

/// `a, b, c`: files as a printout lists them.
pub fn joined(files: &[PathBuf]) -> String {
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

/// Reads `main` and what it includes.
pub fn read(main: &Path) -> Stack {
    let mut stack = Stack::default();
    read_into(main, 0, &mut stack);
    stack
}

fn read_into(path: &Path, depth: usize, stack: &mut Stack) {
    if depth > DEPTH_MAX || stack.files.len() >= FILES_MAX {
        stack.notes.push(format!(
            "{}: not read: more than {DEPTH_MAX} nested includes or {FILES_MAX} files",
            path.display()
        ));
        return;
    }
    let p = path.display();
    // At most FILE_MAX bytes of a regular file, as is (line numbers stay Slurm's).
    let text = match nccl_check_host::read::text(path, FILE_MAX) {
        Ok(t) => t,
        // Slurm: "A missing config file is not an error, but is equivalent to an empty file."
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && depth == 0 => {
            return stack
                .notes
                .push(format!("{p}: absent (Slurm reads no plugin)"));
        }
        Err(e) => return stack.notes.push(format!("{p}: {e}")),
    };
    stack.files.push(path.to_path_buf());
    let dir = path.parent().unwrap_or(Path::new("/"));
    let mut ignored = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = format!("{p}:{}", i + 1);
        let w = words(line);
        match w.first().copied() {
            Some("include") => {
                let Some(pattern) = w.get(1) else {
                    stack.notes.push(format!(
                        "{at}: 'include' without a pattern (Slurm stops reading here)"
                    ));
                    continue;
                };
                // An absolute pattern replaces `dir` (Path::join), a relative one is under it.
                for f in files::expand(&dir.join(pattern)) {
                    read_into(&f, depth + 1, stack);
                }
            }
            Some(kind @ ("required" | "optional")) if w.len() < 2 => stack.notes.push(format!(
                "{at}: '{kind}' without a plugin: Slurm ignores this line"
            )),
            None | Some("required" | "optional") => {}
            Some(other) => ignored.push((i + 1, other)),
        }
        // A line of ours, or one commented out: `#required /usr/lib/.../nccl_check.so ...`.
        let enabled = !w.is_empty();
        let w = if enabled {
            w
        } else {
            words(line.trim_start().trim_start_matches('#'))
        };
        if let [kind @ ("required" | "optional"), plugin, args @ ..] = w.as_slice() {
            if is_ours(plugin) {
                stack.entries.push(Entry {
                    file: path.to_path_buf(),
                    line: i + 1,
                    required: *kind == "required",
                    plugin: plugin.to_string(),
                    args: args.iter().map(|a| a.to_string()).collect(),
                    enabled,
                });
            }
        }
    }
    if let Some(note) = ignored_note(path, &ignored) {
        stack.notes.push(note);
    }
}

/// The note on a file's lines that are not `required`, `optional` or `include` (`(line, first
/// word)`), one per file. The word is quoted only where it reads like a misspelt keyword: this
/// runs as root (`--check-config`), and an `include` may point at any file (`/etc/shadow`),
/// whose lines must never be printed.
fn ignored_note(path: &Path, ignored: &[(usize, &str)]) -> Option<String> {
    let (first, word) = ignored.first()?;
    let keyword_like = word.len() <= 24
        && word
            .chars()
            .all(|c| c.is_ascii_alphabetic() || c == '_' || c == '-');
    let what = if keyword_like {
        format!("'{word}'")
    } else {
        "its first word (not shown: it does not read like a keyword, and this may not be a plugstack file)".into()
    };
    let more = match ignored.len() {
        1 => String::new(),
        n => format!(" (and {} more line(s) like it)", n - 1),
    };
    Some(format!(
        "{}:{first}: {what} is not required, optional or include: Slurm ignores this line{more}",
        path.display()
    ))
}

/// Where Slurm on this node looks: its plugstack.conf and its PluginDir.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub plugstack: PathBuf,
    pub plugin_dir: Option<String>,
    /// Where that came from, for the printout.
    pub source: String,
}

/// The slurm.conf in use on this node (`$SLURM_CONF`, /etc/slurm, a configless node's cache,
/// with its includes; bench-core's `slurm_config` reader) says `PlugStackConfig=` and
/// `PluginDir=`; without `PlugStackConfig=` Slurm reads `plugstack.conf` beside slurm.conf.
/// `root` is `/` except in tests.
pub fn locate(root: &Path, slurm_conf: Option<&str>) -> Located {
    let s = Sources::read(root, slurm_conf, None, Duration::from_secs(1));
    let Some(conf) = s.conf else {
        return Located {
            plugstack: under(root, "/etc/slurm/plugstack.conf"),
            plugin_dir: None,
            source: "no slurm.conf found: Slurm's default place".into(),
        };
    };
    let dir = conf.main.parent().unwrap_or(Path::new("/")).to_path_buf();
    let plugin_dir = conf.get("PluginDir").map(|(v, _)| v);
    match conf.get("PlugStackConfig") {
        Some((v, l)) => Located {
            plugstack: if v.starts_with('/') {
                under(root, &v)
            } else {
                dir.join(v)
            },
            plugin_dir,
            source: format!("PlugStackConfig at {}:{}", l.file.display(), l.line),
        },
        None => Located {
            plugstack: dir.join("plugstack.conf"),
            plugin_dir,
            source: format!("beside {}", conf.main.display()),
        },
    }
}

/// What the check found: problems (exit 2), notes, and each enabled line's effective settings.
#[derive(Debug, Default, PartialEq)]
pub struct Findings {
    pub problems: Vec<String>,
    pub notes: Vec<String>,
    pub effective: Vec<String>,
}

/// `file:line: reason`, with the argument itself where the reason does not name it.
fn located(at: &str, e: &ConfigError) -> String {
    let key = e.arg.split('=').next().unwrap_or("");
    if !key.is_empty() && e.reason.contains(&format!("'{key}'")) {
        format!("{at}: {}", e.reason)
    } else {
        format!("{at}: argument '{}': {}", e.arg.escape_debug(), e.reason)
    }
}

/// Whether `plugin` is a file: as given when absolute, else in a `PluginDir` entry; None when
/// it is searched in a PluginDir that is not known.
fn found(plugin: &str, plugin_dir: Option<&str>, root: &Path) -> Option<bool> {
    if plugin.starts_with('/') {
        return Some(under(root, plugin).is_file());
    }
    let mut dirs = plugin_dir?.split(':').filter(|d| d.starts_with('/'));
    Some(dirs.any(|d| under(root, d).join(plugin).is_file()))
}

/// Checks every line of ours in `stack`.
pub fn check(stack: &Stack, plugin_dir: Option<&str>, root: &Path) -> Findings {
    let mut f = Findings {
        notes: stack.notes.clone(),
        ..Findings::default()
    };
    let enabled: Vec<&Entry> = stack.entries.iter().filter(|e| e.enabled).collect();
    for e in &enabled {
        let (at, plugin) = (e.at(), &e.plugin);
        match found(plugin, plugin_dir, root) {
            Some(true) => {}
            Some(false) if e.required => f.problems.push(format!(
                "{at}: {plugin}: no such plugin file: a 'required' plugin that does not load makes \
                 every srun, sbatch and salloc on this node fail"
            )),
            Some(false) => f.notes.push(format!(
                "{at}: {plugin}: no such plugin file ('optional': Slurm goes on without \
                 --nccl-check)"
            )),
            None => f.notes.push(format!(
                "{at}: {plugin} is searched in PluginDir, which slurm.conf does not name here: \
                 not checked"
            )),
        }
        match PluginConfig::parse(&e.args) {
            Err(err) => f.problems.push(format!(
                "{} (every --nccl-check job fails with it)",
                located(&at, &err)
            )),
            Ok(c) => {
                let worker = c.worker.display();
                if not_runnable(&under(root, &worker.to_string())).is_some() {
                    f.problems.push(format!(
                        "{at}: worker {worker}: not an executable file on this node (every \
                         --nccl-check task here would end in ERROR)"
                    ));
                }
                f.effective.push(format!("{at}: {}", c.describe()));
            }
        }
    }
    if let [first, rest @ ..] = enabled.as_slice() {
        for e in rest {
            f.problems.push(format!(
                "{}: a second {PLUGIN_FILE} line (the first is {}): Slurm loads one plugin per \
                 option name; keep one line",
                e.at(),
                first.at()
            ));
        }
    } else {
        let read = match stack.files.as_slice() {
            [] => "any file".to_string(),
            files => joined(files),
        };
        f.notes.push(format!(
            "no enabled {PLUGIN_FILE} line in {read}: --nccl-check is off on this node"
        ));
        for e in stack.entries.iter().filter(|e| !e.enabled) {
            let state = match PluginConfig::parse(&e.args) {
                Ok(_) => "its arguments are valid".to_string(),
                Err(err) => format!(
                    "when enabled: {}",
                    located("", &err).trim_start_matches(": ")
                ),
            };
            f.notes.push(format!("{}: commented out; {state}", e.at()));
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_check_host::test_support::scratch_dir;
    use std::os::unix::fs::PermissionsExt;

    fn exe(p: &Path) {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    /// The layout the package installs: plugstack.conf includes plugstack.conf.d/*.conf.
    fn layout(d: &Path, line: &str) -> PathBuf {
        std::fs::create_dir_all(d.join("etc/slurm/plugstack.conf.d")).expect("mkdir");
        std::fs::write(
            d.join("etc/slurm/plugstack.conf"),
            "include plugstack.conf.d/*.conf   # relative to this file\n",
        )
        .expect("write");
        std::fs::write(
            d.join("etc/slurm/plugstack.conf.d/pyxis.conf"),
            "required /usr/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis\n",
        )
        .expect("write");
        std::fs::write(
            d.join("etc/slurm/plugstack.conf.d/zz-nccl-check.conf"),
            format!("# the package's header\n{line}\n"),
        )
        .expect("write");
        exe(&d.join("usr/lib/slurm/nccl_check.so"));
        exe(&d.join("usr/libexec/nccl-check/nccl-check"));
        d.join("etc/slurm/plugstack.conf")
    }

    /// Regression: a typo showed only when a user ran --nccl-check.
    #[test]
    fn a_typo_on_the_included_line_is_named_with_file_and_line() {
        let d = scratch_dir("plugstack-typo");
        let main = layout(&d, "required /usr/lib/slurm/nccl_check.so timout=120");
        let stack = read(&main);
        assert_eq!(stack.files.len(), 3, "{stack:?}");
        assert_eq!(stack.entries.len(), 1, "pyxis' line is not ours: {stack:?}");
        let f = check(&stack, None, &d);
        let conf = d.join("etc/slurm/plugstack.conf.d/zz-nccl-check.conf");
        assert_eq!(
            f.problems,
            [format!(
                "{}:2: unknown argument 'timout' (did you mean 'timeout'?) (every --nccl-check \
                 job fails with it)",
                conf.display()
            )]
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_valid_line_gives_its_effective_settings_and_bad_values_name_the_argument() {
        let d = scratch_dir("plugstack-valid");
        let main = layout(
            &d,
            "required /usr/lib/slurm/nccl_check.so timeout=60 nccl_lib=/opt/nccl/libnccl.so.2",
        );
        let f = check(&read(&main), None, &d);
        assert!(f.problems.is_empty(), "{f:?}");
        assert_eq!(f.effective.len(), 1);
        assert!(f.effective[0].contains("timeout=60"), "{f:?}");
        assert!(
            f.effective[0].contains("nccl_lib=/opt/nccl/libnccl.so.2"),
            "{f:?}"
        );
        let main = layout(&d, "required /usr/lib/slurm/nccl_check.so timeout=0");
        let f = check(&read(&main), None, &d);
        assert_eq!(f.problems.len(), 1, "{f:?}");
        assert!(
            f.problems[0].contains(":2: argument 'timeout=0': timeout must be whole seconds"),
            "{f:?}"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_commented_out_line_is_off_and_only_noted() {
        let d = scratch_dir("plugstack-off");
        let main = layout(&d, "#required /usr/lib/slurm/nccl_check.so timout=1");
        let f = check(&read(&main), None, &d);
        assert!(f.problems.is_empty(), "{f:?}");
        assert!(
            f.notes.iter().any(|n| n.contains("--nccl-check is off")),
            "{f:?}"
        );
        assert!(
            f.notes
                .iter()
                .any(|n| n.contains(":2: commented out; when enabled: unknown argument 'timout'")),
            "{f:?}"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_missing_required_plugin_or_worker_and_a_second_line_are_problems() {
        let d = scratch_dir("plugstack-missing");
        let main = layout(
            &d,
            "required /nonexistent/nccl_check.so worker=/nonexistent/nccl-check\n\
             optional nccl_check.so",
        );
        let f = check(&read(&main), Some("/usr/lib/slurm"), &d);
        assert_eq!(f.problems.len(), 3, "{f:?}");
        assert!(f.problems[0].contains("no such plugin file"), "{f:?}");
        assert!(
            f.problems[1].contains("worker /nonexistent/nccl-check: not an executable"),
            "{f:?}"
        );
        assert!(
            f.problems[2].contains(":3: a second nccl_check.so line"),
            "{f:?}"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    /// Regression: `--check-config` (root) quoted the first word of every line Slurm ignores,
    /// so an `include /etc/shadow` printed its password hashes. A line that is not plugstack
    /// syntax is now named by number only, once per file; a misspelt keyword is still quoted.
    #[test]
    fn an_included_shadow_file_is_never_quoted() {
        let d = scratch_dir("plugstack-shadow");
        let hash = "$6$Zp1sa1t$k3VqXhUnH4sh3dPa55w0rd";
        std::fs::write(
            d.join("shadow"),
            format!("root:{hash}:19700:0:99999:7:::\nalice:$y$j9T$s4lt$other:19701::::::\n"),
        )
        .expect("write");
        std::fs::write(
            d.join("p.conf"),
            format!(
                "include {}\nrequird /x/nccl_check.so\n",
                d.join("shadow").display()
            ),
        )
        .expect("write");
        let s = read(&d.join("p.conf"));
        let all = format!("{:?}", check(&s, None, &d));
        assert!(
            !all.contains("Zp1sa1t") && !all.contains("root:") && !all.contains("alice"),
            "{all}"
        );
        let shadow = format!("{}:1:", d.join("shadow").display());
        assert!(
            s.notes
                .iter()
                .any(|n| n.starts_with(&shadow) && n.contains("1 more line")),
            "{s:?}"
        );
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains(":2: 'requird' is not required")),
            "{s:?}"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn line_numbers_are_slurms_and_a_fifo_is_not_opened() {
        let d = scratch_dir("plugstack-lines");
        std::fs::write(
            d.join("p.conf"),
            "\n\n  required /x/nccl_check.so timout=1\n",
        )
        .expect("write");
        let s = read(&d.join("p.conf"));
        assert_eq!(s.entries[0].line, 3, "{s:?}");
        let fifo = d.join("f.conf");
        let c = std::ffi::CString::new(fifo.display().to_string()).expect("path");
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let s = read(&fifo);
        assert!(s.notes[0].contains("not a regular file"), "{s:?}");
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn an_include_loop_ends_and_a_missing_plugstack_is_empty() {
        let d = scratch_dir("plugstack-loop");
        std::fs::write(d.join("p.conf"), "include p.conf\n").expect("write");
        let s = read(&d.join("p.conf"));
        assert!(
            s.notes.iter().any(|n| n.contains("nested includes")),
            "{s:?}"
        );
        let s = read(&d.join("absent.conf"));
        assert!(s.files.is_empty() && s.notes[0].contains("absent"), "{s:?}");
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn slurm_conf_says_where_plugstack_conf_is() {
        let d = scratch_dir("plugstack-locate");
        std::fs::create_dir_all(d.join("etc/slurm")).expect("mkdir");
        std::fs::write(d.join("etc/slurm/slurm.conf"), "ClusterName=c\n").expect("write");
        let l = locate(&d, None);
        assert_eq!(l.plugstack, d.join("etc/slurm/plugstack.conf"));
        std::fs::write(
            d.join("etc/slurm/slurm.conf"),
            "ClusterName=c\nPlugStackConfig=/etc/site/spank.conf\nPluginDir=/usr/lib64/slurm\n",
        )
        .expect("write");
        let l = locate(&d, None);
        assert_eq!(l.plugstack, d.join("etc/site/spank.conf"));
        assert_eq!(l.plugin_dir.as_deref(), Some("/usr/lib64/slurm"));
        assert!(l.source.contains("slurm.conf:2"), "{l:?}");
        std::fs::remove_dir_all(&d).ok();
    }
}
