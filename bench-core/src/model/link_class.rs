//! How the GPUs of a node reach each other, as a class: the key a collective floor is measured
//! on (`[[thresholds]] interconnect = "..."`) and the class facts reads from the node. A plain
//! value so config can parse it and judge can match it without reading the node.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The class a `[[thresholds]]` rule names with `interconnect = "..."`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Every GPU has NVLinks into one NVSwitch fabric (HGX, NVL72).
    Nvswitch,
    /// Every GPU of the node linked directly to every other (no switch).
    NvlinkMesh,
    /// NVLink bridges join GPUs in groups (usually pairs); PCIe between groups.
    Bridged,
    /// No NVLink between the GPUs.
    Pcie,
    /// NVML could not say.
    Unknown,
}

impl Class {
    /// The class a form factor implies when the node cannot be read (offline explanations).
    pub fn of_form(form: crate::model::sku::FormFactor) -> Class {
        use crate::model::sku::FormFactor;
        match form {
            FormFactor::Sxm | FormFactor::Superchip => Class::Nvswitch,
            FormFactor::PcieBridged => Class::Bridged,
            FormFactor::Pcie => Class::Pcie,
        }
    }

    pub const ALL: [Class; 5] = [
        Class::Nvswitch,
        Class::NvlinkMesh,
        Class::Bridged,
        Class::Pcie,
        Class::Unknown,
    ];

    /// The name rules use.
    pub fn name(self) -> &'static str {
        match self {
            Class::Nvswitch => "nvswitch",
            Class::NvlinkMesh => "nvlink_mesh",
            Class::Bridged => "bridged",
            Class::Pcie => "pcie",
            Class::Unknown => "unknown",
        }
    }

    /// A rule's value: one of the names above, except `unknown` (no rule is written for it).
    pub fn parse(text: &str) -> Option<Class> {
        Class::ALL
            .into_iter()
            .find(|c| *c != Class::Unknown && c.name() == text)
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
