//! The node's facts of one check (`facts::node`), gathered beside the measurement: NVML on its
//! own thread from the process's start (it can block for seconds on a sick GPU, so the check
//! waits for it at most `NVML_BUDGET` from its start and never past the deadline), the
//! inventory once CUDA has counted its GPUs (file reads: milliseconds), and the text
//! `--explain-thresholds` shows about them.

use crate::facts::gpu_health::{self, HealthFacts};
use crate::facts::local_probe;
use crate::facts::node::{self, NodeFacts, Sources};
use crate::settings::options::Options;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// The longest the check waits for NVML, from the moment its thread started.
pub const NVML_BUDGET: Duration = Duration::from_secs(3);

/// NVML's facts on their way.
pub struct Pending {
    rx: Option<Receiver<HealthFacts>>,
    started: Instant,
    why_not: String,
}

/// Starts reading NVML on its own thread.
pub fn start_nvml() -> Pending {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("nvml-facts".into())
        .spawn(move || {
            // The receiver may be gone once the check is over: nothing to do then.
            let _ = tx.send(crate::facts::nvml::read_health());
        });
    Pending {
        rx: spawned.is_ok().then_some(rx),
        started: Instant::now(),
        why_not: spawned
            .err()
            .map(|e| format!("cannot start a thread: {e}"))
            .unwrap_or_default(),
    }
}

/// Where this node's facts are read: `/`, the environment the worker started with, and the
/// node's name by the options' one rule (`Options::node_or_host`).
fn sources<'a>(
    opts: &'a Options,
    host: &str,
    env: &'a dyn Fn(&str) -> Option<String>,
) -> Sources<'a> {
    Sources {
        root: "/".into(),
        host: opts.node_or_host(host),
        expected_gpus: &opts.config.expected_gpus,
        env,
    }
}

/// The inventory once CUDA counted `visible` GPUs.
pub fn gather_inventory(opts: &Options, host: &str, visible: usize) -> NodeFacts {
    let env = |k: &str| opts.env.get(k);
    node::inventory(&sources(opts, host, &env), Some(visible as u32))
}

/// NVML's facts once they came (or why not), and how long the check waited for them.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub facts: HealthFacts,
    pub waited_ms: f64,
}

impl Pending {
    /// Waits (bounded: `NVML_BUDGET` from the thread's start, never past `deadline`).
    pub fn resolve(self, deadline: Instant) -> Resolved {
        let t = Instant::now();
        let until = (self.started + NVML_BUDGET).min(deadline);
        let facts = match self.rx {
            None => HealthFacts::unavailable(&self.why_not),
            Some(rx) => rx
                .recv_timeout(until.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| {
                    HealthFacts::unavailable(format!(
                        "no answer within {:.1} s (a GPU may be hung)",
                        NVML_BUDGET.as_secs_f64()
                    ))
                }),
        };
        Resolved {
            facts,
            waited_ms: t.elapsed().as_secs_f64() * 1e3,
        }
    }
}

/// What `--explain-thresholds` says about the node's facts for `gpu_name`.
pub fn explain_node(opts: &Options, device_id: Option<u16>, gpu_name: &str, host: &str) -> String {
    let env = |k: &str| opts.env.get(k);
    let src = sources(opts, host, &env);
    if let Some((model, count)) = &opts.gpu_model {
        // The asked-for model only: this node's files and GPUs are no part of the answer.
        let head =
            format!("Facts of {count} x {model} (--gpu-model: nothing of this node is read):\n");
        return head + &model_facts(opts, device_id, gpu_name);
    }
    let expected = match node::node_expectation(&src) {
        Some(e) => format!(
            "  expected GPUs on {}: {}{} (source: {})\n",
            src.host,
            e.count,
            if e.bus_ids.is_empty() {
                String::new()
            } else {
                format!(" at {}", e.bus_ids.join(", "))
            },
            e.source
        ),
        None => format!(
            "  expected GPUs on {}: not known (no [[expected_gpus]] matches, no Slurm gres.conf/slurm.conf names it): \
             only the driver's list is reported; under srun the job's allocation is expected\n",
            src.host
        ),
    };
    format!("Node facts:\n{expected}") + &model_facts(opts, device_id, gpu_name)
}

/// What the GPU model implies, whichever node asks: NVLinks per GPU and the local probe's floor.
fn model_facts(opts: &Options, device_id: Option<u16>, gpu_name: &str) -> String {
    let nvlinks = match gpu_health::expected_nvlinks(device_id, gpu_name) {
        Some((n, why)) => format!("  NVLinks per GPU: {n} active (source: {why})\n"),
        None => format!(
            "  NVLinks per GPU: '{gpu_name}' is no SXM or superchip part of the SKU table: each GPU \
             is held against its siblings of the same model\n"
        ),
    };
    let probe = match local_probe::copy_floor(device_id, gpu_name) {
        Some((f, how)) => format!(
            "  local probe (device-local copy, every GPU at once): >= {f:.0} GB/s = {how}; and >= {:.2} x its siblings' median\n",
            opts.config.outliers.fraction
        ),
        None => format!(
            "  local probe: no datasheet figure for '{gpu_name}': held against its siblings only ({:.2} x their median)\n",
            opts.config.outliers.fraction
        ),
    };
    nvlinks + &probe
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::environment::Environment;

    /// Emulated nodes (NCCL_HOSTID) are separate nodes for the facts as for the verdict: the
    /// facts were looked up under Slurm's node name while the rendezvous used NCCL_HOSTID.
    #[test]
    fn the_facts_name_the_node_as_the_options_do() {
        let env = Environment::of_pairs([("NCCL_HOSTID", "emu3"), ("SLURMD_NODENAME", "gpu07")]);
        let opts = crate::settings::options::parse(["nccl-check"], &env).expect("options");
        let lookup = |k: &str| opts.env.get(k);
        assert_eq!(sources(&opts, "host1", &lookup).host, "emu3");
        let env = Environment::of_pairs([("SLURMD_NODENAME", "gpu07")]);
        let opts = crate::settings::options::parse(["nccl-check"], &env).expect("options");
        assert_eq!(sources(&opts, "host1", &lookup).host, "gpu07");
        let opts = crate::settings::options::parse(["nccl-check"], &Environment::default())
            .expect("options");
        assert_eq!(sources(&opts, "host1", &lookup).host, "host1");
    }
}
