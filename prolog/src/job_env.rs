//! What the prolog learns from its environment and the driver, read once: the node, the job and
//! its GPUs ([`Facts`]), and from those the GPUs one run checks ([`Selection`]).

use crate::config::{GateConfig, GpuPolicy};
use crate::decide::Mode;
use crate::{gpus, shared};

/// What the environment slurmd built for the prolog says, read here and nowhere else.
#[derive(Debug)]
pub struct Facts {
    pub node: String,
    pub job: Option<String>,
    /// The job's SLUID (`SLURM_JOB_SLUID`, Slurm 25.11 and later): how 26.05's cgroup/v2 paths
    /// name it.
    pub sluid: Option<String>,
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
            let host = nix::unistd::gethostname().unwrap_or_default();
            let short = host.to_string_lossy().split('.').next().map(str::to_string);
            short.unwrap_or_default()
        });
        Facts {
            node,
            job: var("SLURM_JOB_ID"),
            sluid: var("SLURM_JOB_SLUID"),
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
    /// Whether a process on a checked GPU counts against the node: Ok when every checked GPU is
    /// this job's or no job's (`gpus = "job"`, a recheck, or other jobs' GPUs skipped); Err
    /// says why not (then it is only warned).
    pub strays_judged: Result<(), String>,
    /// `--gpus` for the worker; None = every GPU.
    pub indices: Option<Vec<usize>>,
    /// Their identities, when the driver lists them all (the cache needs them).
    pub identities: Option<Vec<String>>,
    /// The check covers every GPU of the node.
    pub all: bool,
    /// For messages: "GPUs 0,2" or "all GPUs".
    pub label: String,
}

/// The GPUs to check; `Ok(None)` = the job has none. `shared`: under `gpus = "all"` at a job's
/// start or end, what Slurm says of other jobs' GPUs ([`shared::plan`]); those are left out.
pub fn select(
    cfg: &GateConfig,
    facts: &Facts,
    mode: Mode,
    shared: Option<&shared::Plan>,
) -> Result<Option<Selection>, String> {
    let node_gpus = gpus::read(&cfg.gpu_info_dir);
    let known =
        (!node_gpus.is_empty()).then(|| node_gpus.iter().map(|g| g.identity()).collect::<Vec<_>>());
    if mode == Mode::Recheck || cfg.gpus == GpuPolicy::All {
        let plan = shared.filter(|_| mode != Mode::Recheck);
        let strays_judged = match (mode, cfg.gpus, plan) {
            // A recheck runs only on a node without jobs.
            (Mode::Recheck, _, _) => Ok(()),
            (_, _, Some(p)) => p.strays_judged.clone(),
            _ => Err("gpus = \"all\" beside other jobs".into()),
        };
        let skip = plan.map(|p| &p.skip).filter(|s| !s.is_empty());
        let Some(skip) = skip else {
            return Ok(Some(Selection {
                strays_judged,
                indices: None,
                identities: known,
                all: true,
                label: "all GPUs".into(),
            }));
        };
        // The plan skips only where the driver's GPUs are Slurm's, so every index is one here.
        let measured: Vec<usize> = (0..node_gpus.len())
            .filter(|i| !skip.contains_key(i))
            .collect();
        let list: Vec<String> = measured.iter().map(|i| i.to_string()).collect();
        let said = plan.map(|p| p.said()).unwrap_or_default();
        return Ok(Some(Selection {
            strays_judged,
            identities: known
                .as_ref()
                .map(|k| measured.iter().filter_map(|&i| k.get(i).cloned()).collect()),
            all: false,
            label: if measured.is_empty() {
                format!("no GPU ({said})")
            } else {
                format!("GPUs {} ({said})", list.join(","))
            },
            indices: Some(measured),
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
        strays_judged: Ok(()),
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
        let cfg = GateConfig::default();
        let mut f = Facts::read(Some("n1".into()));
        f.cuda_visible_devices = Some("3,1".into());
        let s = select(&cfg, &f, Mode::Prolog, None)
            .expect("valid")
            .expect("some");
        assert_eq!(
            (s.indices, s.label.as_str()),
            (Some(vec![1, 3]), "GPUs 1,3")
        );
        f.cuda_visible_devices = None;
        assert!(select(&cfg, &f, Mode::Prolog, None)
            .expect("valid")
            .is_none());
        assert!(select(&cfg, &f, Mode::Recheck, None)
            .expect("valid")
            .is_some_and(|s| s.all));
    }
    #[test]
    fn gpus_all_leaves_out_other_jobs_gpus_and_judges_strays_only_where_slurm_said() {
        let dir = std::env::temp_dir().join(format!("nccl-check-facts-{}", std::process::id()));
        for k in 0..4 {
            let d = dir.join(format!("0000:{k}a:00.0"));
            std::fs::create_dir_all(&d).expect("mkdir");
            let text = format!("Model: X\nGPU UUID: GPU-{k}\nBus Location: 0000:{k}a:00.0\n");
            std::fs::write(d.join("information"), text).expect("write");
        }
        let cfg = GateConfig {
            gpus: GpuPolicy::All,
            gpu_info_dir: dir.clone(),
            ..GateConfig::default()
        };
        let f = Facts::read(Some("n1".into()));
        let plan = shared::Plan {
            skip: [(1, vec!["42".to_string()]), (3, vec!["43".to_string()])].into(),
            strays_judged: Ok(()),
        };
        let s = select(&cfg, &f, Mode::Prolog, Some(&plan))
            .expect("valid")
            .expect("some");
        assert_eq!(s.indices, Some(vec![0, 2]));
        assert_eq!(s.identities, Some(vec!["GPU-0".into(), "GPU-2".into()]));
        assert!(!s.all);
        assert_eq!(
            s.label,
            "GPUs 0,2 (skipped GPU1: allocated to job 42; GPU3: allocated to job 43)"
        );
        assert_eq!(s.strays_judged, Ok(()));
        // Slurm could not say: every GPU, strays not judged; without asking, the same.
        let unknown = shared::Plan {
            skip: Default::default(),
            strays_judged: Err("no answer".into()),
        };
        let s = select(&cfg, &f, Mode::Epilog, Some(&unknown))
            .expect("valid")
            .expect("some");
        assert_eq!((s.indices, s.all), (None, true));
        assert_eq!(s.strays_judged, Err("no answer".into()));
        let s = select(&cfg, &f, Mode::Prolog, None)
            .expect("valid")
            .expect("some");
        assert!(s.strays_judged.is_err());
        // A recheck runs on a node without jobs: every GPU, judged.
        let s = select(&cfg, &f, Mode::Recheck, Some(&plan))
            .expect("valid")
            .expect("some");
        assert_eq!((s.indices, s.strays_judged), (None, Ok(())));
        std::fs::remove_dir_all(&dir).ok();
    }
}
