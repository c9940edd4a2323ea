//! Reading one TOML config file into a typed struct, with errors that name the file, the line
//! and the field (`/etc/nccl-check/nccl-check.toml:12: thresholds[2].min_busbw: ...`). Every
//! config of the project (worker thresholds and plans, prolog policy) goes through here, so an
//! admin sees the same error shape everywhere, and unknown keys are rejected by name (structs
//! use `#[serde(deny_unknown_fields)]`).

use serde::de::DeserializeOwned;
use std::fmt;
use std::path::{Path, PathBuf};

/// A config file that cannot be used, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based line, when the error has a place in the text.
    pub line: Option<usize>,
    /// Dotted path of the field (`thresholds[2].min_busbw`); empty for the file as a whole.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    fn new(file: &Path, line: Option<usize>, field: &str, message: String) -> ConfigError {
        ConfigError {
            file: file.to_path_buf(),
            line,
            field: field.to_string(),
            message,
        }
    }
}

/// Reads and parses `path`. A missing file is an error too; callers that treat "absent" as
/// "defaults" check existence first, so a typo in an explicit `--config` path is never silent.
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    parse(path, &read(path)?)
}

/// Largest config file read: real ones are a few KiB, and `--config /dev/zero` must neither fill
/// the memory nor run past the worker's watchdog (it starts after the config is read).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The text of a config file, or an error naming it (for loaders that validate after parsing).
/// Only a regular file is read (opened non-blocking, so a FIFO is refused instead of waited on),
/// and at most [`MAX_CONFIG_BYTES`] of it.
pub fn read(path: &Path) -> Result<String, ConfigError> {
    let err = |message: String| ConfigError::new(path, None, "", format!("cannot read: {message}"));
    let (bytes, _) =
        crate::read::regular(path, MAX_CONFIG_BYTES, false).map_err(|e| err(e.to_string()))?;
    String::from_utf8(bytes).map_err(|_| err("not UTF-8 text".into()))
}

/// Parses `text` as the contents of `path` (the path only names the file in errors).
pub fn parse<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    let de = toml::Deserializer::parse(text).map_err(|e| {
        let msg = e.message().trim().to_string();
        let (field, msg) = match e.span() {
            Some(s) if msg.starts_with("duplicate key") => duplicate(text, s.start, &msg),
            _ => (String::new(), msg),
        };
        ConfigError::new(path, e.span().map(|s| line_of(text, s.start)), &field, msg)
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.inner();
        let line = inner
            .span()
            .map(|s| line_of(text, s.start))
            .or_else(|| find_key_line(text, &field));
        let field = if field == "." { "" } else { &field };
        ConfigError::new(path, line, field, inner.message().trim().to_string())
    })
}

/// A semantic error found after parsing (a negative threshold, an unknown collective): the line
/// is found from the field's dotted path, so validation code only names the field.
pub fn invalid(path: &Path, text: &str, field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::new(path, find_key_line(text, field), field, message.into())
}

