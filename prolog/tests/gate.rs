//! The release-shaped binary against reproductions of the bugs it had, with a
//! fake worker and a fake scontrol in a scratch directory: concurrent jobs never cross, forged or
//! planted files are refused, the budget holds whatever hangs, the worker's group dies with the
//! prolog, and a huge report costs little. Loopback only, bounded, root (as the prolog runs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_nccl-check-prolog");

struct Site {
    dir: PathBuf,
}

fn write_exec(p: &Path, body: &str) {
    nccl_check_host::test_support::write_executable(p, body);
}

impl Site {
    fn new(name: &str) -> Site {
        let dir = nccl_check_host::test_support::scratch_dir(&format!("gate-{name}"));
        std::fs::create_dir_all(dir.join("gpus")).expect("mkdir");
        std::fs::create_dir_all(dir.join("metrics")).expect("mkdir");
        let s = Site { dir };
        s.gpus("0");
        // show: IDLE (or hangs with a file "hang"); update: appended to "calls".
        write_exec(
            &s.dir.join("scontrol"),
            &format!(
                "#!/bin/sh\n[ -e {d}/hang ] && exec sleep 100\nif [ \"$1\" = show ]; then \
                 echo 'NodeName=n1 State=IDLE'; else echo \"$*\" >> {d}/calls; fi\n",
                d = s.dir.display()
            ),
        );
        s.config("budget_seconds = 10");
        s
    }

    /// Four GPUs whose UUIDs carry `round` (a new set of GPUs each round).
    fn gpus(&self, round: &str) {
        let g = self.dir.join("gpus");
        let _ = std::fs::remove_dir_all(&g);
        for i in 0..4 {
            let d = g.join(format!("0000:{:02x}:00.0", 0x18 + i));
            std::fs::create_dir_all(&d).expect("mkdir");
            std::fs::write(
                d.join("information"),
                format!(
                    "Model: X\nGPU UUID: GPU-r{round}-{i}\nBus Location: 0000:{:02x}:00.0\n",
                    0x18 + i
                ),
            )
            .expect("write");
        }
    }

    fn worker(&self, body: &str) {
        write_exec(&self.dir.join("worker"), &format!("#!/bin/bash\n{body}\n"));
    }

    fn config(&self, extra: &str) {
        self.config_with_metrics(&self.dir.join("metrics/n.prom"), extra);
    }

    fn config_with_metrics(&self, metrics: &Path, extra: &str) {
        let d = self.dir.display();
        let m = metrics.display();
        std::fs::write(
            self.dir.join("prolog.toml"),
            format!(
                "worker = \"{d}/worker\"\nworker_config = \"{d}/none.toml\"\n\
                 state_dir = \"{d}/state\"\ngpu_info_dir = \"{d}/gpus\"\n\
                 scontrol = \"{d}/scontrol\"\nsyslog_facility = \"none\"\n\
                 metrics_file = \"{m}\"\n\
                 fault_root = \"{d}/no-faults\"\n{extra}\n\
                 env = {{ OUT = \"{d}/out\" }}\n"
            ),
        )
        .expect("write");
    }

    fn prolog(&self, job: &str, gpus: &str) -> Command {
        let mut c = Command::new(BIN);
        c.env_clear()
            .env("SLURMD_NODENAME", "n1")
            .env("SLURM_JOB_ID", job)
            .env("CUDA_VISIBLE_DEVICES", gpus)
            .arg("--config")
            .arg(self.dir.join("prolog.toml"))
            .stdin(Stdio::null());
        c
    }

