//! `dlm-data inspect PATH`: look at an output as a trainer would see it, without Python —
//! decoded rows with document (or prompt/answer) boundaries marked, rows/tokens/documents in
//! total and per source, and a length histogram; `--json` prints the counts as one line.
//!
//! PATH may be a shard directory (pack output or mcq's `sft/`, any of parquet, MDS or
//! Megatron, read through the typed [`crate::shards`] contract), one shard file inside such a
//! directory, a `prompts.jsonl` ([`crate::mcq::prompts`]) or a `distilled.json` / `.jsonl`.
//! [`shards`] reads shard outputs, [`records`] the two JSON files, [`stats`] holds the counts.

pub mod records;
pub mod settings;
pub mod shards;
pub mod stats;
pub mod trajectory;

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct InspectArgs {
    /// A shard directory (with index.json), one shard file in it, prompts.jsonl or distilled.json.
    pub path: PathBuf,
    /// Rows (records) to print decoded, from --from on; 0 prints only the summary.
    #[arg(long, default_value_t = 3)]
    pub rows: usize,
    /// First row (record) to print, 0-based over the whole output.
    #[arg(long, default_value_t = 0)]
    pub from: u64,
    /// tokenizer.json (or its directory) to decode with (default: the one index.json records,
    /// when it is still there; else ids are printed).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Characters of decoded text shown per segment before it is cut (0: no limit).
    #[arg(long, default_value_t = 400)]
    pub chars: usize,
    /// Print only the summary, as one line of JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Largest record of prompts.jsonl / distilled.json read (bytes, e.g. 64MiB): a longer
    /// one ends the inspection naming it, having read no more than this.
    #[arg(long, value_parser = crate::pack::parse_bytes, default_value = "64MiB")]
    pub max_record_bytes: u64,
    /// distilled.json: also show each printed record's top-k (from OUT.topk.parquet) at this
    /// generated position (an index into response_ids, continued into tail_ids).
    #[arg(long, value_name = "P")]
    pub position: Option<usize>,
}

/// What PATH is.
#[derive(Debug, Clone, PartialEq)]
enum Target {
    /// A shard directory; `Some(k)`: only its shard `k`.
    Shards(PathBuf, Option<usize>),
    Prompts(PathBuf),
    Distilled(PathBuf),
}

fn bad(path: &Path, why: &str) -> anyhow::Error {
    crate::error::usage(format!(
        "{}: {why}; inspect takes a shard directory (with index.json), a shard file in one, prompts.jsonl or distilled.json",
        path.display()
    ))
}

