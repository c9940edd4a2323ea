//! Reading a worker's JSON report back ([`read_report`]): the callers' one way in. Bounded and
//! safe on paths others could touch: the file is opened with `O_NOFOLLOW | O_NONBLOCK` (a
//! symlink cannot redirect it, a FIFO cannot hang it), must be a regular file, and at most
//! `max_bytes` are read. Tolerant of a newer worker of the same schema: unknown fields are
//! ignored and missing ones default; a newer `schema_version` is an error that says so.

use super::{Report, SCHEMA_VERSION};
use std::fmt;
use std::path::{Path, PathBuf};

impl Report {
    /// The report from a JSON value whose head [`report_value`] checked; a field missing or of
    /// the wrong type is named by its path, the head's first. (The head is read from a copy: the
    /// owned value's deserializer, the one the body takes, is the only one the plugin carries.)
    pub fn deserialize_value(value: serde_json::Value) -> Result<Report, ReportError> {
        Ok(Report {
            head: serde_path_to_error::deserialize(value.clone()).map_err(not_a_report)?,
            body: serde_path_to_error::deserialize(value).map_err(not_a_report)?,
        })
    }
}

/// Why a report cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportError {
    /// No file: the worker wrote no report (it did not start, or stopped before).
    Missing(PathBuf),
    Unreadable(PathBuf, String),
    /// A symlink, FIFO, device or directory where the report should be.
    NotAFile(PathBuf),
    TooLarge(PathBuf, u64),
    /// Not JSON, not an object, or fields of the wrong type.
    NotAReport(String),
    /// Written by a worker with a newer, incompatible report format.
    NewerSchema(u64),
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::Missing(p) => write!(f, "{}: no report", p.display()),
            ReportError::Unreadable(p, e) => write!(f, "{}: {e}", p.display()),
            ReportError::NotAFile(p) => write!(f, "{}: not a regular file", p.display()),
            ReportError::TooLarge(p, max) => {
                write!(f, "{}: larger than {max} bytes", p.display())
            }
            ReportError::NotAReport(e) => write!(f, "not a report: {e}"),
            ReportError::NewerSchema(v) => write!(
                f,
                "the report has schema_version {v}, this reader knows {SCHEMA_VERSION}: \
                 update the caller (plugin, prolog) to the worker's version"
            ),
        }
    }
}

impl std::error::Error for ReportError {}

/// Reads and parses the report at `path`, at most `max_bytes` of it.
pub fn read_report(path: &Path, max_bytes: u64) -> Result<Report, ReportError> {
    parse_report(&read_bounded(path, max_bytes)?)
}

/// The bytes of the report at `path`: a regular file (never through a symlink, never a FIFO
/// waited on), at most `max_bytes`.
pub fn read_bounded(path: &Path, max_bytes: u64) -> Result<Vec<u8>, ReportError> {
    use nccl_check_host::read::{regular, FileError};
    let p = path.to_path_buf();
    match regular(path, max_bytes, true) {
        Ok((bytes, _)) => Ok(bytes),
        Err(FileError::Io(e)) => Err(match e.raw_os_error() {
            Some(libc::ENOENT) => ReportError::Missing(p),
            // O_NOFOLLOW on a symlink.
            Some(libc::ELOOP) => ReportError::NotAFile(p),
            _ => ReportError::Unreadable(p, e.to_string()),
        }),
        Err(FileError::NotAFile) => Err(ReportError::NotAFile(p)),
        Err(FileError::TooLarge(max)) => Err(ReportError::TooLarge(p, max)),
    }
}

/// The report's bytes as a JSON value whose head is a report's: an object with a
/// `schema_version` this reader knows and a `verdict`. Checked before the rest, so that a newer
/// schema is named as such, not as a type error somewhere inside.
pub fn report_value(bytes: &[u8]) -> Result<serde_json::Value, ReportError> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| ReportError::NotAReport(format!("not JSON: {e}")))?;
    let Some(head) = value.as_object() else {
        return Err(ReportError::NotAReport("not a JSON object".into()));
    };
    match head.get("schema_version").map(|v| v.as_u64()) {
        None => return Err(ReportError::NotAReport("no schema_version".into())),
        Some(Some(v)) if v > u64::from(SCHEMA_VERSION) => return Err(ReportError::NewerSchema(v)),
        Some(Some(v)) if v >= 1 => {}
        Some(_) => return Err(ReportError::NotAReport("invalid schema_version".into())),
    }
    if !head.contains_key("verdict") {
        return Err(ReportError::NotAReport("no verdict".into()));
    }
    Ok(value)
}

/// A deserializing error as the report's: the path of the field, then what is wrong with it.
pub fn not_a_report(e: serde_path_to_error::Error<serde_json::Error>) -> ReportError {
    ReportError::NotAReport(format!("{}: {}", e.path(), e.inner()))
}

