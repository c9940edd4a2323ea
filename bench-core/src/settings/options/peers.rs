//! Who takes part in the check and how they meet: rank and world, the rendezvous address and its
//! candidate ports, which process coordinates, the step's label and the credential, from the
//! flags else Slurm's environment.

use super::raw::RawArgs;
use crate::model::credential::Credential;
use crate::settings::environment::Lookup;
use nccl_check_contract::slurm_rendezvous::{self, PortRange};

/// The validated answer to "who, where, proven how".
pub(super) struct Peers {
    pub rank: u32,
    pub world: u32,
    pub rendezvous: Option<String>,
    pub ports: Vec<u16>,
    pub port_range: PortRange,
    pub coordinator: bool,
    pub label: String,
    pub credential: Credential,
}

/// Slurm's ids of this step, when it runs under Slurm.
struct Step {
    job: Option<String>,
    step: String,
}

impl Peers {
    pub fn of(raw: &RawArgs, env: Lookup) -> Result<Peers, String> {
        let (rank, world) = rank_and_world(raw, env)?;
        let ids = Step {
            job: env("SLURM_JOB_ID"),
            step: env("SLURM_STEP_ID").unwrap_or_else(|| "0".into()),
        };
        let port_range = (raw.port_range.as_deref())
            .map_or(Ok(PortRange::DEFAULT), PortRange::parse)
            .map_err(|e| e.to_string())?;
        let explicit = raw
            .rendezvous
            .clone()
            .or_else(|| env("NCCL_CHECK_RENDEZVOUS"));
        let (rendezvous, ports, coordinator) = match explicit {
            Some(r) => (Some(r.clone()), vec![explicit_port(&r)?], rank == 0),
            None if world > 1 => slurm_address(rank, world, &ids, port_range, env)?,
            None => (None, Vec::new(), true),
        };
        let label = match &ids.job {
            Some(j) => format!("slurm-{j}.{}", ids.step),
            None => "manual".into(),
        };
        let credential = credential(world, ids.job.is_some(), env)?;
        Ok(Peers {
            rank,
            world,
            rendezvous,
            ports,
            port_range,
            coordinator,
            label,
            credential,
        })
    }
}

fn parse_u32(what: &str, v: &str) -> Result<u32, String> {
    v.trim()
        .parse::<u32>()
        .map_err(|_| format!("invalid {what} '{v}': expected a non-negative integer"))
}

/// `--rank`/`--world`, else `SLURM_PROCID`/`SLURM_NTASKS`, else 0 of 1.
fn rank_and_world(raw: &RawArgs, env: Lookup) -> Result<(u32, u32), String> {
    let world = raw.world.clone().or_else(|| env("SLURM_NTASKS"));
    let world = world.map_or(Ok(1), |w| parse_u32("world", &w))?;
    let rank = raw.rank.clone().or_else(|| env("SLURM_PROCID"));
    let rank = rank.map_or(Ok(0), |r| parse_u32("rank", &r))?;
    if world == 0 {
        return Err("invalid world 0: at least one process is needed".into());
    }
    if rank >= world {
        return Err(format!("invalid rank {rank}: must be below world {world}"));
    }
    Ok((rank, world))
}

/// The port of a `HOST:PORT` given by flag or `NCCL_CHECK_RENDEZVOUS`.
fn explicit_port(r: &str) -> Result<u16, String> {
    r.rsplit_once(':')
        .filter(|(h, _)| !h.is_empty())
        .and_then(|(_, p)| p.parse::<u16>().ok().filter(|&p| p > 0))
        .ok_or_else(|| format!("invalid rendezvous '{r}': expected HOST:PORT"))
}

/// Under Slurm: the step's first node, on ports derived from the step (or its secret).
fn slurm_address(
    rank: u32,
    world: u32,
    ids: &Step,
    port_range: PortRange,
    env: Lookup,
) -> Result<(Option<String>, Vec<u16>, bool), String> {
    let nodes = env("SLURM_STEP_NODELIST").or_else(|| env("SLURM_JOB_NODELIST"));
    let (Some(nodes), Some(job)) = (nodes, &ids.job) else {
        return Err(format!(
            "world {world} needs --rendezvous HOST:PORT (or run under Slurm)"
        ));
    };
    let secret = env("NCCL_CHECK_SECRET");
    let step_ids = (job.as_str(), ids.step.as_str(), secret.as_deref());
    let (host, ports) = slurm_rendezvous::of_step(&nodes, step_ids, port_range)?;
    // The first task on the step's first node coordinates, whatever its rank (with -m arbitrary
    // rank 0 may run elsewhere); without Slurm's node name, rank 0.
    let coordinator = match (env("SLURMD_NODENAME"), env("SLURM_LOCALID")) {
        (Some(node), Some(local)) => node == host && local == "0",
        _ => rank == 0,
    };
    Ok((Some(format!("{host}:{}", ports[0])), ports, coordinator))
}

/// How peers prove they belong: the step's secret, else MUNGE under Slurm; a world outside
/// Slurm without a secret is refused.
fn credential(world: u32, under_slurm: bool, env: Lookup) -> Result<Credential, String> {
    Ok(match env("NCCL_CHECK_SECRET") {
        Some(secret) => Credential::Secret(secret),
        None if under_slurm => Credential::Munge,
        None if world > 1 => {
            return Err(format!(
                "world {world} outside Slurm needs a shared secret: export NCCL_CHECK_SECRET=$(openssl rand -hex 32) to every process"
            ))
        }
        None => Credential::None,
    })
}
