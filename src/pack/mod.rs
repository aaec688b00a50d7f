//! `dlm-data pack`: stream sources, tokenize in parallel, pack fixed-length rows, write shards.
//!
//! Data path: [`plan`] orders the input files (units) → a reader thread streams each unit's
//! rows through [`crate::sources`] → the main thread tokenizes batches of documents with
//! rayon ([`crate::tokenize`], [`crate::tokenize::bpe`]) and feeds the [`packer`] in document order → a writer thread
//! hands each finished shard to an encoder, and a committer thread writes it durably and
//! journals it in `index.json` ([`resume`]).
//! Output order never depends on the thread count: batches are tokenized in parallel but
//! consumed in order.
//!
//! # Workers (`--shard I/N`) and merging
//! Worker `I` of `N` takes the units `k` with `k % N == I` of the global unit order (whole
//! files) and writes into `OUT/parts/IIIII-of-NNNNN/`. The single-process token stream is
//! the concatenation, in global unit order, of each unit's documents (`[BOS] ids EOS`); a
//! unit's stream does not depend on anything outside the unit. So a worker packs each unit
//! as its own *segment*: the unit's first row starts at a row boundary and its last row is
//! short (never padded, never dropped); the part's provenance entry for the unit gives its
//! rows `[out_row_start, out_row_end)`. The merge rule: for units in global order (the part
//! index's `units` list), concatenate the segments' tokens and document boundaries, re-cut
//! into `seq_len` rows with the same [`packer::Packer`], then drop/pad the final tail and
//! shuffle per shard as the flags say; that is exactly the single-process output. Workers
//! therefore never shuffle or drop (the merge does), and `--tokens` budgets are refused with
//! `--shard` (they depend on the tokens of earlier units of the source).
//!
//! # `--stream`: reading from the Hub without downloading
//! With `--manifest M --stream`, [`remote`] reads each unit straight from the Hub through the
//! fetch client ([`crate::hub::stream`]): parquet as an `AsyncFileReader` (the footer by one
//! suffix range whose bytes are kept, then only the template's column chunks of each row
//! group), JSON/JSONL by sequential 8 MiB ranges; retries, redirects and auth are `fetch`'s.
//! Memory stays bounded (one row group's projected chunks, or one JSON chunk). The lock
//! beside the manifest pins commits and files when present; otherwise the sources are resolved
//! on the Hub exactly as `fetch` does, and the split policy is applied before any request
//! (eval-reference sources and eval splits) and to the listed files. Each streamed file gets
//! one download.log line (`"streamed": true`, `bytes` actually read, `"verified": false` and a
//! `note`: a sha256 needs the whole file); the Hub's size/etag of each file is checked against
//! the lock or listing. The output is identical to `fetch` + `pack` on the same data; only
//! `lock_sha256` (top level and in the resume fingerprint `args`) differs when no lock exists.
//! A transport error that corrupts bytes without failing the request cannot be detected for a
//! streamed range (no checksum covers a range); use `fetch` where byte-level verification is
//! required.
//!
//! # The output directory
//! `--out` is claimed before anything is written ([`crate::shards::outdir`]): a run deletes or
//! overwrites only files its own journal proves it wrote — on resume, the one shard an
//! interrupted writer renamed before journaling it, and `.NAME.tmp*` temp files. A fresh run
//! into a directory holding anything else is refused naming the file (exit 2); `--force`
//! clears dlm-data's own formats (index.json, part-*/shard.* shards), never an input and never
//! any other file. On a write failure (a full disk) the error names the file and the OS error,
//! no temp file is left, and index.json stays `"complete": false`.

pub mod inputs;
pub mod merge;
pub mod oversize;
pub mod packer;
pub mod pipeline;
pub mod plan;
pub mod remote;
pub mod resume;
pub mod strict;

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::shards::ShardFormat;

/// Token id width for MDS/Megatron shards (parquet is always uint32).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DtypeArg {
    /// uint16 when every id of the vocabulary fits, else uint32.
    Auto,
    Uint32,
    Uint16,
}

pub use crate::shards::settings::Oversize;

pub use crate::sizes::parse_bytes;

