//! One module per family of inputs; each type is one fuzz target.

pub mod hub;
pub mod inputs;
pub mod outputs;
pub mod shards;
pub mod teacher;
