//! The node's hardware faults since the last check, beside the bandwidth verdict: Xid/SXid events
//! from the kernel log ([`kmsg`], [`xid`]), PCIe AER counters of the GPUs and NICs ([`aer`]) and
//! InfiniBand/RoCE port counters ([`ib`]), judged as deltas against what the last check saw
//! (`<state_dir>/faults.json`, so each event and each error is judged once). One bounded pass of
//! file reads, timed per source; the result goes into `gate.json` and, on a FAIL, the drain
//! reason. Reads only: nothing here writes outside the state directory.

pub mod aer;
pub mod ib;
pub mod kmsg;
pub mod limits;
pub mod metrics;
pub mod read;
pub mod xid;

use limits::{AerLimits, IbLimits};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
pub use xid::{Class, Needs};

/// The position and counters of the last check.
pub const STATE_FILE: &str = "faults.json";
/// The kernel log read's own time bound (the whole pass targets < 50 ms).
const KMSG_TIME: Duration = Duration::from_millis(30);
/// The largest `faults.json` read back.
const MAX_STATE: u64 = 4 * 1024 * 1024;
/// Most findings kept (the first ones decide; the count of the rest is kept).
const MAX_FINDINGS: usize = 64;

/// What the pass needs from the config.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `/` in production; a fixture tree in tests (`dev/kmsg`, `proc/...`, `sys/...` under it).
    pub root: PathBuf,
    /// The driver's GPU list (`/proc/driver/nvidia/gpus`, config `gpu_info_dir`): with the PCI
    /// functions of NVIDIA's vendor id under `root`, the devices an Xid or SXid may name.
    pub gpu_info_dir: PathBuf,
    pub aer: AerLimits,
    pub ib: IbLimits,
}

/// One fault found.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub class: Class,
    /// "xid", "sxid", "aer" or "ib".
    pub source: &'static str,
    /// The PCI address or the port (`mlx5_0/1`).
    pub subject: String,
    /// What, with the numbers: `Xid 79 GPU has fallen off the bus`.
    pub what: String,
    pub needs: Needs,
}

/// What one source cost and whether it could be read.
#[derive(Debug, Clone, Serialize)]
pub struct Source {
    pub name: &'static str,
    pub path: String,
    pub readable: bool,
    /// Records, devices or ports read.
    pub items: usize,
    pub ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The pass's result (`gate.json` → `faults`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub findings: Vec<Finding>,
    /// Findings beyond the first [`MAX_FINDINGS`].
    pub more: usize,
    pub sources: Vec<Source>,
    /// The whole pass: reading, judging and keeping the position.
    pub total_ms: f64,
    /// Of which keeping the position (`faults.json`, written only when it changed, with fsync).
    pub save_ms: f64,
}

/// `faults.json`: what the last check saw.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Memory {
    boot_id: String,
    kmsg_seq: Option<u64>,
    aer: BTreeMap<String, aer::Counts>,
    ib: BTreeMap<String, ib::Port>,
}

fn ms(t: Instant) -> f64 {
    (t.elapsed().as_secs_f64() * 1e5).round() / 100.0
}

impl Summary {
    pub fn failed(&self) -> bool {
        self.findings.iter().any(|f| f.class == Class::Fail)
    }

    fn add(&mut self, f: Finding) {
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(f);
        } else {
            self.more += 1;
        }
    }

    /// The drain reason of a fault FAIL: `nccl-check:Xid 79|Xid 79 GPU has fallen off the bus
    /// on 0000:3b:00: reboot needed (+1 more) (job 42)`; `job` as [`crate::reason`] takes it.
    pub fn drain_reason(&self, job: Option<&str>) -> Option<String> {
        let fails: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.class == Class::Fail)
            .collect();
        let first = fails.first()?;
        let head = first.what.split(' ').take(2).collect::<Vec<_>>().join(" ");
        let mut sentence = format!("{} on {}", first.what, first.subject);
        if first.needs != Needs::Nothing {
            sentence.push_str(&format!(": {}", first.needs.words()));
        }
        let more = fails.len() - 1 + self.more;
        if more > 0 {
            sentence.push_str(&format!(" (+{more} more)"));
        }
        let clean = |s: &str| -> String {
            s.chars()
                .map(|c| if c.is_control() || c == '|' { ' ' } else { c })
                .take(160)
                .collect()
        };
        let job = job.map(|j| format!(" (job {j})")).unwrap_or_default();
        Some(format!(
            "{}{}|{}{job}",
            crate::drain::PREFIX,
            clean(&head),
            clean(&sentence)
        ))
    }

    /// One line for logs: `faults: 2 sources read in 1.3 ms, FAIL: ...` .
    pub fn line(&self) -> String {
        let read: Vec<&str> = self
            .sources
            .iter()
            .filter(|s| s.readable)
            .map(|s| s.name)
            .collect();
        let unread: Vec<&str> = self
            .sources
            .iter()
            .filter(|s| !s.readable)
            .map(|s| s.name)
            .collect();
        let found: Vec<String> = self
            .findings
            .iter()
            .take(4)
            .map(|f| {
                let class = if f.class == Class::Fail {
                    "FAIL"
                } else {
                    "WARN"
                };
                format!("{class} {} on {}", f.what, f.subject)
            })
            .collect();
        format!(
            "faults: read {} in {:.1} ms{}; {}",
            if read.is_empty() {
                "nothing".to_string()
            } else {
                read.join(", ")
            },
            self.total_ms,
            if unread.is_empty() {
                String::new()
            } else {
                format!(" (not readable: {})", unread.join(", "))
            },
            if found.is_empty() {
                "nothing found".to_string()
            } else {
                found.join("; ")
            }
        )
    }
}

