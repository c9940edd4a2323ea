//! Where [`super::Output::Capped`] writes: the first bytes of a stream as they come, its last
//! bytes at the end (kept by the pipe's tail), and one line saying how much was cut between them.

use std::fs::File;
use std::io::Write;

pub(super) struct CappedLog {
    file: File,
    head_left: usize,
    total: u64,
    written: u64,
}

impl CappedLog {
    /// Writes to a second handle of `file`; None if there is none to be had.
    pub(super) fn new(file: &File, head: usize) -> Option<CappedLog> {
        Some(CappedLog {
            file: file.try_clone().ok()?,
            head_left: head,
            total: 0,
            written: 0,
        })
    }

    /// Writes what still fits in the head; counts the rest. Best effort: a full disk must not
    /// end the supervision.
    pub(super) fn write(&mut self, bytes: &[u8]) {
        let head = bytes.len().min(self.head_left);
        if head > 0 && self.file.write_all(&bytes[..head]).is_ok() {
            self.written += head as u64;
        }
        self.head_left -= head;
        self.total += bytes.len() as u64;
    }

    /// At the end: the part of `tail` (the stream's last bytes) not in the head yet, after a line
    /// that says how many bytes were cut (nothing when the whole stream fit in the head).
    /// `stream` names it ("standard output").
    pub(super) fn finish(&mut self, tail: &[u8], stream: &str) {
        let unwritten = self.total - self.written;
        if unwritten == 0 {
            return;
        }
        let shown = (tail.len() as u64).min(unwritten) as usize;
        let cut = unwritten - shown as u64;
        let _ = write!(
            self.file,
            "\n[nccl-check: {cut} bytes of the worker's {stream} cut here; its first {} and last {shown} bytes are kept]\n",
            self.written
        );
        let _ = self.file.write_all(&tail[tail.len() - shown..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_longer_than_head_and_tail_keeps_both_and_says_the_cut() {
        let dir = crate::test_support::scratch_dir("capped");
        let path = dir.join("log");
        let file = File::create(&path).expect("create");
        let mut log = CappedLog::new(&file, 4).expect("a handle");
        log.write(b"abcdefgh");
        log.write(b"ijkl");
        log.finish(b"jkl", "standard output");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            "abcd\n[nccl-check: 5 bytes of the worker's standard output cut here; its first 4 and last 3 bytes are kept]\njkl"
        );
        let file = File::create(&path).expect("create");
        let mut short = CappedLog::new(&file, 100).expect("a handle");
        short.write(b"all of it");
        short.finish(b"all of it", "standard error");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "all of it");
        std::fs::remove_dir_all(&dir).ok();
    }
}
