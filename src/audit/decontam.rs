//! The `decontam` link: for every audited output (each shard dir, the prompts file) the
//! decontamination report written by `dlm-data decontam` must describe exactly these bytes
//! (sha256) and find no overlapping document. Not having run decontam is a warning.

use std::path::{Path, PathBuf};

use super::report::Check;
use crate::decontam::report::{default_path, load};

pub fn check(shards: &[PathBuf], prompts: Option<&Path>) -> Check {
    let mut targets: Vec<(PathBuf, bool)> = shards.iter().map(|d| (d.clone(), true)).collect();
    if let Some(p) = prompts {
        targets.push((p.to_path_buf(), false));
    }
    if targets.is_empty() {
        return Check::skip("decontam", "no outputs given");
    }
    let mut c = Check::new("decontam");
    let mut clean = 0;
    for (t, is_shards) in &targets {
        let rp = default_path(t, *is_shards);
        let current = if *is_shards {
            crate::util::sha256_file(&t.join("index.json"))
        } else {
            crate::util::sha256_file(t)
        };
        let Ok(current) = current else {
            continue; // the shards / prompts check reports the missing input
        };
        let r = match load(&rp) {
            Ok(r) => r,
            Err(_) => {
                c.warn(format!(
                    "{}: decontamination not run (no {})",
                    t.display(),
                    rp.display()
                ));
                continue;
            }
        };
        if r.scanned.sha256 != current {
            c.fail(format!(
                "{}: stale — scanned sha256 {} but the output is now {current}; re-run decontam",
                rp.display(),
                r.scanned.sha256
            ));
            continue;
        }
        let benches: Vec<String> = r
            .against
            .iter()
            .map(|b| format!("{} ({} items)", b.benchmark, b.items))
            .collect();
        if r.contaminated_documents > 0 {
            let first = r
                .hits
                .first()
                .map(|h| {
                    format!(
                        "; e.g. {} row {} \"{}\"",
                        h.benchmark, h.benchmark_row, h.ngram
                    )
                })
                .unwrap_or_default();
            c.fail(format!(
                "{}: {} document(s) overlap benchmark items{first}{}",
                t.display(),
                r.contaminated_documents,
                r.dropped_copy
                    .as_deref()
                    .map(|d| format!(" (filtered copy: {d})"))
                    .unwrap_or_default()
            ));
        } else {
            clean += 1;
            let from = r
                .filtered_from
                .as_ref()
                .map(|f| {
                    format!(
                        ", filtered from {} ({} documents dropped)",
                        f.path, f.dropped_documents
                    )
                })
                .unwrap_or_default();
            c.note(format!(
                "{}: clean against {} at {}-grams, {} documents{from}",
                t.display(),
                benches.join(", "),
                r.ngram,
                r.scanned.documents
            ));
        }
    }
    c.summary = format!(
        "{clean} of {} output(s) decontaminated and clean",
        targets.len()
    );
    c
}
