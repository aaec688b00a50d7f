//! The model half of the provenance chain: what a checkpoint *is* (its architecture from
//! config.json and the safetensors headers, [`architecture`]; its files and weight digests,
//! [`checkpoint`]) and where it came from (`lineage.json`, extended one training stage at a
//! time by `dlm-data lineage add`, [`lineage`]). `fetch` writes the base's architecture.json;
//! `audit` checks base → teacher → distilled.json → checkpoints → shipped model against them.

pub mod architecture;
pub mod checkpoint;
pub mod lineage;
pub mod safetensors_header;
pub mod tokenizer;
