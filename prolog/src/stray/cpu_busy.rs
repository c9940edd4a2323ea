//! Processes keeping the node's CPUs busy, and whose they are: a node whose CPUs a leftover
//! process of no job keeps busy is not clean, like a GPU another process holds (a check under
//! such load reads NVLink and the network as slow). Read from procfs over a short
//! window: each process's CPU time (`/proc/PID/stat` utime + stime) at the start and the end,
//! and its cgroup (`/proc/PID/cgroup`) to tell a Slurm job's process (a `job_NNN` component,
//! cgroup v1 or v2) from one of no job. Busy CPUs of a running job are never a stray: the node
//! is shared, not dirty.

use nccl_check_host::read;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// How long the CPU times are watched: long enough for a busy loop to show as one CPU at the
/// kernel's 100 Hz accounting (30 ticks), short beside the check's budget.
pub const WINDOW: Duration = Duration::from_millis(300);
/// A process that used at least this many CPUs over the window is busy.
pub const BUSY_CPUS: f64 = 0.5;
/// The busy processes of no job make the node not clean when together they use at least this
/// share of its CPUs (and at least one CPU): a stray daemon's spike does not, a leftover
/// training loader or a stuck job's threads on a quarter of the cores do.
pub const NODE_SHARE: f64 = 0.25;
/// At most this many processes are read (a node has far fewer; more is not a procfs).
const MAX_PIDS: usize = 1 << 17;
/// `PF_KTHREAD` in `/proc/PID/stat`'s flags: kernel threads are never a stray.
const PF_KTHREAD: u64 = 0x0020_0000;

/// One process's CPU time at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticks {
    /// utime + stime, in clock ticks.
    pub cpu: u64,
    /// When it started (ticks since boot): a pid reused within the window is not compared.
    pub start: u64,
}

/// A busy process, named.
#[derive(Debug, Clone, PartialEq)]
pub struct BusyProcess {
    pub pid: u32,
    /// The owner's user name (uid when it has none); empty when /proc did not say.
    pub user: String,
    /// `comm`, as the kernel names the process.
    pub command: String,
    /// The Slurm job whose cgroup it is in; None: no job's.
    pub job: Option<String>,
    /// CPUs it used over the window (1.0 = one core all the time).
    pub cpus: f64,
}

impl std::fmt::Display for BusyProcess {
    /// `pid 4242 (burn), user bob, 1.0 CPU`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.command)?;
        if !self.user.is_empty() {
            write!(f, ", user {}", self.user)?;
        }
        if let Some(j) = &self.job {
            write!(f, ", job {j}")?;
        }
        write!(f, ", {:.1} CPU", self.cpus)
    }
}

/// What the window showed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CpuScan {
    /// The node's CPUs (`cpuN` lines of /proc/stat); 0 when unknown.
    pub cpus: usize,
    /// Busy processes, the busiest first.
    pub busy: Vec<BusyProcess>,
}

impl CpuScan {
    /// The busy processes of no job, when together they make the node not clean.
    pub fn strays(&self) -> Vec<&BusyProcess> {
        let none: Vec<&BusyProcess> = self.busy.iter().filter(|p| p.job.is_none()).collect();
        let used: f64 = none.iter().map(|p| p.cpus).sum();
        let floor = (NODE_SHARE * self.cpus as f64).max(1.0);
        if used >= floor {
            none
        } else {
            Vec::new()
        }
    }

    /// The busy processes of running jobs (never strays).
    pub fn of_jobs(&self) -> Vec<&BusyProcess> {
        self.busy.iter().filter(|p| p.job.is_some()).collect()
    }
}

/// Watches the processes under `proc_root` for `window`; `ours(pid)` leaves the prolog's own
/// processes out. A procfs that cannot be read gives an empty scan (nothing is blamed).
pub fn watch_cpus(proc_root: &Path, window: Duration, ours: &dyn Fn(u32) -> bool) -> CpuScan {
    let before = read_ticks(proc_root);
    std::thread::sleep(window);
    let after = read_ticks(proc_root);
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&h| h > 0)
        .unwrap_or(100) as f64;
    judge_window(proc_root, &before, &after, window.as_secs_f64() * hz, ours)
}

