//! The kernel log's records after a position, from `/dev/kmsg`, bounded in bytes and time.
//!
//! Why `/dev/kmsg` and not `/var/log/kern.log`: it is there on every Linux host (kern.log only
//! where rsyslog runs; Debian 12 and most GPU images log to journald alone), it is the kernel's
//! own buffer (no daemon between the driver and us), and every record carries a sequence number
//! (<https://www.kernel.org/doc/Documentation/ABI/testing/dev-kmsg>): the position kept between
//! checks is (boot id, last sequence number), which no log rotation can invalidate, and a reboot
//! is seen by the boot id changing. Reads are non-blocking (`EAGAIN` = the end), each `read`
//! returns one record, `EPIPE` means records were overwritten while we read (counted by the jump
//! in sequence numbers, and reading goes on); a first record past the kept position + 1 means
//! records were overwritten since the last check ([`Scan::first_seq`]: the caller says so, as
//! a flood of records a user can cause can hide the driver's). The ring buffer holds this boot only (`log_buf_len`, 128 KiB to a few MiB),
//! so a whole read costs milliseconds; the bounds below hold for anything else at that path
//! (a fixture, a 1 GB file, binary garbage).

use super::read::open_nonblocking;
use std::io::{ErrorKind, Read};
use std::path::Path;
use std::time::{Duration, Instant};

/// Most bytes read in one check; the rest waits for the next check (the position is kept).
pub const MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Longest line kept: a kmsg record is at most about 1 KiB; a longer "line" is garbage.
const MAX_LINE: usize = 16 * 1024;
/// Most matching records kept from one read (the first ones decide; the rest are counted).
pub const MAX_RECORDS: usize = 256;

/// One log record that was kept.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub seq: u64,
    /// The syslog facility of the record's prefix: 0 only for the kernel's own records (a write
    /// to `/dev/kmsg` from user space gets `LOG_USER` when its `<N>` prefix says facility 0 or
    /// nothing; `devkmsg_write` in `kernel/printk/printk.c`).
    pub facility: u32,
    pub text: String,
}

/// What [`scan`] does with one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// Evidence: kept (at most [`MAX_RECORDS`]).
    Keep,
    /// Looks like evidence but is not: counted in [`Scan::ignored`].
    Ignore,
    /// Nothing to do with what is looked for.
    Skip,
}

/// The kernel's own facility (`LOG_KERN`).
pub const KERNEL: u32 = 0;

/// What one read found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Records after the position that `pick` kept (at most [`MAX_RECORDS`]).
    pub records: Vec<Record>,
    /// Kept records beyond [`MAX_RECORDS`].
    pub dropped: usize,
    /// Records after the position that `pick` said look like evidence but are not.
    pub ignored: usize,
    /// The first record's sequence number: past the kept position + 1, the records between were
    /// overwritten before this read (the ring buffer turned over, or a user flooded it).
    pub first_seq: Option<u64>,
    /// The last sequence number read (the next position), when any record was read.
    pub last_seq: Option<u64>,
    pub bytes: u64,
    /// Records the kernel overwrote while this read went on (`EPIPE`): the jump in sequence
    /// numbers after it, at least 1 each.
    pub lost: u64,
    /// An `EPIPE` whose jump the next record will say.
    resync: bool,
    /// Why the read stopped before the end: "size" or "time".
    pub cut_short: Option<&'static str>,
    /// Lines that are not kmsg records (garbage), skipped.
    pub bad_lines: u64,
}

/// `prio,seq,usec,flags[,..];text` → (facility, seq, text), the facility being `prio >> 3`;
/// continuation lines (" KEY=value") → None.
pub fn parse_line(line: &[u8]) -> Option<(u32, u64, &[u8])> {
    let semi = line.iter().position(|&b| b == b';')?;
    let header = std::str::from_utf8(&line[..semi]).ok()?;
    let mut fields = header.split(',');
    let prio = fields.next()?.parse::<u32>().ok()?;
    let seq = fields.next()?.parse::<u64>().ok()?;
    Some((prio >> 3, seq, &line[semi + 1..]))
}

/// How a record is judged before it is kept: by its facility and its text.
pub type Picker<'a> = &'a dyn Fn(u32, &str) -> Pick;

