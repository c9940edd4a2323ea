//! The counters' share of the pass: PCIe AER counters of the GPUs and RDMA NICs ([`super::aer`])
//! and InfiniBand/RoCE port state and error counters ([`super::ib`]), each judged by how much it
//! grew since the last check against the configured limits.

use super::limits::{AerLimits, IbLimits};
use super::summary::{ms, Memory, Settings, Source, Summary};
use super::{aer, ib};
use std::collections::BTreeMap;
use std::time::Instant;

/// How much a counter grew; a counter that went back (a reset, a reload) grew by its value.
fn delta(now: u64, before: u64) -> u64 {
    now.checked_sub(before).unwrap_or(now)
}

/// PCIe AER counters of the NVIDIA GPUs and RDMA NICs, against the last pass's.
pub(super) fn scan_aer(
    s: &Settings,
    before: &Memory,
    rebooted: bool,
    now: &mut Memory,
    out: &mut Summary,
) -> Source {
    let t = Instant::now();
    let (devices, problems) = aer::devices(&s.root);
    let mut src = Source {
        name: "aer",
        path: s.root.join("sys/bus/pci/devices").display().to_string(),
        readable: problems.is_empty(),
        items: 0,
        ms: 0.0,
        note: problems.first().cloned(),
    };
    for d in &devices {
        match aer::read_device(&s.root, &d.pci) {
            Ok(Some((c, detail))) => {
                src.items += 1;
                let prev = if rebooted {
                    Some(aer::Counts::default())
                } else {
                    before.aer.get(&d.pci).copied()
                };
                if let Some(p) = prev {
                    judge_aer(d, &c, &p, &detail, &s.aer, out);
                }
                now.aer.insert(d.pci.clone(), c);
            }
            Ok(None) => {}
            Err(e) => {
                src.readable = false;
                src.note.get_or_insert(e);
            }
        }
    }
    if src.items == 0 && src.note.is_none() {
        src.note = Some("no NVIDIA GPU or RDMA NIC with AER counters".into());
    }
    src.ms = ms(t);
    src
}

/// InfiniBand / RoCE ports: state and error counters, against the last pass's.
pub(super) fn scan_ib(
    s: &Settings,
    before: &Memory,
    rebooted: bool,
    now: &mut Memory,
    out: &mut Summary,
) -> Source {
    let t = Instant::now();
    let (ports, problems) = ib::read_ports(&s.root);
    let src = Source {
        name: "ib",
        path: s.root.join("sys/class/infiniband").display().to_string(),
        readable: problems.is_empty(),
        items: ports.len(),
        ms: 0.0,
        note: problems
            .first()
            .cloned()
            .or_else(|| ports.is_empty().then(|| "no RDMA port".to_string())),
    };
    for p in ports {
        let prev = before.ib.get(&p.name);
        if rebooted {
            let zero = ib::Port {
                counters: BTreeMap::new(),
                active: false,
                ..p.clone()
            };
            judge_port(&p, &zero, &s.ib, out);
        } else if let Some(prev) = prev {
            judge_port(&p, prev, &s.ib, out);
        }
        now.ib.insert(p.name.clone(), p);
    }
    Source { ms: ms(t), ..src }
}

fn judge_aer(
    d: &aer::Device,
    now: &aer::Counts,
    before: &aer::Counts,
    detail: &BTreeMap<String, u64>,
    l: &AerLimits,
    out: &mut Summary,
) {
    let types: Vec<String> = detail
        .iter()
        .take(3)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let types = if types.is_empty() {
        String::new()
    } else {
        format!(" ({})", types.join(", "))
    };
    for (what, n, b, limit, with_types) in [
        ("fatal", now.fatal, before.fatal, l.fatal, true),
        ("nonfatal", now.nonfatal, before.nonfatal, l.nonfatal, true),
        (
            "correctable",
            now.correctable,
            before.correctable,
            l.correctable,
            false,
        ),
    ] {
        let grew = delta(n, b);
        if grew > limit {
            let types = if with_types { types.as_str() } else { "" };
            let subject = format!("{} {}", d.role, d.pci);
            out.add_fail(
                "aer",
                &subject,
                format!("AER {what} +{grew} > {limit}{types}"),
            );
        }
    }
}

fn judge_port(now: &ib::Port, before: &ib::Port, l: &IbLimits, out: &mut Summary) {
    let kind = if now.link_layer == "Ethernet" {
        "RoCE"
    } else {
        "IB"
    };
    if before.active && !now.active {
        let what = format!("{kind} link down (ACTIVE at the last check)");
        out.add_fail("ib", &now.name, what);
    }
    for (c, limit) in l.counters() {
        let Some(&n) = now.counters.get(c) else {
            continue;
        };
        let grew = delta(n, before.counters.get(c).copied().unwrap_or(0));
        if grew > limit {
            out.add_fail("ib", &now.name, format!("{kind} {c} +{grew} > {limit}"));
        }
    }
}