/// `dlm-data pack (--manifest FILE | --input PATH... [--text-column NAME | --text TEMPLATE]) --tokenizer PATH --out DIR ...`
#[derive(Args, Debug, Clone)]
pub struct PackArgs {
    /// A manifest (manifests/*.toml): the sources and their mixture weights, read from the fetched lock.
    #[arg(long, conflicts_with = "input", required_unless_present = "input")]
    pub manifest: Option<PathBuf>,
    /// Data instead of a manifest: a file, a directory (its files, recursively) or a glob;
    /// repeatable. .parquet, .json (one array), .jsonl, .txt, each also as .gz or .zst. Also
    /// a bucket URL (s3://, gs://, az://: an object, a prefix or a glob) or
    /// hf://datasets/OWNER/NAME@REV/PATH (@REV optional; a file or a glob), read in place by range.
    #[arg(long)]
    pub input: Vec<PathBuf>,
    /// With --input: the column (parquet) or field (JSON) holding the text.
    #[arg(long, default_value = "text")]
    pub text_column: String,
    /// A `.txt` input's blank-line-separated paragraphs are each a document (default: a
    /// `.txt` file is one document).
    #[arg(long)]
    pub paragraphs: bool,
    /// With --input: a text template over columns/fields instead of --text-column, as
    /// manifests' `text` ("{title}\n\n{body}", nested fields as "{meta.lang}", "{{" for "{").
    #[arg(long, requires = "input", conflicts_with = "text_column")]
    pub text: Option<String>,
    /// tokenizer.json, or a directory holding it (and tokenizer_config.json).
    #[arg(long)]
    pub tokenizer: PathBuf,
    /// Output directory: shards, index.json and the resume journal.
    #[arg(long)]
    pub out: PathBuf,
    /// Tokens per row (1 to 2^20).
    #[arg(long, default_value_t = 2048, value_parser = crate::sizes::tokens())]
    pub seq_len: usize,
    /// Shard format: parquet, mds (MosaicML streaming) or megatron (.bin/.idx).
    #[arg(long, value_enum, default_value = "parquet")]
    pub format: ShardFormat,
    /// EOS token (default: tokenizer_config.json's eos_token, else the first of <|endoftext|>,
    /// </s>, <eos>, <|end_of_text|> in tokenizer.json; the rule is in docs/commands/pack.md).
    #[arg(long)]
    pub eos_token: Option<String>,
    /// Do not append EOS after each document.
    #[arg(long, conflicts_with = "eos_token")]
    pub no_eos: bool,
    /// Prepend the tokenizer's BOS (tokenizer_config.json bos_token) to each document, whatever
    /// its add_bos_token says (BOS is prepended by default when add_bos_token is true).
    #[arg(long, conflicts_with = "no_bos")]
    pub bos: bool,
    /// Prepend this token to each document.
    #[arg(long, conflicts_with = "no_bos")]
    pub bos_token: Option<String>,
    /// No BOS, even when tokenizer_config.json says add_bos_token: true.
    #[arg(long)]
    pub no_bos: bool,
    /// Shuffle rows with this seed (within each shard: bounded memory). Off by default.
    #[arg(long)]
    pub shuffle_seed: Option<u64>,
    #[command(flatten)]
    pub worker: crate::worker::WorkerArgs,
    #[command(flatten)]
    pub cache: crate::hub::cache::CacheArg,
    /// Read straight from the Hub by HTTP Range instead of the cache (manifest parquet/JSON
    /// sources; the lock beside the manifest is used when present).
    #[arg(long, requires = "manifest", conflicts_with = "input")]
    pub stream: bool,
    /// With --stream or an hf:// --input: the download log (default: <cache>/download.log).
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// With --stream or an hf:// --input: failed attempts tolerated per request before giving up.
    #[arg(long, default_value_t = 8, value_parser = crate::sizes::u32_in(0, crate::sizes::MAX_RETRIES))]
    pub retries: u32,
    /// With --stream or an hf:// --input: first retry backoff in milliseconds (doubles each
    /// retry, capped at 60 s).
    #[arg(long, default_value_t = 500, value_parser = crate::sizes::u64_in(0, crate::sizes::MAX_RETRY_BASE_MS))]
    pub retry_base_ms: u64,
    /// Keep the final partial row, padded (pad token: <|pad|>/tokenizer_config pad_token, else EOS).
    #[arg(long)]
    pub pad_last: bool,
    /// Token budget over all sources (10B, 500M, ...), split by manifest weight. A source
    /// that runs out before its share is warned about and reported in index.json
    /// (`totals.mixture`).
    #[arg(long, value_parser = plan::parse_count)]
    pub tokens: Option<u64>,
    /// With --tokens: a source that cannot supply its weighted share is an error (exit 1,
    /// index.json left incomplete) instead of a warning.
    #[arg(long, requires = "tokens")]
    pub strict_mixture: bool,
    /// Warnings a nightly job wants fatal are errors (exit 1, index.json left incomplete): an
    /// `--input` file contributing 0 documents, no documents at all, rows skipped for a missing
    /// text field or as oversized, a `--tokens` source short of its share.
    #[arg(long)]
    pub strict: bool,
    /// Target shard size in token bytes (rows per shard = this / (seq-len * 4)). Peak memory is
    /// about 4x this (rows being packed, the shard being written, its arrow copy and encoding),
    /// whatever the corpus size.
    #[arg(long, value_parser = parse_bytes, default_value = "32MiB")]
    pub shard_bytes: u64,
    /// Print a one-line JSON summary on stdout at the end.
    /// Set from the global `--json` by the CLI (not a flag of its own).
    #[arg(skip)]
    pub json: bool,
    #[command(flatten)]
    pub threads: crate::tuning::ThreadsArg,
    /// Token width for mds/megatron shards.
    #[arg(long, value_enum, default_value = "uint32")]
    pub dtype: DtypeArg,
    /// zstd level of parquet shards' pages, 1 (fastest, the default) to 22 (smallest). Level 3,
    /// the default before, made shards ~5 % smaller for ~10 % more pack CPU.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=22))]
    pub zstd_level: Option<u8>,
    /// Documents larger than this (UTF-8 bytes) are oversized.
    #[arg(long, value_parser = parse_bytes, default_value = "32MiB")]
    pub max_doc_bytes: u64,
    /// Documents holding a run of non-whitespace longer than this (one pre-token, whose BPE
    /// memory grows ~75x its length) are oversized too.
    #[arg(long, value_parser = parse_bytes, default_value = "1MiB")]
    pub max_word_bytes: u64,
    /// Largest input row (a JSON line or array element) read, in bytes: a longer one ends the
    /// run naming the file and row, whatever --on-oversize says, having read no more than this
    /// (default: 64MiB, or twice --max-doc-bytes when that is more).
    #[arg(long, value_parser = parse_bytes)]
    pub max_row_bytes: Option<u64>,
    /// Largest a compressed parquet input (`.parquet.gz` / `.parquet.zst`) may decompress to
    /// in the temporary copy it is read from; a larger one ends the run naming the file.
    #[arg(long, value_parser = parse_bytes, default_value = "16GiB")]
    pub max_decompressed_bytes: u64,
    /// Policy for oversized documents.
    #[arg(long, value_enum, default_value = "fail")]
    pub on_oversize: Oversize,
    /// With --input: a JSON row without the text field(s) ends the run naming the file, the row
    /// and the fields it has (`fail`), or is skipped and counted in index.json's
    /// `totals.skipped_missing_text` (`skip`).
    #[arg(long, value_enum, default_value = "fail")]
    pub on_missing_text: MissingText,
    /// Always encode through the `tokenizers` crate (disable the exact fast BPE path).
    #[arg(long)]
    pub no_fast_tokenizer: bool,
    /// What a document's text that equals an added token (`<|endoftext|>`, `<|im_start|>`,
    /// the mask …) becomes: `plain` text (as if the token did not exist), the token's id
    /// (`split`, the `tokenizers` default; never the mask), or an error (`refuse`).
    #[arg(long, value_enum, default_value = "plain")]
    pub special_tokens_in_text: crate::added_text::SpecialTokensInText,
    /// The diffusion mask token, which no text may ever encode to (default: tokenizer_config.json
    /// `mask_token`, when there is one in the vocabulary).
    #[arg(long)]
    pub mask_token: Option<String>,
    /// Clear dlm-data's own files (index.json, part-*/shard.* shards) that no matching journal
    /// in --out accounts for, instead of refusing; never an input, never any other file.
    #[arg(long)]
    pub force: bool,
}

