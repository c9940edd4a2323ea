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
pub mod driver;
pub mod ib;
pub mod kmsg;
pub mod limits;
pub mod metrics;
pub mod nvml_driver;
pub mod read;
pub mod xid;

use limits::{AerLimits, IbLimits};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use xid::{Class, Needs};

/// The position and counters of the last check.
pub const STATE_FILE: &str = "faults.json";
/// The kernel log read's own time bound (the whole pass targets < 50 ms).
const KMSG_TIME: Duration = Duration::from_millis(30);
/// How long the driver (NVML) is waited for: asked only to confirm a record or after lost
/// records, and a GPU in a bad state can make NVML block for seconds.
const DRIVER_TIME: Duration = Duration::from_secs(5);
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
    /// Asked what a kernel record implies before it drains ([`nvml_driver::Nvml`]; a fake in tests).
    pub driver: Arc<dyn driver::Driver>,
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
    /// For a kernel record: the driver's state that confirmed it, or why it is not confirmed
    /// and what to check; for a state read after lost records: why it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
}

/// Kernel log records this pass could not judge (`gate.json` → `faults.kmsg_lost`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Lost {
    /// Overwritten since the last check, before this read got them (the ring turned over).
    Records(u64),
    /// The log could not be read at all.
    Unreadable(String),
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
    /// Kernel records lost since the last check, or why the log could not be read; None when
    /// every record since the last check was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kmsg_lost: Option<Lost>,
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
    /// on 0000:3b:00: reboot needed (+1 more) (job 42)`, shaped by [`crate::reason::compose`].
    pub fn drain_reason(&self, job: Option<&str>) -> Option<String> {
        let fails: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.class == Class::Fail)
            .collect();
        let first = fails.first()?;
        let head = first.what.split(' ').take(2).collect::<Vec<_>>().join(" ");
        let mut sentence = format!("{} on {}", first.what, first.subject);
        if let Some(e) = &first.evidence {
            sentence.push_str(&format!(" ({e})"));
        }
        if first.needs != Needs::Nothing {
            sentence.push_str(&format!(": {}", first.needs.words()));
        }
        let more = fails.len() - 1 + self.more;
        if more > 0 {
            sentence.push_str(&format!(" (+{more} more)"));
        }
        Some(crate::reason::compose(&head, &sentence, job))
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
                let evidence = f
                    .evidence
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default();
                format!("{class} {} on {}{evidence}", f.what, f.subject)
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
    // The first record this read should find: the one after the kept position, or a new
    // boot's first (sequence number 0); on a first check, any.
    let expect = if rebooted {
        Some(0)
    } else {
        before.kmsg_seq.map(|k| k.saturating_add(1))
    };
    let src = scan_kmsg(s, (after, expect), problem, &mut now, &mut out);
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

/// Xid and SXid: the kernel log's records after sequence number `after` (`pos`: `after`, and
/// the first sequence number expected when no record was lost).
fn scan_kmsg(
    s: &Settings,
    pos: (Option<u64>, Option<u64>),
    problem: Option<String>,
    now: &mut Memory,
    out: &mut Summary,
) -> Source {
    let t = Instant::now();
    let (after, expect) = pos;
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
    let devices = nvidia_devices(s);
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
            let (events, not_ours) = driver_events(&scan.records, devices.as_ref());
            // Lost before this read (the first record is past the expected one) or during it.
            let lost = match (scan.first_seq, expect) {
                (Some(first), Some(e)) => first.saturating_sub(e),
                _ => 0,
            } + scan.lost;
            let to_confirm =
                devices.is_some() && events.iter().any(|(e, _)| xid::assess(e).0 == Class::Fail);
            let asked = (lost > 0 || to_confirm).then(|| ask_driver(s, devices.as_ref()));
            if let Some(asked) = asked.as_ref().filter(|_| lost > 0) {
                out.kmsg_lost = Some(Lost::Records(lost));
                let what = format!(
                    "{lost} kernel log records lost since the last check (overwritten before \
                     they were read: the ring buffer turned over, or was flooded)"
                );
                lost_findings(what, &src.path, asked, out);
            }
            judge_xids(events, scan.dropped, devices.is_some(), asked.as_ref(), out);
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
        Err(e) => {
            // No record read is no health: the GPUs' own state is all there is to go on.
            out.kmsg_lost = Some(Lost::Unreadable(e.to_string()));
            let what = format!("kernel log unreadable ({e}): Xid/SXid records not judged");
            lost_findings(what, &src.path, &ask_driver(s, devices.as_ref()), out);
            src.note = Some(format!("{e}"));
        }
    }
    src.ms = ms(t);
    src
}