/// toml's `duplicate key` at `offset` named: the key, and the line that set it first (searched
/// back to the table header the second one is under).
fn duplicate(text: &str, offset: usize, msg: &str) -> (String, String) {
    let rest = &text[offset.min(text.len())..];
    let key: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    if key.is_empty() {
        return (String::new(), msg.to_string());
    }
    let here = line_of(text, offset);
    let first = text
        .lines()
        .enumerate()
        .take(here - 1)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .take_while(|(_, l)| !l.trim_start().starts_with('['))
        .filter(|(_, l)| {
            let t = l.trim_start();
            t.strip_prefix(key.as_str())
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map(|(i, _)| i + 1)
        .last();
    let msg = match first {
        Some(f) => format!("duplicate key `{key}`: set on line {f} already"),
        None => format!("duplicate key `{key}`"),
    };
    (key, msg)
}

/// 1-based line of byte `offset`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// Best-effort line of a dotted field path such as `thresholds[2].min_busbw` or
/// `plans.quick.steps[1].bytes`: walks the document's spans through toml's own parser.
pub fn find_key_line(text: &str, field: &str) -> Option<usize> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let mut span = None;
    let mut table = Some(doc.get_ref());
    for part in field.split('.').filter(|p| !p.is_empty()) {
        let (key, indices) = split_indices(part)?;
        let value = match table {
            Some(t) => t.get(key)?,
            None => return span.map(|s: std::ops::Range<usize>| line_of(text, s.start)),
        };
        span = Some(value.span());
        let mut v = value.get_ref();
        for i in indices {
            let item = v.as_array()?.get(i)?;
            span = Some(item.span());
            v = item.get_ref();
        }
        table = v.as_table();
    }
    span.map(|s| line_of(text, s.start))
}

fn split_indices(part: &str) -> Option<(&str, Vec<usize>)> {
    let key_end = part.find('[').unwrap_or(part.len());
    let indices = part[key_end..].split('[').filter(|c| !c.is_empty());
    let indices = indices.map(|c| c.strip_suffix(']')?.parse().ok());
    Some((&part[..key_end], indices.collect::<Option<_>>()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_key_is_named_with_both_lines() {
        let text = "budget_seconds = 10\nplan = \"quick\"\nbudget_seconds = 20\n";
        let e = parse::<toml::Table>(Path::new("/etc/x.toml"), text).expect_err("duplicate");
        assert_eq!(
            e.to_string(),
            "/etc/x.toml:3: budget_seconds: duplicate key `budget_seconds`: set on line 1 already"
        );
    }
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // read only through Debug
    struct Doc {
        #[serde(default)]
        rules: Vec<Rule>,
        name: Option<String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // read only through Debug
    struct Rule {
        gpu: String,
        min: f64,
    }

    const FILE: &str = "/etc/nccl-check/test.toml";

    #[test]
    fn a_wrong_type_names_file_line_and_field() {
        let text = "name = \"x\"\n\n[[rules]]\ngpu = \"H200\"\nmin = 1.0\n\n[[rules]]\ngpu = \"H100\"\nmin = \"fast\"\n";
        let e = parse::<Doc>(Path::new(FILE), text).unwrap_err();
        assert_eq!(e.line, Some(9), "{e}");
        assert_eq!(e.field, "rules[1].min");
        assert!(e
            .to_string()
            .starts_with("/etc/nccl-check/test.toml:9: rules[1].min: "));
    }

    #[test]
    fn an_unknown_key_is_rejected_by_name() {
        let text = "[[rules]]\ngpu = \"H200\"\nmin = 1.0\ntreshold = 3\n";
        let e = parse::<Doc>(Path::new(FILE), text).unwrap_err();
        assert!(e.message.contains("treshold"), "{e}");
        assert_eq!(e.line, Some(4), "{e}");
    }

    #[test]
    fn a_syntax_error_names_the_line() {
        let text = "name = \"x\"\n[[rules]\n";
        let e = parse::<Doc>(Path::new(FILE), text).unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
    }

    #[test]
    fn a_missing_field_names_its_table() {
        let text = "[[rules]]\ngpu = \"H200\"\n";
        let e = parse::<Doc>(Path::new(FILE), text).unwrap_err();
        assert!(e.message.contains("min"), "{e}");
        assert!(e.line.is_some(), "{e}");
    }

    #[test]
    fn validation_errors_find_the_line_of_the_field() {
        let text =
            "name = \"x\"\n[[rules]]\ngpu = \"A\"\nmin = 1.0\n[[rules]]\ngpu = \"B\"\nmin = -1.0\n";
        let e = invalid(Path::new(FILE), text, "rules[1].min", "must be >= 0");
        assert_eq!(e.line, Some(7));
        assert_eq!(find_key_line(text, "name"), Some(1));
    }

    #[test]
    fn a_missing_file_says_so() {
        let e = load::<Doc>(Path::new("/nonexistent/nccl-check.toml")).unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
    }
}

/// Regression: `--config /dev/zero` grew without bound and `--config FIFO` blocked in open(2),
/// both before the watchdog starts.
#[cfg(test)]
mod bounded {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn devices_fifos_and_huge_files_are_refused_quickly() {
        let t0 = Instant::now();
        let e = read(Path::new("/dev/zero")).expect_err("/dev/zero");
        assert!(e.message.contains("not a regular file"), "{e}");
        let dir = crate::test_support::scratch_dir("config-read");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("no NUL");
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read(&fifo).expect_err("fifo");
        assert!(e.message.contains("not a regular file"), "{e}");
        let big = dir.join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).expect("write");
        let e = read(&big).expect_err("big");
        assert!(e.message.contains("larger than"), "{e}");
        let ok = dir.join("ok.toml");
        std::fs::write(&ok, "# fine\n").expect("write");
        assert_eq!(read(&ok).expect("regular"), "# fine\n");
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::fs::remove_dir_all(&dir).ok();
    }
}
