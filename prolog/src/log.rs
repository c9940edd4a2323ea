//! Where the prolog's words go: syslog (facility from the config; `nccl-check-prolog[pid]: ...`),
//! and one line on stderr, which slurmd copies into its log (on a failing prolog, 22.05 keeps only
//! the first line of output: `prolog failed: rc:1 output:...`), so that line is the verdict.
//! `--dry-run` also echoes every message on stdout.

use syslog::{Facility, Formatter3164, Logger, LoggerBackend};

pub const PROCESS: &str = "nccl-check-prolog";

type Syslog = Logger<LoggerBackend, Formatter3164>;

pub struct Log {
    syslog: Option<Syslog>,
    echo: bool,
}

impl Log {
    /// Opens syslog with `facility` (validated by the config); without a syslog daemon the
    /// messages still reach stderr's final line.
    pub fn open(facility: &str, socket: &std::path::Path, echo: bool) -> Log {
        let syslog = facility.parse::<Facility>().ok().and_then(|facility| {
            let f = Formatter3164 {
                facility,
                hostname: None,
                process: PROCESS.into(),
                pid: std::process::id(),
            };
            syslog::unix_custom(f, socket).ok()
        });
        Log { syslog, echo }
    }

    fn send(&mut self, msg: &str, to: fn(&mut Syslog, &str) -> syslog::Result<()>) {
        if self.echo {
            nccl_check_host::outln!("{PROCESS}: {msg}");
        }
        if let Some(s) = self.syslog.as_mut() {
            let _ = to(s, msg);
        }
    }

    pub fn info(&mut self, msg: &str) {
        self.send(msg, |s, m| s.info(m));
    }

    pub fn warn(&mut self, msg: &str) {
        self.send(msg, |s, m| s.warning(m));
    }

    pub fn error(&mut self, msg: &str) {
        self.send(msg, |s, m| s.err(m));
    }
}

/// The verdict line on stderr (one line: slurmd keeps the first).
pub fn stderr_line(msg: &str) {
    let one: String = msg.replace(['\n', '\r'], " ");
    nccl_check_host::errln!("{PROCESS}: {one}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_facility_the_config_accepts_is_known_to_syslog_except_none() {
        for f in crate::config::FACILITIES {
            assert_eq!(f.parse::<Facility>().is_ok(), *f != "none", "{f}");
        }
    }

    #[test]
    fn without_a_syslog_daemon_logging_is_silent_not_fatal() {
        let mut l = Log::open("none", std::path::Path::new("/dev/log"), false);
        assert!(l.syslog.is_none());
        l.error("nothing listens; must not panic");
        let mut l = Log::open("daemon", std::path::Path::new("/nonexistent/log"), false);
        assert!(l.syslog.is_none());
        l.error("nothing listens; must not panic");
    }

    #[test]
    fn messages_reach_a_syslog_socket_with_facility_severity_and_process() {
        // A real datagram socket standing in for the syslog daemon's /dev/log.
        let dir = std::env::temp_dir().join(format!("nccl-check-syslog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let _ = std::fs::remove_file(&path);
        let daemon = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        daemon
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut l = Log::open("local3", &path, false);
        assert!(l.syslog.is_some());
        l.error("FAIL job 7 on n1: all_reduce 256 MiB busbw 30.2 < 290.0 GB/s");
        let mut buf = [0u8; 2048];
        let n = daemon.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).into_owned();
        let _ = std::fs::remove_dir_all(&dir);
        // <PRI> = facility local3 (19) * 8 + severity err (3) = 155.
        assert!(got.starts_with("<155>"), "{got}");
        assert!(
            got.contains(&format!(
                "nccl-check-prolog[{}]: FAIL job 7 on n1",
                std::process::id()
            )),
            "{got}"
        );
    }
}
