//! `dlm-data mcq`: sciq train / mmlu auxiliary_train → lettered MCQ items, the stage-2 SFT set
//! and the stage-3 prompts.jsonl.
//!
//! Input is what `fetch` locked: the lock beside the manifest names each source's commit and
//! files; each file is read from `Cache::snapshot_path` after its sha256 is checked against
//! the lock. Eval splits and eval-reference sources are refused before anything is read.
//!
//! - [`item`]: the item, letters A–J, the seeded shuffle placing sciq's correct answer;
//! - [`read`]: sciq / mmlu parquet schemas → items; [`crate::sources::columns`]: Arrow accessors;
//! - [`template`]: the prompt template shared by stages 2 and 3;
//! - [`prompts`]: prompts.jsonl (contract 5); [`sft`] + [`sft_shards`]: the SFT shards,
//!   written by the shared [`crate::shards`] writers with their index.json (contract 4);
//! - [`tokenizer`]: tokenizer + EOS.

pub mod card;
pub mod item;
pub mod load;
pub mod merge;
pub mod prompts;
pub mod read;
pub mod settings;
pub mod sft;
mod sft_set;
pub mod sft_shards;
pub mod sft_write;
mod steps;
pub mod template;
pub mod tokenizer;
pub mod uptodate;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::shards::outdir::{self, Claim};
use crate::shards::ShardFormat;

pub use load::{load_items, Loaded};

#[derive(Args, Debug, Clone)]
pub struct McqArgs {
    /// Manifest of the MCQ sources (manifests/mcq.toml); its lock must sit beside it.
    #[arg(long)]
    pub manifest: PathBuf,
    /// Output directory: prompts.jsonl, and sft/ when --tokenizer is given.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub cache: crate::hub::cache::CacheArg,
    /// tokenizer.json or its directory: also write the stage-2 SFT shards into OUT/sft/.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Shard format of OUT/sft/: parquet (part-NNNNN.parquet), mds (MosaicML Streaming,
    /// shard.NNNNN.mds.zstd) or megatron (part-NNNNN.bin/.idx; prompt and answer are the two
    /// sequences of each document, so the first sequence length is prompt_len).
    #[arg(long, value_enum, default_value = "parquet")]
    pub format: ShardFormat,
    /// Seed of the shuffle placing sciq's correct answer (a pure function of seed and item id).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Prompt template file (placeholders {question}, {options}, {letters}); default in docs/commands/mcq.md.
    #[arg(long)]
    pub template: Option<PathBuf>,
    /// Answer appended for stage 2 before EOS (placeholders {letter}, {answer}).
    #[arg(long, default_value = template::DEFAULT_ANSWER)]
    pub answer_template: String,
    /// EOS token (default: tokenizer_config.json's eos_token, else the first of <|endoftext|>,
    /// </s>, <eos>, <|end_of_text|> in tokenizer.json — the rule pack uses).
    #[arg(long)]
    pub eos_token: Option<String>,
    /// BOS token prepended to each SFT row, counted in prompt_len (default: tokenizer_config.json's
    /// bos_token when its add_bos_token is true, else none).
    #[arg(long, conflicts_with = "no_bos")]
    pub bos_token: Option<String>,
    /// No BOS, even when tokenizer_config.json says add_bos_token: true.
    #[arg(long)]
    pub no_bos: bool,
    /// What question / option text that equals an added token (`<|im_start|>`, the mask …)
    /// becomes in the SFT rows: `plain` text (default), the token (`split`; never the mask),
    /// or an error naming the file and row (`refuse`). The template's own text is encoded as is.
    #[arg(long, value_enum, default_value = "plain")]
    pub special_tokens_in_text: crate::added_text::SpecialTokensInText,
    /// The diffusion mask token no item text may become (default: tokenizer_config.json
    /// `mask_token`, when in the vocabulary).
    #[arg(long)]
    pub mask_token: Option<String>,
    /// Longest SFT row in tokens; longer items are left out of the SFT set and counted.
    #[arg(long, default_value_t = 2048, value_parser = crate::sizes::tokens())]
    pub seq_len: usize,
    /// SFT rows per shard file.
    #[arg(long, default_value_t = 100_000, value_parser = crate::sizes::usize_in(1, crate::sizes::MAX_ROWS_PER_SHARD))]
    pub rows_per_shard: usize,
    #[command(flatten)]
    pub worker: crate::worker::WorkerArgs,
    /// Items larger than this (question plus options, UTF-8 bytes) are skipped and named in the
    /// log and the `--json` summary.
    #[arg(long, value_parser = crate::pack::parse_bytes, default_value = "1MiB")]
    pub max_item_bytes: u64,
    /// Replace dlm-data's own files in --out (prompts.jsonl, OUT/sft shards and index.json)
    /// that no journal there accounts for, instead of refusing; never any other file.
    #[arg(long)]
    pub force: bool,
    /// Print a one-line JSON summary on stdout at the end (items, skipped rows with reasons).
    /// Set from the global `--json` by the CLI (not a flag of its own).
    #[arg(skip)]
    pub json: bool,
    #[command(flatten)]
    pub threads: crate::tuning::ThreadsArg,
}

/// Worker parts only: the `--rows-per-shard` of the run, an index.json key `merge` reads.
pub const PART_ROWS_PER_SHARD: &str = "rows_per_shard";

