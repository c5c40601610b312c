//! Feature translators: behaviour a volume option turns on, stacked above
//! the cluster translators (`graph::table`, place `Above`).
pub mod read_only;
pub mod trash;
