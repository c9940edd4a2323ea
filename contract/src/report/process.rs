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
            // The user's name reaches drain reasons and log lines: shown, never obeyed.
            let user = nccl_check_host::text::escape_control(&self.user);
            write!(f, ", user {user}")?;
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
    fn a_users_name_is_shown_escaped() {
        let p = GpuProcess {
            pid: 7,
            user: "x\x1b[2J|y".into(),
            used_bytes: None,
        };
        assert_eq!(p.to_string(), "pid 7, user x\\u{1b}[2J\\u{7c}y");
    }

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
