//! `dlm-data` prepares all training data for converting an autoregressive LLM into a
//! masked-diffusion LLM. The data path, one module per stage:
//!
//! 1. [`hub`] — `fetch`: declared corpora from the Hugging Face Hub at pinned commits, eval
//!    splits refused by [`policy`] before a byte is downloaded, every download logged and
//!    checksummed into the cache and the lock ([`manifest`]).
//! 2. [`sources`] — streaming readers (parquet, JSON array, JSONL) turning files into
//!    documents with [`provenance`].
//! 3. [`pack`] — tokenize in parallel ([`tokenize`]: the tokenizer library, one folder per
//!    stage), pack fixed-length rows, write [`shards`] (parquet, MDS, Megatron) with an index.
//! 4. [`mcq`] — stage-2 SFT set and stage-3 prompts from sciq/mmlu; [`decontam`] against
//!    benchmark eval sets; [`audit`] proves the provenance chain.
//! 5. [`teacher`] + [`distill`] — the masked-diffusion teacher and LLaDA's block-wise sampler,
//!    writing `distilled.json`; `gpu` (feature `cuda`) runs it with custom CUDA kernels.
//!    [`sampling`] holds what the three share (the sampler's settings and randomness).
//! 6. [`model`] — the model half of the chain: architecture.json of the pinned base (written
//!    by `fetch`), checkpoint digests, lineage.json (`lineage add`), checked by `audit`.
//! 7. [`worker`] + [`merge`] — deterministic disjoint slices for Slurm/Kubernetes arrays, and
//!    merging their outputs into exactly what one process would have written.
//! 8. [`run`] — `dlm-data run PIPELINE.toml`: the stages above from one file, in order,
//!    complete steps skipped, ending with the audit verdict.
//!
//! 9. [`inspect`] — any output as a trainer would see it: decoded rows, counts, histogram.
//!
//! [`storage`] lets a path be a bucket URL (`s3://`, `gs://`, `az://`): one `Location` type,
//! a lease per bucket output, uploads that follow the local journal, `index.json` last.
//!
//! [`fixtures`] generates the project's own test data in the real layouts: six datasets for
//! the hub emulator, a trained tokenizer, a tiny random teacher. [`sizes`] bounds every
//! size-like flag; [`util`], [`error`] and [`secret`] serve every stage; [`added_text`] holds
//! the rule that text from data never becomes an added (control or mask) token; [`build_info`]
//! the tool build (version, commit, features) every output records; [`digest`] the
//! one digest rule (any case read, lowercase held); [`cron`] the
//! one-JSON-line-on-every-exit contract of `--json`; [`tokenize::files`]
//! the tokenizer's files read once and the EOS/BOS/mask/pad rules every stage shares; [`lock`] (one
//! writer per output, never an input overwritten) and [`signals`] (stop at a safe point) guard
//! every command that writes; [`tuning`] decides once how many threads a command uses and
//! every count derived from it (no step asks the pool or the environment). No two top-level
//! modules import each other in a circle (tests/architecture.rs, docs/architecture.md).

pub mod added_text;
pub mod audit;
pub mod bounded;
pub mod build_info;
pub mod cli;
pub mod cron;
pub mod decontam;
pub mod digest;
pub mod distill;
pub mod error;
pub mod fixtures;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod hub;
pub mod inspect;
pub mod lock;
pub mod manifest;
pub mod mcq;
pub mod merge;
pub mod model;
pub mod pack;
pub mod policy;
pub mod progress;
pub mod provenance;
pub mod run;
pub mod sampling;
pub mod secret;
pub mod shards;
pub mod signals;
pub mod sizes;
pub mod sources;
pub mod storage;
pub mod teacher;
#[cfg(test)]
mod testkit;
pub mod tokenize;
pub mod tuning;
pub mod util;
pub mod worker;
