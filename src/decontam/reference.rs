//! The benchmark side of decontamination: `--against` files (parquet / JSONL / JSON; every
//! string field of a row is indexed) and manifests whose `role = "eval-reference"` sources
//! were fetched into `<cache>/eval-reference/` or are the user's own files (`path = …`,
//! hashed into the lock by `fetch`) (text = the source's `text` template), each file checked
//! against its lock before use.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};

use super::index::RefItem;
use super::rows;
use crate::hub::cache::Cache;
use crate::manifest::{Lock, Manifest, Role};

/// One benchmark file as recorded in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchFile {
    /// Repo-relative path for manifest sources, else the local path.
    pub path: String,
    pub sha256: String,
    pub rows: u64,
}

/// One benchmark: a manifest source or a local file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Benchmark {
    pub benchmark: String,
    /// `manifest` or `file`.
    pub kind: String,
    /// The manifest or the file given to `--against`.
    pub from: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
    pub files: Vec<BenchFile>,
    pub items: u64,
}

/// Load every `--against` argument into benchmarks and their items.
pub fn load(against: &[PathBuf], cache: &Cache) -> Result<(Vec<Benchmark>, Vec<RefItem>)> {
    let mut benches = Vec::new();
    let mut items = Vec::new();
    for a in against {
        let is_manifest = a
            .extension()
            .map(|e| e.eq_ignore_ascii_case("toml"))
            .unwrap_or(false);
        if is_manifest {
            load_manifest(a, cache, &mut benches, &mut items)?;
        } else {
            load_file(a, &mut benches, &mut items)?;
        }
    }
    Ok((benches, items))
}

fn load_file(path: &Path, benches: &mut Vec<Benchmark>, items: &mut Vec<RefItem>) -> Result<()> {
    let rows = rows::read_rows(path)?;
    let b = benches.len() as u32;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    for (r, v) in rows.iter().enumerate() {
        items.push(RefItem {
            benchmark: b,
            row: r as u64,
            file: 0,
            text: rows::all_text(v),
        });
    }
    benches.push(Benchmark {
        benchmark: name,
        kind: "file".into(),
        from: path.display().to_string(),
        repo: None,
        commit: None,
        split: None,
        files: vec![BenchFile {
            path: path.display().to_string(),
            sha256: crate::util::sha256_file(path)?,
            rows: rows.len() as u64,
        }],
        items: rows.len() as u64,
    });
    Ok(())
}

fn load_manifest(
    path: &Path,
    cache: &Cache,
    benches: &mut Vec<Benchmark>,
    items: &mut Vec<RefItem>,
) -> Result<()> {
    let m = Manifest::load(path)?;
    let refs: Vec<_> = m
        .sources
        .iter()
        .filter(|s| s.role == Role::EvalReference)
        .collect();
    if refs.is_empty() {
        return Err(crate::error::usage(format!(
            "--against {}: no source with role = \"eval-reference\"",
            path.display()
        )));
    }
    let lock_path = m.lock_path();
    let lock = Lock::load(&lock_path).with_context(|| {
        format!(
            "--against {}: fetch the eval references first (`dlm-data fetch --manifest {}`)",
            path.display(),
            path.display()
        )
    })?;
    for s in refs {
        let ls = lock.source(&s.name).ok_or_else(|| {
            anyhow!(
                "lock {}: eval-reference source {:?} is not pinned; re-run fetch",
                lock_path.display(),
                s.name
            )
        })?;
        let b = benches.len() as u32;
        let mut files = Vec::new();
        let mut sorted: Vec<_> = ls.files.iter().collect();
        sorted.sort_by(|x, y| x.path.cmp(&y.path));
        let mut n_items = 0;
        for (fi, f) in sorted.into_iter().enumerate() {
            let what = format!("eval-reference {:?}: {}", s.name, f.path);
            let local = if s.is_local() {
                // The user's own benchmark (`path = …`): read where the lock pins it, its
                // bytes checked against the lock like a fetched file's.
                let p = crate::sources::local::file_path(&m, f);
                let sha =
                    crate::util::sha256_file(&p).with_context(|| format!("{what}: run fetch"))?;
                if sha != f.sha256 {
                    anyhow::bail!(
                        "{}: sha256 {sha} is not the one lock {} pins ({}): the file changed \
                         since it was fetched; re-run `dlm-data fetch --manifest {}`",
                        p.display(),
                        lock_path.display(),
                        f.sha256,
                        path.display()
                    );
                }
                p
            } else {
                let local =
                    cache.locked_file(Role::EvalReference, &ls.repo, &ls.commit, &f.path)?;
                Cache::verify_locked(&local, &f.sha256, &what)?;
                local
            };
            let rows = rows::read_rows(&local)?;
            for (r, v) in rows.iter().enumerate() {
                let text = rows::render(&s.text, v).with_context(|| {
                    format!("{} row {r} (source {:?})", local.display(), s.name)
                })?;
                items.push(RefItem {
                    benchmark: b,
                    row: r as u64,
                    file: fi as u32,
                    text,
                });
            }
            n_items += rows.len() as u64;
            files.push(BenchFile {
                path: f.path.clone(),
                sha256: f.sha256.clone(),
                rows: rows.len() as u64,
            });
        }
        benches.push(Benchmark {
            benchmark: s.name.clone(),
            kind: "manifest".into(),
            from: path.display().to_string(),
            repo: Some(ls.repo.clone()),
            commit: Some(ls.commit.clone()),
            split: Some(s.split.clone()),
            files,
            items: n_items,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_eval_reference_manifest_covers_the_benchmarks() {
        let m = Manifest::load(Path::new("manifests/eval-reference.toml")).unwrap();
        for s in &m.sources {
            assert_eq!(s.role, Role::EvalReference, "{}", s.name);
        }
        let names: Vec<&str> = m.sources.iter().map(|s| s.name.as_str()).collect();
        for want in [
            "mmlu-test",
            "gpqa-main",
            "gpqa-diamond",
            "sciq-validation",
            "sciq-test",
            "arc-challenge-test",
        ] {
            assert!(names.contains(&want), "{want}");
        }
        // Every text template renders over a row of its dataset's columns.
        let row = serde_json::json!({
            "question": "q", "choices": {"text": ["a"], "label": ["A"]}, "correct_answer": "c",
            "distractor1": "d", "distractor2": "d", "distractor3": "d", "support": "s",
            "Question": "q", "Correct Answer": "c", "Incorrect Answer 1": "i",
            "Incorrect Answer 2": "i", "Incorrect Answer 3": "i"
        });
        for s in &m.sources {
            rows::render(&s.text, &row).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        }
    }
}
