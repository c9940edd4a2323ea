//! The node's facts for one check, gathered once: the GPU inventory (what the node or the job
//! should have against what the driver lists and CUDA opens), NVML's state, and after the run
//! the NICs NCCL used. What becomes a FAIL reason is decided in `judge`; this module gathers.
//!
//! Where the expectation comes from (first that gives one): the job's allocation under Slurm
//! (`SLURM_STEP_GPUS`, else `SLURM_JOB_GPUS`: the device minors Slurm gave; else, in a Slurm job,
//! the count of `CUDA_VISIBLE_DEVICES`), so GPUs the job did not ask for are never "missing";
//! else the admin's `[[expected_gpus]]`; else Slurm's gres.conf/slurm.conf as slurmd reads them
//! (`$SLURM_CONF`'s directory, else /etc/slurm, else a configless node's cache under
//! /run/slurm/conf or the spool directory, `slurm_config`); else nothing (the driver's list is reported).
//!
//! What CUDA opens is held against the expectation only outside a Slurm job: inside one, a task
//! sees the GPUs its binding gives it (`--gpus-per-task`), which may be fewer than the step's.

use super::gpu_health::HealthFacts;
use super::inventory::{self, DriverGpu, NodeExpectation};
use super::net::NetFacts;
use crate::config::expected_gpus::{self, ExpectedGpus};
use crate::model::finding::Finding;
use nccl_check_contract::report::reason::ReasonCode;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What a check knows about its node beyond its measurements.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeFacts {
    /// What this node (or this job) should have, when known.
    pub expected: Option<NodeExpectation>,
    /// The GPUs the driver lists (`/proc/driver/nvidia/gpus`).
    pub driver_gpus: Vec<DriverGpu>,
    /// Why the driver's list could not be read (then it is not compared).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_error: Option<String>,
    /// GPUs CUDA opens in this process.
    pub cuda_visible: Option<u32>,
    /// `available (driver 580.95.05)`, or `NVML not available: <why>`.
    pub nvml: String,
    /// Milliseconds the NVML facts took (read on their own thread, beside the check).
    pub nvml_ms: f64,
    /// The NICs NCCL used, their sysfs state and rate (filled after the run).
    pub net: Option<NetFacts>,
    /// Why there are no NIC facts, or why they were not judged.
    pub net_note: String,
    /// Inventory findings (`gpu_missing`, and `worker_starved` from `off_cpu`); NVML and probe
    /// findings are judged per GPU.
    pub findings: Vec<Finding>,
    /// How long this process could not run while it measured (`runner::off_cpu`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_cpu: Option<crate::measure::runner::off_cpu::OffCpu>,
    /// How busy the host's CPUs were while this process measured, and with whom
    /// (`host_load`); None where `/proc` could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<super::host_load::HostLoad>,
}

/// Where the facts are read from (`/` and the real environment on a node; fixtures in tests).
pub struct Sources<'a> {
    pub root: PathBuf,
    /// Slurm's node name (`SLURMD_NODENAME`) or the host name.
    pub host: String,
    pub expected_gpus: &'a [ExpectedGpus],
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

/// The GPUs a Slurm job was given, as the environment says.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// Device minors, when Slurm gave them (`SLURM_STEP_GPUS=0,1`).
    pub minors: Vec<u32>,
    pub count: u32,
    pub source: String,
}

/// `0,1,4-5` -> [0, 1, 4, 5]; None when a part is not a number or range (bounded).
fn index_list(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi): (u32, u32) = (lo.parse().ok()?, hi.parse().ok()?);
        if hi < lo || out.len() as u32 + (hi - lo) >= crate::model::bounds::MAX_GPUS {
            return None;
        }
        out.extend(lo..=hi);
    }
    (!out.is_empty()).then_some(out)
}

