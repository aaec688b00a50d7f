//! Why `pack --strict` exists: a nightly job has no one to read its warnings. Under `--strict`
//! the warnings that mean the output is not what was asked for — an `--input` file that
//! contributed 0 documents (a wrong `--text-column`), no documents at all, rows skipped for a
//! missing text field (`--on-missing-text skip`), documents skipped as oversized
//! (`--on-oversize skip`), a `--tokens` source short of its share — end the run (exit 1)
//! before index.json is marked complete, all of them named at once. An output of no document
//! at all is refused with or without `--strict` ([`check_not_empty`]).

use anyhow::Result;

use crate::shards::index::{ProvenanceRange, Totals};

/// What `--strict` refuses in a finished run's totals and provenance (empty: nothing).
pub fn problems<T>(inputs: &[T], totals: &Totals, provenance: &[ProvenanceRange]) -> Vec<String> {
    let mut out = Vec::new();
    if !inputs.is_empty() {
        let mut per_file: Vec<(&str, u64)> = Vec::new();
        for p in provenance {
            match per_file.iter_mut().find(|(f, _)| *f == p.file) {
                Some((_, n)) => *n += p.documents,
                None => per_file.push((&p.file, p.documents)),
            }
        }
        for (f, _) in per_file.iter().filter(|(_, n)| *n == 0) {
            out.push(format!(
                "--input {f}: contributed 0 documents (check --text-column / --text)"
            ));
        }
    }
    if totals.documents == 0 {
        out.push("the inputs contributed 0 documents in all".to_string());
    }
    let count = |k: &str| totals.extra.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    let n = count("skipped_missing_text");
    if n > 0 {
        out.push(format!(
            "{n} rows had no text field and were skipped (--on-missing-text skip)"
        ));
    }
    let n = count("skipped_oversize");
    if n > 0 {
        out.push(format!(
            "{n} documents were oversized and skipped (--on-oversize skip)"
        ));
    }
    for m in totals.mixture.iter().flatten().filter(|m| m.short) {
        out.push(format!(
            "mixture: source {:?} supplied {} of its {} budgeted tokens",
            m.source, m.tokens, m.budget
        ));
    }
    out
}

/// `--strict`: an error naming every problem (exit 1), so index.json is never marked complete.
pub fn check<T>(inputs: &[T], totals: &Totals, provenance: &[ProvenanceRange]) -> Result<()> {
    let p = problems(inputs, totals, provenance);
    if p.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "--strict: {} problem(s), index.json left incomplete:\n  {}",
        p.len(),
        p.join("\n  ")
    )
}

/// An output of 0 documents in all is never complete, `--strict` or not: an error (exit 1)
/// naming why the rows gave none (the skips counted, the inputs that contributed nothing),
/// before index.json is marked complete.
pub fn check_not_empty<T>(
    inputs: &[T],
    totals: &Totals,
    provenance: &[ProvenanceRange],
) -> Result<()> {
    if totals.documents > 0 {
        return Ok(());
    }
    let mut why = problems(inputs, totals, provenance);
    why.retain(|p| !p.contains("0 documents in all"));
    for (n, what) in [
        (totals.skipped_empty, "were empty"),
        (
            totals.skipped_filtered,
            "were filtered (a template field null or `-`)",
        ),
    ] {
        if n > 0 {
            why.push(format!("{n} documents {what} and were skipped"));
        }
    }
    if why.is_empty() {
        why.push("the inputs hold no row".to_string());
    }
    anyhow::bail!(
        "the inputs contributed 0 documents in all: index.json left incomplete:\n  {}",
        why.join("\n  ")
    )
}
