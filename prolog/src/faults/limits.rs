//! The fault checks' limits (prolog.toml `aer_limits` and `ib_limits`, inline tables): the most
//! each counter may grow between two checks before the node FAILs. Defaults here and nowhere else.

use serde::{Deserialize, Serialize};

/// PCIe AER, per device, per check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AerLimits {
    /// Uncorrectable fatal errors: the link or device is broken; any is a FAIL.
    pub fatal: u64,
    /// Uncorrectable non-fatal errors (a transaction was lost).
    pub nonfatal: u64,
    /// Corrected errors (retried by the link layer): a burst means a marginal link.
    pub correctable: u64,
}

impl Default for AerLimits {
    fn default() -> Self {
        AerLimits {
            fatal: 0,
            nonfatal: 0,
            correctable: 1000,
        }
    }
}

/// InfiniBand/RoCE port counters, per port, per check (names as in sysfs `counters/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct IbLimits {
    /// The link went down (the port trained anew): any is a FAIL.
    pub link_downed: u64,
    /// The link recovered from errors by retraining.
    pub link_error_recovery: u64,
    pub symbol_error: u64,
    pub port_rcv_errors: u64,
    pub port_rcv_remote_physical_errors: u64,
    pub local_link_integrity_errors: u64,
    pub excessive_buffer_overrun_errors: u64,
}

impl Default for IbLimits {
    fn default() -> Self {
        IbLimits {
            link_downed: 0,
            link_error_recovery: 5,
            symbol_error: 100,
            port_rcv_errors: 100,
            port_rcv_remote_physical_errors: 100,
            local_link_integrity_errors: 10,
            excessive_buffer_overrun_errors: 10,
        }
    }
}

impl IbLimits {
    /// The error counters read (sysfs `counters/` names), in the order messages list them, each
    /// with its limit.
    pub fn counters(&self) -> [(&'static str, u64); 7] {
        [
            ("link_downed", self.link_downed),
            ("link_error_recovery", self.link_error_recovery),
            ("symbol_error", self.symbol_error),
            ("port_rcv_errors", self.port_rcv_errors),
            (
                "port_rcv_remote_physical_errors",
                self.port_rcv_remote_physical_errors,
            ),
            (
                "local_link_integrity_errors",
                self.local_link_integrity_errors,
            ),
            (
                "excessive_buffer_overrun_errors",
                self.excessive_buffer_overrun_errors,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_read_has_a_limit() {
        // Each key of `ib_limits` is a counter read, with its own value, and no counter is read
        // without one.
        let l = IbLimits::default();
        let keys = serde_json::to_value(l).expect("json");
        let keys = keys.as_object().expect("a table");
        assert_eq!(keys.len(), l.counters().len());
        for (c, limit) in l.counters() {
            assert_eq!(keys.get(c).and_then(|v| v.as_u64()), Some(limit), "{c}");
        }
    }
}