/// Reads `path` from its start, keeping records with sequence number above `after` that `pick`
/// keeps; stops at the end, at `max_bytes` or at `deadline`.
pub fn scan(
    path: &Path,
    after: Option<u64>,
    pick: Picker,
    max_bytes: u64,
    deadline: Duration,
) -> std::io::Result<Scan> {
    let start = Instant::now();
    let mut f = open_nonblocking(path)?;
    let mut out = Scan::default();
    // One kmsg record per read(); 16 KiB fits any (the kernel's limit is about 1 KiB).
    let mut buf = vec![0u8; 16 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        if out.bytes >= max_bytes {
            out.cut_short = Some("size");
            break;
        }
        if start.elapsed() >= deadline {
            out.cut_short = Some("time");
            break;
        }
        let want = buf.len().min((max_bytes - out.bytes) as usize);
        match f.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => {
                out.bytes += n as u64;
                pending.extend_from_slice(&buf[..n]);
                take_lines(&mut pending, after, pick, &mut out);
                if pending.len() > MAX_LINE {
                    out.bad_lines += 1;
                    pending.clear();
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // The reader's position was overwritten; the kernel moved it to the oldest record.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                if std::mem::replace(&mut out.resync, true) {
                    out.lost += 1;
                }
            }
            Err(e) => return Err(e),
        }
    }
    // A regular file's last line may lack its newline.
    if out.cut_short.is_none() && !pending.is_empty() {
        pending.push(b'\n');
        take_lines(&mut pending, after, pick, &mut out);
    }
    out.lost += u64::from(out.resync);
    Ok(out)
}

