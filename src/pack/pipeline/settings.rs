//! Why the pack steps never read the clap struct: every flag a step after setup needs is
//! resolved once here ([`RunSettings::resolve`]: the worker slice, the read bounds' defaults,
//! the rule between `--tokens` and `--shard`) and passed down typed. Setup builds the recorded
//! half from it — `index.json`'s `args` ([`crate::shards::settings::PackSettings`], the resume
//! fingerprint) — so a default or a bound decided here cannot disagree with itself.
//! (`--seq-len`'s range is checked once, by its parser `crate::sizes::tokens`.)

use std::path::PathBuf;

use anyhow::Result;

use crate::bounded::{Bound, ReadBounds};
use crate::hub::cache::CacheArg;
use crate::hub::retry::RetryPolicy;
use crate::pack::{DtypeArg, MissingText, PackArgs};
use crate::shards::settings::Packing;
use crate::shards::ShardFormat;
use crate::tokenize::BoundaryFlags;
use crate::worker::WorkerSlice;

/// The flags of one pack run, resolved.
#[derive(Debug, Clone)]
pub(in crate::pack) struct RunSettings {
    /// `--out` (a worker writes `OUT/parts/IIIII-of-NNNNN`).
    pub out: PathBuf,
    /// This process's slice (`--shard`, else the array environment, else the whole job).
    pub worker: WorkerSlice,
    pub seq_len: usize,
    /// `--format` of the output (a worker's parts are parquet whatever this says).
    pub format: ShardFormat,
    /// The flags recorded in `index.json`'s `args` as they are.
    pub packing: Packing,
    /// `--zstd-level` was given (else a rerun continues at the level its output records).
    pub zstd_level_given: bool,
    pub strict_mixture: bool,
    /// One input row's bound while it is read (`--max-row-bytes`, else the default), and a
    /// compressed parquet input's decompressed copy's (`--max-decompressed-bytes`).
    pub read_bounds: ReadBounds,
    pub on_missing_text: MissingText,
    pub tokenizer: PathBuf,
    /// `--input` files were given (not `--manifest`).
    pub from_input: bool,
    /// `--text-column`, recorded with `--input` when `--text` is not given.
    pub text_column: Option<String>,
    /// `--text`, with `--input`.
    pub text: Option<String>,
    pub force: bool,
    pub json: bool,
    /// `--strict`: warnings a nightly job wants fatal are errors (see `pack::strict`).
    pub strict: bool,
    /// The `--input` values, each a local path or a URL (`s3://`, `gs://`, `az://`,
    /// `hf://datasets/…`), parsed once here.
    pub inputs: Vec<crate::storage::Location>,
    /// `--threads`, the pool it built and every count derived from it.
    pub tuning: crate::tuning::Tuning,
    /// `--manifest` (else `--input`).
    pub manifest: Option<PathBuf>,
    /// `--cache` (the cache root the manifest's sources were fetched into).
    pub cache: CacheArg,
    /// `--log` (with `--stream` or an hf:// input: the download log).
    pub log: Option<PathBuf>,
    /// The Hub's retry budget (`--retries`, `--retry-base-ms`) when the Hub is read: with
    /// `--stream`, or for `--input hf://…` files.
    pub hub_retry: Option<RetryPolicy>,
    /// The `--input` text template: `--text`, else `{COLUMN}` of `--text-column`.
    pub text_template: String,
    /// The tokenizer's document-boundary flags and pack's own (`--eos-token`, `--bos`, …,
    /// `--no-fast-tokenizer`, `--special-tokens-in-text`, `--mask-token`).
    pub boundary: BoundaryFlags,
    /// `--dtype`, checked against the format and the vocabulary by setup.
    pub dtype: DtypeArg,
}