/// The job's GPUs under Slurm; None outside a job or when Slurm gave no GPU list.
pub fn allocation(env: &dyn Fn(&str) -> Option<String>) -> Option<Allocation> {
    for var in ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS"] {
        if let Some(minors) = env(var).as_deref().and_then(index_list) {
            return Some(Allocation {
                count: minors.len() as u32,
                minors,
                source: format!("the job's allocation ({var})"),
            });
        }
    }
    let in_job = env("SLURM_JOB_ID").is_some_and(|j| !j.is_empty());
    let cvd = env("CUDA_VISIBLE_DEVICES").filter(|v| !v.trim().is_empty())?;
    in_job.then(|| Allocation {
        minors: Vec::new(),
        count: cvd.split(',').filter(|s| !s.trim().is_empty()).count() as u32,
        source: format!("the job's allocation (CUDA_VISIBLE_DEVICES={cvd})"),
    })
}

/// The slurm.conf in use on this node (`$SLURM_CONF`, /etc/slurm, a configless node's cache:
/// [`nccl_check_host::slurm_config::files::candidates`]) and the gres.conf beside it.
fn slurm_files(src: &Sources) -> Option<(PathBuf, PathBuf)> {
    let env_conf = (src.env)("SLURM_CONF").filter(|c| c.starts_with('/'));
    let conf =
        nccl_check_host::slurm_config::files::candidates(&src.root, env_conf.as_deref(), &[])
            .into_iter()
            .next()?;
    let gres = conf.parent()?.join("gres.conf");
    Some((gres, conf))
}

/// The node's expectation without a job: the admin's config, else Slurm's files.
pub fn node_expectation(src: &Sources) -> Option<NodeExpectation> {
    let partition = (src.env)("SLURM_JOB_PARTITION");
    if let Some(e) =
        expected_gpus::select_expected(src.expected_gpus, partition.as_deref(), &src.host)
    {
        return Some(NodeExpectation::from_config(e));
    }
    let (gres, conf) = slurm_files(src)?;
    inventory::from_slurm_files(&gres, &conf, &src.host)
}

/// The inventory part of the facts (file reads only: milliseconds). `cuda_visible`: how many
/// GPUs CUDA opens in this process, when CUDA was asked.
pub fn inventory(src: &Sources, cuda_visible: Option<u32>) -> NodeFacts {
    let alloc = allocation(src.env);
    let node = node_expectation(src);
    let listed = inventory::driver_gpus(&src.root);
    let driver_error =
        (listed.as_ref().err()).map(|e| format!("the driver's GPU list is unreadable: {e}"));
    // An allocation with minors is compared minor by minor; one with only a count is a count.
    let expected = match &alloc {
        Some(a) if a.minors.is_empty() => Some(NodeExpectation {
            count: a.count,
            source: a.source.clone(),
            ..NodeExpectation::default()
        }),
        _ => node,
    };
    let minors = alloc.as_ref().map(|a| a.minors.as_slice());
    let minors = minors.filter(|m| !m.is_empty());
    let (expected, driver_gpus, mut findings) = match listed {
        Ok(listed) => {
            let mut inv = inventory::compare_with_expected(expected, listed, minors);
            if let (Some(a), Some(e)) = (&alloc, inv.expected.as_mut()) {
                e.source = a.source.clone();
            }
            (inv.expected, inv.listed, inv.findings)
        }
        Err(_) => (expected, Vec::new(), Vec::new()),
    };
    let in_job = (src.env)("SLURM_JOB_ID").is_some_and(|j| !j.is_empty());
    let opened = cuda_visible.zip(expected.as_ref());
    let fewer = opened.filter(|(n, e)| !in_job && findings.is_empty() && *n < e.count);
    if let Some((n, e)) = fewer {
        let cvd = (src.env)("CUDA_VISIBLE_DEVICES")
            .map(|v| format!(" with CUDA_VISIBLE_DEVICES={v}"))
            .unwrap_or_default();
        let (want, from) = (e.count, &e.source);
        let message = format!("expected {want} GPUs, CUDA opens {n}{cvd} (expected from {from})");
        let finding = Finding::new(ReasonCode::GpuMissing, "GPUs", message);
        findings.push(finding.with_values(f64::from(n), f64::from(want)));
    }
    NodeFacts {
        expected,
        driver_gpus,
        driver_error,
        cuda_visible,
        net_note: "not read yet".to_string(),
        findings,
        ..NodeFacts::default()
    }
}