/// `--on-missing-text`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingText {
    Fail,
    Skip,
}

pub fn run(mut args: PackArgs) -> Result<()> {
    keep_freed_memory();
    match crate::storage::Location::of_path(&args.out, "--out")? {
        crate::storage::Location::Object(url) => run_to_bucket(args, &url),
        crate::storage::Location::Local(p) => {
            args.out = p;
            pipeline::run(pipeline::settings::RunSettings::resolve(&args)?).map(|_| ())
        }
        crate::storage::Location::Hub(_) => Err(crate::error::usage(
            "--out: an hf:// URL names an input; write to a local path or a bucket",
        )),
    }
}

/// `--out s3://...` (gs://, az://): the run on a staging directory, uploaded as it is
/// journaled and committed with `index.json` last ([`crate::storage::output`]).
fn run_to_bucket(args: PackArgs, url: &crate::storage::ObjectUrl) -> Result<()> {
    let t0 = std::time::Instant::now();
    let json = args.json;
    let worker = args.worker.resolve()?;
    let mut reads = Vec::new();
    let c = crate::storage::output::run(url, worker, "pack", |staging| {
        let local = PackArgs {
            out: staging,
            json: false,
            ..args
        };
        reads = pipeline::run(pipeline::settings::RunSettings::resolve(&local)?)?;
        Ok(())
    })?;
    if json {
        let out = std::path::PathBuf::from(c.url.to_string());
        let secs = t0.elapsed().as_secs_f64();
        let v = pipeline::summary_value(&c.index, &out, secs, c.already);
        crate::cron::json_line(pipeline::with_reads(v, reads));
    }
    Ok(())
}

/// glibc's malloc, told to keep what `pack` frees: the row-group and shard buffers (megabytes,
/// made and dropped per group) are otherwise mmapped fresh and unmapped each time, and the
/// kernel zeroes every page again (page faults were ~7 % of a 2-thread pack's CPU on a 2-core
/// box, sys time −0.1 s of 3.4 CPU-s, 200 MB prose). Peak memory is unchanged: only what was
/// already freed stays mapped, for the next allocation.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before the pipeline's threads.
    unsafe {
        // Allocations below this come from the heap, not their own mapping (glibc's ceiling).
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        // Free memory at the top of the heap is returned to the kernel above this.
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}
