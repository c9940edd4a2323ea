//! NCCL, loaded at run time through libloading, in layers: `library` resolves symbols (missing
//! library or symbol = error, never a panic), `comm` wraps one communicator with non-blocking init,
//! async-error polling and abort.
//!
//! Why not cudarc's NCCL module: its loader never tries `libnccl.so.2` (the only name the pip wheel
//! and the libnccl2 package ship), it panics when the library is absent, its safe `Comm` has no
//! config, abort or async error, and it is `!Send` (see shared notes B1-B5).

mod comm;
mod error;
#[cfg(test)]
pub mod fake;
mod library;
mod ops;
mod pending;

pub use comm::{Comm, Connecting, WaitError};
pub use error::{NcclError, IN_PROGRESS};
pub use library::{Nccl, UniqueId};
pub use ops::Issue;
pub use pending::PendingComm;