fn take_lines(pending: &mut Vec<u8>, after: Option<u64>, pick: Picker, out: &mut Scan) {
    let mut used = 0;
    while let Some(nl) = pending[used..].iter().position(|&b| b == b'\n') {
        let line = &pending[used..used + nl];
        used += nl + 1;
        if line.first() == Some(&b' ') || line.is_empty() {
            continue; // a record's dictionary (" SUBSYSTEM=pci"), not a record
        }
        let Some((facility, seq, text)) = parse_line(line) else {
            out.bad_lines += 1;
            continue;
        };
        out.first_seq.get_or_insert(seq);
        if std::mem::take(&mut out.resync) {
            let prev = out.last_seq.unwrap_or(seq);
            out.lost += seq.saturating_sub(prev.saturating_add(1)).max(1);
        }
        out.last_seq = Some(out.last_seq.map_or(seq, |s| s.max(seq)));
        if after.is_some_and(|a| seq <= a) {
            continue;
        }
        let text = String::from_utf8_lossy(text);
        match pick(facility, &text) {
            Pick::Keep if out.records.len() < MAX_RECORDS => out.records.push(Record {
                seq,
                facility,
                text: text.into_owned(),
            }),
            Pick::Keep => out.dropped += 1,
            Pick::Ignore => out.ignored += 1,
            Pick::Skip => {}
        }
    }
    pending.drain(..used);
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "6,100,5000,-;usb 1-1: new device\n SUBSYSTEM=usb\n\
4,101,6000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n\
4,102,7000,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 04\n";

    /// Every record that mentions an Xid, whoever wrote it.
    fn xid(_: u32, text: &str) -> Pick {
        if text.contains("Xid") {
            Pick::Keep
        } else {
            Pick::Skip
        }
    }

    fn scratch(name: &str, text: &[u8]) -> std::path::PathBuf {
        let d = nccl_check_host::test_support::scratch_dir(name);
        std::fs::write(d.join("kmsg"), text).expect("write");
        d
    }

    #[test]
    fn records_after_the_position_that_match_are_kept_and_the_position_advances() {
        let d = scratch("kmsg-pos", LOG.as_bytes());
        let s = scan(
            &d.join("kmsg"),
            None,
            &xid,
            MAX_BYTES,
            Duration::from_secs(1),
        )
        .expect("read");
        assert_eq!(s.records.len(), 2);
        assert_eq!((s.records[0].seq, s.last_seq), (101, Some(102)));
        let s = scan(
            &d.join("kmsg"),
            Some(101),
            &xid,
            MAX_BYTES,
            Duration::from_secs(1),
        )
        .expect("read");
        assert_eq!(s.records.len(), 1);
        assert_eq!(s.records[0].seq, 102);
        assert_eq!(s.bad_lines, 0);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn the_first_sequence_number_read_is_kept_so_a_turned_over_ring_shows() {
        let d = scratch("kmsg-first", LOG.as_bytes());
        let s = scan(
            &d.join("kmsg"),
            Some(40),
            &xid,
            MAX_BYTES,
            Duration::from_secs(1),
        )
        .expect("read");
        assert_eq!((s.first_seq, s.last_seq, s.lost), (Some(100), Some(102), 0));
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn an_epipe_counts_the_records_the_jump_after_it_skipped() {
        // After EPIPE the kernel moves the reader to its oldest record: 101..149 were lost.
        let mut out = Scan {
            last_seq: Some(100),
            resync: true,
            ..Scan::default()
        };
        let mut pending = b"4,150,1,-;x\n4,151,1,-;y\n".to_vec();
        take_lines(&mut pending, Some(100), &xid, &mut out);
        assert_eq!((out.lost, out.last_seq), (49, Some(151)));
        // An EPIPE right before the next record (nothing skipped) still counts one.
        out.resync = true;
        let mut pending = b"4,152,1,-;z\n".to_vec();
        take_lines(&mut pending, Some(100), &xid, &mut out);
        assert_eq!(out.lost, 50);
    }

    #[test]
    fn the_facility_is_the_prefix_over_eight_so_user_writes_are_told_from_the_kernel() {
        // `echo '<4>x' > /dev/kmsg` (root) is read back as 12 (LOG_USER, level 4).
        for (line, facility) in [
            (&b"4,1,0,-;NVRM: x"[..], KERNEL),
            (b"12,2,0,-;NVRM: x", 1),
            (b"30,3,0,-,caller=T12;x", 3),
        ] {
            assert_eq!(parse_line(line).map(|p| p.0), Some(facility));
        }
    }

    #[test]
    fn binary_garbage_is_skipped_and_counted_never_a_panic() {
        let mut g: Vec<u8> = (0..=255u8).cycle().take(200_000).collect();
        g.extend_from_slice(LOG.as_bytes());
        g.extend_from_slice(b"\xff\xfe;;;,,\n9,x,;\n4,103,1,-;NVRM: Xid (PCI:\xff): 13\n");
        let d = scratch("kmsg-garbage", &g);
        let s = scan(
            &d.join("kmsg"),
            None,
            &xid,
            MAX_BYTES,
            Duration::from_secs(1),
        )
        .expect("read");
        assert!(s.bad_lines > 0);
        assert_eq!(s.last_seq, Some(103));
        assert_eq!(s.records.len(), 3, "{:?}", s.records);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_one_gigabyte_log_is_read_only_up_to_the_bound() {
        let d = nccl_check_host::test_support::scratch_dir("kmsg-huge");
        let p = d.join("kmsg");
        // Sparse: 1 GB of NUL bytes that costs no disk.
        std::fs::File::create(&p)
            .and_then(|f| f.set_len(1 << 30))
            .expect("sparse file");
        let t = Instant::now();
        let s = scan(&p, None, &xid, MAX_BYTES, Duration::from_secs(5)).expect("read");
        assert_eq!((s.bytes, s.cut_short), (MAX_BYTES, Some("size")));
        assert!(t.elapsed() < Duration::from_secs(5));
        let s = scan(&p, None, &xid, u64::MAX, Duration::from_millis(20)).expect("read");
        assert_eq!(s.cut_short, Some("time"));
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_fifo_is_read_without_blocking() {
        let d = nccl_check_host::test_support::scratch_dir("kmsg-fifo");
        let p = d.join("kmsg");
        super::super::read::tests::make_fifo(&p);
        let s = scan(&p, None, &xid, MAX_BYTES, Duration::from_secs(1)).expect("read");
        assert_eq!(s.bytes, 0);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn the_real_dev_kmsg_is_read_to_its_end_when_readable() {
        // As root on a Linux host: must end (EAGAIN), never block.
        let t = Instant::now();
        if let Ok(s) = scan(
            Path::new("/dev/kmsg"),
            None,
            &xid,
            MAX_BYTES,
            Duration::from_secs(2),
        ) {
            assert!(t.elapsed() < Duration::from_secs(3), "{s:?}");
        }
    }
}
