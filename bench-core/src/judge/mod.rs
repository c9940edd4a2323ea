//! Stage 6, judge: the report (results and facts) and the config in, the verdict
//! ([`nccl_check_contract::verdict::Verdict`], the contract's) and its reasons out. Decides the floor of every
//! result ([`floors`] over [`thresholds`]), PASS or FAIL ([`overall`]), the outliers and the
//! culprit on one node ([`analysis`]), and which fact explains a slow result ([`evidence`]). Pure:
//! every rule is a unit test without a GPU.

pub mod analysis;
pub mod evidence;
pub mod floors;
pub mod foreign;
pub mod overall;
pub mod thresholds;
