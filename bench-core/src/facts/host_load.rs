//! Whether the host's CPUs were busy while the check measured, and with whom: two samples of
//! `/proc` (at the start and the end of the measurement) give the share of every CPU that went to
//! processes other than this check, how long this check's own threads waited for a CPU
//! (`/proc/self/task/*/schedstat`: time runnable but not running), and the top consumers
//! outside the check (pid, user, command, the Slurm job its cgroup names, CPU share).
//!
//! Why: a host with every core busy delays the threads that launch the GPUs' work, and the pair
//! matrix then reads like a dead NVLink by the host's clock (seen on 4x H200 with one busy loop
//! per core: 84-168 GB/s where the GPUs deliver 270+). The GPUs' clock tells the two apart
//! (`runner::gpu_time`); this fact names the cause where the GPUs' clock is slow too (NCCL's
//! proxy threads, which move network data, are host threads).
//!
//! The rule ([`HostLoad::busy`]) is coarse on purpose: others used at least [`BUSY_SHARE`] of
//! every CPU, or this check's threads waited for a CPU at least [`WAIT_SHARE`] of the window
//! (summed over its threads). An unreadable `/proc` is unknown, never busy.

use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

/// Others' share of all CPUs at and above which the host is busy.
pub const BUSY_SHARE: f64 = 0.75;
/// This check's threads' summed wait for a CPU, as a share of the window, at and above which
/// the host is busy (half a thread's time: an idle host leaves it near 0).
pub const WAIT_SHARE: f64 = 0.5;
/// Processes read per sample at most (a host with more is read in part: the rest is not named).
const MAX_PIDS: usize = 16_384;
/// Consumers named at most, and the least share of one CPU worth naming.
const TOP: usize = 5;
const MIN_NAMED: f64 = 0.05;
/// Others' share of all CPUs below which a busy host is busy with the check alone.
pub const MIN_OTHERS: f64 = 0.1;

/// One look at the host.
#[derive(Debug, Clone)]
pub struct HostSample {
    at: Instant,
    /// All CPUs' busy and total clock ticks since boot (`/proc/stat`'s `cpu` line).
    busy_ticks: u64,
    total_ticks: u64,
    cpus: u32,
    /// Every process's user + system ticks (`/proc/PID/stat`).
    procs: HashMap<u32, u64>,
    /// This process's threads' nanoseconds runnable but not running.
    own_wait_ns: Option<u64>,
    /// The CPUs this process may run on (`Cpus_allowed_list`: its cgroup's cpuset, taskset).
    own_cpus: Option<Vec<u32>>,
}

/// A process that used CPU time while the check measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Consumer {
    pub pid: u32,
    pub user: String,
    pub command: String,
    /// The Slurm job whose cgroup holds it, when its cgroup says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// CPUs it used on average (1.0: one whole CPU).
    pub cpus: f64,
}

/// What the two samples show.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostLoad {
    pub window_s: f64,
    pub cpus: u32,
    /// Share of all CPUs busy with anything but this check.
    pub others_share: f64,
    /// Share of all CPUs this check's processes used (every process of the step on this host
    /// and their threads): load too, but the check's own, never another's.
    #[serde(default)]
    pub check_share: f64,
    /// This check's threads' summed wait for a CPU, as a share of the window (None where the
    /// kernel keeps no schedstat).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_wait_share: Option<f64>,
    /// Share of the CPUs this process may run on that went to others' processes (each one's
    /// CPU time spread over the CPUs it may run on, counted where those overlap this
    /// process's): what a job confined to its cpuset feels. None where the CPU lists could
    /// not be read; then `others_share` stands for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub others_on_own_cpus: Option<f64>,
    /// The largest consumers outside the check, largest first.
    pub top: Vec<Consumer>,
}

