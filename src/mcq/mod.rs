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

pub mod item;
pub mod merge;
pub mod prompts;
pub mod read;
pub mod sft;
pub mod sft_shards;
pub mod sft_write;
pub mod template;
pub mod tokenizer;
pub mod uptodate;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::hub::cache::Cache;
use crate::manifest::{Lock, LockedSource, Manifest, Role};
use crate::shards::index::{Index, Kind, ProvenanceRange, Totals};
use crate::shards::outdir::{self, Claim};
use crate::shards::ShardFormat;
use crate::worker::WorkerSlice;
use item::McqItem;
use template::Templates;

#[derive(Args, Debug, Clone)]
pub struct McqArgs {
    /// Manifest of the MCQ sources (manifests/mcq.toml); its lock must sit beside it.
    #[arg(long)]
    pub manifest: PathBuf,
    /// Output directory: prompts.jsonl, and sft/ when --tokenizer is given.
    #[arg(long)]
    pub out: PathBuf,
    /// Cache root (default as in `fetch`).
    #[arg(long)]
    pub cache: Option<PathBuf>,
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
    /// This worker's share I/N of the items (default: the Slurm / Kubernetes array environment, else all).
    #[arg(long)]
    pub shard: Option<WorkerSlice>,
    /// With JOB_COMPLETION_INDEX (Kubernetes indexed jobs): the number of workers.
    #[arg(long, value_parser = crate::sizes::workers())]
    pub num_shards: Option<usize>,
    /// Items larger than this (question plus options, UTF-8 bytes) are skipped and named in the
    /// log and the `--json` summary.
    #[arg(long, value_parser = crate::pack::parse_bytes, default_value = "1MiB")]
    pub max_item_bytes: u64,
    /// Replace dlm-data's own files in --out (prompts.jsonl, OUT/sft shards and index.json)
    /// that no journal there accounts for, instead of refusing; never any other file.
    #[arg(long)]
    pub force: bool,
    /// Print a one-line JSON summary on stdout at the end (items, skipped rows with reasons).
    #[arg(long)]
    pub json: bool,
}

/// Worker parts only: the `--rows-per-shard` of the run, an index.json key `merge` reads.
pub const PART_ROWS_PER_SHARD: &str = "rows_per_shard";

/// Items read from the locked files, with per-file provenance ranges.
pub struct Loaded {
    pub items: Vec<McqItem>,
    pub ranges: Vec<ProvenanceRange>,
    pub skipped_empty: u64,
    pub skipped_oversize: u64,
    /// Items kept without their blank options.
    pub kept_without_blank: u64,
    /// Every row that gave no item: file, row, reason.
    pub skipped: Vec<read::Skipped>,
}

/// Most skipped rows named one by one in the log (all are in the `--json` summary).
const LOG_SKIPPED: usize = 20;

/// Refuse anything that is not a training source of a non-eval split (exit 2).
fn check_policy(m: &Manifest) -> Result<()> {
    for s in &m.sources {
        if s.role == Role::EvalReference {
            return Err(crate::error::refused(format!(
                "manifest {}: source {:?} has role eval-reference; benchmark sets are never prompted or trained on",
                m.path.display(),
                s.name
            )));
        }
        for name in [&s.split, &s.config] {
            if let Some(k) = crate::policy::eval_keyword(name) {
                return Err(crate::error::refused(format!(
                    "manifest {}: source {:?}: {name:?} is an evaluation split (keyword {k:?})",
                    m.path.display(),
                    s.name
                )));
            }
        }
    }
    Ok(())
}

