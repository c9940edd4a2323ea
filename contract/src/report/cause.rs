//! Which class of cause a reason names: the hardware (a GPU, a link, a NIC, a path between
//! nodes), something keeping the node busy (another process on a GPU, the host's CPUs), a part
//! that is missing, or the check's setup. One table from the reason code
//! ([`ReasonCode::cause_class`]), so the worker writes it (`reasons[].cause`), the prolog's
//! `decide` and drain reason read it typed, and no caller guesses it from a sentence. Only `hardware` and `missing` say "replace
//! or repair a part"; `busy` says "end a process" and is never a fault of the GPU.

use super::reason::{Reason, ReasonCode};
use serde::{Deserialize, Serialize};

/// What kind of thing is at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, strum::IntoStaticStr)]
#[cfg_attr(test, derive(strum::EnumIter))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum CauseClass {
    /// A GPU, an NVLink or PCIe link, a NIC, a path between nodes: slow, wrong or faulty.
    Hardware,
    /// The node is busy: another process on a GPU, a check process starved of CPU, a host
    /// whose CPUs others keep busy. The fix is to end a process, not to replace a part.
    Busy,
    /// A GPU the node should have is not there.
    Missing,
    /// The check itself could not run as configured (library, rendezvous, deadline): never
    /// the node's fault.
    Setup,
}

impl CauseClass {
    /// The class as the report spells it (`hardware`, `busy`, `missing`, `setup`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::fmt::Display for CauseClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ReasonCode {
    /// What class of cause the code names: the one table.
    pub fn cause_class(self) -> CauseClass {
        use ReasonCode as C;
        match self {
            C::WrongData
            | C::BusbwBelowThreshold
            | C::GpuOutlier
            | C::LinkOutlier
            | C::NodeOutlier
            | C::NodePairOutlier
            | C::TransportFallback
            | C::NodeSlow
            | C::NodePairSlow
            | C::RailSlow
            | C::SuspectsUnresolved
            | C::NvlinkDown
            | C::PcieDegraded
            | C::EccUncorrectable
            | C::RowRemapPending
            | C::HwSlowdown
            | C::NetPortDown
            | C::NetRateDegraded
            | C::LocalProbeSlow => CauseClass::Hardware,
            C::GpuBusy
            | C::ForeignProcess
            | C::WorkerStarved
            | C::HostInterference
            | C::HostBusy => CauseClass::Busy,
            C::GpuMissing => CauseClass::Missing,
            // ERROR codes (`no_gpu`: this process saw no GPU, e.g. an empty CUDA_VISIBLE_DEVICES),
            // and a code of a newer worker, not known to be the node's fault: judge less.
            C::NcclLibrary | C::NoGpu | C::Rendezvous | C::Timeout | C::Runtime | C::Unknown => {
                CauseClass::Setup
            }
        }
    }
}

impl Reason {
    /// Which class of cause the reason names: hardware, busy, missing or setup.
    pub fn cause(&self) -> CauseClass {
        self.code.cause_class()
    }
}

/// Whether the code is a speed reading (a bandwidth, a probe, the localizer's slow node, pair
/// or rail): what a busy node slows as well as a broken part, unlike a fact that holds
/// whatever the load (a link down, wrong data, an ECC error, a missing GPU).
pub fn is_speed_reading(code: ReasonCode) -> bool {
    code.is_bandwidth()
        || matches!(
            code,
            ReasonCode::NodeSlow
                | ReasonCode::NodePairSlow
                | ReasonCode::RailSlow
                | ReasonCode::SuspectsUnresolved
        )
}

/// The reason that says what a FAIL's cause is, of those the report gives: a missing part
/// first, then a hardware fault that holds whatever the load, then a busy node (it explains
/// the slow readings beside it), then any other; None without reasons.
pub fn deciding(reasons: &[Reason]) -> Option<&Reason> {
    let first = |want: &dyn Fn(&Reason) -> bool| reasons.iter().find(|r| want(r));
    first(&|r| r.cause() == CauseClass::Missing)
        .or_else(|| first(&|r| r.cause() == CauseClass::Hardware && !is_speed_reading(r.code)))
        .or_else(|| first(&|r| r.cause() == CauseClass::Busy))
        .or_else(|| reasons.first())
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator;

    fn r(code: ReasonCode) -> Reason {
        Reason::plain(code, code.as_str())
    }

    /// A busy GPU or host explains the slow readings beside it; a link down, wrong data or a
    /// missing GPU is a fault whatever else the node was doing.
    #[test]
    fn a_busy_node_explains_slow_readings_but_not_a_fault_that_holds_under_any_load() {
        use ReasonCode as C;
        let case = |codes: &[ReasonCode]| {
            let rs: Vec<Reason> = codes.iter().map(|c| r(*c)).collect();
            deciding(&rs).map(|x| (x.code, x.cause()))
        };
        assert_eq!(case(&[]), None);
        assert_eq!(
            case(&[C::LinkOutlier, C::GpuBusy]),
            Some((C::GpuBusy, CauseClass::Busy))
        );
        assert_eq!(
            case(&[C::NodeSlow, C::WorkerStarved]),
            Some((C::WorkerStarved, CauseClass::Busy))
        );
        assert_eq!(
            case(&[C::GpuBusy, C::NvlinkDown]),
            Some((C::NvlinkDown, CauseClass::Hardware))
        );
        assert_eq!(
            case(&[C::WorkerStarved, C::WrongData]),
            Some((C::WrongData, CauseClass::Hardware))
        );
        assert_eq!(
            case(&[C::NvlinkDown, C::GpuMissing]),
            Some((C::GpuMissing, CauseClass::Missing))
        );
        assert_eq!(
            case(&[C::BusbwBelowThreshold, C::LinkOutlier]),
            Some((C::BusbwBelowThreshold, CauseClass::Hardware))
        );
        assert_eq!(case(&[C::Unknown]), Some((C::Unknown, CauseClass::Setup)));
    }

    /// The table, pinned as the prolog's README prints it: every code and its class.
    #[test]
    fn every_code_has_one_class_and_only_hardware_and_missing_are_faults() {
        let mut by_class: Vec<(CauseClass, Vec<&str>)> =
            CauseClass::iter().map(|c| (c, Vec::new())).collect();
        for code in ReasonCode::iter() {
            let class = code.cause_class();
            let slot = by_class
                .iter_mut()
                .find(|(c, _)| *c == class)
                .expect("a class");
            slot.1.push(code.as_str());
        }
        let written: Vec<String> = by_class
            .iter()
            .map(|(c, codes)| format!("{c}: {}", codes.join(",")))
            .collect();
        assert_eq!(
            written,
            [
                "hardware: wrong_data,busbw_below_threshold,gpu_outlier,link_outlier,\
                 node_outlier,node_pair_outlier,transport_fallback,node_slow,node_pair_slow,\
                 rail_slow,suspects_unresolved,nvlink_down,pcie_degraded,ecc_uncorrectable,\
                 row_remap_pending,hw_slowdown,net_port_down,net_rate_degraded,local_probe_slow",
                "busy: worker_starved,gpu_busy,host_interference,foreign_process,host_busy",
                "missing: gpu_missing",
                "setup: nccl_library,no_gpu,rendezvous,timeout,runtime,unknown",
            ]
        );
    }

    #[test]
    fn a_class_is_written_in_snake_case() {
        for c in CauseClass::iter() {
            assert_eq!(
                serde_json::to_string(&c).expect("serializes"),
                format!("\"{}\"", c.as_str())
            );
        }
        assert_eq!(CauseClass::Busy.to_string(), "busy");
    }
}