/// Parses a report from its bytes into the plain [`Report`].
pub fn parse_report(bytes: &[u8]) -> Result<Report, ReportError> {
    Report::deserialize_value(report_value(bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::reason::ReasonCode;
    use crate::verdict::Verdict;
    use nccl_check_host::test_support::scratch_dir;

    #[test]
    fn the_recorded_reports_of_a_real_worker_parse() {
        for (name, text, verdict) in [
            (
                "pass",
                include_str!("../../../tests/prolog/data/real-quick-pass.json"),
                Verdict::Pass,
            ),
            (
                "fail",
                include_str!("../../../tests/prolog/data/real-quick-fail-p2p-disabled.json"),
                Verdict::Fail,
            ),
        ] {
            let r = parse_report(text.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(r.head.verdict, verdict, "{name}");
            assert!(
                !r.body.results.is_empty() && !r.body.gpus.is_empty(),
                "{name}"
            );
            assert!(
                r.body.gpus.iter().all(|g| g.uuid.starts_with("GPU-")),
                "{name}"
            );
        }
    }

    /// The fields every worker wrote, and nothing else: what the suites' fake workers write.
    const LEAST: &str = r#"{"schema_version":1,"tool":"t","tool_version":"0","verdict":"PASS",
        "exit_code":0,"summary":"s","reasons":[],"host":"n1","gpus":[],"results":[],
        "avg_busbw":{}}"#;

    #[test]
    fn unknown_fields_are_ignored_and_fields_older_workers_lacked_default() {
        let r = parse_report(
            LEAST
                .replace(
                    r#""reasons":[]"#,
                    r#""new_field":{"x":[1]},
                       "reasons":[{"code":"a_new_code","message":"m","new":1}]"#,
                )
                .as_bytes(),
        )
        .expect("parses");
        assert_eq!(
            (r.head.verdict, r.head.summary.as_str()),
            (Verdict::Pass, "s")
        );
        assert_eq!(r.head.reasons[0].code, ReasonCode::Unknown);
        assert!(r.body.results.is_empty() && r.body.warnings.is_empty() && r.body.error.is_none());
        assert_eq!(r.body.host, "n1");
    }

    /// A field every worker wrote is required: a report without it is no report (an ERROR for
    /// the caller, never a verdict read from defaults), named by the field.
    #[test]
    fn a_report_without_a_field_every_worker_wrote_names_it() {
        for field in [
            "tool",
            "tool_version",
            "exit_code",
            "summary",
            "reasons",
            "host",
            "gpus",
            "results",
            "avg_busbw",
        ] {
            let v: serde_json::Value = serde_json::from_str(LEAST).expect("json");
            let mut m = v.as_object().expect("object").clone();
            assert!(m.remove(field).is_some(), "{field}");
            let text = serde_json::to_vec(&m).expect("json");
            let e = parse_report(&text).expect_err(field).to_string();
            assert!(
                e.contains(&format!("missing field `{field}`")),
                "{field}: {e}"
            );
        }
    }

    #[test]
    fn what_is_not_a_report_says_why() {
        let cases: [(&[u8], &str); 7] = [
            (b"{\"verdict\":", "not JSON"),
            (b"[1,2]", "not a JSON object"),
            (br#"{"verdict":"PASS"}"#, "no schema_version"),
            (br#"{"schema_version":1,"summary":"x"}"#, "no verdict"),
            (br#"{"schema_version":1,"verdict":"MAYBE"}"#, "verdict"),
            (
                br#"{"schema_version":1,"verdict":"PASS"}"#,
                "missing field `tool`",
            ),
            (
                br#"{"schema_version":"1","verdict":"PASS"}"#,
                "invalid schema_version",
            ),
        ];
        for (text, want) in cases {
            let e = parse_report(text).expect_err(want).to_string();
            assert!(e.starts_with("not a report: ") && e.contains(want), "{e}");
        }
    }

    #[test]
    fn a_newer_schema_is_an_error_that_names_it() {
        let e =
            parse_report(br#"{"schema_version":2,"verdict":{"new":"shape"}}"#).expect_err("newer");
        assert_eq!(e, ReportError::NewerSchema(2));
        assert!(e.to_string().contains("schema_version 2"), "{e}");
    }

    #[test]
    fn symlinks_fifos_and_large_files_are_refused_without_waiting() {
        let d = scratch_dir("read-unsafe");
        let real = d.join("real.json");
        std::fs::write(&real, LEAST).expect("write");
        assert!(read_report(&real, 1 << 20).is_ok());
        let err = |p: &Path, max| read_report(p, max).expect_err("refused");
        assert_eq!(err(&real, 10), ReportError::TooLarge(real.clone(), 10));
        let link = d.join("link.json");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        assert_eq!(err(&link, 1 << 20), ReportError::NotAFile(link.clone()));
        let fifo = d.join("fifo.json");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = std::time::Instant::now();
        assert_eq!(err(&fifo, 1 << 20), ReportError::NotAFile(fifo.clone()));
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
        let gone = d.join("none.json");
        assert_eq!(err(&gone, 1), ReportError::Missing(gone.clone()));
        std::fs::remove_dir_all(&d).ok();
    }
}