/// Decide what PATH is from what is there, never from its name alone.
fn classify(path: &Path, bound: crate::bounded::Bound) -> Result<Target> {
    if !path.exists() {
        return Err(bad(path, "no such file or directory"));
    }
    if !path.is_dir() {
        // A FIFO would block the read for ever, /dev/zero never end.
        crate::bounded::check_regular(path)?;
    }
    if path.is_dir() {
        if crate::shards::index::index_path(path).is_file() {
            return Ok(Target::Shards(path.to_path_buf(), None));
        }
        let mut found = vec![];
        for n in ["prompts.jsonl", "sft"] {
            if path.join(n).exists() {
                found.push(path.join(n).display().to_string());
            }
        }
        if !found.is_empty() {
            return Err(bad(
                path,
                &format!(
                    "an mcq output directory; inspect its parts one by one: {}",
                    found.join(", ")
                ),
            ));
        }
        return Err(bad(path, "no index.json in this directory"));
    }
    // A file listed by the index.json beside it (or one directory up, for `data/` shards).
    let parent = path.parent().unwrap_or(Path::new("."));
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    if path.file_name().is_some_and(|n| n == "index.json") {
        return Ok(Target::Shards(parent.to_path_buf(), None));
    }
    for dir in [Some(parent), parent.parent()].into_iter().flatten() {
        if !crate::shards::index::index_path(dir).is_file() {
            continue;
        }
        let idx = crate::shards::index::load(dir)?;
        let (Ok(a), Ok(b)) = (std::fs::canonicalize(path), std::fs::canonicalize(dir)) else {
            continue;
        };
        let Ok(rel) = a.strip_prefix(&b) else {
            continue;
        };
        let rel = rel.to_string_lossy().replace('\\', "/");
        if let Some(k) = idx
            .shards
            .iter()
            .position(|s| s.file == rel || s.extra_files.contains_key(&rel))
        {
            return Ok(Target::Shards(dir.to_path_buf(), Some(k)));
        }
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    if name.ends_with(".jsonl") || name.ends_with(".json") {
        return match records::first_record(path, bound)? {
            Some(v) if v.get("response").is_some() => Ok(Target::Distilled(path.to_path_buf())),
            Some(v) if v.get("prompt").is_some() => Ok(Target::Prompts(path.to_path_buf())),
            Some(_) => Err(bad(
                path,
                "its first record is neither a prompts.jsonl item (id, prompt) nor a distilled record (response)",
            )),
            None => Err(bad(path, "no records in it")),
        };
    }
    Err(bad(
        path,
        "not a shard listed in an index.json beside it, nor a .json/.jsonl file",
    ))
}

/// A tokenizer to decode with: `--tokenizer`, else the recorded path when it is there.
pub(crate) fn decoder(
    flag: Option<&Path>,
    recorded: Option<&crate::shards::index::TokenizerInfo>,
) -> Result<Option<tokenizers::Tokenizer>> {
    let path = match (flag, recorded) {
        (Some(p), _) => crate::mcq::tokenizer::resolve(p),
        (None, Some(r)) if Path::new(&r.path).is_file() => PathBuf::from(&r.path),
        (None, Some(r)) => {
            tracing::warn!(
                "tokenizer {} (recorded in index.json) is not there: printing ids; pass --tokenizer to decode",
                r.path
            );
            return Ok(None);
        }
        (None, None) => return Ok(None),
    };
    if !path.is_file() {
        return Err(crate::error::usage(format!(
            "--tokenizer {}: no tokenizer.json there",
            path.display()
        )));
    }
    let tok = tokenizers::Tokenizer::from_file(&path)
        .map_err(|e| anyhow!("loading tokenizer {}: {e}", path.display()))?;
    if let Some(r) = recorded {
        let sha = crate::util::sha256_file(&path)?;
        if sha != r.sha256 {
            tracing::warn!(
                "tokenizer {} (sha256 {sha}) is not the one the ids came from ({}, sha256 {}): decoded text may be wrong",
                path.display(),
                r.path,
                r.sha256
            );
        }
    }
    Ok(Some(tok))
}

/// Decoded `ids` as one escaped line, cut after `chars` characters (0: never).
pub(crate) fn show(tok: Option<&tokenizers::Tokenizer>, ids: &[u32], chars: usize) -> String {
    let text = match tok.map(|t| t.decode(ids, false)) {
        Some(Ok(t)) => t,
        Some(Err(e)) => return format!("<cannot decode: {e}> ids {ids:?}"),
        None => {
            let shown: Vec<String> = ids.iter().take(64).map(|i| i.to_string()).collect();
            let more = ids.len().saturating_sub(64);
            return if more > 0 {
                format!("ids [{} …+{more}]", shown.join(", "))
            } else {
                format!("ids [{}]", shown.join(", "))
            };
        }
    };
    cut(&text, chars)
}

/// `text` as an escaped one-line string, cut after `chars` characters (0: never).
pub(crate) fn cut(text: &str, chars: usize) -> String {
    let n = text.chars().count();
    if chars == 0 || n <= chars {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(chars).collect();
        format!("{head:?}…(+{} chars)", n - chars)
    }
}

pub fn run(args: InspectArgs) -> Result<()> {
    let args = settings::InspectSettings::resolve(&args)?;
    let mut text = String::new();
    let stats = match classify(&args.path, args.bound)? {
        Target::Shards(dir, only) => shards::inspect(&dir, only, &args, &mut text)?,
        Target::Prompts(p) => records::prompts(&p, &args, &mut text)?,
        Target::Distilled(p) => records::distilled(&p, &args, &mut text)?,
    };
    if args.json {
        crate::cron::json_line(serde_json::to_string(&stats)?);
    } else {
        use std::io::Write;
        let mut o = std::io::stdout().lock();
        // A closed pipe (`| head`) ends the output quietly.
        let _ = o
            .write_all(text.as_bytes())
            .and_then(|_| o.write_all(stats.render().as_bytes()));
    }
    Ok(())
}
