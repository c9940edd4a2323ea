//! This node's GPUs as the NVIDIA driver lists them, without CUDA: one small text file per GPU,
//! `/proc/driver/nvidia/gpus/<pci>/information` (a few microseconds each). Gives the cache its
//! GPU identity and maps Slurm's GPU indices to GPUs.
//!
//! Index order is PCI bus order, the order of `nvidia-smi`, of Slurm's NVML autodetection, and of
//! CUDA under `CUDA_DEVICE_ORDER=PCI_BUS_ID` (which the prolog sets for the worker).

use std::path::Path;

/// One GPU as the driver describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGpu {
    /// `0000:18:00.0`, lower case.
    pub bus: String,
    pub model: String,
    /// `GPU-...`; `None` when the driver shows `GPU-????...` (no persistence mode) or nothing.
    pub uuid: Option<String>,
}

impl NodeGpu {
    /// What identifies this GPU for the cache: its UUID, else its bus location and model (a GPU
    /// swapped for the same model in the same slot is then not noticed; run nvidia-persistenced).
    pub fn identity(&self) -> String {
        match &self.uuid {
            Some(u) => u.clone(),
            None => format!("{}/{}", self.bus, self.model),
        }
    }
}

/// Reads every `<dir>/*/information`, sorted by bus location. A missing directory (no driver,
/// no GPU) is an empty list: the worker is the one to say ERROR "no GPU".
pub fn read(dir: &Path) -> Vec<NodeGpu> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut gpus: Vec<NodeGpu> = entries
        .flatten()
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path().join("information")).ok()?;
            Some(parse_information(&text, &e.file_name().to_string_lossy()))
        })
        .collect();
    gpus.sort_by(|a, b| a.bus.cmp(&b.bus));
    gpus
}

/// Parses one `information` file; `dir_name` (the PCI address) stands in for a missing
/// `Bus Location`.
pub fn parse_information(text: &str, dir_name: &str) -> NodeGpu {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    let uuid = field("GPU UUID").filter(|u| u.starts_with("GPU-") && !u.contains('?'));
    NodeGpu {
        bus: field("Bus Location")
            .unwrap_or_else(|| dir_name.to_string())
            .to_ascii_lowercase(),
        model: field("Model").unwrap_or_default(),
        uuid,
    }
}

/// Parses the job's GPU list from the prolog's `CUDA_VISIBLE_DEVICES` (physical indices, set by
/// slurmd with gres/gpu). `None` or empty = the job has no GPUs.
pub fn parse_job_gpus(value: Option<&str>) -> Result<Vec<usize>, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(Vec::new());
    };
    let index = |part: &str| {
        part.trim().parse().map_err(|_| {
            format!(
                "CUDA_VISIBLE_DEVICES={v:?}: {part:?} is not a GPU index (gres/gpu gives indices)"
            )
        })
    };
    let mut out = v.split(',').map(index).collect::<Result<Vec<usize>, _>>()?;
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: &str = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 220\nGPU UUID: \t GPU-0ee3a5d2-62c6-b5ab-4c3f-4e9bd5d0f2a1\nVideo BIOS: \t 96.00.74.00.0c\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:19:00.0\nDevice Minor: \t 0\nGPU Excluded:\t No\n";

    #[test]
    fn the_driver_information_file_gives_model_uuid_and_bus() {
        let g = parse_information(H200, "0000:19:00.0");
        assert_eq!(g.model, "NVIDIA H200");
        assert_eq!(
            g.uuid.as_deref(),
            Some("GPU-0ee3a5d2-62c6-b5ab-4c3f-4e9bd5d0f2a1")
        );
        assert_eq!(g.bus, "0000:19:00.0");
        assert_eq!(g.identity(), "GPU-0ee3a5d2-62c6-b5ab-4c3f-4e9bd5d0f2a1");
    }

    #[test]
    fn a_hidden_uuid_falls_back_to_bus_and_model() {
        let text = H200.replace(
            "GPU-0ee3a5d2-62c6-b5ab-4c3f-4e9bd5d0f2a1",
            "GPU-????????-????-????-????-????????????",
        );
        let g = parse_information(&text, "x");
        assert_eq!(g.uuid, None);
        assert_eq!(g.identity(), "0000:19:00.0/NVIDIA H200");
    }

    #[test]
    fn a_missing_directory_is_no_gpus() {
        assert!(read(Path::new("/nonexistent/nvidia/gpus")).is_empty());
    }

    #[test]
    fn gpus_are_sorted_by_bus_location() {
        let dir = std::env::temp_dir().join(format!("nccl-check-gpus-{}", std::process::id()));
        for (bus, uuid) in [("0000:9a:00.0", "GPU-b"), ("0000:19:00.0", "GPU-a")] {
            let d = dir.join(bus);
            std::fs::create_dir_all(&d).expect("mkdir");
            let text = format!("Model: X\nGPU UUID: {uuid}\nBus Location: {bus}\n");
            std::fs::write(d.join("information"), text).expect("write");
        }
        let g = read(&dir);
        std::fs::remove_dir_all(&dir).ok();
        let uuids: Vec<_> = g.iter().map(|g| g.identity()).collect();
        assert_eq!(uuids, ["GPU-a", "GPU-b"]);
    }

    #[test]
    fn the_job_gpu_list_is_parsed_from_physical_indices() {
        assert_eq!(parse_job_gpus(None), Ok(vec![]));
        assert_eq!(parse_job_gpus(Some("")), Ok(vec![]));
        assert_eq!(parse_job_gpus(Some("2,0, 2")), Ok(vec![0, 2]));
        let e = parse_job_gpus(Some("GPU-abc")).unwrap_err();
        assert!(e.contains("not a GPU index"), "{e}");
    }
}
