//! Stage 8, judge: the report (results and facts) and the config in, the verdict
//! ([`nccl_check_contract::verdict::Verdict`], the contract's) and its reasons out. Decides the
//! floor of every result (`model::floors` over `model::thresholds`, the lookup the retest
//! shares); the verdict is one pass in [`overall`]
//! over two families of reasons: what was measured ([`analysis`]: wrong data, floors, outliers,
//! the culprit on one node) and what the node says ([`evidence`]: its facts, host interference, a
//! busy host, other processes on its GPUs, transport fallbacks); the localizer's reasons come in
//! with the report, and `localize::own` says which node's own finding wins over them; which
//! slow readings a busy host explains is one decision table ([`load`]). Pure:
//! every rule is a unit test without a GPU.

pub mod analysis;
pub mod evidence;
/// The fault table of the emulated fabric replayed on the simulation and judged by this stage.
#[cfg(test)]
mod fabric_table;
pub mod load;
pub mod overall;
