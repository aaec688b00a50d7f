//! The dataset card: a shard directory uploaded to the Hub as it lies (`hf upload`) must show
//! where its rows came from and open in the dataset viewer. `README.md` beside `index.json`
//! carries the Hub's YAML `configs` / `data_files` for a format the Hub reads (parquet:
//! `data/*.parquet`; MDS and Megatron have none), the sources at their commits, the tokenizer's
//! digest, the totals, and the command that gives the audit verdict.
//!
//! The card is a pure function of the index ([`render`]): written with every complete index
//! (write-if-changed, so an unchanged rerun leaves it alone), and `audit` checks that the card
//! in a directory is the one its `index.json` renders.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::index_schema::{Index, Kind};
use super::ShardFormat;

/// The card's file name (what the Hub shows and `datasets` ignores as data).
pub const CARD_FILE: &str = "README.md";

/// `dir/README.md`.
pub fn card_path(dir: &Path) -> PathBuf {
    dir.join(CARD_FILE)
}

/// The YAML front matter: the viewer's config for parquet, tags for every format.
fn front_matter(idx: &Index) -> String {
    let mut y = String::from("---\n");
    if idx.format == ShardFormat::Parquet {
        // https://huggingface.co/docs/hub/datasets-manual-configuration: one default config,
        // one split; `load_dataset(DIR)` reads the same files.
        y.push_str(
            "configs:\n- config_name: default\n  data_files:\n  - split: train\n    path: \
             data/*.parquet\n",
        );
    }
    y.push_str("tags:\n- dlm-data\n- tokenized\n");
    let _ = writeln!(y, "- {}", format_name(idx.format));
    y.push_str("---\n");
    y
}

fn format_name(f: ShardFormat) -> &'static str {
    f.name()
}

/// One line per source: a Hub repo at its commit (linked), or a local file with its sha256.
fn sources(idx: &Index) -> String {
    // (source, repo, commit, split) → (files, documents)
    let mut by: BTreeMap<(&str, &str, &str, &str), (usize, u64)> = BTreeMap::new();
    for p in &idx.provenance {
        let e = by
            .entry((
                p.source.as_str(),
                p.repo.as_str(),
                p.commit.as_str(),
                p.split.as_str(),
            ))
            .or_default();
        e.0 += 1;
        e.1 += p.documents;
    }
    let local_sha: BTreeMap<&str, &str> = idx
        .args
        .as_ref()
        .and_then(|a| a.inputs.as_ref())
        .map(|v| {
            v.iter()
                .map(|f| (f.path.as_str(), f.sha256.as_str()))
                .collect()
        })
        .unwrap_or_default();
    let shown = local_names(idx);
    let mut s = String::new();
    for ((source, repo, commit, split), (ranges, docs)) in &by {
        if commit.is_empty() || repo.is_empty() || *repo == "local" {
            // `--input` URLs (a bucket's objects, hf:// files) are named in full.
            let urls = idx
                .provenance
                .iter()
                .any(|p| p.source == *source && p.file.contains("://"));
            let kind = if urls { "input files" } else { "local files" };
            let _ = writeln!(
                s,
                "- `{source}` ({kind}, split `{split}`): {docs} documents"
            );
            for p in idx.provenance.iter().filter(|p| p.source == *source) {
                let name = shown
                    .get(p.file.as_str())
                    .map_or(p.file.as_str(), String::as_str);
                match local_sha.get(p.file.as_str()) {
                    Some(sha) => {
                        let _ = writeln!(s, "  - `{name}` sha256 `{sha}`");
                    }
                    None => {
                        let _ = writeln!(s, "  - `{name}`");
                    }
                }
            }
        } else {
            let _ = writeln!(
                s,
                "- `{source}`: [{repo}@{short}](https://huggingface.co/datasets/{repo}/tree/{commit}) \
                 split `{split}`, {ranges} file range(s), {docs} documents",
                short = commit.chars().take(12).collect::<String>(),
            );
        }
    }
    if s.is_empty() {
        s.push_str("- (no provenance recorded)\n");
    }
    s
}

