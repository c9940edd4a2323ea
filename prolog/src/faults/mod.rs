//! The node's hardware faults since the last check, beside the bandwidth verdict: Xid/SXid events
//! from the kernel log ([`kmsg`], [`xid`]), PCIe AER counters of the GPUs and NICs ([`aer`]) and
//! InfiniBand/RoCE port counters ([`ib`]), judged as deltas against what the last check saw
//! (`<state_dir>/faults.json`, so each event and each error is judged once). One bounded pass of
//! file reads, timed per source; the result goes into `gate.json` and, on a FAIL, the drain
//! reason. A kernel record drains only when the driver's state confirms it ([`driver`]), and
//! kernel records lost since the last check (or a log that cannot be read) are said, and every
//! GPU's driver state is read instead. Reads only: nothing here writes outside the state
//! directory.

pub mod aer;
mod counters;
pub mod driver;
pub mod ib;
mod kernel_log;
pub mod kmsg;
pub mod limits;
pub mod metrics;
pub mod nvml_driver;
pub mod read;
mod summary;
pub mod xid;

use std::path::Path;
use std::time::Instant;
use summary::{ms, Memory};
pub use summary::{Lost, Settings, Summary};
pub use xid::Class;

/// The position and counters of the last check.
pub const STATE_FILE: &str = "faults.json";
/// The largest `faults.json` read back.
const MAX_STATE: u64 = 4 * 1024 * 1024;

/// What the last check saw, its bytes (to skip a write that changes nothing), and a problem.
fn load(state_dir: &Path) -> (Memory, Vec<u8>, Option<String>) {
    use nccl_check_host::read::{regular, FileError};
    let p = state_dir.join(STATE_FILE);
    let problem = match regular(&p, MAX_STATE, false) {
        Ok((bytes, _)) => match serde_json::from_slice(&bytes) {
            Ok(m) => return (m, bytes, None),
            Err(e) => format!("{}: {e}; starting anew", p.display()),
        },
        Err(FileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Default::default()
        }
        Err(e) => format!("{}: {e}", p.display()),
    };
    (Memory::default(), Vec::new(), Some(problem))
}

/// The pass: read every source, judge what is new since `faults.json`, and (with `save`) keep the
/// new position and counters there.
pub fn check(s: &Settings, state_dir: &Path, save: bool) -> Summary {
    let start = Instant::now();
    let mut out = Summary::default();
    let (before, before_bytes, problem) = load(state_dir);
    let first_check = problem.is_some() || before.boot_id.is_empty() && before.kmsg_seq.is_none();
    let boot_id = read::small(&s.root.join("proc/sys/kernel/random/boot_id"))
        .map(|b| read::cut(b.trim()))
        .unwrap_or_default();
    // A reboot: the log's sequence numbers and every counter started again from zero.
    let rebooted = !first_check && !boot_id.is_empty() && boot_id != before.boot_id;
    let mut now = Memory {
        boot_id,
        ..Memory::default()
    };
    // Where to read from, and the first record this read should find: the one after the kept
    // position, or a new boot's first (sequence number 0); on a first check, any.
    let (after, expect) = match before.kmsg_seq {
        _ if rebooted => (None, Some(0)),
        kept => (kept, kept.map(|k| k.saturating_add(1))),
    };
    let src = kernel_log::scan_kmsg(s, (after, expect), problem, &mut now, &mut out);
    out.sources.push(src);
    let src = counters::scan_aer(s, &before, rebooted, &mut now, &mut out);
    out.sources.push(src);
    let src = counters::scan_ib(s, &before, rebooted, &mut now, &mut out);
    out.sources.push(src);
    let t = Instant::now();
    if save {
        keep(state_dir, &now, &before_bytes, &mut out);
    }
    out.save_ms = ms(t);
    out.total_ms = ms(start);
    out
}