/// What the last check saw, its bytes (to skip a write that changes nothing), and a problem.
fn load(state_dir: &Path) -> (Memory, Vec<u8>, Option<String>) {
    let p = state_dir.join(STATE_FILE);
    let mut bytes = Vec::new();
    match read::open_nonblocking(&p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return (Memory::default(), bytes, None)
        }
        Err(e) => {
            return (
                Memory::default(),
                bytes,
                Some(format!("{}: {e}", p.display())),
            )
        }
        Ok(f) => {
            if let Err(e) = f.take(MAX_STATE).read_to_end(&mut bytes) {
                return (
                    Memory::default(),
                    Vec::new(),
                    Some(format!("{}: {e}", p.display())),
                );
            }
        }
    }
    match serde_json::from_slice(&bytes) {
        Ok(m) => (m, bytes, None),
        Err(e) => (
            Memory::default(),
            Vec::new(),
            Some(format!("{}: {e}; starting anew", p.display())),
        ),
    }
}

/// How much a counter grew; a counter that went back (a reset, a reload) grew by its value.
fn delta(now: u64, before: u64) -> u64 {
    if now >= before {
        now - before
    } else {
        now
    }
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
    let after = if rebooted { None } else { before.kmsg_seq };
    let src = scan_kmsg(s, after, problem, &mut now, &mut out);
    out.sources.push(src);
    let src = scan_aer(s, &before, rebooted, &mut now, &mut out);
    out.sources.push(src);
    let src = scan_ib(s, &before, rebooted, &mut now, &mut out);
    out.sources.push(src);
    let t = Instant::now();
    if save {
        keep(state_dir, &now, &before_bytes, &mut out);
    }
    out.save_ms = ms(t);
    out.total_ms = ms(start);
    out
}

/// Xid and SXid: the kernel log's records after sequence number `after`.
fn scan_kmsg(
    s: &Settings,
    after: Option<u64>,
    problem: Option<String>,
    now: &mut Memory,
    out: &mut Summary,
) -> Source {
    let t = Instant::now();
    let path = s.root.join("dev/kmsg");
    now.kmsg_seq = after;
    let mut src = Source {
        name: "kmsg",
        path: path.display().to_string(),
        readable: false,
        items: 0,
        ms: 0.0,
        note: problem,
    };
    match kmsg::scan(
        &path,
        after,
        &pick_driver_record,
        kmsg::MAX_BYTES,
        KMSG_TIME,
    ) {
        Ok(scan) => {
            src.readable = true;
            src.items = scan.records.len();
            now.kmsg_seq = scan.last_seq.or(after);
            let devices = nvidia_devices(s);
            let not_ours = judge_xids(&scan.records, scan.dropped, devices.as_ref(), out);
            // A problem with faults.json first, then what the read left out or ignored.
            let mut notes: Vec<String> = src.note.take().into_iter().collect();
            notes.extend(kmsg_notes(&scan));
            if scan.ignored > 0 {
                notes.push(format!(
                    "{} records mention an Xid but are not the NVIDIA driver's own kernel records (a process, file or user message): ignored",
                    scan.ignored
                ));
            }
            if not_ours > 0 {
                notes.push(format!(
                    "{not_ours} Xid/SXid records name a PCI address that is not one of this node's GPUs or NVSwitches: ignored"
                ));
            }
            if !notes.is_empty() {
                src.note = Some(notes.join("; "));
            }
        }
        Err(e) => src.note = Some(format!("{e}")),
    }
    src.ms = ms(t);
    src
}