    fn run(&self, job: &str, gpus: &str) -> Output {
        self.prolog(job, gpus).output().expect("runs")
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.dir.join("calls")).unwrap_or_default()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The fake of the concurrency test: PASS on GPUs 0,1, FAIL on 2,3, each report carrying a token
/// that only this run knows; "<run dir> <token>" goes to $OUT.
const PAIR_WORKER: &str = r#"
while [ $# -gt 0 ]; do case $1 in --json) json=$2; shift;; --gpus) gpus=$2; shift;; esac; shift; done
tok=$(cat /proc/sys/kernel/random/uuid)
echo "$(basename "$(dirname "$json")") $gpus $tok" >> "$OUT"
sleep 0.0$((RANDOM % 5))
if [ "$gpus" = 0,1 ]; then
  printf '{"schema_version":1,"tool":"fake","tool_version":"0","exit_code":0,"reasons":[],"host":"n1","gpus":[],"results":[],"avg_busbw":{},"verdict":"PASS","summary":"pass %s"}' "$tok" > "$json"; exit 0
fi
printf '{"schema_version":1,"tool":"fake","tool_version":"0","exit_code":1,"host":"n1","gpus":[],"results":[],"avg_busbw":{},"verdict":"FAIL","summary":"fail","reasons":[{"code":"busbw_below_threshold","message":"sendrecv busbw 1.0 < 300.0 GB/s %s","subject":"GPU2<->GPU3"}]}' "$tok" > "$json"
exit 1
"#;

/// Regression: 30 pairs of concurrent prologs on one node (PASS on GPUs 0,1, FAIL on 2,3) gave 4
/// drains with the other job's report and 3 lost or crossed cache entries.
#[test]
fn a_hundred_concurrent_pass_and_fail_pairs_never_cross() {
    let s = Site::new("pairs");
    s.worker(PAIR_WORKER);
    let t = Instant::now();
    for round in 0..100 {
        s.gpus(&round.to_string());
        let _ = std::fs::remove_file(s.dir.join("state/drained"));
        let (pj, fj) = (
            format!("{}", 1000 + 2 * round),
            format!("{}", 1001 + 2 * round),
        );
        let pass = s
            .prolog(&pj, "0,1")
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let fail = s
            .prolog(&fj, "2,3")
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let (pass, fail) = (
            pass.wait_with_output().expect("wait"),
            fail.wait_with_output().expect("wait"),
        );
        let out = std::fs::read_to_string(s.dir.join("out")).expect("worker log");
        let token = |job: &str| {
            out.lines()
                .find(|l| l.starts_with(&format!("job-{job}.")))
                .and_then(|l| l.split(' ').nth(2))
                .map(str::to_string)
                .unwrap_or_else(|| panic!("no worker run for job {job}: {out}"))
        };
        let (pe, fe) = (stderr(&pass), stderr(&fail));
        assert_eq!(pass.status.code(), Some(0), "round {round}: {pe}");
        assert!(
            pe.contains(&format!("PASS job {pj}")) && pe.contains(&token(&pj)),
            "{pe}"
        );
        assert_eq!(fail.status.code(), Some(1), "round {round}: {fe}");
        let ft = token(&fj);
        assert!(fe.contains(&format!("FAIL job {fj}")), "{fe}");
        assert!(
            fe.contains("nccl-check:GPU2-3 slow|") && fe.contains(&ft),
            "{fe}"
        );
        assert!(fe.contains("; drained n1"), "{fe}");
        let calls = s.calls();
        let last = calls.lines().last().unwrap_or("");
        assert!(
            last.contains(&ft) && last.ends_with(&format!("(job {fj})")),
            "round {round}: the drain carries another report: {last}"
        );
        // The PASS of this round's GPUs 0,1 is recorded; nothing of the failed 2,3.
        let cache: serde_json::Value = serde_json::from_slice(
            &std::fs::read(s.dir.join("state/last-pass.json")).expect("cache"),
        )
        .expect("json");
        let sets: Vec<String> = cache["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| e["gpus"].to_string())
            .collect();
        let want = format!("[\"GPU-r{round}-0\",\"GPU-r{round}-1\"]");
        assert!(sets.contains(&want), "round {round}: {sets:?}");
        assert!(
            !sets.iter().any(|g| g.contains(&format!("GPU-r{round}-2"))),
            "{sets:?}"
        );
    }
    assert!(t.elapsed() < Duration::from_secs(240), "{:?}", t.elapsed());
}

/// Regression: a state dir pre-created 0777 by another user with a forged last-pass.json gave a
/// failing node "PASS (cached)" without running the worker.
#[test]
fn a_forged_cache_in_a_world_writable_state_dir_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let s = Site::new("forged");
    s.worker("echo ran >> \"$OUT\"; exit 1");
    let state = s.dir.join("state");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let forged = r#"{"entries":[{"passed_unix":9999999999.0,"gpus":["GPU-r0-0","GPU-r0-1"],"fingerprint":"x"}]}"#;
    std::fs::write(state.join("last-pass.json"), forged).expect("write");
    let o = s.run("5", "0,1");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(
        e.contains(&format!(
            "ERROR job 5 on n1: state_dir {}: mode 0777",
            state.display()
        )),
        "{e}"
    );
    assert!(!e.contains("PASS"), "{e}");
    assert!(!s.dir.join("out").exists(), "the worker ran");
}

/// Regression: with a metrics directory writable by a service account, 600 planted symlinks made
/// root overwrite a root-owned 0600 file and chmod it 0644.
#[test]
fn planted_symlinks_in_a_metrics_dir_another_uid_can_write_change_nothing() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let s = Site::new("metrics");
    s.worker(
        "while [ $# -gt 0 ]; do [ \"$1\" = --json ] && j=$2; shift; done\n\
         echo '{\"schema_version\":1,\"tool\":\"fake\",\"tool_version\":\"0\",\"exit_code\":0,\"reasons\":[],\"host\":\"n1\",\"gpus\":[],\"results\":[],\"avg_busbw\":{},\"verdict\":\"PASS\",\"summary\":\"ok\"}' > \"$j\"",
    );
    let m = s.dir.join("metrics");
    let target = s.dir.join("secret");
    std::fs::write(&target, "root only\n").expect("write");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::os::unix::fs::chown(&m, Some(65534), Some(65534)).expect("chown (root)");
    for pid in 0..600 {
        let _ = std::os::unix::fs::symlink(&target, m.join(format!(".n.prom.{pid}.tmp")));
    }
    std::os::unix::fs::symlink(&target, m.join("n.prom")).expect("plant");
    let o = s.run("6", "0,1");
    let e = stderr(&o);
    assert!(e.contains("PASS"), "{e}");
    // Refused by name (in gate.json: stderr's one line is the verdict), the check made anyway.
    let gate = std::fs::read_to_string(s.dir.join("state/gate.json")).expect("gate.json");
    assert!(
        gate.contains(&format!("metrics_file {}: owned by uid 65534", m.display())),
        "{gate}"
    );
    assert_eq!(
        std::fs::read_to_string(&target).expect("read"),
        "root only\n"
    );
    let meta = std::fs::metadata(&target).expect("stat");
    assert_eq!((meta.mode() & 0o777, meta.uid()), (0o600, 0));
}

const PASS_WORKER: &str = "echo ran >> \"$OUT\"\n\
    while [ $# -gt 0 ]; do [ \"$1\" = --json ] && j=$2; shift; done\n\
    echo '{\"schema_version\":1,\"tool\":\"fake\",\"tool_version\":\"0\",\"exit_code\":0,\"reasons\":[],\"host\":\"n1\",\"gpus\":[],\"results\":[],\"avg_busbw\":{},\"verdict\":\"PASS\",\"summary\":\"ok\"}' > \"$j\"";

/// Debian's node exporter package makes /var/lib/prometheus prometheus:prometheus and
/// its textfile directory node-exporter/ root:root 0755; the prolog refused the documented path
/// because of the parent and every job ran unchecked. The layout as the package installs it.
#[test]
fn the_debian_node_exporter_layout_gets_the_metrics() {
    let s = Site::new("debian-textfile");
    s.worker(PASS_WORKER);
    let prom = s.dir.join("prometheus");
    let textfile = prom.join("node-exporter");
    std::fs::create_dir_all(&textfile).expect("mkdir");
    std::os::unix::fs::chown(&prom, Some(65534), Some(65534)).expect("chown (root)");
    s.config_with_metrics(&textfile.join("nccl_check.prom"), "budget_seconds = 10");
    let o = s.run("7", "0,1");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(!e.contains("metrics_file"), "{e}");
    let text = std::fs::read_to_string(textfile.join("nccl_check.prom")).expect("metrics written");
    assert!(
        text.contains("nccl_check_gate_state{state=\"pass\"} 1"),
        "{text}"
    );
    let gate = std::fs::read_to_string(s.dir.join("state/gate.json")).expect("gate.json");
    assert!(!gate.contains("metrics_error"), "{gate}");
}

/// A metrics_file the prolog refuses (here a textfile directory owned by the service
/// user) turned the gate off: `ERROR ... refused; not checked, not drained` on every job. The
/// check runs; the refusal is the metrics' error, in the log, gate.json and the fallback file.
#[test]
fn a_refused_metrics_file_never_turns_the_check_off() {
    let s = Site::new("metrics-refused");
    s.worker(PASS_WORKER);
    let textfile = s.dir.join("prometheus/node-exporter");
    std::fs::create_dir_all(&textfile).expect("mkdir");
    std::os::unix::fs::chown(&textfile, Some(65534), Some(65534)).expect("chown (root)");
    s.config_with_metrics(&textfile.join("nccl_check.prom"), "budget_seconds = 10");
    let o = s.run("8", "0,1");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(s.dir.join("out").exists(), "the worker did not run: {e}");
    assert!(e.contains("PASS"), "{e}");
    assert!(!e.contains("ERROR"), "{e}");
    let gate = std::fs::read_to_string(s.dir.join("state/gate.json")).expect("gate.json");
    assert!(gate.contains("\"state\": \"pass\""), "{gate}");
    assert!(gate.contains("\"metrics_error\""), "{gate}");
    assert!(gate.contains("owned by uid 65534"), "{gate}");
    let fallback = std::fs::read_to_string(s.dir.join("state/nccl_check.prom")).expect("fallback");
    assert!(
        fallback.contains("nccl_check_metrics_file_error 1"),
        "{fallback}"
    );
    assert!(
        fallback.contains("nccl_check_gate_state{state=\"pass\"} 1"),
        "{fallback}"
    );
    assert!(!textfile.join("nccl_check.prom").exists());
}

/// Regression: the prolog outlasted budget_seconds by ~50 s (10 s per scontrol call, lock waits)
/// and said "draining" before knowing the drain failed.
#[test]
fn a_hung_scontrol_costs_at_most_the_budget_and_the_message_says_the_drain_failed() {
    let s = Site::new("budget");
    s.config("budget_seconds = 5");
    s.worker(
        "while [ $# -gt 0 ]; do [ \"$1\" = --json ] && j=$2; shift; done\n\
         echo '{\"schema_version\":1,\"tool\":\"fake\",\"tool_version\":\"0\",\"exit_code\":1,\"reasons\":[],\"host\":\"n1\",\"gpus\":[],\"results\":[],\"avg_busbw\":{},\"verdict\":\"FAIL\",\"summary\":\"slow\"}' > \"$j\"; exit 1",
    );
    std::fs::write(s.dir.join("hang"), "").expect("write");
    let t = Instant::now();
    let o = s.run("7", "0,1");
    let took = t.elapsed();
    let e = stderr(&o);
    assert!(
        took < Duration::from_secs(7),
        "{took:?} with budget_seconds = 5: {e}"
    );
    assert!(e.contains("drain FAILED: "), "{e}");
    assert!(!e.contains("drained n1"), "{e}");
    assert_eq!(o.status.code(), Some(1), "{e}");
}

/// A report that says PASS with exit 1 drained with the PASS summary as the reason.
#[test]
fn a_report_contradicting_the_exit_code_is_an_error_and_never_drains() {
    let s = Site::new("contradiction");
    s.worker(
        "while [ $# -gt 0 ]; do [ \"$1\" = --json ] && j=$2; shift; done\n\
         echo '{\"schema_version\":1,\"tool\":\"fake\",\"tool_version\":\"0\",\"exit_code\":0,\"reasons\":[],\"host\":\"n1\",\"gpus\":[],\"results\":[],\"avg_busbw\":{},\"verdict\":\"PASS\",\"summary\":\"all good\"}' > \"$j\"; exit 1",
    );
    let o = s.run("8", "0,1");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(
        e.contains("ERROR job 8 on n1") && e.contains("contradiction"),
        "{e}"
    );
    assert_eq!(s.calls(), "", "drained on a contradiction");
    let gate = std::fs::read_to_string(s.dir.join("state/gate.json")).expect("gate.json");
    assert!(gate.contains("\"state\": \"error\""), "{gate}");
    let prom = std::fs::read_to_string(s.dir.join("metrics/n.prom")).expect("metrics");
    assert!(
        prom.contains("nccl_check_gate_state{state=\"error\"} 1"),
        "{prom}"
    );
}

/// Regression: a 400 MB report cost 2 GB of RSS.
#[test]
fn a_huge_report_is_an_error_that_costs_little_memory() {
    let s = Site::new("huge");
    s.worker(
        "while [ $# -gt 0 ]; do [ \"$1\" = --json ] && j=$2; shift; done\n\
         truncate -s 400M \"$j\"; exit 0",
    );
    let o = s.run("9", "0,1");
    let e = stderr(&o);
    assert!(
        e.contains("ERROR job 9") && e.contains("report too large"),
        "{e}"
    );
    // SAFETY: getrusage fills the struct we pass.
    let rss_kib = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut u);
        u.ru_maxrss
    };
    assert!(rss_kib < 100 * 1024, "largest child RSS {rss_kib} KiB");
}