/// What the driver says of every NVIDIA device of this node, or why it cannot be asked.
fn ask_driver(
    s: &Settings,
    devices: Option<&BTreeSet<String>>,
) -> Result<BTreeMap<String, driver::Answer>, String> {
    let d = devices.ok_or("this node's GPU list could not be read")?;
    s.driver
        .ask(&d.iter().cloned().collect::<Vec<_>>(), DRIVER_TIME)
}

/// Records were lost or the log is unreadable (`what`): a WARN saying so, with what the driver's
/// state of every GPU showed instead, and a FAIL for each problem that state has.
fn lost_findings(
    what: String,
    path: &str,
    asked: &Result<BTreeMap<String, driver::Answer>, String>,
    out: &mut Summary,
) {
    let mut fails = Vec::new();
    let said = match asked {
        Err(why) => format!(
            "the driver's state could not be read instead ({why}): nothing says the GPUs are \
             healthy; check nvidia-smi -q"
        ),
        Ok(answers) => {
            let gpus = answers
                .values()
                .filter(|a| !matches!(a, driver::Answer::Unknown(_)))
                .count();
            for (pci, a) in answers {
                for (p, needs) in driver::persistent_problems(a) {
                    fails.push(Finding {
                        class: Class::Fail,
                        source: "driver",
                        subject: pci.clone(),
                        what: format!("GPU state after lost kernel records: {p}"),
                        needs,
                        evidence: None,
                    });
                }
            }
            if gpus == 0 {
                format!(
                    "NVML answers for none of this node's {} NVIDIA devices: nothing says the \
                     GPUs are healthy; check nvidia-smi -q",
                    answers.len()
                )
            } else {
                format!(
                    "the driver's state of {gpus} GPUs read instead: {} with a problem",
                    fails.len()
                )
            }
        }
    };
    out.add(Finding {
        class: Class::Warn,
        source: "kmsg",
        subject: path.to_string(),
        what,
        needs: Needs::Nothing,
        evidence: Some(said),
    });
    for f in fails {
        out.add(f);
    }
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

/// The driver's records of this node's devices, those of one device and code as one event
/// with a count; and how many named a device that is not this node's (ignored). With
/// `devices` unknown, every record is kept (and judged a WARN).
fn driver_events(
    records: &[kmsg::Record],
    devices: Option<&BTreeSet<String>>,
) -> (Vec<(xid::Event, usize)>, usize) {
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
    (seen, not_ours)
}

/// Each event judged: a FAIL of the catalog's drains only when the driver's state (`asked`)
/// confirms it, else it is a WARN naming what to check. With the devices unknown, nothing
/// drains: each event is a WARN that says why it was not judged.
fn judge_xids(
    events: Vec<(xid::Event, usize)>,
    dropped: usize,
    devices_known: bool,
    asked: Option<&Result<BTreeMap<String, driver::Answer>, String>>,
    out: &mut Summary,
) {
    for (e, n) in events {
        let (mut class, mut needs, mut meaning) = xid::assess(&e);
        let mut evidence = None;
        if !devices_known {
            class = Class::Warn;
            meaning.push_str(
                " (not judged: this node's GPU list could not be read, so the address cannot be tied to it)",
            );
        } else if class == Class::Fail {
            let no_answer = Err("the driver was not asked".to_string());
            match driver::confirm(&e, asked.unwrap_or(&no_answer)) {
                driver::Confirmation::Confirmed(state, by_state) => {
                    evidence = Some(state);
                    if needs == Needs::Nothing {
                        needs = by_state;
                    }
                }
                driver::Confirmation::Unconfirmed(why) => {
                    class = Class::Warn;
                    evidence = Some(why);
                }
            }
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
            evidence,
        });
    }
    out.more += dropped;
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
                evidence: None,
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
            evidence: None,
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
                evidence: None,
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
