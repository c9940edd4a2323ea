//! Stage 7, report: the record of one check: what was measured and read, then the judge's
//! verdict, each put in once (`assemble`), written as the JSON report (`json`) and read back
//! bounded (`read`). Comes after every stage whose values it holds (`measure`'s rows, `facts`,
//! `localize`'s summary, `meet`'s members) and before the two that read it (`judge`, `render`).

pub mod assemble;
pub mod json;
pub mod read;
