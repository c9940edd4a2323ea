//! What the prolog learns from its environment and the driver, read once: the node, the job and
//! its GPUs ([`Facts`]), and from those the GPUs one run checks ([`Selection`]).

use crate::config::{Config, GpuPolicy};
use crate::decide::Mode;
use crate::gpus;

/// What the environment slurmd built for the prolog says, read here and nowhere else.
#[derive(Debug)]
pub struct Facts {
    pub node: String,
    pub job: Option<String>,
    /// The job's GPUs (physical indices), with gres/gpu.
    pub cuda_visible_devices: Option<String>,
    /// slurmd's config, for scontrol.
    pub slurm_conf: Option<String>,
    /// Which script slurmd runs (`prolog_slurmd`, `epilog_slurmd`): one binary serves both.
    pub script_context: Option<String>,
}

impl Facts {
    pub fn read(node: Option<String>) -> Facts {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let node = node.or_else(|| var("SLURMD_NODENAME")).unwrap_or_else(|| {
            nix::unistd::gethostname()
                .map(|h| {
                    h.to_string_lossy()
                        .split('.')
                        .next()
                        .unwrap_or("")
                        .to_string()
                })
                .unwrap_or_default()
        });
        Facts {
            node,
            job: var("SLURM_JOB_ID"),
            cuda_visible_devices: var("CUDA_VISIBLE_DEVICES"),
            slurm_conf: var("SLURM_CONF"),
            script_context: var("SLURM_SCRIPT_CONTEXT"),
        }
    }

    /// The job as the drain reason names it: `42`, `42, epilog` (the reason then ends
    /// `(job 42, epilog)`), none for a recheck.
    pub fn job_label(&self, mode: Mode) -> Option<String> {
        match mode {
            Mode::Recheck => None,
            Mode::Prolog => self.job.clone(),
            Mode::Epilog => Some(format!("{}, epilog", self.job.as_deref().unwrap_or("?"))),
        }
    }

    /// "job 42", "epilog job 42", "recheck" or "no job", for messages.
    pub fn whom(&self, mode: Mode) -> String {
        match (mode, self.job.as_deref()) {
            (Mode::Recheck, _) => "recheck".to_string(),
            (Mode::Prolog, Some(j)) => format!("job {j}"),
            (Mode::Prolog, None) => "no job".to_string(),
            (Mode::Epilog, Some(j)) => format!("epilog job {j}"),
            (Mode::Epilog, None) => "epilog".to_string(),
        }
    }
}

/// The GPUs one run checks.
#[derive(Debug)]
pub struct Selection {
    /// `--gpus` for the worker; None = every GPU.
    pub indices: Option<Vec<usize>>,
    /// Their identities, when the driver lists them all (the cache needs them).
    pub identities: Option<Vec<String>>,
    /// The check covers every GPU of the node.
    pub all: bool,
    /// For messages: "GPUs 0,2" or "all GPUs".
    pub label: String,
}

/// The GPUs to check; `Ok(None)` = the job has none.
pub fn select(cfg: &Config, facts: &Facts, mode: Mode) -> Result<Option<Selection>, String> {
    let node_gpus = gpus::read(&cfg.gpu_info_dir);
    let known =
        (!node_gpus.is_empty()).then(|| node_gpus.iter().map(|g| g.identity()).collect::<Vec<_>>());
    if mode == Mode::Recheck || cfg.gpus == GpuPolicy::All {
        return Ok(Some(Selection {
            indices: None,
            identities: known,
            all: true,
            label: "all GPUs".into(),
        }));
    }
    let job = gpus::parse_job_gpus(facts.cuda_visible_devices.as_deref())?;
    if job.is_empty() {
        return Ok(None);
    }
    let identities = known
        .as_ref()
        .and_then(|k| job.iter().map(|&i| k.get(i).cloned()).collect());
    let all = known
        .as_ref()
        .is_some_and(|k| job.len() == k.len() && job.iter().all(|&i| i < k.len()));
    let list: Vec<String> = job.iter().map(|i| i.to_string()).collect();
    Ok(Some(Selection {
        indices: Some(job),
        identities,
        all,
        label: format!("GPUs {}", list.join(",")),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_prefer_the_explicit_node_name() {
        assert_eq!(Facts::read(Some("n9".into())).node, "n9");
    }

    #[test]
    fn the_job_gpus_select_those_indices_and_none_means_nothing_to_check() {
        let cfg = Config::default();
        let mut f = Facts::read(Some("n1".into()));
        f.cuda_visible_devices = Some("3,1".into());
        let s = select(&cfg, &f, Mode::Prolog)
            .expect("valid")
            .expect("some");
        assert_eq!(
            (s.indices, s.label.as_str()),
            (Some(vec![1, 3]), "GPUs 1,3")
        );
        f.cuda_visible_devices = None;
        assert!(select(&cfg, &f, Mode::Prolog).expect("valid").is_none());
        assert!(select(&cfg, &f, Mode::Recheck)
            .expect("valid")
            .is_some_and(|s| s.all));
    }
}
