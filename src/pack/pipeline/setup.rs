//! Step 1 of a pack run, before anything is written: which worker this is, the plan of input
//! units, the tokenizer, the token dtype, the part format and the output directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;

use super::settings::RunSettings;
use crate::manifest::Manifest;
use crate::pack::plan::{Plan, Unit};
use crate::pack::remote::Streaming;
use crate::pack::DtypeArg;
use crate::shards::settings::PackSettings;
use crate::shards::{Dtype, ShardFormat};
use crate::sources::files::PendingHashes;
use crate::tokenize::DocTokenizer;
use crate::worker::WorkerSlice;

/// Everything the later steps need, fixed before the output directory is touched.
pub(super) struct Setup {
    /// The exclusive lock on `out_dir` ([`crate::lock`]), held for the whole run; `None` on a
    /// read-only output, which the journal accepts only when complete.
    pub _lock: Option<crate::lock::OutputLock>,
    pub worker: WorkerSlice,
    /// `--stream`: the Hub reader shared with the reader thread.
    pub streaming: Option<Arc<Streaming>>,
    pub plan: Plan,
    pub tok: DocTokenizer,
    pub dtype: Dtype,
    /// The format this process writes: `--format`, or parquet for a worker's part.
    pub part_format: ShardFormat,
    /// `--out`, or `--out/parts/IIIII-of-NNNNN` for a worker (created).
    pub out_dir: PathBuf,
    /// The units of the plan this worker owns, in global order.
    pub units: Vec<Unit>,
    /// The settings resolved from the flags, recorded as the index's `args`. In a fresh
    /// `--input` run their `inputs` come from `hashes` (still being computed).
    pub settings: PackSettings,
    /// `--input` files' sha256 still being computed: the writer records them in `args.inputs`
    /// before it journals the first shard ([`settle_inputs`]).
    pub hashes: Option<PendingHashes>,
}

/// Record pending input hashes in an index's `args` (once, before its first save after the
/// run's start).
pub(super) fn settle_inputs(
    hashes: &mut Option<PendingHashes>,
    idx: &mut crate::shards::index::Index,
) -> Result<()> {
    if let Some(h) = hashes.take() {
        let files = h.wait()?;
        if let Some(a) = idx.args.as_mut() {
            a.inputs = Some(files);
        }
    }
    Ok(())
}

/// Claim the output, plan the units, load the tokenizer, pick the dtype (the flags were
/// resolved before, [`RunSettings::resolve`]).
pub(super) fn prepare(rs: &RunSettings) -> Result<Setup> {
    let worker = rs.worker;
    let out_dir = rs.out_dir();
    let lock = claim_output(rs, &out_dir)?;
    let streaming = match rs.hub_retry {
        Some(retry) => Some(Arc::new(Streaming::new(
            retry,
            &rs.cache.resolve(),
            rs.log.as_deref(),
            worker,
        )?)),
        None => None,
    };
    let (plan, inputs) = plan_units(rs, streaming.as_deref())?;
    let tok = load_tokenizer(rs)?;
    let dtype = choose_dtype(rs, &tok)?;
    // The files read are inputs too (cache blobs through their snapshot links).
    let unit_inputs: Vec<(&str, &Path)> = plan
        .units
        .iter()
        .filter(|u| u.remote.is_none())
        .map(|u| ("input file", u.path.as_path()))
        .collect();
    crate::lock::refuse_inputs("--out", &rs.out, &unit_inputs)?;

    let units: Vec<Unit> = plan
        .units
        .iter()
        .enumerate()
        .filter(|(k, _)| worker.owns(*k))
        .map(|(_, u)| u.clone())
        .collect();
    tok.size_word_cache(units.iter().map(|u| u.bytes).sum(), rs.tuning.word_cache);
    // The inputs' sha256 belong to the resume fingerprint. An existing journal is compared
    // with it before anything else: hash first. A fresh directory's index gets them when the
    // writer journals its first shard: hashing overlaps tokenizing.
    let (inputs, hashes) = match inputs {
        None => (None, None),
        Some(pending) => {
            if crate::shards::index::index_path(&out_dir).exists() {
                (Some(pending.wait()?), None)
            } else {
                (None, Some(pending))
            }
        }
    };
    let settings = settings(rs, &plan, &tok, dtype, inputs);
    Ok(Setup {
        _lock: lock,
        worker,
        streaming,
        plan,
        tok,
        dtype,
        part_format: rs.part_format(),
        out_dir,
        units,
        settings,
        hashes,
    })
}

/// Before any work: paths we can record exactly, no input as the output, one writer (the lock
/// on `out_dir`, `None` when read-only).
fn claim_output(rs: &RunSettings, out_dir: &Path) -> Result<Option<crate::lock::OutputLock>> {
    let local_inputs = crate::pack::inputs::local_paths(&rs.inputs);
    let given: Vec<(&str, &Path)> = [
        ("--out", Some(rs.out.as_path())),
        ("--manifest", rs.manifest.as_deref()),
        ("--tokenizer", Some(rs.tokenizer.as_path())),
        ("--cache", rs.cache.dir.as_deref()),
        ("--log", rs.log.as_deref()),
    ]
    .into_iter()
    .filter_map(|(f, p)| p.map(|p| (f, p)))
    .chain(local_inputs.iter().map(|p| ("--input", *p)))
    .collect();
    crate::lock::require_utf8_all(given.iter().copied())?;
    let lock_file = rs
        .manifest
        .as_deref()
        .and_then(|m| Manifest::load(m).ok())
        .map(|m| m.lock_path());
    let mut inputs: Vec<(&str, &Path)> = given[1..]
        .iter()
        .filter(|(f, _)| *f != "--log")
        .copied()
        .collect();
    if let Some(l) = &lock_file {
        inputs.push(("lock", l.as_path()));
    }
    crate::lock::refuse_inputs("--out", &rs.out, &inputs)?;
    let dirs: Vec<(&str, &Path)> = local_inputs.iter().map(|p| ("--input", *p)).collect();
    crate::lock::refuse_inside_input_dirs("--out", &rs.out, &dirs)?;
    crate::lock::OutputLock::dir_or_read_only(out_dir, "pack")
}