/// Regression: a SIGKILLed prolog left the worker's children orphaned.
#[test]
fn the_workers_whole_group_dies_with_a_killed_prolog() {
    let s = Site::new("pdeath");
    s.worker("sleep 1000 & echo \"$! $$\" > \"$OUT\"; sleep 1000");
    let mut p = s
        .prolog("10", "0,1")
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let out = s.dir.join("out");
    let t = Instant::now();
    while std::fs::read_to_string(&out).map_or(true, |s| !s.ends_with('\n')) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the worker never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    p.kill().expect("SIGKILL the prolog");
    p.wait().expect("reap");
    let pids = std::fs::read_to_string(&out).expect("pids");
    for pid in pids.split_whitespace() {
        let t = Instant::now();
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Gone, or a zombie about to be reaped by init.
            if stat.is_empty() || stat.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "pid {pid} survived: {stat}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `--recheck` (the HealthCheckProgram) writes Slurm's node state beside the gate's
/// metrics, whether jobs run there or not: the fact the "no gate run in a day on an allocated
/// node" alert needs. A busy node's recheck measures nothing and leaves the gate's file alone.
#[test]
fn the_recheck_writes_whether_slurm_runs_jobs_on_the_node() {
    let s = Site::new("node-state");
    s.worker(
        r#"while [ $# -gt 0 ]; do [ "$1" = --json ] && json=$2; shift; done
printf '{"schema_version":1,"tool":"fake","tool_version":"0","exit_code":0,"reasons":[],"host":"n1","gpus":[],"results":[],"avg_busbw":{},"verdict":"PASS","summary":"ok"}' > "$json""#,
    );
    let scontrol = |state: &str| {
        write_exec(
            &s.dir.join("scontrol"),
            &format!("#!/bin/sh\n[ \"$1\" = show ] && echo 'NodeName=n1 State={state}'\nexit 0\n"),
        )
    };
    let recheck = || {
        Command::new(BIN)
            .env_clear()
            .args(["--recheck", "--node", "n1", "--config"])
            .arg(s.dir.join("prolog.toml"))
            .stdin(Stdio::null())
            .output()
            .expect("runs")
    };
    let node = s.dir.join("metrics/n-node.prom");
    let gate = s.dir.join("metrics/n.prom");

    scontrol("MIXED");
    let o = recheck();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = std::fs::read_to_string(&node).expect("the node state file");
    assert!(
        t.contains("nccl_check_node_allocated{slurm_state=\"MIXED\"} 1\n"),
        "{t}"
    );
    assert!(
        t.contains("nccl_check_node_state_timestamp_seconds "),
        "{t}"
    );
    assert!(
        !gate.exists(),
        "a busy node's recheck wrote the gate's metrics"
    );

    scontrol("IDLE");
    let o = recheck();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = std::fs::read_to_string(&node).expect("the node state file");
    assert!(
        t.contains("nccl_check_node_allocated{slurm_state=\"IDLE\"} 0\n"),
        "{t}"
    );
    let g = std::fs::read_to_string(&gate).expect("the idle node was measured");
    assert!(
        g.contains("nccl_check_gate_state{state=\"pass\"} 1\n"),
        "{g}"
    );
}

/// `--recheck` measures every GPU, so it never runs where jobs may run: Slurm's
/// answer failing, hanging (bounded: a quarter of the budget), malformed, or saying the node is
/// allocated, mixed or planned ends the run with no verdict, said, and the worker never starts.
#[test]
fn the_recheck_never_measures_a_node_whose_state_is_unknown_or_busy() {
    let s = Site::new("recheck-unknown");
    let ran = s.dir.join("worker-ran");
    s.worker(&format!(
        r#"touch {}
while [ $# -gt 0 ]; do [ "$1" = --json ] && json=$2; shift; done
printf '{{"schema_version":1,"tool":"fake","tool_version":"0","exit_code":1,"reasons":[],"host":"n1","gpus":[],"results":[],"avg_busbw":{{}},"verdict":"FAIL","summary":"slow"}}' > "$json"; exit 1"#,
        ran.display()
    ));
    let recheck = |show: &str| {
        write_exec(
            &s.dir.join("scontrol"),
            &format!(
                "#!/bin/sh\nif [ \"$1\" = show ]; then {show}; fi\necho \"$*\" >> {}/calls\n",
                s.dir.display()
            ),
        );
        let t = Instant::now();
        let o = Command::new(BIN)
            .env_clear()
            .args(["--recheck", "--node", "n1", "--config"])
            .arg(s.dir.join("prolog.toml"))
            .stdin(Stdio::null())
            .output()
            .expect("runs");
        (o, t.elapsed())
    };
    let cases = [
        (
            "echo 'slurm_load_node error: Unable to contact slurm controller' >&2; exit 1",
            2,
            "cannot read the node's state",
        ),
        ("exec sleep 100", 2, "no answer within"),
        ("echo 'garbage'; exit 0", 2, "cannot read the node's state"),
        (
            "echo 'NodeName=n1 State='; exit 0",
            2,
            "does not say the node is free of jobs",
        ),
        (
            "echo 'NodeName=n1 State=FUTURE'; exit 0",
            2,
            "does not say the node is free of jobs",
        ),
        (
            "echo 'NodeName=n1 State=ALLOCATED'; exit 0",
            0,
            "skipped, jobs run on the node",
        ),
        (
            "echo 'NodeName=n1 State=MIXED+DRAIN'; exit 0",
            0,
            "skipped, jobs run on the node",
        ),
        (
            "echo 'NodeName=n1 State=IDLE+PLANNED'; exit 0",
            0,
            "skipped, jobs run on the node",
        ),
    ];
    for (show, code, said) in cases {
        let (o, took) = recheck(show);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(code), "{show}: {e}");
        assert!(e.contains(said), "{show}: {e}");
        assert!(!e.contains("checking anyway"), "{show}: {e}");
        assert!(!ran.exists(), "{show}: the worker ran: {e}");
        assert!(took < Duration::from_secs(5), "{show}: took {took:?}");
        let calls = std::fs::read_to_string(s.dir.join("calls")).unwrap_or_default();
        assert!(!calls.contains("update"), "{show}: {calls}");
    }
    // The control: an idle node is measured (and its FAIL drains).
    let (o, _) = recheck("echo 'NodeName=n1 State=IDLE'; exit 0");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(ran.exists());
}

/// Under `gpus = "all"`, a slow result on GPUs whose owner Slurm cannot say (the
/// question fails, or its answer is not Slurm's JSON) may be another job's load: NOT JUDGED,
/// never drained, the job runs. The control: Slurm says no other job is here, and it drains.
#[test]
fn a_fail_on_gpus_whose_owner_slurm_cannot_say_is_not_judged_and_never_drains() {
    let s = Site::new("unjudged");
    s.config("budget_seconds = 10\ngpus = \"all\"\ncache_seconds = 0");
    s.worker(
        r#"while [ $# -gt 0 ]; do [ "$1" = --json ] && json=$2; shift; done
printf '{"schema_version":1,"tool":"fake","tool_version":"0","exit_code":1,"reasons":[],"host":"n1","gpus":[],"results":[],"avg_busbw":{},"verdict":"FAIL","summary":"all_reduce slow"}' > "$json"; exit 1"#,
    );
    let d = s.dir.display().to_string();
    let slurm = |gres_show: &str, squeue: &str| {
        write_exec(
            &s.dir.join("scontrol"),
            &format!(
                "#!/bin/sh\ncase \"$*\" in\n'show node -d -o n1') {gres_show};;\n\
                 show*) echo 'NodeName=n1 State=MIXED';;\n*) echo \"$*\" >> {d}/calls;;\nesac\n"
            ),
        );
        write_exec(&s.dir.join("squeue"), &format!("#!/bin/sh\n{squeue}\n"));
        let _ = std::fs::remove_file(s.dir.join("calls"));
        let _ = std::fs::remove_dir_all(s.dir.join("state"));
    };
    let node = "echo 'NodeName=n1 Gres=gpu:4 GresUsed=gpu:1 State=MIXED'";
    let ours = r#"echo '{"jobs":[{"job_id":5,"job_state":"RUNNING","nodes":"n1","gres_detail":["gpu:1(IDX:0)"]}]}'"#;
    let cases = [
        (
            "echo 'slurm_load_node error: timeout' >&2; exit 1",
            ours,
            "Slurm could not say",
        ),
        (
            node,
            "echo 'squeue: error: Invalid --json'; exit 1",
            "Slurm could not say",
        ),
        (node, "echo '{\"jobs\":[{\"job_id\":5,'", "not Slurm's JSON"),
        (
            node,
            r#"echo '{"jobs":[{"job_id":5,"job_state":"RUNNING","nodes":"n1","gres_detail":["gpu:1(IDX:0)"]},{"job_id":6,"job_state":"RUNNING","nodes":"n1","gres_detail":["gpu:1(IDX:1)"]}]}'"#,
            "counts 1 GPUs in use",
        ),
    ];
    for (show, squeue, said) in cases {
        slurm(show, squeue);
        let o = s.run("5", "");
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{show} / {squeue}: {e}");
        assert!(
            e.contains("NOT JUDGED job 5 on n1") && e.contains(said),
            "{squeue}: {e}"
        );
        assert!(e.contains("not drained, the job runs"), "{e}");
        assert!(
            !s.calls().contains("update"),
            "{squeue}: drained: {}",
            s.calls()
        );
    }
    // The control: Slurm says the node's one GPU in use is this job's: the FAIL drains.
    slurm(node, ours);
    let o = s.run("5", "");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(s.calls().contains("state=drain"), "{}", s.calls());
}

/// A worker that found the node only busy ends busy (exit 8, an ERROR: the hardware was not
/// judged). The gate never drains on it as hardware: the job runs, nothing is drained, no pass
/// is cached; the verdict line names the busy host.
#[test]
fn a_busy_only_check_is_no_hardware_fail_and_never_drains() {
    let s = Site::new("busy8");
    s.worker(
        "while [ $# -gt 0 ]; do [ \"$1\" = --json ] && j=$2; shift; done\n\
         echo '{\"schema_version\":1,\"tool\":\"fake\",\"tool_version\":\"0\",\"exit_code\":8,\"host\":\"n1\",\"gpus\":[],\"results\":[],\"avg_busbw\":{},\"verdict\":\"ERROR\",\"summary\":\"node busy, the hardware was not judged: n1: host busy\",\"reasons\":[{\"code\":\"host_busy\",\"message\":\"n1: host busy: 97% of 64 CPUs used by other processes\",\"subject\":\"n1\"}]}' > \"$j\"; exit 8",
    );
    let o = s.run("8", "0,1");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "the job runs: {e}");
    assert!(!s.calls().contains("update"), "drained: {}", s.calls());
    assert!(e.contains("host busy"), "{e}");
    assert!(!e.contains("FAIL job"), "told the hardware failed: {e}");
    let gate = std::fs::read_to_string(s.dir.join("state/gate.json")).expect("gate.json");
    assert!(gate.contains("\"state\": \"error\""), "{gate}");
}
