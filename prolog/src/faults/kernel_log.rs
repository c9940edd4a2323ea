//! The kernel log's share of the pass: the NVIDIA driver's Xid and SXid records since the last
//! check, each judged against the catalog ([`super::xid`]) and, before it drains, confirmed by
//! the driver's state ([`super::driver`]); records lost or a log unreadable are said, with every
//! GPU's driver state read instead.

use super::summary::{ms, Finding, Lost, Memory, Settings, Source, Summary};
use super::xid::{self, Class, Needs};
use super::{aer, driver, kmsg};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The kernel log read's own time bound (the whole pass targets < 50 ms).
const KMSG_TIME: Duration = Duration::from_millis(30);
/// How long the driver (NVML) is waited for: asked only to confirm a record or after lost
/// records, and a GPU in a bad state can make NVML block for seconds.
const DRIVER_TIME: Duration = Duration::from_secs(5);

/// Xid and SXid: the kernel log's records after sequence number `after` (`pos`: `after`, and
/// the first sequence number expected when no record was lost).
pub(super) fn scan_kmsg(
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
            src.note = (!notes.is_empty()).then(|| notes.join("; "));
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
    fails.into_iter().for_each(|f| out.add(f));
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
    let listed = std::fs::read_dir(&s.gpu_info_dir).is_ok();
    let pci = aer::nvidia_functions(&s.root);
    let readable = pci.is_ok();
    let gpus = crate::gpus::read(&s.gpu_info_dir);
    let all = gpus
        .into_iter()
        .map(|g| g.bus)
        .chain(pci.into_iter().flatten());
    let out = all.filter_map(|a| xid::pci_device(&a)).collect();
    (listed || readable).then_some(out)
}

/// What a scan of the kernel log left out, in words (none: it read everything).
fn kmsg_notes(scan: &kmsg::Scan) -> Option<String> {
    let notes: Vec<String> = [
        scan.cut_short.map(|why| {
            format!(
                "stopped at the {why} bound after {} bytes; the rest next check",
                scan.bytes
            )
        }),
        (scan.lost > 0).then(|| format!("{} records overwritten before they were read", scan.lost)),
        (scan.bad_lines > 0)
            .then(|| format!("{} lines that are not log records skipped", scan.bad_lines)),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!notes.is_empty()).then(|| notes.join("; "))
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
