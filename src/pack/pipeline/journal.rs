//! Step 2 of a pack run: the output's journal (`index.json`). Decide from the resume
//! fingerprint whether the run is fresh, resumes at a cursor, or is already complete; claim the
//! output directory; write the incomplete index every later shard is journaled into.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::settings::RunSettings;
use super::setup::{pad_id, Setup};
use crate::pack::resume::{self, Cursor, Found};
use crate::shards::index::{self, Index, Kind, TokenizerInfo};
use crate::shards::outdir::{self, Claim};
use crate::shards::settings::PackSettings;
use crate::shards::staged;
use crate::shards::ShardFormat;

/// What the journal says about `--out`.
pub(super) enum Opened {
    /// Finished already with the same arguments: nothing to do.
    Complete(Box<Index>),
    /// Fresh or resumed: the run continues from `cursor`.
    Run(Journal),
}

/// The incomplete index of a run that goes on, and where it goes on from.
pub(super) struct Journal {
    pub cursor: Cursor,
    /// The index as saved now (recorded shards, the cursor's totals and provenance).
    pub base: Index,
    /// MDS: the recorded shards' raw index entries, kept as the writer appends to them.
    pub prior_mds: Vec<Value>,
}

/// A read-only `--out` (no lock could be made): complete with these arguments and every
/// listed shard present at its recorded size, or refused — nothing can be written there.
fn read_only(out_dir: &std::path::Path, found: Found) -> Result<Opened> {
    let Found::Complete(idx) = found else {
        return Err(crate::lock::read_only_refusal(
            out_dir,
            "not a complete output of this pack command",
        ));
    };
    for f in outdir::journal_files(&idx) {
        let p = out_dir.join(&f);
        if !p.is_file() {
            return Err(crate::lock::read_only_refusal(
                out_dir,
                &format!("{f}, listed in its index.json, is missing"),
            ));
        }
    }
    for sh in &idx.shards {
        let len = std::fs::metadata(out_dir.join(&sh.file))
            .map(|m| m.len())
            .ok();
        if len != Some(sh.bytes) {
            return Err(crate::lock::read_only_refusal(
                out_dir,
                &format!(
                    "{} is not the {} bytes index.json records",
                    sh.file, sh.bytes
                ),
            ));
        }
    }
    Ok(Opened::Complete(idx))
}

