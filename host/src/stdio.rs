//! Lines on stdout and stderr that never panic. Rust ignores SIGPIPE, so a write to a reader that
//! went away (`nccl-check-prolog --check-config | head -1`) fails with EPIPE, and `println!`
//! turns that into a panic: the prolog's catch-all then exits 0, even for a NOT READY config, and
//! in slurmd's prolog a closed stderr would lose the verdict's exit code. Here a failed write is
//! dropped: what the program decided (its exit code, a drain) does not depend on who reads.
//! Every binary of the workspace prints through [`outln!`](crate::outln) and
//! [`errln!`](crate::errln) (clippy's `print_stdout`/`print_stderr` keep it so).

use std::fmt;
use std::io::{self, Write};

/// Writes `args` to stdout; a failure (EPIPE, a closed descriptor) is ignored.
pub fn out(args: fmt::Arguments) {
    let mut o = io::stdout().lock();
    let _ = o.write_fmt(args).and_then(|()| o.flush());
}

/// Writes `args` to stderr; a failure is ignored.
pub fn err(args: fmt::Arguments) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// `println!` that never panics ([`out`]).
#[macro_export]
macro_rules! outln {
    () => { $crate::stdio::out(format_args!("\n")) };
    ($($t:tt)*) => { $crate::stdio::out(format_args!("{}\n", format_args!($($t)*))) };
}

/// `print!` that never panics ([`out`]).
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::stdio::out(format_args!($($t)*)) };
}

/// `eprintln!` that never panics ([`err`]).
#[macro_export]
macro_rules! errln {
    () => { $crate::stdio::err(format_args!("\n")) };
    ($($t:tt)*) => { $crate::stdio::err(format_args!("{}\n", format_args!($($t)*))) };
}
