//! Other processes on a GPU, as the worker reads them from NVML (`gpus[].health.processes`) and
//! the prolog names them in a drain reason: one type and one sentence for both.

use serde::{Deserialize, Serialize};

/// Another process holding a context on a GPU (NVML's running compute processes), named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    /// The owner's user name (or uid when it has no name); empty when /proc did not say.
    pub user: String,
    /// GPU memory it holds, bytes, when NVML says.
    pub used_bytes: Option<u64>,
}

impl std::fmt::Display for GpuProcess {
    /// `pid 4242, user bob, 8.0 GiB`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {}", self.pid)?;
        if !self.user.is_empty() {
            write!(f, ", user {}", self.user)?;
        }
        if let Some(b) = self.used_bytes {
            write!(f, ", {:.1} GiB", b as f64 / f64::from(1u32 << 30))?;
        }
        Ok(())
    }
}

/// `GPU0: busy: 2 other processes (pid 4242, user bob, 8.0 GiB; pid 77); ` for a GPU other
/// processes were using, else `GPU0: `.
pub fn busy_prefix(subject: &str, others: &[GpuProcess]) -> String {
    if others.is_empty() {
        return format!("{subject}: ");
    }
    let n = others.len();
    let list: Vec<String> = others.iter().take(4).map(|p| p.to_string()).collect();
    let more = if n > 4 {
        format!("; +{} more", n - 4)
    } else {
        String::new()
    };
    format!(
        "{subject}: busy: {n} other process{} ({}{more}); ",
        if n == 1 { "" } else { "es" },
        list.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_prefix_names_at_most_four_processes() {
        assert_eq!(busy_prefix("GPU0", &[]), "GPU0: ");
        let p = |pid| GpuProcess {
            pid,
            user: String::new(),
            used_bytes: None,
        };
        let six: Vec<_> = (1..=6).map(p).collect();
        assert_eq!(
            busy_prefix("GPU1", &six),
            "GPU1: busy: 6 other processes (pid 1; pid 2; pid 3; pid 4; +2 more); "
        );
    }
}