/// The card's name for each absolute local file the provenance names: its path relative to
/// the directory all of them share (a lone file: its name). A card is published with the
/// directory (uploaded to the Hub): it names no local path, and the sha256 beside each name
/// identifies the file. Relative names (a manifest's `path =` sources, relative to the
/// manifest) are shown as recorded.
fn local_names(idx: &Index) -> BTreeMap<&str, String> {
    let abs: Vec<&str> = idx
        .provenance
        .iter()
        .filter(|p| p.repo.is_empty() || p.repo == "local" || p.commit.is_empty())
        .map(|p| p.file.as_str())
        .filter(|f| Path::new(f).is_absolute())
        .collect();
    let Some(first) = abs.first() else {
        return BTreeMap::new();
    };
    let mut common: PathBuf = Path::new(first)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    for f in &abs {
        while !Path::new(f).starts_with(&common) {
            if !common.pop() {
                break;
            }
        }
    }
    abs.iter()
        .map(|f| {
            let rel = Path::new(f).strip_prefix(&common).unwrap_or(Path::new(f));
            (*f, rel.display().to_string())
        })
        .collect()
}

/// How to get the audit verdict for this directory.
fn audit_hint(idx: &Index) -> String {
    let mut cmd = String::from("dlm-data audit --shards .");
    // The manifest by its file name: a card names no local path.
    let manifest = idx.manifest.as_deref().map(|m| {
        Path::new(m)
            .file_name()
            .map_or(m.to_string(), |n| n.to_string_lossy().into_owned())
    });
    if manifest.is_some() {
        cmd.push_str(" --manifest MANIFEST");
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Not run when this card was written. Verify the chain (manifest → lock → download log → \
         shards) with:\n\n```sh\n{cmd}\n```\n"
    );
    if let Some(m) = manifest {
        let _ = writeln!(s, "where MANIFEST is the path of `{m}`.\n");
    }
    if let Some(l) = &idx.lock_sha256 {
        let _ = writeln!(s, "The lock these rows were packed from has sha256 `{l}`.");
    }
    s
}

/// The card for `idx` (deterministic: the same index gives the same bytes).
pub fn render(idx: &Index) -> String {
    let t = &idx.totals;
    let kind = match idx.kind {
        Kind::Pretrain => "pretraining rows (packed documents, EOS between them)",
        Kind::Sft => "SFT rows (prompt and response, loss on the response)",
    };
    let mut s = front_matter(idx);
    let _ = writeln!(
        s,
        "\n# Tokenized shards\n\nWritten by {tool}: {kind}, `{fmt}` format, {rows} rows of \
         {seq} tokens (`{dtype}`), {tokens} tokens from {docs} documents in {shards} shard(s). \
         `index.json` beside this card describes every shard (sha256, rows, tokens) and the \
         provenance of every row range.\n",
        tool = idx.tool,
        fmt = format_name(idx.format),
        rows = t.rows,
        seq = idx.seq_len,
        dtype = serde_json::to_value(idx.dtype)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
        tokens = t.tokens,
        docs = t.documents,
        shards = idx.shards.len(),
    );
    if idx.format == ShardFormat::Parquet {
        s.push_str(
            "Load with `datasets.load_dataset(\"parquet\", data_files=\"data/*.parquet\")` or \
             `load_dataset(DIR)`.\n\n",
        );
    } else {
        s.push_str("The Hub's viewer does not read this format; see `index.json`.\n\n");
    }
    let _ = writeln!(
        s,
        "## Tokenizer\n\n`tokenizer.json` sha256 `{}`, vocabulary {}, EOS `{}` (id {}).\n",
        idx.tokenizer.sha256,
        idx.tokenizer.vocab_size,
        idx.tokenizer.eos_token,
        idx.tokenizer.eos_id
    );
    let _ = writeln!(s, "## Sources\n\n{}", sources(idx));
    let _ = write!(s, "## Audit\n\n{}", audit_hint(idx));
    s
}

/// Whether `path` is a card this tool wrote (what `--force` may clear with the shards it
/// describes; a user's own README.md never is).
pub fn is_card(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| {
        t.starts_with("---\n") && t.contains("\n# Tokenized shards\n\nWritten by dlm-data ")
    })
}

/// Write `dir/README.md` for `idx` unless it already holds those bytes.
pub fn write(dir: &Path, idx: &Index) -> Result<()> {
    crate::util::write_if_changed(&card_path(dir), render(idx).as_bytes()).map(|_| ())
}
