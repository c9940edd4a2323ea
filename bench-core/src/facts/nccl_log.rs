//! NCCL's INFO log of this check, as `measure::nccl_env` captured it to a private file: read once
//! the run is over, for the report and the transport rule (`transport`), and removed once read.

use crate::facts::transport::TransportInfo;
use crate::facts::transport::{parse_log, TransportSummary};
use crate::measure::nccl_env::LogPlace;
use std::path::Path;

/// What NCCL's log says, for the report, and the parsed log for the transport rule (none when
/// the log was not recorded). The log is removed once read.
pub fn read_transports(log: &LogPlace) -> (TransportInfo, Option<TransportSummary>) {
    let path = match log {
        Ok(p) => p,
        Err(why) => return (TransportInfo::not_recorded(why.clone()), None),
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    remove(path);
    let s = parse_log(&text);
    (TransportInfo::from_log(&s), Some(s))
}

fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
    if let Some(dir) = path.parent() {
        let _ = std::fs::remove_dir(dir);
    }
}