/// Keeps the new position and counters in `faults.json` when they changed; a write that fails
/// is said on the first source.
fn keep(state_dir: &Path, now: &Memory, before_bytes: &[u8], out: &mut Summary) {
    let text = serde_json::to_vec(now).unwrap_or_default();
    if text == before_bytes {
        return;
    }
    if let Err(e) = crate::secure::write_atomic(&state_dir.join(STATE_FILE), &text, 0o600) {
        if let Some(s) = out.sources.first_mut() {
            s.note = Some(format!("{}: {e}", state_dir.join(STATE_FILE).display()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use limits::{AerLimits, IbLimits};
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;
    use xid::Needs;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/faults");

    /// A copy of fixture `name` (a tree with dev/, proc/, sys/) and a state directory.
    fn tree(name: &str, test: &str) -> (PathBuf, Settings) {
        let d = nccl_check_host::test_support::scratch_dir(&format!("faults-{test}-{name}"));
        let ok = std::process::Command::new("cp")
            .arg("-R") // owned by whoever runs the test, as sysfs is by root
            .arg(format!("{FIXTURES}/{name}"))
            .arg(d.join("root"))
            .status()
            .expect("cp")
            .success();
        assert!(ok);
        std::fs::create_dir_all(d.join("state")).expect("mkdir");
        let s = Settings {
            root: d.join("root"),
            gpu_info_dir: d.join("gpus"),
            aer: AerLimits::default(),
            ib: IbLimits::default(),
            driver: Arc::new(driver::tests::Fake::none()),
        };
        (d, s)
    }

    fn append_kmsg(s: &Settings, line: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(s.root.join("dev/kmsg"))
            .expect("open");
        writeln!(f, "{line}").expect("write");
    }

    /// A PCI function of NVIDIA's (an NVSwitch's class) in the tree's sysfs.
    fn nvidia(s: &Settings, addr: &str) {
        let dir = s.root.join("sys/bus/pci/devices").join(addr);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("vendor"), "0x10de\n").expect("write");
        std::fs::write(dir.join("class"), "0x068000\n").expect("write");
    }

    use driver::tests::Fake;
    use driver::{Answer, GpuState};

    /// The settings with `fake` as the driver.
    fn asking(s: &Settings, fake: Fake) -> (Settings, Arc<Fake>) {
        let fake = Arc::new(fake);
        let s = Settings {
            driver: fake.clone(),
            ..s.clone()
        };
        (s, fake)
    }

    /// A GPU that answers and whose driver asks for a reset.
    fn reset_asked() -> Answer {
        Answer::State(GpuState {
            recovery_action: Some(1),
            ..GpuState::default()
        })
    }

    /// A GPU that answers and shows nothing wrong.
    fn healthy() -> Answer {
        Answer::State(GpuState {
            recovery_action: Some(0),
            dbe_volatile: Some(0),
            remap_pending: Some(false),
            remap_failed: Some(false),
            links_inactive: Some(0),
            ..GpuState::default()
        })
    }

    fn set(s: &Settings, rel: &str, text: &str) {
        std::fs::write(s.root.join(rel), text).expect("write");
    }

    fn fails(sum: &Summary) -> Vec<String> {
        sum.findings
            .iter()
            .filter(|f| f.class == Class::Fail)
            .map(|f| format!("{} on {}", f.what, f.subject))
            .collect()
    }

    #[test]
    fn hdr_ndr_and_roce_trees_are_read_and_a_first_check_judges_only_the_log() {
        for (name, layer, xids) in [
            ("hdr", "InfiniBand", vec!["Xid 13"]),
            ("ndr", "InfiniBand", vec!["Xid 63", "SXid 12028"]),
            ("roce", "Ethernet", vec![]),
        ] {
            let (d, s) = tree(name, "trees");
            let sum = check(&s, &d.join("state"), true);
            for src in &sum.sources {
                assert!(src.readable, "{name}: {src:?}");
            }
            assert_eq!(
                sum.sources[1].items, 2,
                "{name}: GPU and NIC: {:?}",
                sum.sources
            );
            assert_eq!(sum.sources[2].items, 1, "{name}: one port");
            assert!(!sum.failed(), "{name}: {:?}", sum.findings);
            let found: Vec<String> = sum
                .findings
                .iter()
                .map(|f| f.what.split(' ').take(2).collect::<Vec<_>>().join(" "))
                .collect();
            assert_eq!(found, xids, "{name}");
            let mem: serde_json::Value = serde_json::from_slice(
                &std::fs::read(d.join("state").join(STATE_FILE)).expect("saved"),
            )
            .expect("json");
            assert_eq!(mem["ib"]["mlx5_0/1"]["link_layer"], layer, "{name}");
            assert!(mem["aer"]["0000:3b:00.0"].is_object(), "{name}: the NIC");
            assert!(
                mem["aer"]["0000:05:00.0"].is_null(),
                "{name}: an NVSwitch is no GPU"
            );
            // Measured on fixtures: the whole pass stays far below the 50 ms target.
            assert!(sum.total_ms < 50.0, "{name}: {} ms", sum.total_ms);
            std::fs::remove_dir_all(&d).ok();
        }
    }

    #[test]
    fn each_event_is_judged_once_across_restarts_and_again_after_a_reboot() {
        let (d, s) = tree("hdr", "once");
        let (s, _) = asking(&s, Fake::every(Answer::Lost));
        let st = d.join("state");
        assert!(!check(&s, &st, true).failed());
        append_kmsg(
            &s,
            "3,4,9000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.",
        );
        let sum = check(&s, &st, true);
        assert_eq!(
            fails(&sum),
            ["Xid 79 GPU has fallen off the bus on 0000:18:00"]
        );
        assert_eq!(sum.findings[0].needs, Needs::Reboot);
        let r = sum.drain_reason(Some("42")).expect("reason");
        assert!(
            r.starts_with(
                "nccl-check:Xid 79|Xid 79 GPU has fallen off the bus on 0000:18:00 (NVML: the GPU \
                 is lost (it does not answer)): reboot needed"
            ),
            "{r}"
        );
        assert!(r.ends_with("(job 42)"), "{r}");
        // A new process (the next prolog) reads the position back: nothing new, and a position
        // that did not move is not written again (no fsync on a quiet node).
        use std::os::unix::fs::MetadataExt;
        let inode = || std::fs::metadata(st.join(STATE_FILE)).expect("saved").ino();
        let before = inode();
        assert!(check(&s, &st, true).findings.is_empty());
        assert_eq!(inode(), before);
        // A dry run does not move the position.
        append_kmsg(
            &s,
            "3,5,9100000,-;NVRM: Xid (PCI:0000:18:00): 48, pid=0, DBE",
        );
        assert!(check(&s, &st, false).failed());
        assert!(check(&s, &st, true).failed());
        assert!(!check(&s, &st, true).failed());
        // A reboot: a new boot id, sequence numbers from the start: the new boot's events count.
        set(&s, "proc/sys/kernel/random/boot_id", "another-boot\n");
        set(
            &s,
            "dev/kmsg",
            "3,0,10,-;NVRM: Xid (PCI:0000:18:00): 95, Uncontained: FBHUB\n",
        );
        assert_eq!(fails(&check(&s, &st, true)).len(), 1);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_wrapped_log_judges_only_records_after_the_position() {
        // The ring buffer moved on (the kernel's "rotation"): older records are gone, the
        // sequence numbers go on.
        let (d, s) = tree("hdr", "wrap");
        let inactive = GpuState {
            links_inactive: Some(2),
            ..GpuState::default()
        };
        let (s, _) = asking(&s, Fake::every(Answer::State(inactive)));
        let st = d.join("state");
        check(&s, &st, true);
        set(
            &s,
            "dev/kmsg",
            "3,2,1,-;NVRM: Xid (PCI:0000:18:00): 79, an old one, before the position\n\
             3,900,2,-;NVRM: Xid (PCI:0000:18:00): 74, NVLink: fatal error\n",
        );
        assert_eq!(
            fails(&check(&s, &st, true)),
            ["Xid 74 NVLink error on 0000:18:00"]
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn canned_logs_of_each_class() {
        for (file, n_fail, n_warn, resets) in [
            ("fail.kmsg", 6, 0, 6),
            ("warn.kmsg", 0, 5, 0),
            // Xid 63 "reset gpu to activate" needs a reset; Xid 94 (RESTART_APP) does not.
            ("reset.kmsg", 0, 2, 1),
        ] {
            let (d, s) = tree("roce", "canned");
            let (s, _) = asking(&s, Fake::every(reset_asked()));
            for a in ["19", "1a", "1b", "1c", "86", "c6"] {
                nvidia(&s, &format!("0000:{a}:00.0"));
            }
            std::fs::copy(format!("{FIXTURES}/kmsg/{file}"), s.root.join("dev/kmsg"))
                .expect("copy");
            let sum = check(&s, &d.join("state"), true);
            let count = |c| sum.findings.iter().filter(|f| f.class == c).count();
            assert_eq!(
                (count(Class::Fail), count(Class::Warn)),
                (n_fail, n_warn),
                "{file}: {:?}",
                sum.findings
            );
            let r = sum
                .findings
                .iter()
                .filter(|f| f.needs != Needs::Nothing)
                .count();
            assert_eq!(r, resets, "{file}");
            std::fs::remove_dir_all(&d).ok();
        }
    }

    /// Each way a process name, a file name or a user's message reaches the kernel log, as the
    /// kernel writes it (`kmsg/forged.kmsg`: segfault, trap, OOM killer, hung task, stack depth,
    /// audit, a pr_cont fragment, `/dev/kmsg` writes by a user and by root daemons, the driver's
    /// format on an address that is not this node's): none is a finding, each is counted as
    /// ignored; the driver's own record on this node's GPU still FAILs.
    #[test]
    fn records_a_user_can_cause_are_never_evidence_and_the_driver_s_own_still_is() {
        let (d, s) = tree("hdr", "forged");
        // The driver's recovery action confirms both: the GPU's Xid and, for the NVSwitch,
        // a GPU of the node that needs a reset.
        let (s, _) = asking(&s, Fake::with("0000:18:00", reset_asked()));
        let st = d.join("state");
        check(&s, &st, true);
        let forged = std::fs::read_to_string(format!("{FIXTURES}/kmsg/forged.kmsg")).expect("read");
        for line in forged.lines() {
            append_kmsg(&s, line);
            let sum = check(&s, &st, true);
            assert!(sum.findings.is_empty(), "{line}: {:?}", sum.findings);
            let note = sum.sources[0].note.clone().unwrap_or_default();
            assert!(note.contains(": ignored"), "{line}: {note}");
        }
        append_kmsg(
            &s,
            "4,90,9000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.",
        );
        append_kmsg(
            &s,
            "4,91,9000001,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 47 LTSSM Fault Up",
        );
        assert_eq!(
            fails(&check(&s, &st, true)),
            [
                "Xid 79 GPU has fallen off the bus on 0000:18:00",
                "SXid 20034 fatal NVSwitch error on 0000:05:00.0"
            ]
        );
        std::fs::remove_dir_all(&d).ok();
    }

    /// The ring turned over between the driver's record and this check (a user flooded it with
    /// records the kernel writes for them): the first readable record is past the kept
    /// position. Said (how many), and every GPU is judged by its driver state instead.
    #[test]
    fn a_ring_turned_over_since_the_last_check_is_said_and_every_gpu_judged_by_its_driver() {
        let (d, s) = tree("hdr", "turned");
        let st = d.join("state");
        let (s, fake) = asking(&s, Fake::every(healthy()));
        assert!(!check(&s, &st, true).failed()); // the fixture's Xid 13, a WARN
        assert!(
            fake.asked().is_empty(),
            "a quiet node does not ask the driver"
        );
        let kept = 3; // the fixture's last record
        let flood: String = (kept + 1001..kept + 1004)
            .map(|seq| format!("6,{seq},1,-;overlay: failed to resolve 'x': -2\n"))
            .collect();
        set(&s, "dev/kmsg", &flood);
        let sum = check(&s, &st, true);
        assert_eq!(sum.kmsg_lost, Some(Lost::Records(1000)), "{sum:?}");
        assert!(!sum.failed(), "healthy GPUs: {:?}", sum.findings);
        assert!(
            sum.line().contains(
                "WARN 1000 kernel log records lost since the last check (overwritten before they were read: the ring buffer turned over, or was flooded)"
            ) && sum.line().contains("the driver's state of 2 GPUs read instead: 0 with a problem"),
            "{}",
            sum.line()
        );
        assert_eq!(
            fake.asked(),
            ["0000:05:00", "0000:18:00"],
            "every NVIDIA device"
        );
        let json = serde_json::to_value(&sum).expect("json");
        assert_eq!(json["kmsg_lost"]["records"], 1000);
        // Nothing lost since: nothing said.
        assert_eq!(check(&s, &st, true).kmsg_lost, None);
        // NVML knows none of the devices: that is not "healthy".
        let (unknown, _) = asking(&s, Fake::every(Answer::Unknown("Not found".into())));
        set(&s, "dev/kmsg", "6,1500,1,-;x\n");
        let line = check(&unknown, &st, false).line();
        assert!(
            line.contains("NVML answers for none of this node's 2 NVIDIA devices"),
            "{line}"
        );
        // Lost again, and the driver says a GPU needs a reset: a FAIL that drains.
        let (s, _) = asking(&s, Fake::with("0000:18:00", reset_asked()));
        set(&s, "dev/kmsg", "6,2000,1,-;overlay: x\n");
        let sum = check(&s, &st, true);
        assert_eq!(sum.kmsg_lost, Some(Lost::Records(2000 - (kept + 1004))));
        assert_eq!(
            fails(&sum),
            ["GPU state after lost kernel records: NVML recovery action: GPU reset on 0000:18:00"]
        );
        let r = sum.drain_reason(None).expect("reason");
        assert!(r.starts_with("nccl-check:GPU state|"), "{r}");
        // After a reboot the new boot's first record is 0: a later first record is a loss too.
        set(&s, "proc/sys/kernel/random/boot_id", "another-boot\n");
        set(&s, "dev/kmsg", "6,40,1,-;x\n");
        assert_eq!(check(&s, &st, true).kmsg_lost, Some(Lost::Records(40)));
        std::fs::remove_dir_all(&d).ok();
    }

    /// An unreadable kernel log is no PASS of the kernel log: said, and the driver's state of
    /// every GPU decides.
    #[test]
    fn an_unreadable_kernel_log_is_said_and_the_driver_s_state_decides() {
        let (d, s) = tree("hdr", "unreadable");
        std::fs::remove_file(s.root.join("dev/kmsg")).expect("rm");
        let (s, _) = asking(&s, Fake::none());
        let sum = check(&s, &d.join("state"), false);
        assert!(matches!(&sum.kmsg_lost, Some(Lost::Unreadable(e)) if e.contains("No such file")));
        assert!(!sum.failed());
        assert!(
            sum.line().contains("WARN kernel log unreadable (")
                && sum
                    .line()
                    .contains("the driver's state could not be read instead (NVML not available"),
            "{}",
            sum.line()
        );
        let (s, _) = asking(&s, Fake::with("0000:18:00", Answer::Lost));
        assert_eq!(
            fails(&check(&s, &d.join("state"), false)),
            ["GPU state after lost kernel records: NVML: the GPU is lost (it does not answer) on 0000:18:00"]
        );
        std::fs::remove_dir_all(&d).ok();
    }

    /// Facility-0 records the kernel writes with text a user chose at their start, in the
    /// driver's format: the OOM killer's summary split by another CPU's printk (a cpuset cgroup
    /// named so starts the record) and an nftables `log prefix` (`nf_log_all_netns = 1`). Not
    /// confirmed by the driver (NVML missing, or the GPU answers and is healthy), neither drains;
    /// the driver's record with a confirming state does.
    #[test]
    fn a_record_in_the_driver_s_format_drains_only_when_the_driver_s_state_confirms_it() {
        let (d, s) = tree("hdr", "confirm");
        let st = d.join("state");
        check(&s, &st, true);
        let records = [
            "4,SEQ,9000000,c;NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus,mems_allowed=0,global_oom,task_memcg=/user.slice/a5evil,task=x,pid=4242,uid=1001",
            "4,SEQ,9000001,-;NVRM: Xid (PCI:0000:18:00): 48, pid=1, An uncorrectable double bit error IN= OUT=lo SRC=127.0.0.1 DST=127.0.0.1 LEN=84 PROTO=ICMP",
        ];
        let mut seq = 100;
        for (fake, why) in [
            (Fake::none(), "NVML not available"),
            (Fake::every(healthy()), "NVML: "),
        ] {
            let (s, _) = asking(&s, fake);
            for r in records {
                seq += 1;
                append_kmsg(&s, &r.replace("SEQ", &seq.to_string()));
                let sum = check(&s, &st, true);
                assert!(!sum.failed(), "{r}: {:?}", sum.findings);
                let f = &sum.findings[0];
                let e = f.evidence.as_deref().unwrap_or_default();
                assert!(
                    f.class == Class::Warn
                        && e.starts_with("not confirmed by the driver's state")
                        && e.contains(why)
                        && e.contains("; check nvidia-smi"),
                    "{r}: {f:?}"
                );
            }
        }
        let dbe = Answer::State(GpuState {
            dbe_volatile: Some(1),
            ..GpuState::default()
        });
        let (s, _) = asking(&s, Fake::with("0000:18:00", dbe));
        append_kmsg(&s, &records[1].replace("SEQ", "200"));
        let sum = check(&s, &st, true);
        assert_eq!(fails(&sum), ["Xid 48 double-bit ECC error on 0000:18:00"]);
        assert_eq!(
            sum.findings[0].evidence.as_deref(),
            Some("NVML: 1 uncorrectable ECC errors since the driver loaded")
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_flood_of_forged_records_cannot_push_the_driver_s_own_out_of_the_read() {
        let (d, s) = tree("hdr", "flood");
        let (s, _) = asking(&s, Fake::every(Answer::Lost));
        let st = d.join("state");
        check(&s, &st, true);
        let mut log = String::new();
        for seq in 10..(10 + 4 * kmsg::MAX_RECORDS) {
            log.push_str(&format!(
                "6,{seq},1,-;Xid (PCI:0):79[{seq}]: segfault at 0 ip 0 sp 0 error 6\n"
            ));
        }
        log.push_str(
            "4,5000,2,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.",
        );
        append_kmsg(&s, &log);
        let sum = check(&s, &st, true);
        assert_eq!(
            fails(&sum),
            ["Xid 79 GPU has fallen off the bus on 0000:18:00"]
        );
        assert_eq!(sum.more, 0);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn an_xid_on_a_node_whose_devices_cannot_be_read_is_said_and_never_drains() {
        let (d, s) = tree("hdr", "unknown");
        let (s, _) = asking(&s, Fake::every(Answer::Lost));
        std::fs::remove_dir_all(s.root.join("sys")).expect("rm sys");
        append_kmsg(
            &s,
            "4,90,9000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.",
        );
        let sum = check(&s, &d.join("state"), false);
        assert!(!sum.failed(), "{:?}", sum.findings);
        assert!(
            sum.line().contains("WARN Xid 79 GPU has fallen off the bus (not judged: this node's GPU list could not be read"),
            "{}",
            sum.line()
        );
        // The driver's GPU list alone ties the address to this node.
        std::fs::create_dir_all(d.join("gpus/0000:18:00.0")).expect("mkdir");
        std::fs::write(
            d.join("gpus/0000:18:00.0/information"),
            "Model: X\nBus Location: 0000:18:00.0\n",
        )
        .expect("write");
        assert!(check(&s, &d.join("state"), false).failed());
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn aer_and_port_counters_fail_on_growth_over_the_limits_naming_device_and_port() {
        let (d, s) = tree("ndr", "counters");
        let st = d.join("state");
        assert!(!check(&s, &st, true).failed());
        let gpu = "sys/bus/pci/devices/0000:18:00.0";
        let fatal = std::fs::read_to_string(s.root.join(gpu).join("aer_dev_fatal")).expect("read");
        set(
            &s,
            &format!("{gpu}/aer_dev_fatal"),
            &fatal
                .replace("MalfTLP 0", "MalfTLP 1")
                .replace("TOTAL_ERR_FATAL 0", "TOTAL_ERR_FATAL 1"),
        );
        let nic = "sys/bus/pci/devices/0000:3b:00.0/aer_dev_correctable";
        let cor = std::fs::read_to_string(s.root.join(nic)).expect("read");
        set(
            &s,
            nic,
            &cor.replace("TOTAL_ERR_COR 0", "TOTAL_ERR_COR 1000"),
        );
        let port = "sys/class/infiniband/mlx5_0/ports/1";
        set(&s, &format!("{port}/counters/link_downed"), "1\n");
        set(&s, &format!("{port}/counters/symbol_error"), "101\n");
        set(&s, &format!("{port}/state"), "1: DOWN\n");
        let sum = check(&s, &st, true);
        assert_eq!(
            fails(&sum),
            [
                "AER fatal +1 > 0 (MalfTLP 1) on GPU 0000:18:00.0",
                "IB link down (ACTIVE at the last check) on mlx5_0/1",
                "IB link_downed +1 > 0 on mlx5_0/1",
                "IB symbol_error +101 > 100 on mlx5_0/1",
            ]
        );
        // At the limit (1000 correctable) is no FAIL; judged once.
        assert!(check(&s, &st, true).findings.is_empty());
        // A counter that went back (driver reload) counts from zero.
        set(&s, &format!("{port}/counters/symbol_error"), "150\n");
        set(&s, &format!("{port}/counters/link_error_recovery"), "0\n");
        assert!(check(&s, &st, true).findings.is_empty(), "150 - 101");
        std::fs::remove_dir_all(&d).ok();
    }

    /// sysfs counters are root's and read-only; a counter file another user can write (a tree
    /// where sysfs should be, a bind mount) is not evidence: the source is said unreadable.
    #[test]
    fn counters_another_user_could_write_never_fail() {
        use std::os::unix::fs::PermissionsExt;
        let (d, s) = tree("ndr", "writable");
        let st = d.join("state");
        assert!(!check(&s, &st, true).failed());
        let gpu = "sys/bus/pci/devices/0000:18:00.0/aer_dev_fatal";
        let fatal = std::fs::read_to_string(s.root.join(gpu)).expect("read");
        set(
            &s,
            gpu,
            &fatal.replace("TOTAL_ERR_FATAL 0", "TOTAL_ERR_FATAL 5"),
        );
        let port = "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error";
        set(&s, port, "5000\n");
        for f in [gpu, port] {
            std::fs::set_permissions(s.root.join(f), std::fs::Permissions::from_mode(0o666))
                .expect("chmod");
        }
        let sum = check(&s, &st, false);
        assert!(!sum.failed(), "{:?}", sum.findings);
        for (i, name) in [(1, "aer"), (2, "ib")] {
            let src = &sum.sources[i];
            assert!(!src.readable, "{name}: {src:?}");
            assert!(
                src.note
                    .as_deref()
                    .is_some_and(|n| n.contains("not evidence")),
                "{name}: {src:?}"
            );
        }
        // The same growth in files only root can write: a FAIL.
        for f in [gpu, port] {
            std::fs::set_permissions(s.root.join(f), std::fs::Permissions::from_mode(0o444))
                .expect("chmod");
        }
        assert_eq!(fails(&check(&s, &st, false)).len(), 2);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn hostile_trees_are_bounded_named_and_never_panic() {
        let (d, s) = tree("roce", "hostile");
        let st = d.join("state");
        // Garbage where the position is kept: a first check again, said so.
        std::fs::write(st.join(STATE_FILE), [0xffu8, 0, 1, 2]).expect("write");
        let sum = check(&s, &st, true);
        assert!(sum.sources[0]
            .note
            .as_deref()
            .is_some_and(|n| n.contains("starting anew")));
        // A FIFO for a counter file, binary garbage in another, a directory for the log.
        let port = s.root.join("sys/class/infiniband/mlx5_0/ports/1/counters");
        std::fs::remove_file(port.join("link_downed")).expect("rm");
        read::tests::make_fifo(&port.join("link_downed"));
        std::fs::write(port.join("port_rcv_errors"), [0u8, 0xff, 0xfe]).expect("write");
        let aer = s
            .root
            .join("sys/bus/pci/devices/0000:18:00.0/aer_dev_fatal");
        std::fs::write(&aer, b"\xff\xfe\x00garbage\n").expect("write");
        std::fs::remove_file(s.root.join("dev/kmsg")).expect("rm");
        std::fs::create_dir(s.root.join("dev/kmsg")).expect("mkdir");
        let t = Instant::now();
        let sum = check(&s, &st, true);
        assert!(t.elapsed() < Duration::from_secs(10));
        let unreadable: Vec<&str> = sum
            .sources
            .iter()
            .filter(|s| !s.readable)
            .map(|s| s.name)
            .collect();
        assert_eq!(unreadable, ["kmsg", "aer", "ib"], "{:?}", sum.sources);
        assert!(!sum.failed());
        // No tree at all: every source unreadable, nothing found.
        let none = Settings {
            root: d.join("absent"),
            ..s
        };
        let sum = check(&none, &st, false);
        assert!(!sum.sources[0].readable && !sum.failed(), "{sum:?}");
        assert!(
            matches!(sum.kmsg_lost, Some(Lost::Unreadable(_))),
            "{sum:?}"
        );
        std::fs::remove_dir_all(&d).ok();
    }
}
