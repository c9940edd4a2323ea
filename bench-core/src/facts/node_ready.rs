//! Whether this node can run a check at all, for `--check-config`: the GPUs its driver lists and,
//! where there are some, whether NCCL loads from where the worker would load it. A node without a
//! GPU (a login node, the controller) cannot tell: that is a note, never a failure.

use crate::facts::inventory;
use crate::measure::nccl::Nccl;
use std::path::{Path, PathBuf};

/// The outcome: lines to print, and whether the node is not ready.
#[derive(Debug, PartialEq)]
pub struct NodeReady {
    pub lines: Vec<String>,
    pub not_ready: bool,
}

/// `nccl_lib`: `NCCL_CHECK_NCCL_LIB`, else the config's, else the library path (as a check loads it).
pub fn probe_node(root: &Path, nccl_lib: Option<&Path>) -> NodeReady {
    let gpus = inventory::driver_gpus(root).unwrap_or_default();
    let lib = nccl_lib.map(Path::to_path_buf);
    let shown = lib
        .as_ref()
        .map_or("libnccl.so.2 on the library path".to_string(), |p| {
            p.display().to_string()
        });
    if gpus.is_empty() {
        return NodeReady {
            lines: vec![format!(
                "# no GPU listed by the driver on this node: NCCL ({shown}) not loaded; \
                 a check here ends in ERROR (no GPU), never FAIL. Run this on a GPU node too"
            )],
            not_ready: false,
        };
    }
    let mut lines = vec![format!("# {} GPUs listed by the driver", gpus.len())];
    let not_ready = match Nccl::load(lib.as_deref()) {
        Ok(n) => {
            lines.push(format!(
                "# NCCL {} loads from {}",
                n.version_string(),
                n.path.display()
            ));
            false
        }
        Err(e) => {
            lines.push(format!(
                "NOT READY NCCL ({shown}): {e}; every check on this node would end in ERROR. \
                 Set nccl_lib = \"/path/libnccl.so.2\" in /etc/nccl-check/nccl-check.toml"
            ));
            true
        }
    };
    NodeReady { lines, not_ready }
}

/// The library a check would load: the environment's, else the config's.
pub fn nccl_lib(config: Option<PathBuf>) -> Option<PathBuf> {
    std::env::var_os("NCCL_CHECK_NCCL_LIB")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_without_gpus_cannot_tell_and_is_not_failed() {
        let r = probe_node(
            Path::new("/nonexistent-root"),
            Some(Path::new("/nonexistent/libnccl.so.2")),
        );
        assert!(!r.not_ready, "{r:?}");
        assert!(r.lines[0].contains("no GPU listed by the driver"), "{r:?}");
    }

    #[test]
    fn a_gpu_node_whose_nccl_does_not_load_is_not_ready() {
        let root = crate::test_support::scratch_dir("node-ready");
        std::fs::create_dir_all(root.join("proc/driver/nvidia/gpus/0000:19:00.0")).expect("mkdir");
        let r = probe_node(&root, Some(Path::new("/nonexistent/libnccl.so.2")));
        assert!(r.not_ready, "{r:?}");
        assert!(
            r.lines[1].starts_with("NOT READY NCCL (/nonexistent/libnccl.so.2): "),
            "{r:?}"
        );
        std::fs::remove_dir_all(&root).ok();
    }
}
