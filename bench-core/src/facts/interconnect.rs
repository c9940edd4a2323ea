//! How the GPUs of a node reach each other, read from the node (NVML's NVLink state and where
//! each link leads), never inferred from a GPU's name: one NVSwitch fabric, a direct NVLink
//! mesh, NVLink-bridged groups (pairs) with PCIe between them, or PCIe only. A built-in
//! collective floor states the interconnect it was measured on and applies only where the node
//! has it (`thresholds`); where NVML cannot say, the class is `Unknown`, and no
//! interconnect-specific floor applies (judge less, never more).
//!
//! A GPU with any link into an NVSwitch makes the class `nvswitch`, even when some or all of
//! another GPU's links are down: that GPU is then an `nvlink_down` finding against its SKU's
//! link count (`gpu_health`), not a reason to judge the node as a PCIe one.

use super::gpu_health::{GpuHealth, HealthFacts, LinkFact, Remote};
use crate::model::link_class::Class;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// The interconnect of this process's GPUs, as read, with what the report says about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interconnect {
    pub class: Class,
    /// GPUs of this process it was read for.
    pub gpus: u32,
    /// Most active NVLinks of one of those GPUs (0 without NVLink).
    pub links_per_gpu: u32,
    /// NVLink groups of the node (bus ids), for `bridged` and `nvlink_mesh`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Vec<String>>,
    /// PCIe generation and width the GPUs are capable of (the lowest among them).
    pub pcie: Option<(u32, u32)>,
    /// Why the class is unknown, or how it was assumed (offline, from the SKU).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

impl Interconnect {
    pub fn unknown(why: impl Into<String>) -> Interconnect {
        Interconnect {
            class: Class::Unknown,
            gpus: 0,
            links_per_gpu: 0,
            groups: vec![],
            pcie: None,
            note: why.into(),
        }
    }

    /// What `--explain-thresholds --gpu-model` assumes of `gpus` GPUs of a known form factor.
    pub fn assumed(form: crate::model::sku::FormFactor, links: u32, gpus: u32) -> Interconnect {
        let class = Class::of_form(form);
        Interconnect {
            class,
            gpus,
            links_per_gpu: if class == Class::Pcie { 0 } else { links },
            note: format!("assumed from the SKU's form factor ({})", form.describe()),
            ..Interconnect::unknown("")
        }
    }
}

impl fmt::Display for Interconnect {
    /// `8 GPUs, one NVLink fabric (NVSwitch), 18 links each` or
    /// `8 GPUs on PCIe Gen5 x16, 4 bridged groups`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, links, groups) = (self.gpus, self.links_per_gpu, self.groups.len());
        let gpus = format!("{n} GPU{}", if n == 1 { "" } else { "s" });
        let pcie = self
            .pcie
            .map(|(g, w)| format!("PCIe Gen{g} x{w}"))
            .unwrap_or_else(|| "PCIe".into());
        let pairs = self.groups.iter().all(|g| g.len() == 2);
        let bridged = if pairs { "pairs" } else { "groups" };
        match self.class {
            Class::Nvswitch => write!(
                f,
                "{gpus}, one NVLink fabric (NVSwitch), {links} links each"
            )?,
            Class::NvlinkMesh => write!(f, "{gpus}, direct NVLink mesh, {links} links each")?,
            Class::Bridged if groups == 0 => write!(f, "{gpus} on {pcie} with NVLink bridges")?,
            Class::Bridged => write!(f, "{gpus} on {pcie}, {groups} NVLink-bridged {bridged}")?,
            Class::Pcie => write!(f, "{gpus} on {pcie}, no NVLink")?,
            Class::Unknown => write!(f, "interconnect unknown")?,
        }
        if !self.note.is_empty() {
            write!(f, " ({})", self.note)?;
        }
        Ok(())
    }
}

/// The interconnect of the GPUs with bus ids `mine` (NVML's list for the whole node is
/// `facts`; with `mine` empty, every GPU NVML lists).
pub fn of_node(facts: &HealthFacts, mine: &[String]) -> Interconnect {
    let gpus = match facts {
        HealthFacts::Available { gpus, .. } => gpus,
        HealthFacts::Unavailable { why } => return Interconnect::unknown(why.clone()),
    };
    let norm =
        |b: &str| crate::config::expected_gpus::bus_id(b).unwrap_or_else(|| b.to_ascii_lowercase());
    let mine: BTreeSet<String> = mine.iter().map(|b| norm(b)).collect();
    let selected: Vec<&GpuHealth> = gpus
        .iter()
        .filter(|g| mine.is_empty() || mine.contains(&norm(&g.bus_id)))
        .collect();
    if selected.is_empty() {
        return Interconnect::unknown("NVML lists none of this process's GPUs");
    }
    let active = |g: &GpuHealth| g.links.iter().filter(|l| l.active).count() as u32;
    let links_per_gpu = selected.iter().map(|g| active(g)).max().unwrap_or(0);
    let pcie = selected
        .iter()
        .filter_map(|g| g.pcie.as_ref().map(|p| (p.max_gen, p.max_width)))
        .min();
    let base = Interconnect {
        class: Class::Pcie,
        gpus: selected.len() as u32,
        links_per_gpu,
        pcie,
        ..Interconnect::unknown("")
    };
    let to_switch = |l: &LinkFact| l.remote == Remote::Switch;
    if selected.iter().any(|g| g.links.iter().any(to_switch)) {
        return Interconnect {
            class: Class::Nvswitch,
            ..base
        };
    }
    // Direct GPU-GPU links over the whole node: groups are the connected parts.
    let groups = groups(gpus, &norm);
    let mine_in_groups = groups
        .iter()
        .any(|grp| selected.iter().any(|g| grp.contains(&norm(&g.bus_id))));
    if !mine_in_groups {
        return base;
    }
    let everyone = gpus.len();
    let full_mesh = groups.len() == 1
        && groups[0].len() == everyone
        && everyone >= 3
        && gpus
            .iter()
            .all(|g| direct_peers(g, &norm).len() == everyone - 1);
    Interconnect {
        class: if full_mesh {
            Class::NvlinkMesh
        } else {
            Class::Bridged
        },
        groups,
        ..base
    }
}

/// The bus ids a GPU's active links lead to directly.
fn direct_peers(g: &GpuHealth, norm: &dyn Fn(&str) -> String) -> BTreeSet<String> {
    g.links
        .iter()
        .filter(|l| l.active)
        .filter_map(|l| match &l.remote {
            Remote::Gpu { bus_id } => Some(norm(bus_id)),
            _ => None,
        })
        .filter(|b| *b != norm(&g.bus_id))
        .collect()
}

/// Connected groups (2 or more GPUs) of direct NVLinks, each sorted, in order of first bus id.
fn groups(gpus: &[GpuHealth], norm: &dyn Fn(&str) -> String) -> Vec<Vec<String>> {
    let mut groups: Vec<BTreeSet<String>> = Vec::new();
    for g in gpus {
        let mut set = direct_peers(g, norm);
        if set.is_empty() {
            continue;
        }
        set.insert(norm(&g.bus_id));
        // Merge every existing group that shares a GPU with this one.
        let (joined, rest): (Vec<_>, Vec<_>) =
            groups.into_iter().partition(|grp| !grp.is_disjoint(&set));
        set.extend(joined.into_iter().flatten());
        groups = rest;
        groups.push(set);
    }
    // Sets order as their sorted lists do.
    groups.sort();
    let lists = groups.into_iter().map(|s| s.into_iter().collect());
    lists.collect()
}

#[cfg(test)]
mod tests;
