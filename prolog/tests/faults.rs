//! The fault pass wired into the gate, through the release-shaped binary with a fixture tree
//! (`fault_root`), a fake worker and a fake scontrol: a hardware fault drains without running
//! the worker and names its source and PCI address; `gate.json` lists every source with its
//! cost; the epilog context (SLURM_SCRIPT_CONTEXT=epilog_slurmd, as slurmd sets it) drains on
//! FAIL with exit 0 and its PASS makes the next prolog a cached pass.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_nccl-check-prolog");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/faults");

const PASS: &str = r#"while [ $# -gt 0 ]; do case $1 in --json) json=$2; shift;; esac; shift; done
echo run >> "$OUT"
printf '{"schema_version":1,"tool":"fake","tool_version":"0","exit_code":0,"reasons":[],"host":"n1","gpus":[],"results":[],"avg_busbw":{},"verdict":"PASS","summary":"fine"}' > "$json"; exit 0"#;
const FAIL: &str = r#"while [ $# -gt 0 ]; do case $1 in --json) json=$2; shift;; esac; shift; done
echo run >> "$OUT"
printf '{"schema_version":1,"tool":"fake","tool_version":"0","exit_code":1,"host":"n1","gpus":[],"results":[],"avg_busbw":{},"verdict":"FAIL","summary":"slow","reasons":[{"code":"busbw_below_threshold","message":"all_reduce busbw 1.0 < 300.0 GB/s","subject":"GPU0<->GPU1"}]}' > "$json"; exit 1"#;

struct Site {
    dir: PathBuf,
    /// What the fake NVML answers (`NCCL_CHECK_FAKE_NVML`: "lost", "answers"), or "none": no
    /// NVML library at all.
    nvml: std::cell::Cell<&'static str>,
}

/// The fake libnvidia-ml.so.1 (`tests/data/fake-nvml.c`) built into `dir`.
fn fake_nvml(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let ok = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join("libnvidia-ml.so.1"))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/fake-nvml.c"
        ))
        .status()
        .expect("cc")
        .success();
    assert!(ok, "cc fake-nvml.c");
}

impl Site {
    fn new(name: &str, tree: &str) -> Site {
        let dir = nccl_check_host::test_support::scratch_dir(&format!("gate-faults-{name}"));
        let ok = Command::new("cp")
            .arg("-R") // owned by whoever runs the test, as sysfs is by root
            .arg(format!("{FIXTURES}/{tree}"))
            .arg(dir.join("root"))
            .status()
            .expect("cp")
            .success();
        assert!(ok);
        for i in 0..2 {
            let d = dir.join(format!("gpus/0000:{:02x}:00.0", 0x18 + i));
            std::fs::create_dir_all(&d).expect("mkdir");
            std::fs::write(
                d.join("information"),
                format!(
                    "Model: X\nGPU UUID: GPU-f-{i}\nBus Location: 0000:{:02x}:00.0\n",
                    0x18 + i
                ),
            )
            .expect("write");
        }
        nccl_check_host::test_support::write_executable(
            &dir.join("scontrol"),
            &format!(
                "#!/bin/sh\nif [ \"$1\" = show ]; then echo 'NodeName=n1 State=IDLE'; \
                 else echo \"$*\" >> {}/calls; fi\n",
                dir.display()
            ),
        );
        let d = dir.display();
        std::fs::write(
            dir.join("prolog.toml"),
            format!(
                "worker = \"{d}/worker\"\nworker_config = \"{d}/none.toml\"\n\
                 state_dir = \"{d}/state\"\ngpu_info_dir = \"{d}/gpus\"\n\
                 scontrol = \"{d}/scontrol\"\nsyslog_facility = \"none\"\n\
                 budget_seconds = 10\nfault_root = \"{d}/root\"\n\
                 env = {{ OUT = \"{d}/out\" }}\n"
            ),
        )
        .expect("write");
        fake_nvml(&dir.join("nvml"));
        let s = Site {
            dir,
            nvml: std::cell::Cell::new("lost"),
        };
        s.worker(PASS);
        s
    }

    fn worker(&self, body: &str) {
        nccl_check_host::test_support::write_executable(
            &self.dir.join("worker"),
            &format!("#!/bin/bash\n{body}\n"),
        );
    }