/// The flags resolved ([`settings`]), then the run: on a local directory, or on a staging
/// directory committed to the bucket `--out` names ([`crate::storage::output`]: the SFT
/// shards as they are journaled, then prompts.jsonl and the card, `sft/index.json` last; without
/// `--tokenizer`, the card then prompts.jsonl).
pub fn run(args: McqArgs) -> Result<()> {
    let st = settings::McqSettings::resolve(&args)?;
    let Some(url) = st.bucket.clone() else {
        return run_local(st);
    };
    let shape = if st.tokenizer.is_some() {
        crate::storage::output::Shape {
            index_dir: Some("sft"),
            files: &["prompts.jsonl", crate::shards::card::CARD_FILE],
        }
    } else {
        crate::storage::output::Shape {
            index_dir: None,
            files: &[crate::shards::card::CARD_FILE, "prompts.jsonl"],
        }
    };
    let whole = crate::worker::WorkerSlice::WHOLE;
    crate::storage::output::run_shaped(&url, whole, "mcq", shape, |staging| {
        run_local(settings::McqSettings { out: staging, ..st })
    })?;
    Ok(())
}

/// The run, step by step ([`steps`], [`load`], [`sft_set`]), into a local directory.
fn run_local(st: settings::McqSettings) -> Result<()> {
    let (args, slice) = (&st, st.slice);
    // 1. Paths, manifest, one writer, policy, templates, lock, tokenizer.
    let o = steps::open(args)?;
    let out = args.out_dir();
    let prompts_path = out.join("prompts.jsonl");
    let sft_dir = out.join("sft");
    let settings = steps::fingerprint(args, &o)?;
    if let Some(want) = &settings {
        let manifest_abs = crate::shards::index::abs_path(&o.m.path);
        match uptodate::check(&sft_dir, &prompts_path, &manifest_abs, want) {
            Ok(()) => return up_to_date(args, &out, &prompts_path, Some(&sft_dir)),
            Err(why) => tracing::debug!("{}: not up to date: {why}", sft_dir.display()),
        }
    }
    // 2. The items of every locked file; this worker's share.
    let mut loaded = load_items(&o.m, &o.lock, &o.cache, args.seed, args.max_item_bytes)?;
    let ranges = std::mem::take(&mut loaded.ranges);
    let items = steps::worker_items(std::mem::take(&mut loaded.items), slice);
    let records: Vec<prompts::PromptRecord> = items
        .iter()
        .map(|it| prompts::PromptRecord::from_item(it, &o.templates))
        .collect();
    // Prompts only: rewritten only when their bytes would change.
    if o.tok.is_none() && std::fs::read(&prompts_path).is_ok_and(|b| b == prompts::encode(&records))
    {
        return up_to_date(args, &out, &prompts_path, None);
    }
    // 3. The output claimed; prompts.jsonl.
    let reports = steps::claim(args, &o, &out, &prompts_path, &sft_dir)?;
    crate::signals::check()?;
    steps::write_prompts(&prompts_path, &records, &reports)?;
    // 4. The SFT set.
    let sft_summary = match &o.tok {
        Some(tok) => {
            let job = sft_set::SftJob {
                args,
                slice,
                o: &o,
                tok,
                items: &items,
                loaded: &loaded,
                settings: settings.as_ref(),
                sft_dir: &sft_dir,
                prompts_path: &prompts_path,
                reports: &reports,
                row_groups: args.tuning.row_groups,
            };
            sft_set::write(&job, ranges)?
        }
        None => serde_json::Value::Null,
    };
    // The output's card (a whole run's: a worker's part is not an output of its own).
    if slice.is_whole() {
        card::write(&out, &records)?;
    }
    steps::summary(
        args,
        slice,
        &out,
        &prompts_path,
        records.len(),
        &loaded,
        sft_summary,
    );
    Ok(())
}

/// A rerun of an identical, complete run: nothing is read beyond the journal and nothing is
/// written. The `--json` summary says so (`"up_to_date": true`) with the recorded counts.
fn up_to_date(
    args: &settings::McqSettings,
    out: &std::path::Path,
    prompts_path: &std::path::Path,
    sft_dir: Option<&std::path::Path>,
) -> Result<()> {
    tracing::info!(
        "up to date: {} was written by an identical mcq run on the same inputs; nothing to do",
        out.display()
    );
    if args.json {
        let items = std::fs::read(prompts_path)
            .with_context(|| format!("reading {}", prompts_path.display()))?
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count();
        let sft = match sft_dir.and_then(outdir::own_index) {
            Some(i) => serde_json::json!({
                "dir": sft_dir.map(|d| d.display().to_string()),
                "rows": i.totals.rows,
                "tokens": i.totals.tokens,
                "shards": i.shards.len(),
            }),
            None => serde_json::Value::Null,
        };
        crate::cron::json_line(serde_json::json!({
            "up_to_date": true,
            "out": out.display().to_string(),
            "prompts": prompts_path.display().to_string(),
            "items": items,
            "sft": sft,
        }));
    }
    Ok(())
}

/// `claim` extended with what an earlier `mcq` or `merge` run left in `sft_dir`, per its
/// index: its shards, and the decontam report about them (kept when `keep_report`, else
/// removable); after an interrupted run also the one shard renamed before it was journaled.
fn claim_sft(claim: Claim, sft_dir: &std::path::Path, keep_report: bool) -> Claim {
    let Some(old) = outdir::own_index(sft_dir) else {
        return claim;
    };
    let claim = claim.remove(outdir::journal_files(&old));
    let claim = if keep_report {
        claim.keep([outdir::DECONTAM_REPORT])
    } else {
        claim.remove([outdir::DECONTAM_REPORT])
    };
    if old.complete {
        claim
    } else {
        claim.remove(outdir::shard_files(old.format, old.shards.len()))
    }
}