/// Reads one sample under `proc_root` (`/proc` on a node, a fixture tree in tests); `own` is
/// this process's pid (its CPU time is the check's, not another's). None when `/proc/stat`
/// cannot be read.
pub fn sample(proc_root: &Path, own: u32) -> Option<HostSample> {
    let stat = std::fs::read_to_string(proc_root.join("stat")).ok()?;
    let (busy_ticks, total_ticks, cpus) = cpu_ticks(&stat)?;
    let entries = std::fs::read_dir(proc_root).into_iter().flatten().flatten();
    let procs = (entries.take(MAX_PIDS * 2))
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            Some((pid, process_ticks(&stat)?))
        })
        .take(MAX_PIDS)
        .collect();
    Some(HostSample {
        at: Instant::now(),
        busy_ticks,
        total_ticks,
        cpus,
        procs,
        own_wait_ns: own_wait(&proc_root.join(own.to_string()).join("task")),
        own_cpus: allowed_cpus(&proc_root.join(own.to_string())),
    })
}

/// Most CPUs read from one `Cpus_allowed_list`.
const MAX_CPUS: u32 = 8192;

/// `Cpus_allowed_list:\t0-3,8,10-11` of `/proc/PID/status`: the CPUs, ascending; None when
/// unreadable or empty.
fn allowed_cpus(pid_dir: &Path) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(pid_dir.join("status")).ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    parse_cpu_list(list.trim())
}

/// `0-3,8,10-11` -> [0, 1, 2, 3, 8, 10, 11], at most [`MAX_CPUS`]; None when malformed.
pub(crate) fn parse_cpu_list(list: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
        if a > b || b >= MAX_CPUS {
            return None;
        }
        cpus.extend(a..=b);
    }
    cpus.sort_unstable();
    cpus.dedup();
    (!cpus.is_empty()).then_some(cpus)
}

/// Of `ticks` a process used on `theirs` (its allowed CPUs), the share that fell on `mine`,
/// taking its time as spread evenly over the CPUs it may run on.
fn on_mine(ticks: f64, theirs: &[u32], mine: &[u32]) -> f64 {
    let overlap = theirs
        .iter()
        .filter(|c| mine.binary_search(c).is_ok())
        .count();
    ticks * overlap as f64 / theirs.len().max(1) as f64
}

/// `cpu  user nice system idle iowait irq softirq steal ...`: (busy, total) ticks and the
/// number of `cpuN` lines.
fn cpu_ticks(stat: &str) -> Option<(u64, u64, u32)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    if v.len() < 4 {
        return None;
    }
    let total: u64 = v.iter().sum();
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    let cpus = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count() as u32;
    Some((total.saturating_sub(idle), total, cpus.max(1)))
}