    /// The binary, with the fake NVML unless `nvml` is "none".
    fn bin(&self) -> Command {
        let mut c = Command::new(BIN);
        c.env_clear();
        if self.nvml.get() != "none" {
            c.env("LD_LIBRARY_PATH", self.dir.join("nvml"))
                .env("NCCL_CHECK_FAKE_NVML", self.nvml.get())
                .env("NCCL_CHECK_FAKE_NVML_GPUS", "0000:18:00.0 0000:19:00.0");
        }
        c
    }

    fn run(&self, job: &str, context: &str) -> Output {
        self.bin()
            .env("SLURMD_NODENAME", "n1")
            .env("SLURM_JOB_ID", job)
            .env("CUDA_VISIBLE_DEVICES", "0,1")
            .env("SLURM_SCRIPT_CONTEXT", context)
            .arg("--config")
            .arg(self.dir.join("prolog.toml"))
            .stdin(Stdio::null())
            .output()
            .expect("runs")
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.dir.join(rel)).unwrap_or_default()
    }

    fn gate(&self) -> serde_json::Value {
        serde_json::from_str(&self.read("state/gate.json")).expect("gate.json")
    }

    fn worker_runs(&self) -> usize {
        self.read("out").lines().count()
    }

    fn log(&self, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("root/dev/kmsg"))
            .expect("kmsg");
        writeln!(f, "{line}").expect("write");
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

#[test]
fn a_hardware_fault_drains_without_the_worker_and_names_its_source_and_address() {
    let s = Site::new("xid", "hdr");
    let o = s.run("7", "prolog_slurmd");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(s.worker_runs(), 1);
    let g = s.gate();
    assert_eq!(g["context"], "prolog");
    let names: Vec<&str> = g["faults"]["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|x| x["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, ["kmsg", "aer", "ib"]);
    assert!(g["faults"]["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .all(|x| x["readable"] == true && x["ms"].is_number()));
    assert!(
        g["faults"]["total_ms"].as_f64().is_some_and(|t| t < 50.0),
        "{g}"
    );
    // The fixture's Xid 13 is an application's fault: a WARN in gate.json, no drain.
    assert_eq!(g["faults"]["findings"][0]["class"], "warn");

    s.log("3,4,9000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.");
    let o = s.run("8", "prolog_slurmd");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(
        s.worker_runs(),
        1,
        "the worker must not run on a faulty node"
    );
    let calls = s.read("calls");
    assert!(
        calls.contains("reason=nccl-check:Xid 79|Xid 79 GPU has fallen off the bus on 0000:18:00 (NVML: the GPU is lost (it does not answer)): reboot needed (job 8)"),
        "{calls}"
    );
    assert!(e.contains("FAIL job 8 on n1: hardware fault:"), "{e}");
    assert_eq!(s.gate()["state"], "fail");
    assert_eq!(
        s.gate()["drain_reason"]
            .as_str()
            .map(|r| r.contains("0000:18:00")),
        Some(true)
    );
    // Judged once: the next job is measured again.
    let o = s.run("9", "prolog_slurmd");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(s.worker_runs(), 2);
}

/// Every way a user's process name, file name or message reaches the kernel log
/// (`kmsg/forged.kmsg`, as the kernel writes each), appended one at a time, read by the prolog and
/// by the epilog: never a drain, the worker runs; the driver's own record then drains.
#[test]
fn kernel_records_a_user_can_cause_drain_neither_in_the_prolog_nor_in_the_epilog() {
    let s = Site::new("forged", "hdr");
    // Every prolog measures, so each writes its fault pass to gate.json.
    let conf = s.dir.join("prolog.toml");
    let text = std::fs::read_to_string(&conf).expect("read");
    std::fs::write(&conf, format!("{text}cache_seconds = 0\n")).expect("write");
    let forged = std::fs::read_to_string(format!("{FIXTURES}/kmsg/forged.kmsg")).expect("read");
    let mut job = 100;
    for line in forged.lines() {
        s.log(line);
        for context in ["prolog_slurmd", "epilog_slurmd"] {
            job += 1;
            let o = s.run(&job.to_string(), context);
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(0), "{context} {line}: {e}");
            assert!(!e.contains("FAIL"), "{context} {line}: {e}");
            let calls = s.read("calls");
            assert!(
                !calls.contains("reason="),
                "{context} drained on {line}: {calls}"
            );
            if context == "prolog_slurmd" {
                // The prolog read the new record and said what it ignored.
                let note = s.gate()["faults"]["sources"][0]["note"].to_string();
                assert!(note.contains(": ignored"), "{line}: {note}");
            }
        }
    }
    s.log("4,90,9000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.");
    let o = s.run("200", "epilog_slurmd");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        s.read("calls").contains("reason=nccl-check:Xid 79|"),
        "{}",
        s.read("calls")
    );
}