impl NodeFacts {
    /// What the off-CPU watch saw while this process measured, and `worker_starved` naming
    /// `node` when it lost half of it (`runner::off_cpu::finding`).
    pub fn set_off_cpu(&mut self, node: &str, seen: crate::measure::runner::off_cpu::OffCpu) {
        self.findings
            .extend(crate::measure::runner::off_cpu::finding(node, &seen));
        self.off_cpu = Some(seen);
    }

    /// Records NVML's state; the per-GPU facts go to the report's `gpus[]`.
    pub fn set_nvml(&mut self, facts: &HealthFacts, ms: f64) {
        self.nvml = match facts {
            HealthFacts::Available { driver_version, .. } => {
                format!("available (driver {driver_version})")
            }
            HealthFacts::Unavailable { why } => why.clone(),
        };
        self.nvml_ms = ms;
    }

    /// The NICs NCCL's log says it used (`lines`: its `NET/... : Using [0]...` lines; None when
    /// the log was not recorded), read from sysfs under `root`. On one node they carried no
    /// traffic: reported, not judged (a check of one node is no test of its network).
    pub fn set_net(
        &mut self,
        root: &Path,
        lines: Option<&[String]>,
        nodes: u32,
        policy: &super::net::NetPolicy,
    ) {
        let Some(lines) = lines else {
            self.net_note = "NCCL's log was not recorded: the NICs it used are unknown".into();
            return;
        };
        let mut nics: Vec<super::net::NicRef> = Vec::new();
        for nic in lines
            .iter()
            .flat_map(|l| super::net::nics_from_nccl_log_line(l))
        {
            if !nics.contains(&nic) {
                nics.push(nic);
            }
        }
        if nics.is_empty() {
            self.net_note = "NCCL's log names no NIC".into();
            return;
        }
        let mut net = super::net::read_nics(root, &nics, policy);
        if nodes <= 1 {
            self.net_note = format!(
                "one node: the NICs carried no traffic; reported, not judged ({} finding(s) ignored)",
                net.findings.len()
            );
            net.findings.clear();
            net.expected_pair_gbs = None;
        } else {
            self.net_note = net.note.clone();
        }
        self.net = Some(net);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/inventory")
            .join(name)
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    fn two() -> Vec<ExpectedGpus> {
        vec![ExpectedGpus {
            partitions: vec![],
            nodes: vec![],
            count: 8,
            bus_ids: vec![],
        }]
    }

    #[test]
    fn the_job_allocation_comes_from_slurm_and_a_bare_cuda_list_is_none() {
        let a = allocation(&env_of(&[
            ("SLURM_STEP_GPUS", "0,2"),
            ("SLURM_JOB_GPUS", "0-3"),
        ]));
        assert_eq!(a.map(|a| (a.minors, a.count)), Some((vec![0, 2], 2)));
        let a = allocation(&env_of(&[("SLURM_JOB_GPUS", "0-3")])).unwrap();
        assert_eq!((a.minors.len(), a.count), (4, 4));
        assert!(a.source.contains("SLURM_JOB_GPUS"));
        let a = allocation(&env_of(&[
            ("SLURM_JOB_ID", "7"),
            ("CUDA_VISIBLE_DEVICES", "3"),
        ]));
        assert_eq!(a.map(|a| (a.minors.len(), a.count)), Some((0, 1)));
        assert_eq!(allocation(&env_of(&[("CUDA_VISIBLE_DEVICES", "0")])), None);
        assert_eq!(allocation(&env_of(&[("SLURM_JOB_GPUS", "x")])), None);
        assert_eq!(index_list("0-99999"), None);
    }

    #[test]
    fn cuda_seeing_fewer_gpus_than_configured_is_gpu_missing_outside_a_job() {
        let cfg = two();
        let env = env_of(&[("CUDA_VISIBLE_DEVICES", "0")]);
        let src = Sources {
            root: data("node-8"),
            host: "gpu001".into(),
            expected_gpus: &cfg,
            env: &env,
        };
        let f = inventory(&src, Some(1));
        assert_eq!(f.driver_gpus.len(), 8);
        assert_eq!(f.findings.len(), 1, "{:?}", f.findings);
        assert_eq!(f.findings[0].code.as_str(), "gpu_missing");
        assert!(
            f.findings[0]
                .message
                .starts_with("expected 8 GPUs, CUDA opens 1 with CUDA_VISIBLE_DEVICES=0"),
            "{}",
            f.findings[0].message
        );
        // All 8 open: nothing missing.
        assert!(inventory(&src, Some(8)).findings.is_empty());
        // The driver lost one: named by the driver's list, not twice.
        let src = Sources {
            root: data("node-7of8"),
            ..src
        };
        let f = inventory(&src, Some(7));
        assert_eq!(f.findings.len(), 1);
        assert!(f.findings[0]
            .message
            .starts_with("expected 8 GPUs, driver lists 7"));
    }

    #[test]
    fn in_a_job_only_its_gpus_count_and_a_task_binding_is_not_missing() {
        let cfg = two();
        // The job has minors 0-3 of the 7-of-8 node (5 is gone): all present.
        let env = env_of(&[("SLURM_JOB_ID", "9"), ("SLURM_JOB_GPUS", "0,1,2,3")]);
        let src = Sources {
            root: data("node-7of8"),
            host: "gpu007".into(),
            expected_gpus: &cfg,
            env: &env,
        };
        // A task bound to one GPU of the four: CUDA opens 1, which is not a fault in a job.
        let f = inventory(&src, Some(1));
        assert!(f.findings.is_empty(), "{:?}", f.findings);
        assert!(f.expected.unwrap().source.contains("SLURM_JOB_GPUS"));
        // A job step without a GPU list: the node's expectation (8), but CUDA's count is the
        // task's binding, not the node's: not missing.
        let bare = env_of(&[("SLURM_JOB_ID", "9")]);
        let step = Sources {
            root: data("node-8"),
            host: "gpu007".into(),
            expected_gpus: &cfg,
            env: &bare,
        };
        let f = inventory(&step, Some(1));
        assert!(f.findings.is_empty(), "{:?}", f.findings);
        assert_eq!(f.expected.map(|e| e.count), Some(8));
        let env = env_of(&[("SLURM_JOB_ID", "9"), ("SLURM_STEP_GPUS", "4,5")]);
        let src = Sources { env: &env, ..src };
        let f = inventory(&src, Some(2));
        assert_eq!(f.findings.len(), 1);
        assert!(f.findings[0].message.contains("/dev/nvidia5 absent"));
    }

    #[test]
    fn without_a_driver_list_or_expectation_nothing_is_missing() {
        let none: Vec<ExpectedGpus> = vec![];
        let env = env_of(&[]);
        let src = Sources {
            root: data("no-such-root"),
            host: "gpu001".into(),
            expected_gpus: &none,
            env: &env,
        };
        let f = inventory(&src, Some(1));
        assert!(f.findings.is_empty());
        assert!(f.driver_error.is_some());
        assert_eq!(f.expected, None);
        // Slurm's files under the root give the count.
        let src = Sources {
            root: data("slurm-root"),
            ..src
        };
        let e = node_expectation(&src);
        assert_eq!(e.map(|e| e.count), Some(8));
    }

    #[test]
    fn a_configless_node_s_gres_conf_in_run_slurm_conf_gives_the_count() {
        // slurmd --conf-server: no /etc/slurm, the controller's files under /run/slurm/conf.
        let root = nccl_check_host::test_support::scratch_dir("configless-gres");
        let conf = root.join("run/slurm/conf");
        std::fs::create_dir_all(&conf).expect("mkdir");
        std::fs::copy(data("gres.conf"), conf.join("gres.conf")).expect("copy");
        std::fs::copy(data("slurm.conf"), conf.join("slurm.conf")).expect("copy");
        let none: Vec<ExpectedGpus> = vec![];
        let env = env_of(&[]);
        let src = Sources {
            root: root.clone(),
            host: "gpu007".into(),
            expected_gpus: &none,
            env: &env,
        };
        let e = node_expectation(&src).expect("from the configless cache");
        assert_eq!(e.count, 8);
        assert!(
            e.source.contains("run/slurm/conf/gres.conf"),
            "{}",
            e.source
        );
        std::fs::remove_dir_all(&root).ok();
    }

    #[test]
    fn the_nics_of_nccls_log_are_judged_only_across_nodes() {
        let sysfs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/sysfs/tcp");
        let none: Vec<ExpectedGpus> = vec![];
        let env = env_of(&[]);
        let src = Sources {
            root: data("node-8"),
            host: "h".into(),
            expected_gpus: &none,
            env: &env,
        };
        let policy = super::super::net::NetPolicy::default();
        let lines = vec!["NET/Socket : Using [0]eth1:10.0.0.1<0> [1]eth0:10.1.0.1<0>".to_string()];
        let mut f = inventory(&src, None);
        f.set_net(&sysfs, Some(&lines), 2, &policy);
        let net = f.net.as_ref().unwrap();
        assert_eq!(net.findings.len(), 1);
        assert_eq!(
            (
                net.findings[0].code.as_str(),
                net.findings[0].subject.as_str()
            ),
            ("net_port_down", "eth1")
        );
        let mut f = inventory(&src, None);
        f.set_net(&sysfs, Some(&lines), 1, &policy);
        assert!(f.net.as_ref().unwrap().findings.is_empty());
        assert!(f.net_note.starts_with("one node"), "{}", f.net_note);
        f.set_net(&sysfs, None, 2, &policy);
        assert!(f.net_note.contains("not recorded"));
        // The lines come from NCCL's log as `transport::parse_log` keeps them (once each).
        let log = "gpu1:10:11 [0] NCCL INFO NET/Socket : Using [0]eth1:10.0.0.1<0>\n\
                   gpu1:10:12 [1] NCCL INFO NET/Socket : Using [0]eth1:10.0.0.1<0>\n\
                   gpu1:10:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n";
        let parsed = crate::facts::transport::parse_log(log);
        assert_eq!(
            parsed.net_using,
            vec!["NET/Socket : Using [0]eth1:10.0.0.1<0>"]
        );
        let mut f = inventory(&src, None);
        f.set_net(&sysfs, Some(&parsed.net_using), 2, &policy);
        assert_eq!(f.net.unwrap().findings[0].subject, "eth1");
    }

    #[test]
    fn bus_ids_are_normalized_to_the_drivers_form() {
        use crate::config::expected_gpus::bus_id;
        assert_eq!(bus_id("00000000:9B:00.0").as_deref(), Some("0000:9b:00.0"));
        assert_eq!(bus_id("0000:18:00.0").as_deref(), Some("0000:18:00.0"));
        assert_eq!(bus_id("garbage"), None);
        assert_eq!(bus_id(""), None);
    }

    /// Regression: the README said gres.conf is looked for only under $SLURM_CONF's directory or
    /// /etc/slurm; the code takes it beside the slurm.conf in use, a configless node's cache
    /// included (what the README now says).
    #[test]
    fn a_configless_nodes_cached_gres_conf_gives_the_expectation() {
        let root = nccl_check_host::test_support::scratch_dir("configless-gres");
        let cache = root.join("var/spool/slurmd/conf-cache");
        std::fs::create_dir_all(&cache).expect("mkdir");
        std::fs::write(cache.join("slurm.conf"), "ClusterName=c\nGresTypes=gpu\n").expect("w");
        std::fs::write(
            cache.join("gres.conf"),
            "NodeName=gpu001 Name=gpu Count=4\n",
        )
        .expect("w");
        let env = env_of(&[]);
        let none = Vec::new();
        let src = Sources {
            root: root.clone(),
            host: "gpu001".into(),
            expected_gpus: &none,
            env: &env,
        };
        let e = node_expectation(&src).expect("an expectation from the cache");
        std::fs::remove_dir_all(&root).ok();
        assert_eq!(e.count, 4);
        assert!(
            e.source.contains("var/spool/slurmd/conf-cache/gres.conf"),
            "{}",
            e.source
        );
    }
}
