//! Why the mcq output has a card: `OUT/` uploaded to the Hub as it lies must show where its
//! prompts came from and open `prompts.jsonl` in the dataset viewer. `OUT/README.md` carries
//! the Hub's YAML `configs` (`prompts.jsonl`; the SFT shards' parquet files when there are
//! some — `sft/` also has its own card), the sources at their commits and how to audit.
//!
//! The card is a pure function of the records' sources and the SFT format ([`render`]), written
//! with write-if-changed (an unchanged rerun leaves it alone); `audit --prompts` checks that
//! the card beside prompts.jsonl is the one its records render.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::prompts::PromptRecord;

/// `OUT/README.md` (the name the Hub shows).
pub fn card_path(out: &Path) -> PathBuf {
    out.join(crate::shards::card::CARD_FILE)
}

/// What marks a card this tool wrote for an mcq output (a user's README.md never is one).
const HEADING: &str = "\n# MCQ prompts\n\nWritten by dlm-data ";

/// Whether `OUT/sft` holds complete parquet SFT shards (their config goes in the card).
pub fn sft_parquet(out: &Path) -> bool {
    crate::shards::index::load(&out.join("sft"))
        .is_ok_and(|i| i.complete && i.format == crate::shards::ShardFormat::Parquet)
}

/// The card for `records` (deterministic: the same records give the same bytes).
pub fn render(records: &[PromptRecord], sft_parquet: bool) -> String {
    let mut s = String::from(
        "---\nconfigs:\n- config_name: prompts\n  data_files:\n  - split: train\n    path: \
         prompts.jsonl\n",
    );
    if sft_parquet {
        s.push_str(
            "- config_name: sft\n  data_files:\n  - split: train\n    path: sft/data/*.parquet\n",
        );
    }
    s.push_str("tags:\n- dlm-data\n- mcq\n---\n");
    let _ = writeln!(
        s,
        "{}{}: multiple-choice prompt records in `prompts.jsonl` (one JSON object a line: id, \
         source, repo, commit, file, row, prompt, options, gold), the inputs of distillation.{}\n",
        HEADING,
        env!("CARGO_PKG_VERSION"),
        if sft_parquet {
            " The SFT rows built from them are in `sft/` (its own card and `index.json`)."
        } else {
            ""
        }
    );
    // The sources at their commits (not counts: the card names where the records come from;
    // prompts.jsonl itself is checked record by record).
    let by: BTreeSet<(&str, &str, &str)> = records
        .iter()
        .map(|r| (r.source.as_str(), r.repo.as_str(), r.commit.as_str()))
        .collect();
    s.push_str("## Sources\n\n");
    for (source, repo, commit) in &by {
        let _ = writeln!(
            s,
            "- `{source}`: [{repo}@{short}](https://huggingface.co/datasets/{repo}/tree/{commit})",
            short = commit.chars().take(12).collect::<String>(),
        );
    }
    if by.is_empty() {
        s.push_str("- (no records)\n");
    }
    s.push_str(
        "\n## Audit\n\nNot run when this card was written. Verify the chain (manifest → lock → \
         download log → prompts) with:\n\n```sh\ndlm-data audit --manifest MANIFEST --prompts \
         prompts.jsonl\n```\n",
    );
    s
}

/// Whether `path` is a card this tool wrote for an mcq output.
pub fn is_card(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t.starts_with("---\n") && t.contains(HEADING))
}

/// Write `OUT/README.md` for `records` unless it already holds those bytes.
pub fn write(out: &Path, records: &[PromptRecord]) -> Result<()> {
    let text = render(records, sft_parquet(out));
    crate::util::write_if_changed(&card_path(out), text.as_bytes()).map(|_| ())
}

/// `audit --prompts OUT/prompts.jsonl`: the card beside it (when there is one this tool wrote)
/// must be the one its records render; `Some(problem)` when it is not.
pub fn check(prompts: &Path, records: &[PromptRecord]) -> Option<String> {
    // The card describes `prompts.jsonl` only (another file beside it is not its subject).
    if prompts.file_name() != Some(std::ffi::OsStr::new("prompts.jsonl")) {
        return None;
    }
    let out = prompts
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let path = card_path(out);
    if !is_card(&path) {
        return None;
    }
    let text = std::fs::read(&path).ok()?;
    (text != render(records, sft_parquet(out)).as_bytes()).then(|| {
        format!(
            "{}: not the card its prompts.jsonl renders (edited, or left by another run; a rerun \
             of mcq rewrites it)",
            path.display()
        )
    })
}