/// The plan of input units (the cache, `--stream` or `--input`); for `--input`, the files'
/// sha256 being computed on a thread of their own.
fn plan_units(
    rs: &RunSettings,
    streaming: Option<&Streaming>,
) -> Result<(Plan, Option<PendingHashes>)> {
    let tokens = rs.packing.tokens;
    match (&rs.manifest, rs.inputs.is_empty()) {
        (Some(m), true) => Ok((
            match streaming {
                Some(st) => Plan::from_manifest_stream(m, tokens, &|man| st.list(man))?,
                None => Plan::from_manifest(m, &rs.cache.resolve(), tokens)?,
            },
            None,
        )),
        (None, false) => {
            let files = crate::pack::inputs::expand(&rs.inputs, streaming)?;
            let plan = Plan::from_input(&files, &rs.text_template, tokens)?;
            tracing::info!(
                "--input: {} files, {} bytes (sha256 recorded in index.json)",
                plan.units.len(),
                plan.units.iter().map(|u| u.bytes).sum::<u64>()
            );
            // Hashed while the tokenizer loads and the run starts (see [`prepare`]).
            let hashes = files
                .iter()
                .map(|f| crate::pack::inputs::to_hash(f, streaming))
                .collect();
            Ok((
                plan,
                Some(PendingHashes::spawn_each(hashes, rs.tuning.hashers)?),
            ))
        }
        _ => Err(crate::error::usage(
            "give exactly one of --manifest or --input",
        )),
    }
}

/// The tokenizer with the document-boundary flags (`--eos-token`, `--no-eos`, `--bos`, …).
fn load_tokenizer(rs: &RunSettings) -> Result<DocTokenizer> {
    let tok = DocTokenizer::load(&rs.tokenizer, &rs.boundary)?;
    let boundaries = crate::tokenize::files::Boundaries {
        eos: tok.eos.clone(),
        eos_choice: tok.eos_choice.clone(),
        bos: tok.bos.clone(),
        bos_choice: tok.bos_choice.clone(),
    }
    .describe();
    let mask_desc = match &tok.mask {
        Some((t, i)) => format!("{t:?} (id {i})"),
        None => "none known".into(),
    };
    tracing::info!(
        "tokenizer {} (path: {}), {boundaries}, mask {mask_desc}, added-token text in documents: {}",
        tok.json_path().display(),
        tok.path(),
        tok.mode.as_str()
    );
    Ok(tok)
}

/// `--dtype` against the format and the vocabulary (parquet is always uint32).
fn choose_dtype(rs: &RunSettings, tok: &DocTokenizer) -> Result<Dtype> {
    Ok(match (rs.format, rs.dtype) {
        (ShardFormat::Parquet, DtypeArg::Uint16) => {
            return Err(crate::error::usage(
                "--dtype uint16: parquet shards are always list<uint32>",
            ))
        }
        (ShardFormat::Parquet, _) | (_, DtypeArg::Uint32) => Dtype::U32,
        (_, DtypeArg::Uint16) | (_, DtypeArg::Auto) if tok.vocab_size <= 1 << 16 => Dtype::U16,
        (_, DtypeArg::Uint16) => {
            return Err(crate::error::usage(format!(
                "--dtype uint16: the vocabulary has {} ids, more than uint16 holds",
                tok.vocab_size
            )))
        }
        (_, DtypeArg::Auto) => Dtype::U32,
    })
}

/// The resume fingerprint: every argument and input that changes the output bytes, as the
/// typed settings the index records. A rerun with different ones is refused (or, with
/// `--force`, starts fresh).
pub(super) fn settings(
    rs: &RunSettings,
    plan: &Plan,
    tok: &DocTokenizer,
    dtype: Dtype,
    inputs: Option<Vec<crate::shards::settings::InputFile>>,
) -> PackSettings {
    PackSettings {
        units: plan
            .units
            .iter()
            .map(|u| (u.source.name.to_string(), u.file.clone(), u.bytes))
            .collect(),
        lock_sha256: plan.lock_sha256.clone(),
        text_column: rs.text_column.clone(),
        tokenizer_sha256: tok.sha256.clone(),
        eos: tok.eos.as_ref().map(|e| e.1),
        bos: tok.bos.as_ref().map(|b| b.1),
        seq_len: rs.seq_len,
        format: rs.format,
        dtype,
        packing: rs.packing.clone(),
        worker: [rs.worker.index, rs.worker.count],
        text: rs.text.clone(),
        inputs,
    }
}

/// The id `--pad-last` pads with: tokenizer_config.json's `pad_token`, else `<|pad|>`, else EOS
/// ([`crate::tokenize::files::TokenizerFiles::pad_id`]).
pub(super) fn pad_id(tok: &DocTokenizer) -> Option<u32> {
    tok.files
        .pad_id(|t| tok.token_to_id(t), tok.eos.as_ref().map(|e| e.1))
}
