use super::*;
use std::time::Duration;

/// [`between_for`] of a check of one process, `own`.
fn between(
    a: &HostSample,
    b: &HostSample,
    own: u32,
    ticks_per_s: f64,
    proc_root: &Path,
) -> HostLoad {
    between_for(a, b, &[own], ticks_per_s, proc_root)
}

/// A `/proc` tree with a 4-CPU `stat` and the given processes (pid, comm, ticks, cgroup).
fn fixture(name: &str, cpu: &str, procs: &[(u32, &str, u64, &str)]) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("host-load-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    let stat = format!("{cpu}\ncpu0 1 0 1 1\ncpu1 1 0 1 1\ncpu2 1 0 1 1\ncpu3 1 0 1 1\nintr 5\n");
    std::fs::write(d.join("stat"), stat).expect("stat");
    for &(pid, comm, ticks, cgroup) in procs {
        let p = d.join(pid.to_string());
        std::fs::create_dir_all(p.join("task/1")).expect("mkdir");
        // A command with a space and a parenthesis: fields are counted after the last ')'.
        let stat = format!(
            "{pid} ({comm}) R 1 1 1 0 -1 4194304 100 0 0 0 {} {} 0 0 20 0 1 0 5 0 0",
            ticks / 2,
            ticks - ticks / 2
        );
        std::fs::write(p.join("stat"), stat).expect("stat");
        std::fs::write(p.join("comm"), format!("{comm}\n")).expect("comm");
        std::fs::write(p.join("status"), "Name:\tx\nUid:\t0\t0\t0\t0\n").expect("status");
        std::fs::write(p.join("cgroup"), cgroup).expect("cgroup");
        std::fs::write(p.join("task/1/schedstat"), "100 2000000000 5\n").expect("schedstat");
    }
    d
}

fn shifted(s: &HostSample, secs: f64) -> HostSample {
    HostSample {
        at: s.at + Duration::from_secs_f64(secs),
        ..s.clone()
    }
}

#[test]
fn a_sample_reads_the_cpus_every_process_and_this_ones_wait() {
    let d = fixture(
        "read",
        "cpu  100 0 50 800 50 0 0 0 0 0",
        &[(7, "busy (loop)", 40, ""), (9, "nccl-check", 10, "")],
    );
    let s = sample(&d, 9).expect("a sample");
    assert_eq!((s.busy_ticks, s.total_ticks, s.cpus), (150, 1000, 4));
    assert_eq!(s.procs.get(&7), Some(&40));
    assert_eq!(s.own_wait_ns, Some(2_000_000_000));
    // No /proc/stat: unknown, not idle.
    assert!(sample(&d.join("nowhere"), 9).is_none());
}

#[test]
fn every_cpu_busy_with_others_is_busy_and_names_the_consumers_largest_first() {
    let d = fixture(
        "busy",
        "cpu  0 0 0 0 0 0 0 0",
        &[
            (
                7,
                "loop",
                0,
                "0::/system.slice/slurmstepd.scope/job_4242/step_0\n",
            ),
            (8, "loop", 0, "0::/user.slice\n"),
            (9, "nccl-check", 0, ""),
        ],
    );
    let a = sample(&d, 9).expect("a");
    let mut b = shifted(&a, 1.0);
    // In 1 s at 100 ticks/s on 4 CPUs (400 ticks): 380 busy, 40 of them the check's own.
    b.busy_ticks = 380;
    b.total_ticks = 400;
    b.procs.insert(7, 200);
    b.procs.insert(8, 140);
    b.procs.insert(9, 40);
    let load = between(&a, &b, 9, 100.0, &d);
    assert!((load.others_share - 0.85).abs() < 1e-9, "{load:?}");
    assert!(load.busy());
    assert_eq!(
        load.top.len(),
        2,
        "the check itself is never a consumer: {load:?}"
    );
    assert_eq!((load.top[0].pid, load.top[0].cpus), (7, 2.0));
    assert_eq!(load.top[0].job.as_deref(), Some("4242"));
    assert_eq!((load.top[1].pid, load.top[1].job.as_deref()), (8, None));
    assert_eq!(load.top[0].user, "root");
    // Pid 8 another process of the same check (emulated nodes on one host): not another's.
    let shared = between_for(&a, &b, &[9, 8], 100.0, &d);
    assert!((shared.others_share - 0.5).abs() < 1e-9, "{shared:?}");
    assert!(!shared.busy());
    assert_eq!(shared.top.iter().map(|c| c.pid).collect::<Vec<_>>(), [7]);
    let text = load.describe();
    assert!(text.starts_with("host busy: 85% of 4 CPUs"), "{text}");
    assert!(
        text.contains("pid 7 (root, loop, job 4242) 2.0 CPU"),
        "{text}"
    );
}