/// Read every locked parquet file of every source, verifying sha256 against the lock.
pub fn load_items(
    m: &Manifest,
    lock: &Lock,
    cache: &Cache,
    seed: u64,
    max_item_bytes: u64,
) -> Result<Loaded> {
    check_policy(m)?;
    let lock_path = m.lock_path();
    let mut items = Vec::new();
    let mut ranges = Vec::new();
    let (mut skipped_empty, mut skipped_oversize, mut kept_without_blank) = (0, 0, 0);
    let mut skipped = Vec::new();
    for s in &m.sources {
        if s.is_local() {
            return Err(crate::error::usage(format!(
                "manifest {}: source {:?} is local (`path = …`): local sources are read by `pack` only; mcq reads Hub datasets",
                m.path.display(),
                s.name
            )));
        }
        let ls: &LockedSource = lock.source(&s.name).ok_or_else(|| {
            anyhow::anyhow!(
                "lock {}: source {:?} is not pinned; run `dlm-data fetch --manifest {}`",
                lock_path.display(),
                s.name,
                m.path.display()
            )
        })?;
        if ls.repo != s.repo || ls.role != Role::Train {
            anyhow::bail!(
                "lock {}: source {:?} is pinned to {} (role {:?}) but the manifest says {}; re-run fetch",
                lock_path.display(),
                s.name,
                ls.repo,
                ls.role,
                s.repo
            );
        }
        let mut files: Vec<_> = ls
            .files
            .iter()
            .filter(|f| f.path.ends_with(".parquet"))
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        if files.is_empty() {
            anyhow::bail!(
                "lock {}: source {:?} has no parquet files",
                lock_path.display(),
                s.name
            );
        }
        let id_prefix = format!("{}-{}", s.name, s.split);
        let mut row_offset = 0;
        for f in files {
            if let Some(k) = crate::policy::eval_keyword(&f.path) {
                return Err(crate::error::refused(format!(
                    "lock {}: source {:?} file {:?} is an evaluation file (keyword {k:?})",
                    lock_path.display(),
                    s.name,
                    f.path
                )));
            }
            let path = cache
                .locked_file(Role::Train, &ls.repo, &ls.commit, &f.path)
                .with_context(|| format!("lock {}: source {:?}", lock_path.display(), s.name))?;
            let sha = crate::util::sha256_file(&path).with_context(|| {
                format!(
                    "source {:?}: locked file {} not in the cache; run fetch",
                    s.name, f.path
                )
            })?;
            if sha != f.sha256 {
                anyhow::bail!(
                    "{}: sha256 {sha} does not match the lock ({}); the cache is corrupt, re-run fetch",
                    path.display(),
                    f.sha256
                );
            }
            let ctx = read::FileCtx {
                prov: crate::provenance::Provenance {
                    source: s.name.clone(),
                    repo: ls.repo.clone(),
                    commit: ls.commit.clone(),
                    file: f.path.clone(),
                    row: 0,
                },
                id_prefix: &id_prefix,
                row_offset,
                seed,
                max_item_bytes,
            };
            let before = items.len();
            let st = read::read_file(&path, &ctx, &mut items)?;
            row_offset += st.rows;
            skipped_empty += st.skipped_empty;
            skipped_oversize += st.skipped_oversize;
            kept_without_blank += st.kept_without_blank;
            ranges.push(ProvenanceRange {
                source: s.name.clone(),
                repo: ls.repo.clone(),
                commit: ls.commit.clone(),
                file: f.path.clone(),
                split: s.split.clone(),
                role: "train".into(),
                row_start: 0,
                row_end: st.rows,
                documents: (items.len() - before) as u64,
                out_row_start: None,
                out_row_end: None,
            });
            let kept_note = if st.kept_without_blank > 0 {
                format!(
                    "; {} kept without their blank options (listed in blank_options)",
                    st.kept_without_blank
                )
            } else {
                String::new()
            };
            tracing::info!(
                "{}: {} rows, {} items from {} ({} skipped{kept_note})",
                s.name,
                st.rows,
                st.items,
                f.path,
                st.skipped.len()
            );
            for k in &st.skipped[..st.skipped.len().min(LOG_SKIPPED)] {
                tracing::warn!(
                    "{}: {} row {}: skipped: {}",
                    s.name,
                    k.file,
                    k.row,
                    k.reason
                );
            }
            if st.skipped.len() > LOG_SKIPPED {
                tracing::warn!(
                    "{}: {}: {} more skipped rows (all listed by --json)",
                    s.name,
                    f.path,
                    st.skipped.len() - LOG_SKIPPED
                );
            }
            skipped.extend(st.skipped);
        }
    }
    Ok(Loaded {
        items,
        ranges,
        skipped_empty,
        skipped_oversize,
        kept_without_blank,
        skipped,
    })
}

