//! Where [`super::Output::TeeLines`] copies: whole lines of a stream as they arrive, each passed
//! through the caller's filter first, so a caller that says a result itself can leave out the
//! child's own line for it (the plugin prints one verdict line per failure, not the worker's too).

use std::fs::File;
use std::io::Write;

/// Longest line held back waiting for its newline; a longer one is copied as it is (it is no
/// line a filter is written for, and nothing may grow without bound).
const PENDING_MAX: usize = 64 << 10;

pub(super) struct LineCopy {
    file: File,
    skip: fn(&[u8]) -> bool,
    pending: Vec<u8>,
}

impl LineCopy {
    pub(super) fn new(file: &File, skip: fn(&[u8]) -> bool) -> Option<LineCopy> {
        Some(LineCopy {
            file: file.try_clone().ok()?,
            skip,
            pending: Vec::new(),
        })
    }

    /// Copies every complete line `skip` does not refuse. Best effort: a closed terminal must not
    /// end the supervision.
    pub(super) fn write(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            if !(self.skip)(&line) {
                let _ = self.file.write_all(&line);
            }
        }
        if self.pending.len() > PENDING_MAX {
            let _ = self.file.write_all(&self.pending);
            self.pending.clear();
        }
    }

    /// The stream ended: a last line without its newline.
    pub(super) fn finish(&mut self) {
        if !self.pending.is_empty() && !(self.skip)(&self.pending) {
            let _ = self.file.write_all(&self.pending);
        }
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(line: &[u8]) -> bool {
        line.starts_with(b"nccl-check: ERROR ")
    }

    #[test]
    fn whole_lines_pass_the_filter_however_they_arrive() {
        let d = crate::test_support::scratch_dir("line-copy");
        let f = File::create(d.join("copy")).expect("create");
        let mut c = LineCopy::new(&f, verdict).expect("copy");
        for chunk in [
            &b"nccl-check: running 3 s"[..],
            b" of 4 s budget\nnccl-check: ER",
            b"ROR no GPU\npartial",
        ] {
            c.write(chunk);
        }
        assert_eq!(
            std::fs::read_to_string(d.join("copy")).expect("read"),
            "nccl-check: running 3 s of 4 s budget\n"
        );
        c.finish();
        assert_eq!(
            std::fs::read_to_string(d.join("copy")).expect("read"),
            "nccl-check: running 3 s of 4 s budget\npartial"
        );
        // A line without end is not held forever.
        c.write(&vec![b'x'; PENDING_MAX + 1]);
        assert!(c.pending.is_empty());
        std::fs::remove_dir_all(&d).ok();
    }
}