#[test]
fn the_epilog_drains_on_fail_exits_zero_and_its_pass_makes_the_next_prolog_cached() {
    let s = Site::new("epilog", "roce");
    s.worker(FAIL);
    let o = s.run("5", "epilog_slurmd");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "the job has ended: exit 0: {e}");
    assert!(e.contains("FAIL epilog job 5 on n1"), "{e}");
    let calls = s.read("calls");
    assert!(
        calls.contains("reason=nccl-check:GPU0-1 slow|") && calls.contains("(job 5, epilog)"),
        "{calls}"
    );
    assert_eq!(s.gate()["context"], "epilog");

    s.worker(PASS);
    std::fs::remove_file(s.dir.join("state/drained")).ok();
    let o = s.run("6", "epilog_slurmd");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(s.worker_runs(), 2);
    let o = s.run("7", "prolog_slurmd");
    let e = stderr(&o);
    assert!(e.is_empty() || !e.contains("FAIL"), "{e}");
    assert_eq!(
        s.worker_runs(),
        2,
        "the epilog's pass is the next prolog's cached pass"
    );
    // --epilog says the same where the environment does not.
    s.worker(FAIL);
    let o = s
        .bin()
        .env("SLURMD_NODENAME", "n1")
        .env("SLURM_JOB_ID", "10")
        .env("CUDA_VISIBLE_DEVICES", "0,1")
        .args(["--epilog", "--config"])
        .arg(s.dir.join("prolog.toml"))
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("FAIL epilog job 10"), "{}", stderr(&o));
}

#[test]
fn faults_prints_the_pass_as_json_keeps_no_position_and_exits_one_on_a_fail() {
    let s = Site::new("cli", "ndr");
    s.log("3,9,9000000,-;NVRM: Xid (PCI:0000:18:00): 95, pid=1, Uncontained: FBHUB");
    for _ in 0..2 {
        let o = s
            .bin()
            .args(["--faults", "--node", "n1", "--config"])
            .arg(s.dir.join("prolog.toml"))
            .output()
            .expect("runs");
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(v["sources"].as_array().map(Vec::len), Some(3), "{v}");
        assert_eq!(
            v["findings"][0]["what"], "Xid 95 uncontained ECC error",
            "{v}"
        );
        assert_eq!(v["findings"][0]["needs"], "gpu-reset", "{v}");
    }
    assert!(!s.dir.join("state/faults.json").exists());
    assert_eq!(s.worker_runs(), 0);
}

