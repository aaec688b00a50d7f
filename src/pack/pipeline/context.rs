//! What steps 3b (`feed.rs`, `chunked.rs`) read but never change: the flags, the tokenizer,
//! the units and the budgets shared with the reader, built once by `mod.rs`.

use std::sync::atomic::AtomicBool;

use super::settings::RunSettings;
use crate::pack::plan::Unit;
use crate::tokenize::DocTokenizer;

/// What the packing step reads but never changes.
pub(super) struct PackCtx<'a> {
    /// The run's flags, resolved ([`RunSettings::resolve`]).
    pub settings: &'a RunSettings,
    pub tok: &'a DocTokenizer,
    pub units: &'a [Unit],
    /// Per source: its `--tokens` budget is spent (shared with the reader, which stops early).
    pub exhausted: &'a [AtomicBool],
    /// A worker: each unit is packed as its own segment (see the `pack` module doc).
    pub segment_mode: bool,
    /// Hand the writer each parquet shard's rows as they close (see [`WriteMsg::Rows`](super::write::WriteMsg::Rows)).
    pub stream_rows: bool,
    /// `--pad-last`'s pad id.
    pub pad: Option<u32>,
    /// Every source of the plan (weights and `--tokens` budgets).
    pub sources: &'a [std::sync::Arc<crate::pack::plan::SourceInfo>],
}