#[test]
fn the_decision_table_of_the_host_rule() {
    let load = |others: f64, wait: Option<f64>| HostLoad {
        window_s: 2.0,
        cpus: 8,
        others_share: others,
        check_share: 0.0,
        own_wait_share: wait,
        others_on_own_cpus: None,
        top: Vec::new(),
    };
    // (others' share, own wait share) -> busy
    let table = [
        (0.0, None, false),
        (0.5, Some(0.1), false),
        (0.74, Some(0.49), false),
        (0.75, None, true),
        (1.0, Some(0.0), true),
        (0.2, Some(0.5), true),
        // The check's threads waited, others used next to nothing: the check's own load.
        (0.0, Some(2.0), false),
        (0.09, Some(0.6), false),
        (0.1, Some(0.6), true),
    ];
    for (others, wait, busy) in table {
        assert_eq!(load(others, wait).busy(), busy, "{others} {wait:?}");
    }
    // Others' share of this process's own CPUs decides where it is known: 14% of the host
    // (busy loops confined to 2 of 16 CPUs) is all of the 2 CPUs of the worker confined with
    // them, and none of the others'.
    let confined = HostLoad {
        others_on_own_cpus: Some(0.9),
        ..load(0.14, Some(0.65))
    };
    assert!(confined.busy());
    let beside = HostLoad {
        others_on_own_cpus: Some(0.0),
        ..load(0.14, Some(0.65))
    };
    assert!(!beside.busy() && beside.only_the_checks_own());
}

#[test]
fn a_check_alone_on_the_host_is_not_busy_whatever_it_uses_itself() {
    let d = fixture("alone", "cpu  0 0 0 0 0 0 0 0", &[(9, "nccl-check", 0, "")]);
    let a = sample(&d, 9).expect("a");
    let mut b = shifted(&a, 2.0);
    // The check's own threads spin on 3 of 4 CPUs.
    b.busy_ticks = 600;
    b.total_ticks = 800;
    b.procs.insert(9, 600);
    b.own_wait_ns = a.own_wait_ns;
    let load = between(&a, &b, 9, 100.0, &d);
    assert_eq!(load.others_share, 0.0);
    assert_eq!(load.own_wait_share, Some(0.0));
    assert!(!load.busy() && load.top.is_empty(), "{load:?}");
}

#[test]
fn slurm_jobs_are_read_from_v1_and_v2_cgroup_paths_only_as_numbers() {
    assert_eq!(
        slurm_job("0::/system.slice/slurmstepd.scope/job_17/step_batch/user/task_0\n"),
        Some("17".into())
    );
    assert_eq!(
        slurm_job("4:cpuset:/slurm/uid_1000/job_9/step_0\n"),
        Some("9".into())
    );
    assert_eq!(slurm_job("0::/user.slice/user-1000.slice/job_x\n"), None);
    assert_eq!(slurm_job(""), None);
}

/// The check's other processes (another rank of the step on this host, an emulated node) are
/// its own load, read live from /proc: never named as a consumer, counted in `check_share`.
/// Seen at 16 emulated nodes: `top: pid (root, nccl-check)` on a host with no other load.
#[test]
fn the_checks_other_processes_are_its_own_load_not_anothers() {
    // The check's other process: this same program (the test binary), spinning.
    let spin = || {
        std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "--exact",
                "facts::host_load::tests::spins_when_asked",
                "--nocapture",
            ])
            .env("NCCL_CHECK_TEST_SPIN_S", "3")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("a busy child")
    };
    let mut rank = spin();
    let start = sample(Path::new("/proc"), std::process::id()).expect("/proc is readable");
    std::thread::sleep(Duration::from_millis(600));
    let ours = load_since(&start, &[rank.id()]).expect("/proc is readable");
    let theirs = load_since(&start, &[]).expect("/proc is readable");
    let _ = rank.kill();
    let _ = rank.wait();
    assert!(
        !ours.top.iter().any(|c| c.pid == rank.id()),
        "the check's own process named as load: {ours:?}"
    );
    assert!(ours.check_share > 0.0, "{ours:?}");
    assert!(
        theirs.top.iter().any(|c| c.pid == rank.id()),
        "a process of no check must be named: {theirs:?}"
    );
}