/// The kernel writes facility-0 records that start with text a user chose, in the driver's
/// format: the OOM killer's summary split by another CPU's printk (the cpuset cgroup's name
/// starts a record) and an nftables `log prefix` (`nf_log_all_netns = 1`). Without the driver's
/// state to confirm them (NVML missing, or the GPU answers), neither drains: a WARN names the
/// record and what to check, and the worker measures. The driver saying the GPU is lost drains.
#[test]
fn a_record_in_the_driver_s_format_drains_only_when_the_driver_s_state_confirms_it() {
    let s = Site::new("confirm", "hdr");
    let conf = s.dir.join("prolog.toml");
    let text = std::fs::read_to_string(&conf).expect("read");
    std::fs::write(&conf, format!("{text}cache_seconds = 0\n")).expect("write");
    let records = [
        "4,SEQ,9000000,c;NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus,mems_allowed=0,global_oom,task_memcg=/user.slice/a5evil,task=x,pid=4242,uid=1001",
        "4,SEQ,9000001,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus. IN= OUT=lo SRC=127.0.0.1 DST=127.0.0.1 LEN=84 TOS=0x00 PREC=0x00 TTL=64 ID=1 DF PROTO=ICMP TYPE=8 CODE=0 ID=7 SEQ=1",
    ];
    let mut job = 300;
    for (nvml, check) in [
        ("none", "NVML not available"),
        ("answers", "the GPU answers"),
    ] {
        s.nvml.set(nvml);
        for r in records {
            job += 1;
            let r = r.replace("SEQ", &format!("{}", 113_000 + job));
            s.log(&r);
            let o = s.run(&job.to_string(), "prolog_slurmd");
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(0), "{nvml} {r}: {e}");
            assert!(
                !s.read("calls").contains("reason="),
                "{nvml}: drained on {r}"
            );
            // gate.json (and syslog's faults line) name the record and what to check.
            let f = &s.gate()["faults"]["findings"][0];
            let evidence = f["evidence"].as_str().unwrap_or_default();
            assert!(
                f["class"] == "warn"
                    && f["what"] == "Xid 79 GPU has fallen off the bus"
                    && f["subject"] == "0000:18:00"
                    && evidence.starts_with("not confirmed by the driver's state")
                    && evidence.contains(check)
                    && evidence.contains("check nvidia-smi (does the GPU answer?)"),
                "{nvml} {r}: {f}"
            );
        }
    }
    assert_eq!(s.worker_runs(), 4, "the measurement decided each time");
    s.nvml.set("lost");
    s.log(&records[1].replace("SEQ", "114000"));
    let o = s.run("400", "prolog_slurmd");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        s.read("calls")
            .contains("reason=nccl-check:Xid 79|Xid 79 GPU has fallen off the bus on 0000:18:00 (NVML: the GPU is lost"),
        "{}",
        s.read("calls")
    );
}

/// Records lost since the last check (a first record past the kept position: the ring turned
/// over, e.g. flooded by a user) and a kernel log that cannot be read are said in the log line,
/// gate.json and the metrics, and that run reads the driver's state of every GPU instead.
#[test]
fn lost_and_unreadable_kernel_records_are_said_and_every_gpu_s_driver_state_decides() {
    let s = Site::new("lost", "hdr");
    s.nvml.set("answers");
    let conf = s.dir.join("prolog.toml");
    let text = std::fs::read_to_string(&conf).expect("read");
    let d = s.dir.display();
    std::fs::write(
        &conf,
        format!("{text}cache_seconds = 0\nmetrics_file = \"{d}/metrics/n1.prom\"\n"),
    )
    .expect("write");
    std::fs::create_dir_all(s.dir.join("metrics")).expect("mkdir");
    assert_eq!(s.run("1", "prolog_slurmd").status.code(), Some(0));
    // The ring turned over: the records after the kept position are gone.
    std::fs::write(
        s.dir.join("root/dev/kmsg"),
        "6,5000,1,-;overlay: failed to resolve 'x': -2\n6,5001,2,-;overlay: failed to resolve 'x': -2\n",
    )
    .expect("write");
    let o = s.run("2", "prolog_slurmd");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    let g = s.gate();
    let f = &g["faults"]["findings"][0];
    assert!(
        f["class"] == "warn"
            && f["source"] == "kmsg"
            && f["what"]
                .as_str()
                .is_some_and(|w| w.contains("kernel log records lost since the last check"))
            && f["evidence"] == "the driver's state of 2 GPUs read instead: 0 with a problem",
        "{g}"
    );
    let lost = g["faults"]["kmsg_lost"]["records"].as_u64();
    assert!(lost.is_some_and(|n| n > 4000), "{g}");
    let m = s.read("metrics/n1-faults.prom");
    assert!(m.contains("nccl_check_fault_kmsg_lost_records "), "{m}");
    assert!(!m.contains("nccl_check_fault_kmsg_lost_records 0\n"), "{m}");
    // Unreadable: said, and with the driver saying a GPU is lost, a FAIL that drains.
    std::fs::remove_file(s.dir.join("root/dev/kmsg")).expect("rm");
    s.nvml.set("lost");
    let o = s.run("3", "prolog_slurmd");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    let f = s.gate()["faults"]["findings"].to_string();
    assert!(f.contains("kernel log unreadable"), "{f}");
    assert!(
        s.read("calls").contains("reason=nccl-check:GPU state|GPU state after lost kernel records: NVML: the GPU is lost"),
        "{}",
        s.read("calls")
    );
    assert!(s.gate()["faults"]["kmsg_lost"]["unreadable"].is_string());
}
