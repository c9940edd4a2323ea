//! The interconnect classes from canned NVML link tables (the shapes `facts::nvml` records).

use super::*;
use crate::facts::gpu_health::{NvLinks, Pcie};

fn bus(i: usize) -> String {
    format!("00000000:{:02X}:00.0", 0x18 + i)
}

/// A GPU with `links` NVLinks, each leading where `remote(link)` says.
fn gpu(i: usize, links: u32, remote: impl Fn(u32) -> Remote) -> GpuHealth {
    GpuHealth {
        index: i as u32,
        bus_id: bus(i),
        name: "NVIDIA H100 80GB HBM3".into(),
        pci_device_id: Some(0x2330),
        nvlink: (links > 0).then_some(NvLinks {
            present: links,
            active: links,
        }),
        links: (0..links)
            .map(|link| LinkFact {
                link,
                active: true,
                remote: remote(link),
            })
            .collect(),
        processes: vec![],
        pcie: Some(Pcie {
            gen: 1,
            max_gen: 5,
            width: 16,
            max_width: 16,
        }),
        ecc_uncorrected_volatile: Some(0),
        row_remap: None,
        throttle: None,
        clocks: None,
        errors: vec![],
    }
}

fn node(gpus: Vec<GpuHealth>) -> HealthFacts {
    HealthFacts::Available {
        driver_version: "580.95.05".into(),
        gpus,
    }
}

fn nvswitch_node(n: usize) -> Vec<GpuHealth> {
    (0..n).map(|i| gpu(i, 18, |_| Remote::Switch)).collect()
}

fn bridged_pairs(n: usize) -> Vec<GpuHealth> {
    (0..n)
        .map(|i| {
            let partner = bus(i ^ 1);
            gpu(i, 12, move |_| Remote::Gpu {
                bus_id: partner.clone(),
            })
        })
        .collect()
}

#[test]
fn eight_sxm_gpus_on_nvswitch_are_one_nvlink_fabric() {
    let ic = of_node(&node(nvswitch_node(8)), &[]);
    assert_eq!(ic.class, Class::Nvswitch);
    assert_eq!((ic.gpus, ic.links_per_gpu), (8, 18));
    assert_eq!(
        ic.to_string(),
        "8 GPUs, one NVLink fabric (NVSwitch), 18 links each"
    );
}

#[test]
fn pcie_cards_without_links_are_pcie_with_their_generation_and_width() {
    let gpus: Vec<GpuHealth> = (0..8).map(|i| gpu(i, 0, |_| Remote::Unknown)).collect();
    let ic = of_node(&node(gpus), &[]);
    assert_eq!(ic.class, Class::Pcie);
    assert_eq!(ic.pcie, Some((5, 16)));
    assert_eq!(ic.to_string(), "8 GPUs on PCIe Gen5 x16, no NVLink");
}

#[test]
fn bridged_pairs_are_bridged_with_each_pair_named() {
    let ic = of_node(&node(bridged_pairs(8)), &[]);
    assert_eq!(ic.class, Class::Bridged);
    assert_eq!(ic.groups.len(), 4);
    assert_eq!(ic.groups[0], vec!["0000:18:00.0", "0000:19:00.0"]);
    assert_eq!(
        ic.to_string(),
        "8 GPUs on PCIe Gen5 x16, 4 NVLink-bridged pairs"
    );
}

#[test]
fn one_link_down_on_nvswitch_stays_nvswitch_and_even_a_gpu_with_none_does() {
    let mut gpus = nvswitch_node(8);
    gpus[3].links[7].active = false;
    let ic = of_node(&node(gpus.clone()), &[]);
    assert_eq!(ic.class, Class::Nvswitch);
    assert_eq!(ic.links_per_gpu, 18);
    // A GPU whose every link is down, in a process that drives only it, still sees no switch:
    // its own class falls to PCIe, but the node-wide view of a sibling keeps nvswitch.
    for l in &mut gpus[3].links {
        l.active = false;
        l.remote = Remote::Unknown;
    }
    assert_eq!(of_node(&node(gpus.clone()), &[]).class, Class::Nvswitch);
    assert_eq!(of_node(&node(gpus), &[bus(3)]).class, Class::Pcie);
}

#[test]
fn a_four_way_direct_mesh_is_a_mesh_and_one_lost_peer_makes_it_groups() {
    let mesh = |i: usize| {
        gpu(i, 12, move |l| Remote::Gpu {
            bus_id: bus((i + 1 + (l as usize % 3)) % 4),
        })
    };
    let gpus: Vec<GpuHealth> = (0..4).map(mesh).collect();
    assert_eq!(of_node(&node(gpus.clone()), &[]).class, Class::NvlinkMesh);
    let mut broken = gpus;
    for g in &mut broken {
        g.links.retain(|l| match &l.remote {
            Remote::Gpu { bus_id } => {
                let pair = [g.bus_id.as_str(), bus_id.as_str()];
                !(pair.contains(&bus(0).as_str()) && pair.contains(&bus(2).as_str()))
            }
            _ => true,
        });
    }
    assert_eq!(of_node(&node(broken), &[]).class, Class::Bridged);
}

#[test]
fn a_process_sees_its_own_gpus_and_unknown_is_said() {
    let ic = of_node(&node(nvswitch_node(8)), &[bus(2).to_lowercase()]);
    assert_eq!((ic.class, ic.gpus), (Class::Nvswitch, 1));
    let none = of_node(&node(nvswitch_node(2)), &["0000:99:00.0".into()]);
    assert_eq!(none.class, Class::Unknown);
    assert!(none.note.contains("none of this process"), "{}", none.note);
    let unavailable = of_node(
        &HealthFacts::unavailable("libnvidia-ml.so.1: not found"),
        &[],
    );
    assert_eq!(unavailable.class, Class::Unknown);
    assert!(unavailable.to_string().contains("libnvidia-ml"));
}

#[test]
fn rule_names_parse_and_unknown_is_not_a_rule_value() {
    for c in Class::ALL {
        let parsed = Class::parse(c.name());
        if c == Class::Unknown {
            assert_eq!(parsed, None);
        } else {
            assert_eq!(parsed, Some(c));
        }
    }
    assert_eq!(Class::parse("NVSwitch"), None);
}