/// Evidence is the NVIDIA driver's own record: written by the kernel (facility 0, which no write
/// to `/dev/kmsg` from user space gets, root's included) and in the driver's whole format from
/// the message's start. A record that only mentions `Xid (PCI:` is counted and ignored.
fn pick_driver_record(facility: u32, text: &str) -> kmsg::Pick {
    if facility == kmsg::KERNEL && xid::parse(text).is_some() {
        kmsg::Pick::Keep
    } else if text.contains("Xid (PCI:") {
        kmsg::Pick::Ignore
    } else {
        kmsg::Pick::Skip
    }
}

/// This node's NVIDIA devices as `dddd:bb:dd`: the driver's GPU list and every PCI function with
/// NVIDIA's vendor id (GPUs and NVSwitches). None when neither could be read: then no Xid can be
/// tied to this node.
fn nvidia_devices(s: &Settings) -> Option<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let listed = std::fs::read_dir(&s.gpu_info_dir).is_ok();
    for g in crate::gpus::read(&s.gpu_info_dir) {
        out.extend(xid::pci_device(&g.bus));
    }
    let (pci, readable) = aer::nvidia_functions(&s.root);
    out.extend(pci.iter().filter_map(|a| xid::pci_device(a)));
    (listed || readable).then_some(out)
}

/// What a scan of the kernel log left out, in words (none: it read everything).
fn kmsg_notes(scan: &kmsg::Scan) -> Option<String> {
    let mut notes = Vec::new();
    if let Some(why) = scan.cut_short {
        notes.push(format!(
            "stopped at the {why} bound after {} bytes; the rest next check",
            scan.bytes
        ));
    }
    if scan.lost > 0 {
        notes.push(format!(
            "{} records overwritten before they were read",
            scan.lost
        ));
    }
    if scan.bad_lines > 0 {
        notes.push(format!(
            "{} lines that are not log records skipped",
            scan.bad_lines
        ));
    }
    (!notes.is_empty()).then(|| notes.join("; "))
}

/// PCIe AER counters of the NVIDIA GPUs and RDMA NICs, against the last pass's.
fn scan_aer(
    s: &Settings,
    before: &Memory,
    rebooted: bool,
    now: &mut Memory,
    out: &mut Summary,
) -> Source {
    let t = Instant::now();
    let (devices, problems) = aer::devices(&s.root);
    let mut src = Source {
        name: "aer",
        path: s.root.join("sys/bus/pci/devices").display().to_string(),
        readable: problems.is_empty(),
        items: 0,
        ms: 0.0,
        note: problems.first().cloned(),
    };
    for d in &devices {
        match aer::read_device(&s.root, &d.pci) {
            Ok(Some((c, detail))) => {
                src.items += 1;
                let prev = if rebooted {
                    Some(aer::Counts::default())
                } else {
                    before.aer.get(&d.pci).copied()
                };
                if let Some(p) = prev {
                    judge_aer(d, &c, &p, &detail, &s.aer, out);
                }
                now.aer.insert(d.pci.clone(), c);
            }
            Ok(None) => {}
            Err(e) => {
                src.readable = false;
                src.note.get_or_insert(e);
            }
        }
    }
    if src.items == 0 && src.note.is_none() {
        src.note = Some("no NVIDIA GPU or RDMA NIC with AER counters".into());
    }
    src.ms = ms(t);
    src
}