/// The spinning process of the test above (this test binary, run by it with
/// NCCL_CHECK_TEST_SPIN_S); run by the harness without it, it checks that a process of another
/// program is never taken for this one.
#[test]
fn spins_when_asked() {
    match std::env::var("NCCL_CHECK_TEST_SPIN_S") {
        Ok(s) => {
            let until = Instant::now() + Duration::from_secs(s.parse().unwrap_or(3));
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        Err(_) => {
            let mut sh = std::process::Command::new("sleep")
                .arg("5")
                .spawn()
                .expect("sleep");
            let proc_root = Path::new("/proc");
            assert!(runs_this_program(proc_root, std::process::id()));
            assert!(!runs_this_program(proc_root, sh.id()));
            assert!(!runs_this_program(proc_root, u32::MAX));
            // Ended, not reaped: no exe, its command decides.
            let mut done = std::process::Command::new(std::env::current_exe().expect("exe"))
                .arg("--list")
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("a short child");
            let zombie = done.id();
            let until = Instant::now() + Duration::from_secs(10);
            while std::fs::read_link(proc_root.join(zombie.to_string()).join("exe")).is_ok()
                && Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(
                runs_this_program(proc_root, zombie),
                "an unreaped worker is ours"
            );
            let _ = done.wait();
            let _ = sh.kill();
            let _ = sh.wait();
        }
    }
}

/// Busy with its own processes alone (more of them than CPUs): said so, not as another's.
#[test]
fn a_host_busy_with_the_check_alone_says_so() {
    let load = HostLoad {
        window_s: 5.0,
        cpus: 16,
        others_share: 0.02,
        check_share: 0.97,
        own_wait_share: Some(1.4),
        others_on_own_cpus: None,
        top: Vec::new(),
    };
    assert!(!load.busy() && load.only_the_checks_own());
    let text = load.describe();
    assert!(
        text.contains("2% of 16 CPUs used by other processes, 97% by this check's own")
            && text.contains("the load is the check's own"),
        "{text}"
    );
    let others = HostLoad {
        others_share: 0.9,
        ..load
    };
    assert!(!others.only_the_checks_own());
}

/// Others' time counted on this process's CPUs only where theirs overlap (one H200, 16
/// emulated nodes: 6 busy loops confined to 2 CPUs loaded the worker confined with them, not
/// the workers beside them).
#[test]
fn others_load_on_this_process_cpus_counts_where_their_cpus_overlap() {
    let d = fixture(
        "cpuset",
        "cpu  0 0 0 0 0 0 0 0",
        &[
            (7, "loop", 0, ""),
            (8, "spread", 0, ""),
            (9, "nccl-check", 0, ""),
        ],
    );
    let status = |pid: u32, list: &str| {
        let text = format!("Name:\tx\nUid:\t0\t0\t0\t0\nCpus_allowed_list:\t{list}\n");
        std::fs::write(d.join(pid.to_string()).join("status"), text).expect("status");
    };
    // 4 CPUs: the loop may run on CPU 3 only, "spread" anywhere, the check on CPUs 0-2.
    status(7, "3");
    status(8, "0-3");
    status(9, "0-2");
    let a = sample(&d, 9).expect("a");
    assert_eq!(a.own_cpus, Some(vec![0, 1, 2]));
    let mut b = shifted(&a, 1.0);
    // In 1 s at 100 ticks/s on 4 CPUs: the loop used all of CPU 3, "spread" 0.4 CPU.
    (b.busy_ticks, b.total_ticks) = (140, 400);
    b.procs.insert(7, 100);
    b.procs.insert(8, 40);
    let load = between(&a, &b, 9, 100.0, &d);
    assert!((load.others_share - 0.35).abs() < 1e-9, "{load:?}");
    // On CPUs 0-2 (300 ticks): 3/4 of "spread"'s 40 ticks, none of the loop's.
    let mine = load.others_on_own_cpus.expect("known");
    assert!((mine - 0.1).abs() < 1e-9, "{mine}");
    // Confined with the loop (CPU 3): all of it and a quarter of "spread".
    status(9, "3");
    let a = sample(&d, 9).expect("a");
    let mut b = shifted(&a, 1.0);
    (b.busy_ticks, b.total_ticks) = (140, 400);
    b.procs.insert(7, 100);
    b.procs.insert(8, 40);
    let load = between(&a, &b, 9, 100.0, &d);
    assert_eq!(load.others_on_own_cpus, Some(1.0));
}

#[test]
fn a_cpu_list_reads_ranges_and_refuses_what_is_malformed() {
    assert_eq!(
        parse_cpu_list("0-3,8,10-11"),
        Some(vec![0, 1, 2, 3, 8, 10, 11])
    );
    assert_eq!(parse_cpu_list("5"), Some(vec![5]));
    assert_eq!(parse_cpu_list(""), None);
    assert_eq!(parse_cpu_list("3-1"), None);
    assert_eq!(parse_cpu_list("0-99999"), None);
    assert_eq!(parse_cpu_list("x"), None);
}
