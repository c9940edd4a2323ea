//! Stage 9, render: the report in, what people read out: the nccl-tests table on stdout (`table`,
//! `output`), the progress line on stderr (`progress`) and the SVG plot (`plot`). Decides nothing:
//! a verdict is never computed here.

#[cfg(feature = "gpu")]
pub(crate) mod output;
#[cfg(feature = "gpu")]
pub mod plot;
pub mod progress;
pub mod table;
