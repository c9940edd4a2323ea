//! What the user reads about a check: the per-node result table of `--nccl-check=...,verbose`
//! (or plugstack `verbose=1`: rank 0 prints the header, every task its own row as soon as its
//! worker ends, so the rows of a step arrive together on srun's stderr, one line each), the
//! plugin's own lines on the task's stderr ([`say`]), and the hint for a missing NCCL that fits
//! a user who runs through srun.

use std::path::Path;

use nccl_check_contract::exit::NCCL_LIB_HINT;

use crate::worker::TaskOutcome;

/// The table's header line.
pub fn header() -> String {
    format!(
        "nccl-check: {:<16} {:>9} {:<7} {:>7}  {}",
        "node", "rank", "verdict", "time", "result"
    )
}

/// One task's row, with the whole detail (one line, bounded by the worker module): it is the
/// only place a verbose check says a FAIL or ERROR, so it is never cut.
pub fn row(node: &str, rank: u32, world: u32, outcome: &TaskOutcome, note: &str) -> String {
    let node: String = node.chars().filter(|c| !c.is_control()).take(64).collect();
    format!(
        "nccl-check: {node:<16} {:>9} {:<7} {:>6.1}s  {}{note}",
        format!("{rank}/{world}"),
        outcome.verdict.to_string(),
        outcome.elapsed.as_secs_f64(),
        outcome.detail
    )
}

/// Writes one line to the task's stderr, which slurmstepd has already connected to srun's
/// stderr before any task callback runs (mgr.c `prepare_stdio` precedes `exec_task`).
pub fn say(line: &str) {
    nccl_check_host::errln!("{line}");
}

/// The detail of a worker that could not load NCCL, with the worker's hint (`--nccl-lib`, which
/// no srun user can pass) replaced by what is true here: the user's `NCCL_CHECK_NCCL_LIB` when
/// that is what was tried, else the plugin line's `nccl_lib=` when the site set one, else both
/// ways to name the library.
pub fn nccl_lib_hint(detail: &str, user_lib: Option<&str>, site_lib: Option<&Path>) -> String {
    let hint = match (user_lib, site_lib) {
        (Some(u), _) => format!(
            "NCCL_CHECK_NCCL_LIB={u} (your environment) is what was tried: correct it, or unset \
             it to use the site's library"
        ),
        (None, Some(s)) => format!(
            "nccl_lib={} on the plugin line (the site's) is what was tried: tell your admin, or \
             set NCCL_CHECK_NCCL_LIB=/path/to/libnccl.so.2 in your job's environment",
            s.display()
        ),
        (None, None) => "set NCCL_CHECK_NCCL_LIB=/path/to/libnccl.so.2 in your job's environment, \
             or ask your admin to set nccl_lib= on the plugin line"
            .to_string(),
    };
    with_hint(detail, &hint)
}

/// [`nccl_lib_hint`] for a task that a plugin before this one (pyxis) moved into the job's
/// container: the loader that found no NCCL is the image's, so the message says so and points at
/// the image (pyxis shows other plugins no image path, so the container is named, not the file).
pub fn nccl_lib_hint_in_container(
    detail: &str,
    user_lib: Option<&str>,
    site_lib: Option<&Path>,
) -> String {
    let hint = match (user_lib, site_lib) {
        (Some(u), _) => format!(
            "NCCL_CHECK_NCCL_LIB={u} (your environment) is what was tried inside the container: \
             correct it to a path in the image, or unset it"
        ),
        (None, Some(s)) => format!(
            "nccl_lib={} on the plugin line (the site's) is what was tried inside the container: \
             set NCCL_CHECK_NCCL_LIB=/path/in/the/image/libnccl.so.2 in your job's environment",
            s.display()
        ),
        (None, None) => "the image has no libnccl.so.2 that its loader can load (ld.so.cache, \
             LD_LIBRARY_PATH): use an image with NCCL, or set \
             NCCL_CHECK_NCCL_LIB=/path/in/the/image/libnccl.so.2 in your job's environment"
            .to_string(),
    };
    with_hint(detail, &hint).replacen(
        NOT_FOUND,
        "NCCL library not found in the job's container image (srun --container-image)",
        1,
    )
}

/// The worker's words for a missing NCCL (`ExitCode::NcclLibrary`'s detail starts with them).
const NOT_FOUND: &str = "NCCL library not found";

