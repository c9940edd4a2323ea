//! Processes keeping the node's CPUs busy, and whose they are. Read from procfs over a short
//! window: each process's CPU time (`/proc/PID/stat` utime + stime) at the start and the end;
//! whose each is comes from Slurm afterwards ([`super::owner`]). A check under such load reads
//! NVLink and the network as slow, so the busy processes that are not this job's are named
//! (pid, user, command, their job where Slurm says) beside the verdict; they never drain: any
//! user who can run a process on the node (ssh without `pam_slurm_adopt`, cron, another job on a
//! shared node) can keep its CPUs busy, and a node must not be taken out of service for that.

use super::owner::{Owner, Owners};
use nccl_check_host::{read, text::escape_control};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// How long the CPU times are watched: long enough for a busy loop to show as one CPU at the
/// kernel's 100 Hz accounting (30 ticks), short beside the check's budget.
pub const WINDOW: Duration = Duration::from_millis(300);
/// A process that used at least this many CPUs over the window is busy.
pub const BUSY_CPUS: f64 = 0.5;
/// The busy processes not this job's are said beside the verdict when together they use at
/// least this share of its CPUs (and at least one CPU): a stray daemon's spike is not, a
/// leftover training loader or another job's threads on a quarter of the cores are.
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

/// A busy process, named (`user` and `command` escaped: text a process chose).
#[derive(Debug, Clone, PartialEq)]
pub struct BusyProcess {
    pub pid: u32,
    /// The owner's user name (uid when it has none); empty when /proc did not say.
    pub user: String,
    /// `comm`, as the kernel names the process.
    pub command: String,
    /// CPUs it used over the window (1.0 = one core all the time).
    pub cpus: f64,
}

/// A busy process with whose it is: `pid 4242 (burn), user bob, job 17, 1.0 CPU`.
pub struct Named<'a>(pub &'a BusyProcess, pub &'a Owner);

impl std::fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Named(p, owner) = self;
        write!(f, "pid {} ({})", p.pid, p.command)?;
        if !p.user.is_empty() {
            write!(f, ", user {}", p.user)?;
        }
        write!(f, ", {owner}, {:.1} CPU", p.cpus)
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
    /// The busy processes that are not this job's, with whose they are, when together they use
    /// [`NODE_SHARE`] of the node's CPUs (at least one); else none.
    pub fn others<'a>(&'a self, owners: &Owners) -> Vec<(&'a BusyProcess, Owner)> {
        let others: Vec<(&BusyProcess, Owner)> = self
            .busy
            .iter()
            .map(|p| (p, owners.of(p.pid)))
            .filter(|(_, o)| *o != Owner::ThisJob)
            .collect();
        let used: f64 = others.iter().map(|(p, _)| p.cpus).sum();
        if used >= (NODE_SHARE * self.cpus as f64).max(1.0) {
            others
        } else {
            Vec::new()
        }
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
            user: escape_control(&user_of(&dir)),
            command: escape_control(&read::small(&dir.join("comm"), 256).unwrap_or_default()),
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

/// `CPUs: busy: 2 processes not this job's (pid 4242 (burn), user bob, no job, 1.0 CPU; ...)`.
pub fn sentence(others: &[(&BusyProcess, Owner)]) -> String {
    let n = others.len();
    let list: Vec<String> = others
        .iter()
        .take(4)
        .map(|(p, o)| Named(p, o).to_string())
        .collect();
    let more = if n > 4 {
        format!("; +{} more", n - 4)
    } else {
        String::new()
    };
    format!(
        "CPUs: busy: {n} process{} not this job's ({}{more})",
        if n == 1 { "" } else { "es" },
        list.join("; ")
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

    /// Slurm's `listpids` on this node: pid 102 is job 42's, pid 106 this job's (9).
    fn owners(root: &Path) -> Owners {
        let table = "PID JOBID STEPID LOCALID GLOBALID\n102 42 0 0 0\n106 9 batch 0 0\n";
        Owners::new(Ok(table.into()), root, Some("9"), None)
    }

    /// Two processes of no job busy on a 4-CPU node, one of job 42, one of this job, an idle
    /// one, a kernel thread and the prolog's own: the busy ones not this job's are named with
    /// whose they are, busiest first; a comm with an escape sequence or a `|` is shown escaped.
    #[test]
    fn busy_processes_not_this_jobs_are_named_with_their_job_and_escaped() {
        let fx = Fixture::new(4);
        let none = "0::/user.slice/user-0.slice/session-1.scope\n";
        fx.process(100, "burn", none, 1000);
        fx.process(101, "x\x1b[2J|y", none, 1000);
        fx.process(102, "train", none, 1000);
        fx.process(103, "idle", none, 1000);
        fx.process_with(104, "kworker", none, PF_KTHREAD, 1000);
        fx.process(105, "prolog", none, 1000);
        fx.process(106, "mine", none, 1000);
        let before = read_ticks(fx.0.path());
        assert_eq!(before.len(), 6, "the kernel thread is left out");
        fx.process(100, "burn", none, 1030);
        fx.process(101, "x\x1b[2J|y", none, 1018);
        fx.process(102, "train", none, 1030);
        fx.process(103, "idle", none, 1001);
        fx.process_with(104, "kworker", none, PF_KTHREAD, 1030);
        fx.process(105, "prolog", none, 1030);
        fx.process(106, "mine", none, 1030);
        let after = read_ticks(fx.0.path());
        let scan = judge_window(fx.0.path(), &before, &after, 30.0, &|pid| pid == 105);
        assert_eq!(scan.cpus, 4);
        let pids: Vec<u32> = scan.busy.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [100, 102, 106, 101]);
        let others = scan.others(&owners(fx.0.path()));
        assert_eq!(
            sentence(&others),
            "CPUs: busy: 3 processes not this job's (pid 100 (burn), user 4000000, no job, 1.0 CPU; \
             pid 102 (train), user 4000000, job 42, 1.0 CPU; pid 101 (x\\u{1b}[2J\\u{7c}y), user \
             4000000, no job, 0.6 CPU)"
        );
        assert!(!sentence(&others).contains('\x1b'));
    }

    #[test]
    fn others_are_said_only_when_they_use_a_quarter_of_the_cpus() {
        let p = |pid, cpus| BusyProcess {
            pid,
            user: String::new(),
            command: "x".into(),
            cpus,
        };
        let tmp = tempfile::tempdir().expect("tempdir");
        let o = owners(tmp.path());
        let scan = CpuScan {
            cpus: 16,
            busy: vec![p(1, 1.0), p(2, 1.0), p(106, 8.0)],
        };
        assert!(
            scan.others(&o).is_empty(),
            "2 of 16 CPUs, the rest this job's"
        );
        let scan = CpuScan {
            cpus: 16,
            busy: (1..=4).map(|i| p(i, 1.0)).collect(),
        };
        assert_eq!(scan.others(&o).len(), 4);
        let small = CpuScan {
            cpus: 2,
            busy: vec![p(1, 0.6)],
        };
        assert!(small.others(&o).is_empty(), "at least one CPU");
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