/// Inspect, claim and initialise `s.out_dir`'s journal.
pub(super) fn open(args: &RunSettings, s: &mut Setup) -> Result<Opened> {
    let found = resume::inspect(
        &s.out_dir,
        &mut s.settings,
        args.force,
        !args.zstd_level_given,
    )?;
    let s = &*s;
    let out_dir = &s.out_dir;
    let fingerprint = s.settings.clone();
    if s._lock.is_none() {
        return read_only(out_dir, found);
    }
    let (prior, cursor) = match found {
        Found::Complete(idx) => return Ok(Opened::Complete(idx)),
        Found::Resume(idx, c) => {
            crate::progress::note(&format!(
                "{}: resuming after {} recorded shards (input unit {}, row {})",
                out_dir.display(),
                c.shards,
                c.unit,
                c.row
            ));
            (Some(idx), c)
        }
        Found::Fresh => (
            None,
            Cursor {
                source_tokens: vec![0; s.plan.sources.len()],
                ..Default::default()
            },
        ),
    };
    // The recorded shards wait in the staging directory until the output is complete: an
    // output written before they did (or killed while moving them into place) has some in
    // their final place, put back first.
    if let Some(p) = &prior {
        staged::stage(out_dir, &staged::listed(p))?;
    }
    // Delete or overwrite only what the journal proves this tool wrote; never an input.
    let mut claim = Claim::new("pack", args.force)
        .inputs(s.plan.units.iter().map(|u| u.path.as_path()))
        .inputs(std::iter::once(args.tokenizer.as_path()));
    if let Some(p) = &prior {
        claim = claim
            .keep(outdir::journal_files(p))
            .remove(outdir::shard_files(p.format, p.shards.len()));
    } else if let Some(old) =
        outdir::own_index(out_dir).filter(|i| !i.complete && i.shards.is_empty())
    {
        // An earlier run that committed nothing: its index (and the one shard it may have
        // renamed before journaling it) is this tool's own, replaced by the fresh start.
        claim = claim
            .remove(outdir::journal_files(&old))
            .remove(outdir::shard_files(old.format, 0));
    }
    claim.apply(out_dir)?;
    let staging = staged::dir(out_dir);
    std::fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;

    let base = base_index(args, s, prior.as_deref(), &cursor, fingerprint)?;
    let is_mds = s.part_format == ShardFormat::Mds;
    let prior_mds: Vec<Value> = if is_mds && prior.is_some() {
        let raw: Value =
            serde_json::from_str(&std::fs::read_to_string(index::index_path(out_dir))?)?;
        raw.get("shards")
            .and_then(|s| s.as_array())
            .cloned()
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    index::save(out_dir, &base, is_mds.then_some(&prior_mds[..]))?;
    Ok(Opened::Run(Journal {
        cursor,
        base,
        prior_mds,
    }))
}

/// The incomplete index: the recorded shards, the cursor's totals and provenance, and in
/// `extra` the fingerprint (`args`), the tokenizer's choices, a worker's unit list and the
/// cursor (`resume`).
fn base_index(
    args: &RunSettings,
    s: &Setup,
    prior: Option<&Index>,
    cursor: &Cursor,
    fingerprint: PackSettings,
) -> Result<Index> {
    let (tok, worker, plan) = (&s.tok, s.worker, &s.plan);
    Ok(Index {
        version: 1,
        tool: Index::tool_name(),
        tool_build: Some(crate::build_info::ToolBuild::current()),
        kind: Kind::Pretrain,
        format: s.part_format,
        seq_len: args.seq_len as u64,
        dtype: s.dtype,
        tokenizer: TokenizerInfo {
            path: index::abs_path(tok.json_path()),
            sha256: tok.sha256.clone(),
            eos_token: tok.eos.as_ref().map(|e| e.0.clone()).unwrap_or_default(),
            eos_id: tok.eos.as_ref().map(|e| e.1).unwrap_or(u32::MAX),
            vocab_size: tok.vocab_size,
        },
        shards: prior.map(|i| i.shards.clone()).unwrap_or_default(),
        totals: cursor.totals.clone(),
        provenance: cursor.provenance.clone(),
        manifest: plan.manifest.as_deref().map(index::abs_path),
        lock_sha256: plan.lock_sha256.clone(),
        complete: false,
        args: Some(fingerprint),
        extra: {
            let mut m = BTreeMap::new();
            m.insert("eos_choice".into(), json!(tok.eos_choice));
            // Which encoder the ids came from, and the share of documents that went through the
            // `tokenizers` crate instead of the exact fast path (per tokenizer: 0 or 1).
            m.insert("tokenizer_encoder".into(), json!(tok.path()));
            m.insert(
                "tokenizer_crate_share".into(),
                json!(if tok.is_fast() { 0.0 } else { 1.0 }),
            );
            m.insert("bos_token".into(), json!(tok.bos.as_ref().map(|b| &b.0)));
            if !worker.is_whole() {
                m.insert(
                    "worker".into(),
                    json!({"index": worker.index, "count": worker.count}),
                );
                let all: Vec<_> = plan
                    .units
                    .iter()
                    .enumerate()
                    .map(|(k, u)| json!({"source": &*u.source.name, "file": u.file, "owner": k % worker.count}))
                    .collect();
                m.insert("units".into(), json!(all));
                // What `merge` pads the final row with (`--pad-last`).
                m.insert(
                    "pad_id".into(),
                    json!(if args.packing.pad_last {
                        pad_id(tok)
                    } else {
                        None
                    }),
                );
            }
            m.insert("resume".into(), serde_json::to_value(cursor)?);
            m
        },
    })
}