/// `/proc/PID/stat`: utime + stime (fields 14 and 15), after the command's closing parenthesis
/// (a command may hold spaces and parentheses of its own).
fn process_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime 15.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The summed run-queue wait of every thread under `task` (`schedstat`'s second field).
fn own_wait(task: &Path) -> Option<u64> {
    let waits: Vec<u64> = (std::fs::read_dir(task).ok()?.flatten().take(4096))
        .filter_map(|entry| {
            let stat = std::fs::read_to_string(entry.path().join("schedstat")).ok()?;
            stat.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .collect();
    (!waits.is_empty()).then(|| waits.iter().sum())
}

/// What happened between `a` and `b`: `ticks_per_s` is the kernel's clock tick
/// (`sysconf(_SC_CLK_TCK)`, 100 on Linux), `proc_root` where to name the consumers. Every process
/// of `check` counts as the check's own, not another's: the processes of one check on one host
/// (emulated nodes; one process per GPU) load its CPUs themselves.
pub fn between_for(
    a: &HostSample,
    b: &HostSample,
    check: &[u32],
    ticks_per_s: f64,
    proc_root: &Path,
) -> HostLoad {
    let window_s = b.at.duration_since(a.at).as_secs_f64();
    let total = b.total_ticks.saturating_sub(a.total_ticks) as f64;
    let busy = b.busy_ticks.saturating_sub(a.busy_ticks) as f64;
    let delta = |pid: &u32, t: &u64| t.saturating_sub(a.procs.get(pid).copied().unwrap_or(*t));
    let own_ticks: f64 = check
        .iter()
        .filter_map(|p| b.procs.get(p).map(|t| delta(p, t) as f64))
        .sum();
    // No ticks counted: no share to speak of.
    let share = |ticks: f64| (total > 0.0).then(|| (ticks / total).clamp(0.0, 1.0));
    let own_wait_share = match (a.own_wait_ns, b.own_wait_ns) {
        (Some(x), Some(y)) if window_s > 0.0 => Some(y.saturating_sub(x) as f64 / 1e9 / window_s),
        _ => None,
    };
    let others: Vec<(u32, f64)> = (b.procs.iter())
        .filter(|(pid, _)| !check.contains(pid) && a.procs.contains_key(pid))
        .map(|(pid, t)| (*pid, delta(pid, t) as f64))
        .filter(|&(_, ticks)| ticks > 0.0)
        .collect();
    let others_on_own_cpus = b.own_cpus.as_ref().and_then(|mine| {
        let capacity = total * mine.len() as f64 / f64::from(b.cpus.max(1));
        let all: Vec<u32> = (0..b.cpus).collect();
        let used: f64 = (others.iter())
            .map(|&(pid, ticks)| {
                let theirs = allowed_cpus(&proc_root.join(pid.to_string()));
                on_mine(ticks, theirs.as_deref().unwrap_or(&all), mine)
            })
            .sum();
        (capacity > 0.0).then(|| (used / capacity).clamp(0.0, 1.0))
    });
    // Over no window no one used a CPU worth naming.
    let mut used: Vec<(u32, f64)> = (others.into_iter().filter(|_| window_s > 0.0))
        .map(|(pid, ticks)| (pid, ticks / ticks_per_s / window_s))
        .filter(|&(_, c)| c >= MIN_NAMED)
        .collect();
    used.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    let top = used
        .into_iter()
        .take(TOP)
        .map(|(pid, cpus)| consumer(proc_root, pid, cpus))
        .collect();
    HostLoad {
        window_s,
        cpus: b.cpus,
        others_share: share(busy - own_ticks).unwrap_or(0.0),
        check_share: share(own_ticks).unwrap_or(0.0),
        own_wait_share,
        others_on_own_cpus,
        top,
    }
}

/// A consumer's user, command and Slurm job, read now (a process that is gone keeps its pid).
fn consumer(proc_root: &Path, pid: u32, cpus: f64) -> Consumer {
    let dir = proc_root.join(pid.to_string());
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let user = match status_user(&read("status")) {
        Some((_, Some(name))) => name,
        Some((uid, None)) => uid.to_string(),
        None => "?".into(),
    };
    Consumer {
        pid,
        user,
        command: read("comm").trim().chars().take(64).collect(),
        job: slurm_job(&read("cgroup")),
        cpus,
    }
}

/// The real uid of a `/proc/PID/status` text (its `Uid:` line), and that user's name where known.
pub(crate) fn status_user(status: &str) -> Option<(u32, Option<String>)> {
    let uid_line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let uid = uid_line.split_whitespace().next()?.parse().ok()?;
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid));
    Some((uid, user.ok().flatten().map(|u| u.name)))
}

/// `0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0` → `4242`; 26.05's
/// `.../slurmstepd.scope/s14DKSR4920005/...` → its SLUID (the host crate's one reading).
pub fn slurm_job(cgroup: &str) -> Option<String> {
    nccl_check_host::slurm_job::job_of_cgroup(cgroup).map(|j| j.to_string())
}

impl HostLoad {
    /// Others' share of the CPUs this check may run on: `others_on_own_cpus` where known, else
    /// of every CPU.
    pub fn others_here(&self) -> f64 {
        self.others_on_own_cpus.unwrap_or(self.others_share)
    }

    /// Whether others' processes made the host busy enough to slow the check (see the module
    /// comment): never where the load is the check's own ([`HostLoad::only_the_checks_own`]).
    pub fn busy(&self) -> bool {
        self.loaded() && self.others_here() >= MIN_OTHERS
    }

    /// Whether the check's CPUs were loaded at all, by anyone.
    fn loaded(&self) -> bool {
        self.others_here() >= BUSY_SHARE || self.own_wait_share.is_some_and(|w| w >= WAIT_SHARE)
    }

    /// Whether what loaded the check's CPUs is this check alone: its threads waited for a CPU
    /// while others used less than [`MIN_OTHERS`] of them (emulated nodes, more ranks than
    /// cores). Said in the host fact; no host is busy by it, as every peer of the check is
    /// loaded by the check alike (one H200, 16 emulated nodes on 16 cores, one node's worker
    /// confined with busy loops: every node's threads waited for a CPU, and that node's slow
    /// pairs stood as hardware against 15 "equally busy" peers).
    pub fn only_the_checks_own(&self) -> bool {
        self.loaded() && self.others_here() < MIN_OTHERS
    }

    /// `host busy: 97% of 64 CPUs used by other processes, the check's threads waited 1.8x
    /// their time for a CPU; top: pid 4242 (alice, python, job 17) 1.0 CPU, ...`
    pub fn describe(&self) -> String {
        let (others, own) = (self.others_share * 100.0, self.check_share * 100.0);
        let cpus = self.cpus;
        let mut s = format!(
            "host busy: {others:.0}% of {cpus} CPUs used by other processes, {own:.0}% by this check's own"
        );
        if let Some(mine) = self.others_on_own_cpus.map(|m| m * 100.0) {
            s += &format!(", others {mine:.0}% of the CPUs this check may run on");
        }
        if self.only_the_checks_own() {
            s += " (the load is the check's own: more of its processes and threads than CPUs)";
        }
        if let Some(w) = self.own_wait_share {
            s += &format!(", the check's threads waited {w:.2}x the window for a CPU");
        }
        let top: Vec<String> = (self.top.iter())
            .map(|c| {
                let job = c
                    .job
                    .as_ref()
                    .map_or(String::new(), |j| format!(", job {j}"));
                let (pid, user, command, cpus) = (c.pid, &c.user, &c.command, c.cpus);
                format!("pid {pid} ({user}, {command}{job}) {cpus:.1} CPU")
            })
            .collect();
        if !top.is_empty() {
            s += &format!("; top: {}", top.join(", "));
        }
        s
    }
}

/// Whether `pid` here runs this same program. A pid of the check may be a process of another
/// node, and the same number an unrelated process here: only one that runs this program is
/// the check's own.
/// A process that has ended but is not reaped yet (a worker done before this one, its
/// `timeout` parent not yet woken) has no `exe` to read, only its `comm` and its ticks: then
/// its command decides (seen on one H200: a finished worker of another emulated node named as
/// this node's load).
fn runs_this_program(proc_root: &Path, pid: u32) -> bool {
    let exe = |p: &str| std::fs::read_link(proc_root.join(p).join("exe")).ok();
    let comm = |p: &str| std::fs::read_to_string(proc_root.join(p).join("comm")).ok();
    let pid = pid.to_string();
    match (exe("self"), exe(&pid)) {
        (Some(mine), Some(theirs)) => mine == theirs,
        (Some(_), None) => comm("self").is_some_and(|c| comm(&pid) == Some(c)),
        (None, _) => false,
    }
}

/// The load since `start` (a [`sample`] at the start of the measurement; read while the check
/// still measures too, for the other nodes, `facts::known`), the check's processes `check` (every
/// process of the step, this one among them) not counted as others; None when `/proc` could not
/// be read.
pub fn load_since(start: &HostSample, check: &[u32]) -> Option<HostLoad> {
    let proc_root = Path::new("/proc");
    let own = std::process::id();
    let end = sample(proc_root, own)?;
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let tick = if tick > 0 { tick as f64 } else { 100.0 };
    let others = (check.iter().copied()).filter(|&p| p != own && runs_this_program(proc_root, p));
    let pids: Vec<u32> = std::iter::once(own).chain(others).collect();
    Some(between_for(start, &end, &pids, tick, proc_root))
}

#[cfg(test)]
mod tests;