/// `detail` with the worker's `--nccl-lib` hint replaced by `hint`, before any ` [worker exit N]`.
fn with_hint(detail: &str, hint: &str) -> String {
    let without = detail.replace(&format!("; {NCCL_LIB_HINT}"), "");
    match without.rfind(" [worker exit ") {
        Some(i) => format!("{}; {hint}{}", &without[..i], &without[i..]),
        None => format!("{without}; {hint}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_check_contract::verdict::Verdict;
    use std::time::Duration;

    fn outcome(verdict: Verdict, detail: &str) -> TaskOutcome {
        TaskOutcome {
            verdict,
            ending: Ok(nccl_check_host::supervise::Ending::Exited(1)),
            detail: detail.into(),
            elapsed: Duration::from_millis(3140),
            keep_problem: None,
        }
    }

    #[test]
    fn rows_line_up_under_the_header() {
        let out = outcome(
            Verdict::Fail,
            "all_reduce busbw 12.3 < 300.0 GB/s; responsible: n2 GPU 0",
        );
        let (h, r) = (header(), row("n2", 1, 2, &out, ""));
        assert_eq!(
            r,
            "nccl-check: n2                     1/2 FAIL       3.1s  all_reduce busbw 12.3 < \
             300.0 GB/s; responsible: n2 GPU 0"
        );
        assert_eq!(h.find("result"), r.find("all_reduce"));
        assert_eq!(h.find("verdict"), r.find("FAIL"));
    }

    /// Regression: the row cut the worker's sentence after 160 characters, mid-word.
    #[test]
    fn a_row_holds_the_whole_detail() {
        let long = format!(
            "NCCL library not found (tried {}) [worker exit 3]",
            "x".repeat(300)
        );
        let r = row("n1", 0, 1, &outcome(Verdict::Error, &long), " (warn)");
        assert!(r.ends_with(&format!("{long} (warn)")), "{r}");
    }

    /// Regression: an srun user was told to use --nccl-lib, which srun cannot pass on.
    #[test]
    fn the_nccl_hint_names_what_was_tried_and_never_the_workers_flag() {
        let d = format!(
            "NCCL library not found (tried libnccl.so.2: nope); {NCCL_LIB_HINT} [worker exit 3]"
        );
        let user = nccl_lib_hint(
            &d,
            Some("/home/u/libnccl.so.2"),
            Some(Path::new("/opt/l.so")),
        );
        assert_eq!(
            user,
            "NCCL library not found (tried libnccl.so.2: nope); NCCL_CHECK_NCCL_LIB=/home/u/libnccl.so.2 \
             (your environment) is what was tried: correct it, or unset it to use the site's library \
             [worker exit 3]"
        );
        let site = nccl_lib_hint(&d, None, Some(Path::new("/opt/nccl/libnccl.so.2")));
        assert!(
            site.contains("nccl_lib=/opt/nccl/libnccl.so.2 on the plugin line"),
            "{site}"
        );
        let none = nccl_lib_hint(&d, None, None);
        assert!(
            none.contains("set NCCL_CHECK_NCCL_LIB=") && none.contains("nccl_lib="),
            "{none}"
        );
        for s in [user, site, none] {
            assert!(!s.contains("--nccl-lib"), "{s}");
            assert!(s.ends_with(" [worker exit 3]"), "{s}");
        }
    }

    /// Regression: in a pyxis container with an image lacking NCCL the user was told to ask the
    /// admin for nccl_lib= (a host path), and nothing said the image was what lacked NCCL.
    #[test]
    fn in_a_container_the_nccl_hint_names_the_image() {
        let d = format!(
            "NCCL library not found (tried libnccl.so.2: nope); {NCCL_LIB_HINT} [worker exit 3]"
        );
        let none = nccl_lib_hint_in_container(&d, None, None);
        assert!(
            none.starts_with(
                "NCCL library not found in the job's container image (srun --container-image) \
                 (tried libnccl.so.2: nope); the image has no libnccl.so.2"
            ),
            "{none}"
        );
        assert!(!none.contains("ask your admin"), "{none}");
        let user = nccl_lib_hint_in_container(&d, Some("/opt/x/libnccl.so.2"), None);
        assert!(
            user.contains("NCCL_CHECK_NCCL_LIB=/opt/x/libnccl.so.2 (your environment) is what was tried inside the container"),
            "{user}"
        );
        let site = nccl_lib_hint_in_container(&d, None, Some(Path::new("/usr/lib/l.so")));
        assert!(
            site.contains("nccl_lib=/usr/lib/l.so on the plugin line (the site's) is what was tried inside the container"),
            "{site}"
        );
        for s in [none, user, site] {
            assert!(s.contains("container image"), "{s}");
            assert!(!s.contains("--nccl-lib"), "{s}");
            assert!(s.ends_with(" [worker exit 3]"), "{s}");
        }
    }
}
