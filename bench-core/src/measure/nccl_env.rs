//! NCCL's environment for one check, set before NCCL is loaded (it reads these once, at its
//! first call): the site's network profile, CollNet/NVLS when expected, a p2p chunk that reads links rather than a busy host's pace, and NCCL's INFO log
//! captured to a private file so the transports can be judged afterwards. Every variable is set
//! through the worker's [`Environment`] snapshot, so the report records what NCCL sees.

use crate::config::network::{NetworkProfile, TransportExpectation};
use crate::settings::environment::Environment;
use crate::settings::options::Options;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

/// Where NCCL's log goes (a file in a private directory of its own, removed however the process
/// ends: [`remove_log_dir`]), or why it is not recorded.
pub type LogPlace = Result<PathBuf, String>;

/// This host's name (`gethostname`), "unknown" if it cannot be read.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// What the paths must use: the profile's expectations and the options'.
pub fn path_expectation(opts: &Options, profile: Option<&NetworkProfile>) -> TransportExpectation {
    TransportExpectation::new(profile, opts.expect_collnet, opts.expect_nvls)
}

/// The site's network profile for this job (partition from Slurm, this host), its environment
/// set before NCCL loads: the check runs with exactly the settings the site's jobs use.
pub fn apply_network_profile(
    opts: &'static Options,
    env: &mut Environment,
) -> Option<&'static NetworkProfile> {
    let p = crate::config::network::select_profile(
        &opts.config.network,
        opts.partition.as_deref(),
        &hostname(),
    )?;
    for (k, v) in p.env_pairs() {
        env.set_for_nccl(k, v);
    }
    Some(p)
}

/// NCCL's chunk for send/recv over the network, where neither the caller nor the site's profile
/// set `NCCL_P2P_NET_CHUNKSIZE`: 512 KiB, 4x NCCL's 128 KiB default (its p2p buffer per peer and
/// channel grows to 8 chunks, 4 MiB; the check's p2p steps meet a handful of peers, its alltoall
/// at most 31). Why: with every core busy (a data loader, a co-tenant), a 128 KiB chunk is one
/// wake-up of NCCL's proxy threads, and the pair rounds read the host scheduler's pace, not the
/// link: one H200, 8 emulated nodes under one busy loop per core read every pair at 0.058-0.060
/// GB/s, the node shaped to 1 Gbit/s included, and PASSed; with 512 KiB chunks the same runs read
/// healthy pairs at 0.23 and the shaped node's at 0.11, and FAILed it (no load: 0.33 and 0.11;
/// `bench-core/benchmarks/results/2026-12-02-h200x1-p2p-chunk`). Collectives other than
/// send/recv (the all_reduce nccl-tests compares) do not use this chunk.
pub const P2P_NET_CHUNK: (&str, &str) = ("NCCL_P2P_NET_CHUNKSIZE", "524288");

/// The variable [`P2P_NET_CHUNK`] names and its value when `env` leaves it unset.
pub fn p2p_net_chunk(env: &Environment) -> Option<(&'static str, &'static str)> {
    env.get_os(P2P_NET_CHUNK.0)
        .is_none()
        .then_some(P2P_NET_CHUNK)
}

/// Where NCCL's INFO log of this process goes: a private temporary file, unless the user set
/// `NCCL_DEBUG` (then their settings stand and transports are not recorded).
pub fn capture_nccl_log(
    opts: &Options,
    profile: Option<&NetworkProfile>,
    env: &mut Environment,
) -> LogPlace {
    let expect = path_expectation(opts, profile);
    if expect.collnet && env.get_os("NCCL_COLLNET_ENABLE").is_none() {
        env.set_for_nccl("NCCL_COLLNET_ENABLE", "1");
    }
    if expect.nvls {
        env.set_for_nccl("NCCL_NVLS_ENABLE", "1");
    }
    if let Some(level) = env.get("NCCL_DEBUG") {
        return Err(format!(
            "not recorded: NCCL_DEBUG={level} was set by the caller"
        ));
    }
    // A fresh private directory (0700; creation fails if the name exists, so no planted
    // symlink can redirect NCCL's fopen when the prolog runs this as root).
    let dir = env.temp_dir().join(format!(
        "nccl-check-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("not recorded: cannot create {}: {e}", dir.display()))?;
    let path = dir.join("nccl.log");
    env.set_for_nccl("NCCL_DEBUG", "INFO");
    env.set_for_nccl("NCCL_DEBUG_FILE", &path);
    if env.get_os("NCCL_DEBUG_SUBSYS").is_none() {
        env.set_for_nccl("NCCL_DEBUG_SUBSYS", "INIT,P2P,SHM,NET,COLL,GRAPH,TUNING");
    }
    Ok(path)
}

/// Removes the private directory of the log at `log` (at exit, whatever the verdict): the one
/// [`capture_nccl_log`] made, the only maker of a place that is not an error.
pub fn remove_log_dir(log: &LogPlace) {
    if let Some(dir) = log.as_ref().ok().and_then(|path| path.parent()) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unset: the check's chunk; set by the caller or a profile: theirs stands.
    #[test]
    fn the_p2p_chunk_is_set_only_where_nobody_set_one() {
        let none = Environment::of_pairs([]);
        assert_eq!(
            p2p_net_chunk(&none),
            Some(("NCCL_P2P_NET_CHUNKSIZE", "524288"))
        );
        let theirs = Environment::of_pairs([("NCCL_P2P_NET_CHUNKSIZE", "131072")]);
        assert_eq!(p2p_net_chunk(&theirs), None);
    }

    /// The name the kernel holds (uname's nodename), whole: not "unknown", not cut short.
    #[test]
    fn the_hostname_is_the_kernels() {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("procfs");
        assert_eq!(hostname(), kernel.trim_end());
    }
}