impl RunSettings {
    /// Every flag the steps read, checked and defaulted before any file is opened.
    pub fn resolve(a: &PackArgs) -> Result<RunSettings> {
        let worker = a.worker.resolve()?;
        if !worker.is_whole() && a.tokens.is_some() {
            return Err(crate::error::usage(
                "--tokens cannot be combined with --shard I/N: budgets depend on the tokens of files other workers own; apply the budget in one process",
            ));
        }
        let from_input = !a.input.is_empty();
        let inputs = a
            .input
            .iter()
            .map(|p| crate::storage::Location::of_path(p, "--input"))
            .collect::<Result<Vec<_>>>()?;
        let retry = RetryPolicy {
            retries: a.retries,
            base: std::time::Duration::from_millis(a.retry_base_ms.max(1)),
            max: std::time::Duration::from_secs(60),
        };
        let from_hub = inputs
            .iter()
            .any(|l| matches!(l, crate::storage::Location::Hub(_)));
        if a.log.is_some() && !a.stream && !from_hub {
            return Err(crate::error::usage(
                "--log is the download log of Hub reads: give it with --stream or an hf:// --input",
            ));
        }
        // Parquet pages take the level: a whole run's parquet output, or any worker's parts.
        let parquet = a.format == ShardFormat::Parquet || !worker.is_whole();
        if a.zstd_level.is_some() && a.format != ShardFormat::Parquet {
            return Err(crate::error::usage(format!(
                "--zstd-level sets parquet shards' compression; --format {} does not take it",
                a.format.name()
            )));
        }
        let zstd_level =
            parquet.then(|| a.zstd_level.unwrap_or(crate::shards::parquet::ZSTD_LEVEL));
        let row_limit = a
            .max_row_bytes
            .unwrap_or_else(|| crate::sources::ROW_BYTES.max(a.max_doc_bytes.saturating_mul(2)));
        Ok(RunSettings {
            out: a.out.clone(),
            worker,
            seq_len: a.seq_len,
            format: a.format,
            packing: Packing {
                shuffle_seed: a.shuffle_seed,
                pad_last: a.pad_last,
                tokens: a.tokens,
                shard_bytes: a.shard_bytes,
                max_doc_bytes: a.max_doc_bytes,
                max_word_bytes: a.max_word_bytes,
                on_oversize: a.on_oversize,
                zstd_level,
                paragraphs: a.paragraphs,
            },
            zstd_level_given: a.zstd_level.is_some(),
            strict_mixture: a.strict_mixture,
            read_bounds: ReadBounds {
                // `--on-oversize skip` covers a row over its read bound too (JSON Lines).
                row: match a.on_oversize {
                    crate::shards::settings::Oversize::Skip => {
                        Bound::new(row_limit, "--max-row-bytes").skipping()
                    }
                    _ => Bound::new(row_limit, "--max-row-bytes"),
                },
                decompressed: Bound::new(a.max_decompressed_bytes, "--max-decompressed-bytes"),
                paragraphs: a.paragraphs,
            },
            on_missing_text: a.on_missing_text,
            tokenizer: a.tokenizer.clone(),
            from_input,
            text_column: (from_input && a.text.is_none()).then(|| a.text_column.clone()),
            text: a.text.clone().filter(|_| from_input),
            force: a.force,
            json: a.json,
            strict: a.strict,
            inputs,
            tuning: crate::tuning::Tuning::resolve(a.threads)?,
            manifest: a.manifest.clone(),
            cache: a.cache.clone(),
            log: a.log.clone(),
            hub_retry: (a.stream || from_hub).then_some(retry),
            text_template: match &a.text {
                Some(t) => t.clone(),
                None => format!("{{{}}}", a.text_column),
            },
            boundary: BoundaryFlags {
                boundary: crate::tokenize::files::Flags {
                    eos_token: a.eos_token.clone(),
                    no_eos: a.no_eos,
                    bos: a.bos,
                    bos_token: a.bos_token.clone(),
                    no_bos: a.no_bos,
                },
                no_fast: a.no_fast_tokenizer,
                mode: a.special_tokens_in_text,
                mask_token: a.mask_token.clone(),
            },
            dtype: a.dtype,
        })
    }

    /// `--out`, or `--out/parts/IIIII-of-NNNNN` for a worker.
    pub fn out_dir(&self) -> PathBuf {
        self.worker.out_dir(&self.out)
    }

    /// The format this process writes: `--format`, or parquet for a worker's part (an
    /// intermediate with exact ids and document boundaries; `merge` writes the requested one).
    pub fn part_format(&self) -> ShardFormat {
        if self.worker.is_whole() {
            self.format
        } else {
            ShardFormat::Parquet
        }
    }
}
