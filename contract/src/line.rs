//! The verdict line: the worker's last line on stderr, `nccl-check: FAIL <summary>`, written by
//! [`write`] (the worker) and read by [`parse`] (the plugin's batch check reads it from srun's
//! output, where a worker's report file is out of reach). One format, one place.

use crate::verdict::Verdict;
use nccl_check_host::text::escape_control;

/// What every verdict line starts with.
pub const PREFIX: &str = "nccl-check: ";

/// The line for `verdict` and its one-line `summary`. The summary may carry text from other
/// processes (hosts, a peer's reason for giving up): control characters are shown escaped, so
/// it stays one line and is never obeyed by a terminal.
pub fn write(verdict: Verdict, summary: &str) -> String {
    format!("{PREFIX}{verdict} {}", escape_control(summary))
}

/// A verdict line found in one line of output, whatever precedes it (srun's `--label` `1: `).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found<'a> {
    pub verdict: Verdict,
    /// The summary after the verdict word.
    pub summary: &'a str,
}

/// The verdict line in `line`, if it holds one: [`PREFIX`], then `PASS`, `FAIL` or `ERROR` as a
/// whole word.
pub fn parse(line: &str) -> Option<Found<'_>> {
    let (_, rest) = line.split_once(PREFIX)?;
    [Verdict::Pass, Verdict::Fail, Verdict::Error]
        .into_iter()
        .find_map(|v| {
            let after = rest.strip_prefix(v.as_str())?;
            // The word ends the line, or a space and the summary follow it.
            (after.is_empty() || after.starts_with(' ')).then(|| Found {
                verdict: v,
                summary: after.get(1..).unwrap_or("").trim_end(),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_line_reads_back_and_stays_one_line() {
        for v in [Verdict::Pass, Verdict::Fail, Verdict::Error] {
            let l = write(
                v,
                "all_reduce 256 MiB: busbw 12.3 < 300.0 GB/s\nnccl-check: PASS",
            );
            assert!(!l.contains('\n'), "{l}");
            let f = parse(&l).expect("parses");
            assert_eq!(f.verdict, v);
            assert!(f.summary.starts_with("all_reduce 256 MiB"), "{l}");
        }
        assert_eq!(
            write(Verdict::Fail, "x"),
            "nccl-check: FAIL x",
            "the format the suites and users know"
        );
    }

    #[test]
    fn only_a_verdict_word_after_the_prefix_is_a_verdict_line() {
        let f = parse("1: nccl-check: FAIL busbw 12.3 < 300.0 GB/s; responsible: n2 GPU3")
            .expect("with srun's label");
        assert_eq!(f.verdict, Verdict::Fail);
        assert_eq!(f.summary, "busbw 12.3 < 300.0 GB/s; responsible: n2 GPU3");
        assert_eq!(
            parse("nccl-check: ERROR").map(|f| f.verdict),
            Some(Verdict::Error)
        );
        for not in [
            "nccl-check: running 3 s",
            "nccl-check: FAILED to start",
            "srun: error: n2: task 1: Exited with exit code 1",
            "nccl-check:FAIL x",
            "",
        ] {
            assert_eq!(parse(not), None, "{not}");
        }
    }
}
