//! InfiniBand and RoCE port error counters from sysfs
//! (`/sys/class/infiniband/<dev>/ports/<n>/counters/<name>`, the IBA PortCounters attribute;
//! <https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband>) and each
//! port's state (`4: ACTIVE`). A counter a port does not have (RoCE ports lack some) is skipped.

use super::limits::IbLimits;
use super::read;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Most ports per device looked at.
const MAX_PORTS: usize = 16;

/// One port as read now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Port {
    /// `mlx5_0/1`.
    pub name: String,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
    pub active: bool,
    pub counters: BTreeMap<String, u64>,
}

/// Every RDMA port of the node, sorted by name; and what could not be read.
pub fn read_ports(root: &Path) -> (Vec<Port>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let ib = root.join("sys/class/infiniband");
    let Ok(devs) = std::fs::read_dir(&ib) else {
        return (out, problems); // no RDMA device: nothing to read
    };
    for dev in devs.flatten().take(super::aer::MAX_RDMA) {
        let dname = dev.file_name().to_string_lossy().into_owned();
        let Ok(ports) = std::fs::read_dir(dev.path().join("ports")) else {
            problems.push(format!("{}/ports: not readable", dev.path().display()));
            continue;
        };
        for port in ports.flatten().take(MAX_PORTS) {
            let p = port.path();
            let name = format!("{dname}/{}", port.file_name().to_string_lossy());
            let state = read::small(&p.join("state")).unwrap_or_default();
            let link_layer = read::small(&p.join("link_layer"))
                .map(|s| read::cut(s.trim()))
                .unwrap_or_default();
            let mut counters = BTreeMap::new();
            for (c, _) in IbLimits::default().counters() {
                let f = p.join("counters").join(c);
                if !f.exists() {
                    continue;
                }
                match read::number(&f) {
                    Ok(n) => {
                        counters.insert(c.to_string(), n);
                    }
                    Err(e) => problems.push(e),
                }
            }
            out.push(Port {
                name,
                link_layer,
                active: state.contains("ACTIVE"),
                counters,
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    (out, problems)
}