/// The busy processes between two readings `ticks` clock ticks apart.
pub fn judge_window(
    proc_root: &Path,
    before: &BTreeMap<u32, Ticks>,
    after: &BTreeMap<u32, Ticks>,
    ticks: f64,
    ours: &dyn Fn(u32) -> bool,
) -> CpuScan {
    let mut busy = Vec::new();
    for (&pid, a) in after {
        let Some(b) = before.get(&pid).filter(|b| b.start == a.start) else {
            continue;
        };
        let cpus = a.cpu.saturating_sub(b.cpu) as f64 / ticks.max(1.0);
        if cpus < BUSY_CPUS || ours(pid) {
            continue;
        }
        let dir = proc_root.join(pid.to_string());
        busy.push(BusyProcess {
            pid,
            user: user_of(&dir),
            command: read::small(&dir.join("comm"), 256).unwrap_or_default(),
            job: read::small(&dir.join("cgroup"), 64 << 10)
                .ok()
                .and_then(|c| job_of_cgroup(&c)),
            cpus,
        });
    }
    busy.sort_by(|a, b| b.cpus.total_cmp(&a.cpus).then(a.pid.cmp(&b.pid)));
    CpuScan {
        cpus: count_cpus(proc_root),
        busy,
    }
}

/// Every user process's CPU time now (kernel threads left out).
pub fn read_ticks(proc_root: &Path) -> BTreeMap<u32, Ticks> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(proc_root) else {
        return out;
    };
    for e in dir.flatten().take(MAX_PIDS) {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let stat = read::small(&e.path().join("stat"), read::ATTR_MAX);
        if let Some(t) = stat.ok().as_deref().and_then(parse_stat) {
            out.insert(pid, t);
        }
    }
    out
}

/// `/proc/PID/stat` → its CPU time and start; None for a kernel thread or a malformed line.
/// The command (field 2) may hold spaces and parentheses, so fields are counted after the
/// last `)`: there field 3 (state) is the first.
pub fn parse_stat(line: &str) -> Option<Ticks> {
    let (_, rest) = line.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    if field(9)? & PF_KTHREAD != 0 {
        return None;
    }
    Some(Ticks {
        cpu: field(14)?.checked_add(field(15)?)?,
        start: field(22)?,
    })
}

/// The Slurm job of a process from its `/proc/PID/cgroup`: the number of a `job_NNN`
/// component (`0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0`, cgroup v2;
/// `4:cpuset:/slurm/uid_1000/job_42/step_batch`, v1).
pub fn job_of_cgroup(cgroup: &str) -> Option<String> {
    cgroup
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .flat_map(|path| path.split('/'))
        .find_map(|c| {
            let n = c.strip_prefix("job_")?;
            (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.to_string())
        })
}

/// The owner of a process (real uid from `status`), by name when it has one.
fn user_of(dir: &Path) -> String {
    let status = read::small(&dir.join("status"), 64 << 10).unwrap_or_default();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u32>().ok());
    match uid {
        Some(u) => nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(u))
            .ok()
            .flatten()
            .map_or_else(|| u.to_string(), |user| user.name),
        None => String::new(),
    }
}

