//! The ground floor: the domain's plain types and pure lookups that more than one stage names
//! (the collectives' table, sizes, data types, the pair schedule, node counts, the SKU table, the
//! interconnect class, the threshold rules and the floor of a measurement, a fault found about a
//! part, a GPU's local copy rate, what the localizer leaves in the report, the rendezvous
//! credential, small statistics), so a stage can share them without importing a later stage: the
//! retest while measuring, the verdict and the localizer ask the same floor lookup here. Imports
//! no stage: only std, external crates, the contract and other `model` modules.

pub mod bounds;
pub mod collectives;
pub mod credential;
pub mod datatype;
pub mod finding;
pub mod floors;
pub mod link_class;
pub mod local_copy;
pub mod localization;
pub mod node_count;
pub mod pairs;
pub mod size;
pub mod sku;
pub mod stats;
pub mod step;
pub mod thresholds;
pub mod time_budget;
