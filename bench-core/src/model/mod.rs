//! The ground floor: the domain's plain types and pure lookups that more than one stage names
//! (sizes, data types, the pair schedule, node counts, the SKU table, the interconnect class,
//! small statistics), so a stage can share them without importing a later stage. Imports no
//! stage: only std, external crates and other `model` modules.

pub mod datatype;
pub mod link_class;
pub mod node_count;
pub mod pairs;
pub mod size;
pub mod sku;
pub mod stats;