fn out_dir(args: &McqArgs, slice: WorkerSlice) -> PathBuf {
    if slice.is_whole() {
        args.out.clone()
    } else {
        args.out.join("parts").join(slice.part_dir_name())
    }
}

pub fn run(args: McqArgs) -> Result<()> {
    let slice = WorkerSlice::resolve(args.shard, args.num_shards)?;
    // Before any work: paths recorded exactly, no input as the output, one writer.
    let given: Vec<(&str, &std::path::Path)> = [
        ("--out", Some(args.out.as_path())),
        ("--manifest", Some(args.manifest.as_path())),
        ("--tokenizer", args.tokenizer.as_deref()),
        ("--template", args.template.as_deref()),
        ("--cache", args.cache.as_deref()),
    ]
    .into_iter()
    .filter_map(|(f, p)| p.map(|p| (f, p)))
    .collect();
    crate::lock::require_utf8_all(given.iter().copied())?;
    let m = Manifest::load_data(&args.manifest)?;
    let lock_file = m.lock_path();
    let mut inputs: Vec<(&str, &std::path::Path)> = given[1..].to_vec();
    inputs.push(("lock", lock_file.as_path()));
    crate::lock::refuse_inputs("--out", &args.out, &inputs)?;
    let _lock = crate::lock::OutputLock::dir(&out_dir(&args, slice), "mcq")?;
    check_policy(&m)?;
    let templates = Templates::load(args.template.as_deref(), &args.answer_template)?;
    let lock_path = m.lock_path();
    let lock = Lock::load(&lock_path).with_context(|| {
        format!(
            "no usable lock beside the manifest; run `dlm-data fetch --manifest {}` first",
            m.path.display()
        )
    })?;
    let cache = Cache::resolve(args.cache.as_deref());
    let tok = match &args.tokenizer {
        Some(p) => Some(tokenizer::load(
            p,
            &crate::doc_tokens::Flags {
                eos_token: args.eos_token.clone(),
                bos_token: args.bos_token.clone(),
                no_bos: args.no_bos,
                ..Default::default()
            },
            args.mask_token.as_deref(),
            args.special_tokens_in_text,
        )?),
        None => None,
    };
    let out = out_dir(&args, slice);
    let prompts_path = out.join("prompts.jsonl");
    let sft_dir = out.join("sft");
    // The run's settings (the fingerprint a rerun must match to be a no-op).
    let settings = match &tok {
        Some(t) => Some(uptodate::McqSettings {
            manifest_sha256: crate::util::sha256_file(&m.path)?,
            lock_sha256: crate::util::sha256_file(&lock_path)?,
            seed: args.seed,
            prompt_template: templates.prompt_text.clone(),
            answer_template: templates.answer_text.clone(),
            max_item_bytes: args.max_item_bytes,
            tokenizer_sha256: t.info.sha256.clone(),
            eos_id: t.info.eos_id,
            bos: t.bos.clone(),
            mask: t.mask.clone(),
            special_tokens_in_text: t.mode,
            seq_len: args.seq_len,
            format: args.format,
            rows_per_shard: args.rows_per_shard,
        }),
        None => None,
    };
    if let Some(want) = &settings {
        let manifest_abs = crate::shards::index::abs_path(&m.path);
        match uptodate::check(&sft_dir, &prompts_path, &manifest_abs, want) {
            Ok(()) => return up_to_date(&args, &out, &prompts_path, Some(&sft_dir)),
            Err(why) => tracing::debug!("{}: not up to date: {why}", sft_dir.display()),
        }
    }
    let loaded = load_items(&m, &lock, &cache, args.seed, args.max_item_bytes)?;
    let mut ranges = loaded.ranges;
    // This worker's items: global item k belongs to worker k % N.
    let items: Vec<McqItem> = loaded
        .items
        .into_iter()
        .enumerate()
        .filter(|(k, _)| slice.owns(*k))
        .map(|(_, it)| it)
        .collect();
    let records: Vec<prompts::PromptRecord> = items
        .iter()
        .map(|it| prompts::PromptRecord::from_item(it, &templates))
        .collect();
    // Prompts only: rewritten only when their bytes would change.
    if tok.is_none() && std::fs::read(&prompts_path).is_ok_and(|b| b == prompts::encode(&records)) {
        return up_to_date(&args, &out, &prompts_path, None);
    }
    // Replace only what an earlier mcq run wrote there; never an input.
    let inputs: Vec<&std::path::Path> = [
        Some(args.manifest.as_path()),
        Some(lock_path.as_path()),
        args.template.as_deref(),
        args.tokenizer.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut claim = Claim::new("mcq", args.force)
        .keep(["sft"])
        .inputs(inputs.iter().copied());
    if prompts_path.is_file() && prompts::is_own_file(&prompts_path) {
        claim = claim.remove(["prompts.jsonl"]);
    }
    // decontam's report on prompts.jsonl, written beside it by the documented pipeline: this
    // tool's own file. Kept while it describes the prompts this run writes, removed (stale)
    // when they change.
    let prompts_report = out.join(outdir::prompts_decontam_report("prompts.jsonl"));
    let report_scanned = outdir::own_decontam_report(&prompts_report);
    if report_scanned.is_some() {
        claim = claim.keep([outdir::prompts_decontam_report("prompts.jsonl")]);
    }
    claim.apply(&out)?;
    // decontam's report on the SFT shards: kept while it describes the index written now.
    let sft_report = sft_dir.join(outdir::DECONTAM_REPORT);
    let sft_report_scanned = outdir::own_decontam_report(&sft_report);
    if args.tokenizer.is_some() {
        // The decontam report is removed after the write when the shards changed.
        let claim = Claim::new("mcq", args.force).inputs(inputs.iter().copied());
        claim_sft(claim, &sft_dir, sft_report_scanned.is_some()).apply(&sft_dir)?;
    }
    crate::signals::check()?;
    prompts::write(&prompts_path, &records)?;
    if let Some(scanned) = report_scanned {
        if crate::util::sha256_file(&prompts_path)? != scanned {
            std::fs::remove_file(&prompts_report)
                .with_context(|| format!("removing {}", prompts_report.display()))?;
            tracing::info!(
                "{}: removed: it describes other prompts than those written now (rerun decontam)",
                prompts_report.display()
            );
        }
    }
    crate::report::note(&format!(
        "prompts: {} items → {}",
        records.len(),
        prompts_path.display()
    ));

    let mut sft_summary = serde_json::Value::Null;
    if let Some(tok) = tok {
        let (rows, too_long, added) = sft::build_rows(&items, &templates, &tok, args.seq_len)?;
        if added.documents > 0 {
            tracing::warn!("sft: {}", added.summary("items"));
        }
        let kept: Vec<&sft::SftRow> = rows.iter().flatten().collect();
        std::fs::create_dir_all(&sft_dir)
            .with_context(|| format!("creating {}", sft_dir.display()))?;
        let dtype = crate::shards::Dtype::U32;
        let mut extra = BTreeMap::new();
        if let Some((t, _)) = &tok.bos {
            // Only with a BOS, so outputs without one keep their bytes.
            extra.insert("bos_token".into(), serde_json::json!(t));
        }
        extra.insert(
            "mcq".into(),
            serde_json::json!({
                "seed": args.seed,
                "prompt_template": templates.prompt_text,
                "answer_template": templates.answer_text,
                "prompts_sha256": crate::util::sha256_file(&prompts_path)?,
                "worker": slice.to_string(),
                "columns": {"id": "utf8", "input_ids": "list<uint32>", "prompt_len": "uint32", "length": "uint32", "source": "utf8", "repo": "utf8", "commit": "utf8", "file": "utf8", "row": "uint32"},
            }),
        );
        // The journal: written incomplete before the first shard and after each one, so a
        // rerun after a crash may replace exactly the files it lists.
        let mut index = Index {
            version: 1,
            tool: Index::tool_name(),
            kind: Kind::Sft,
            format: args.format,
            seq_len: args.seq_len as u64,
            dtype,
            tokenizer: tok.info.clone(),
            shards: Vec::new(),
            totals: Totals::default(),
            provenance: Vec::new(),
            manifest: Some(crate::shards::index::abs_path(&m.path)),
            lock_sha256: Some(crate::util::sha256_file(&lock_path)?),
            complete: false,
            args: None,
            extra,
        };
        if let Some(st) = &settings {
            index
                .extra
                .insert(uptodate::KEY.into(), serde_json::to_value(st)?);
        }
        if !slice.is_whole() {
            // merge re-cuts the rows into shards of this size (a part may hold one shard).
            index
                .extra
                .insert(PART_ROWS_PER_SHARD.into(), args.rows_per_shard.into());
        }
        let mds_entries =
            sft_write::write_shards(&sft_dir, &mut index, &kept, args.rows_per_shard)?;
        // Provenance documents count what reached the SFT set, per file.
        let mut per_file: BTreeMap<(String, String), u64> = BTreeMap::new();
        for (it, r) in items.iter().zip(&rows) {
            if r.is_some() {
                *per_file
                    .entry((it.prov.source.clone(), it.prov.file.clone()))
                    .or_default() += 1;
            }
        }
        for r in &mut ranges {
            r.documents = per_file
                .get(&(r.source.clone(), r.file.clone()))
                .copied()
                .unwrap_or(0);
        }
        let counts = sft_write::Counts {
            skipped_empty: loaded.skipped_empty,
            too_long,
            skipped_oversize: loaded.skipped_oversize,
            kept_without_blank: loaded.kept_without_blank,
            added: added.clone(),
        };
        index.totals = sft_write::totals(&kept, &index, &counts)?;
        index.provenance = ranges;
        sft_write::save_complete(&sft_dir, &mut index, &mds_entries)?;
        if let Some(scanned) = &sft_report_scanned {
            let index_sha =
                crate::util::sha256_file(&sft_dir.join(crate::shards::index::INDEX_FILE))?;
            if &index_sha != scanned && sft_report.is_file() {
                std::fs::remove_file(&sft_report)
                    .with_context(|| format!("removing {}", sft_report.display()))?;
                tracing::info!(
                    "{}: removed: it describes other shards than those written now (rerun decontam)",
                    sft_report.display()
                );
            }
        }
        let tokens = index.totals.tokens;
        crate::report::note(&format!(
            "sft: {} rows, {} tokens ({} over --seq-len {} left out) → {}",
            kept.len(),
            tokens,
            too_long,
            args.seq_len,
            sft_dir.display()
        ));
        sft_summary = serde_json::json!({
            "dir": sft_dir.display().to_string(),
            "rows": kept.len(),
            "tokens": tokens,
            "shards": index.shards.len(),
            "too_long": too_long,
            "added_token_text": added,
        });
    }
    if !slice.is_whole() {
        crate::report::note(&format!(
            "mcq worker {slice} done: {}; run `dlm-data merge {}` once all {} workers are done",
            out.display(),
            args.out.display(),
            slice.count
        ));
    }
    if args.json {
        crate::cron::json_line(serde_json::json!({
            "out": out.display().to_string(),
            "prompts": prompts_path.display().to_string(),
            "items": records.len(),
            "skipped_empty": loaded.skipped_empty,
            "skipped_oversize": loaded.skipped_oversize,
            "kept_without_blank_options": loaded.kept_without_blank,
            "skipped": loaded.skipped,
            "sft": sft_summary,
        }));
    }
    Ok(())
}

/// A rerun of an identical, complete run: nothing is read beyond the journal and nothing is
/// written. The `--json` summary says so (`"up_to_date": true`) with the recorded counts.
fn up_to_date(
    args: &McqArgs,
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