/// The `cpuN` lines of `/proc/stat`.
fn count_cpus(proc_root: &Path) -> usize {
    read::small(&proc_root.join("stat"), 1 << 20)
        .map(|s| {
            s.lines()
                .filter(|l| {
                    // `cpu0 ...`, not the sum line `cpu  ...`.
                    l.strip_prefix("cpu")
                        .and_then(|r| r.split(' ').next())
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
                .count()
        })
        .unwrap_or(0)
}

/// `CPUs: busy: 2 processes of no job (pid 4242 (burn), user bob, 1.0 CPU; ...)`.
pub fn sentence(strays: &[&BusyProcess]) -> String {
    let n = strays.len();
    let list: Vec<String> = strays.iter().take(4).map(|p| p.to_string()).collect();
    let more = if n > 4 {
        format!("; +{} more", n - 4)
    } else {
        String::new()
    };
    format!(
        "CPUs: busy: {n} process{} of no job ({}{more})",
        if n == 1 { "" } else { "es" },
        list.join("; ")
    )
}

/// The drain reason: `nccl-check:CPUs busy|CPUs: busy: 1 process of no job (pid 4242 (burn),
/// user bob, 1.0 CPU): the node is not clean (job 8)`.
pub fn drain_reason(strays: &[&BusyProcess], job: Option<&str>) -> String {
    let job = job.map(|j| format!(" (job {j})")).unwrap_or_default();
    format!(
        "nccl-check:CPUs busy|{}: not a job's, the node is not clean{job}",
        sentence(strays)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc/PID/stat` line: `cpu` ticks split as utime/stime, started at `start`.
    fn stat(pid: u32, comm: &str, flags: u64, cpu: u64, start: u64) -> String {
        let mut f = vec!["0".to_string(); 50];
        f[0] = "R".into(); // field 3
        f[1] = "1".into(); // ppid
        f[9 - 3] = flags.to_string();
        f[14 - 3] = (cpu / 2).to_string();
        f[15 - 3] = (cpu - cpu / 2).to_string();
        f[22 - 3] = start.to_string();
        format!("{pid} ({comm}) {}", f.join(" "))
    }

    struct Fixture(tempfile::TempDir);

    impl Fixture {
        fn new(cpus: usize) -> Fixture {
            let d = tempfile::tempdir().expect("tempdir");
            let lines: Vec<String> = (0..cpus).map(|i| format!("cpu{i} 1 2 3")).collect();
            std::fs::write(
                d.path().join("stat"),
                format!("cpu 1 2 3\n{}\nintr 0\n", lines.join("\n")),
            )
            .expect("stat");
            Fixture(d)
        }

        fn process(&self, pid: u32, comm: &str, cgroup: &str, cpu: u64) {
            self.process_with(pid, comm, cgroup, 0, cpu);
        }

        fn process_with(&self, pid: u32, comm: &str, cgroup: &str, flags: u64, cpu: u64) {
            let dir = self.0.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).expect("dir");
            std::fs::write(dir.join("stat"), stat(pid, comm, flags, cpu, 7)).expect("stat");
            std::fs::write(dir.join("comm"), format!("{comm}\n")).expect("comm");
            std::fs::write(dir.join("cgroup"), cgroup).expect("cgroup");
            std::fs::write(
                dir.join("status"),
                "Name:\tx\nUid:\t4000000\t4000000\t0\t0\n",
            )
            .expect("status");
        }
    }

    #[test]
    fn the_cpu_time_is_read_after_a_command_with_spaces_and_parentheses() {
        let t = parse_stat(&stat(9, "a b) (c", 0, 31, 5)).expect("parses");
        assert_eq!(t, Ticks { cpu: 31, start: 5 });
        assert_eq!(parse_stat(&stat(2, "kthreadd", PF_KTHREAD, 9, 1)), None);
        assert_eq!(parse_stat("12 (x) R 1 2"), None);
    }

    #[test]
    fn a_slurm_jobs_cgroup_names_its_job_in_v1_and_v2() {
        let v2 = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n";
        assert_eq!(job_of_cgroup(v2).as_deref(), Some("42"));
        let v1 = "12:memory:/slurm/uid_1000/job_7/step_batch\n4:cpuset:/slurm/uid_1000/job_7\n";
        assert_eq!(job_of_cgroup(v1).as_deref(), Some("7"));
        assert_eq!(
            job_of_cgroup("0::/user.slice/user-1000.slice/session-3.scope"),
            None
        );
        assert_eq!(job_of_cgroup("0::/system.slice/job_x/y"), None);
    }

    /// Two processes of no job busy on a 4-CPU node, one of job 42, an idle one, a kernel
    /// thread and the prolog's own: the strays are the two of no job, busiest first.
    #[test]
    fn busy_processes_of_no_job_are_strays_and_a_jobs_are_not() {
        let fx = Fixture::new(4);
        let none = "0::/user.slice/user-0.slice/session-1.scope\n";
        let job = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n";
        fx.process(100, "burn", none, 1000);
        fx.process(101, "loader", none, 1000);
        fx.process(102, "train", job, 1000);
        fx.process(103, "idle", none, 1000);
        fx.process_with(104, "kworker", none, PF_KTHREAD, 1000);
        fx.process(105, "prolog", none, 1000);
        let before = read_ticks(fx.0.path());
        assert_eq!(before.len(), 5, "the kernel thread is left out");
        fx.process(100, "burn", none, 1030);
        fx.process(101, "loader", none, 1018);
        fx.process(102, "train", job, 1030);
        fx.process(103, "idle", none, 1001);
        fx.process_with(104, "kworker", none, PF_KTHREAD, 1030);
        fx.process(105, "prolog", none, 1030);
        let after = read_ticks(fx.0.path());
        let scan = judge_window(fx.0.path(), &before, &after, 30.0, &|pid| pid == 105);
        assert_eq!(scan.cpus, 4);
        let pids: Vec<u32> = scan.busy.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [100, 102, 101]);
        let strays = scan.strays();
        assert_eq!(strays.iter().map(|p| p.pid).collect::<Vec<_>>(), [100, 101]);
        assert_eq!(scan.of_jobs()[0].job.as_deref(), Some("42"));
        assert_eq!(
            drain_reason(&strays, Some("8")),
            "nccl-check:CPUs busy|CPUs: busy: 2 processes of no job (pid 100 (burn), user \
             4000000, 1.0 CPU; pid 101 (loader), user 4000000, 0.6 CPU): not a job's, the node \
             is not clean (job 8)"
        );
        assert!(drain_reason(&strays, None).starts_with("nccl-check:CPUs busy|"));
    }

    #[test]
    fn a_node_is_not_clean_only_when_its_strays_use_a_quarter_of_its_cpus() {
        let p = |pid, cpus, job: Option<&str>| BusyProcess {
            pid,
            user: String::new(),
            command: "x".into(),
            job: job.map(str::to_string),
            cpus,
        };
        let scan = CpuScan {
            cpus: 16,
            busy: vec![p(1, 1.0, None), p(2, 1.0, None), p(3, 8.0, Some("5"))],
        };
        assert!(scan.strays().is_empty(), "2 of 16 CPUs, the rest a job's");
        let scan = CpuScan {
            cpus: 16,
            busy: (1..=4).map(|i| p(i, 1.0, None)).collect(),
        };
        assert_eq!(scan.strays().len(), 4);
        let small = CpuScan {
            cpus: 2,
            busy: vec![p(1, 0.6, None)],
        };
        assert!(small.strays().is_empty(), "at least one CPU");
    }

    /// A pid that ended and was reused within the window is not compared with its
    /// predecessor.
    #[test]
    fn a_reused_pid_is_not_compared_across_processes() {
        let fx = Fixture::new(2);
        let mut before = BTreeMap::new();
        before.insert(100, Ticks { cpu: 0, start: 1 });
        fx.process(100, "new", "0::/\n", 1000);
        let after = read_ticks(fx.0.path());
        assert!(judge_window(fx.0.path(), &before, &after, 30.0, &|_| false)
            .busy
            .is_empty());
    }

    #[test]
    fn an_unreadable_procfs_blames_nothing() {
        let scan = watch_cpus(Path::new("/nonexistent/proc"), Duration::ZERO, &|_| false);
        assert_eq!(scan, CpuScan::default());
    }
}