/// InfiniBand / RoCE ports: state and error counters, against the last pass's.
fn scan_ib(
    s: &Settings,
    before: &Memory,
    rebooted: bool,
    now: &mut Memory,
    out: &mut Summary,
) -> Source {
    let t = Instant::now();
    let (ports, problems) = ib::read_ports(&s.root);
    let src = Source {
        name: "ib",
        path: s.root.join("sys/class/infiniband").display().to_string(),
        readable: problems.is_empty(),
        items: ports.len(),
        ms: 0.0,
        note: problems
            .first()
            .cloned()
            .or_else(|| ports.is_empty().then(|| "no RDMA port".to_string())),
    };
    for p in ports {
        let prev = before.ib.get(&p.name);
        if rebooted {
            let zero = ib::Port {
                counters: BTreeMap::new(),
                active: false,
                ..p.clone()
            };
            judge_port(&p, &zero, &s.ib, out);
        } else if let Some(prev) = prev {
            judge_port(&p, prev, &s.ib, out);
        }
        now.ib.insert(p.name.clone(), p);
    }
    Source { ms: ms(t), ..src }
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

/// The driver's records judged, those of one device and code as one finding with a count;
/// returns how many named a device that is not this node's (ignored). With `devices` unknown,
/// nothing drains: each event is a WARN that says why it was not judged.
fn judge_xids(
    records: &[kmsg::Record],
    dropped: usize,
    devices: Option<&BTreeSet<String>>,
    out: &mut Summary,
) -> usize {
    let mut seen: Vec<(xid::Event, usize)> = Vec::new();
    let mut not_ours = 0;
    for r in records {
        let Some(e) = xid::parse(&r.text).filter(|_| r.facility == kmsg::KERNEL) else {
            continue;
        };
        if let Some(d) = devices {
            if !xid::pci_device(&e.pci).is_some_and(|p| d.contains(&p)) {
                not_ours += 1;
                continue;
            }
        }
        match seen
            .iter_mut()
            .find(|(s, _)| s.kind == e.kind && s.code == e.code && s.pci == e.pci)
        {
            Some((_, n)) => *n += 1,
            None => seen.push((e, 1)),
        }
    }
    // FAILs first: they decide the drain reason.
    seen.sort_by_key(|(e, _)| xid::assess(e).0 != Class::Fail);
    for (e, n) in seen {
        let (mut class, needs, mut meaning) = xid::assess(&e);
        if devices.is_none() {
            class = Class::Warn;
            meaning.push_str(
                " (not judged: this node's GPU list could not be read, so the address cannot be tied to it)",
            );
        }
        let (source, kind) = match e.kind {
            xid::Kind::Xid => ("xid", "Xid"),
            xid::Kind::SXid => ("sxid", "SXid"),
        };
        let times = if n > 1 {
            format!(" (x{n})")
        } else {
            String::new()
        };
        out.add(Finding {
            class,
            source,
            subject: e.pci.clone(),
            what: format!("{kind} {} {meaning}{times}", e.code),
            needs,
        });
    }
    out.more += dropped;
    not_ours
}

fn judge_aer(
    d: &aer::Device,
    now: &aer::Counts,
    before: &aer::Counts,
    detail: &BTreeMap<String, u64>,
    l: &AerLimits,
    out: &mut Summary,
) {
    let types: Vec<String> = detail
        .iter()
        .take(3)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let types = if types.is_empty() {
        String::new()
    } else {
        format!(" ({})", types.join(", "))
    };
    for (what, n, b, limit, with_types) in [
        ("fatal", now.fatal, before.fatal, l.fatal, true),
        ("nonfatal", now.nonfatal, before.nonfatal, l.nonfatal, true),
        (
            "correctable",
            now.correctable,
            before.correctable,
            l.correctable,
            false,
        ),
    ] {
        let grew = delta(n, b);
        if grew > limit {
            out.add(Finding {
                class: Class::Fail,
                source: "aer",
                subject: format!("{} {}", d.role, d.pci),
                what: format!(
                    "AER {what} +{grew} > {limit}{}",
                    if with_types { types.as_str() } else { "" }
                ),
                needs: Needs::Nothing,
            });
        }
    }
}

fn judge_port(now: &ib::Port, before: &ib::Port, l: &IbLimits, out: &mut Summary) {
    let kind = if now.link_layer == "Ethernet" {
        "RoCE"
    } else {
        "IB"
    };
    if before.active && !now.active {
        out.add(Finding {
            class: Class::Fail,
            source: "ib",
            subject: now.name.clone(),
            what: format!("{kind} link down (ACTIVE at the last check)"),
            needs: Needs::Nothing,
        });
    }
    for c in ib::COUNTERS {
        let (Some(&n), Some(limit)) = (now.counters.get(c), l.of(c)) else {
            continue;
        };
        let grew = delta(n, before.counters.get(c).copied().unwrap_or(0));
        if grew > limit {
            out.add(Finding {
                class: Class::Fail,
                source: "ib",
                subject: now.name.clone(),
                what: format!("{kind} {c} +{grew} > {limit}"),
                needs: Needs::Nothing,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                "nccl-check:Xid 79|Xid 79 GPU has fallen off the bus on 0000:18:00: reboot needed"
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
            "3,1,10,-;NVRM: Xid (PCI:0000:18:00): 95, Uncontained: FBHUB\n",
        );
        assert_eq!(fails(&check(&s, &st, true)).len(), 1);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_wrapped_log_judges_only_records_after_the_position() {
        // The ring buffer moved on (the kernel's "rotation"): older records are gone, the
        // sequence numbers go on.
        let (d, s) = tree("hdr", "wrap");
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

    #[test]
    fn a_flood_of_forged_records_cannot_push_the_driver_s_own_out_of_the_read() {
        let (d, s) = tree("hdr", "flood");
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
        assert!(!sum.sources[0].readable && sum.findings.is_empty());
        std::fs::remove_dir_all(&d).ok();
    }
}
