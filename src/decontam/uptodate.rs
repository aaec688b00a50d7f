//! Reruns of `decontam` with the same arguments on unchanged inputs are no-ops: the report
//! records the run's [`RecordedArgs`] (`"args"`), and a rerun whose settings match, whose
//! scanned prompts.jsonl / index.json still has the recorded sha256, and (with `--drop`) whose
//! copy is still the one its report describes, leaves every file untouched — no index build,
//! no scan, no new `time`.

use std::path::Path;

use super::report::{self, DecontamReport};
pub use super::report::{AgainstDigest, RecordedArgs};

/// sha256 of what decontam scans at `path`: prompts.jsonl itself, or a shard directory's
/// index.json.
pub fn scanned_sha(path: &Path, is_shards: bool) -> Option<String> {
    let f = if is_shards {
        path.join(crate::shards::index::INDEX_FILE)
    } else {
        path.to_path_buf()
    };
    crate::util::sha256_file(&f).ok()
}

/// The recorded report when this run would rewrite it unchanged (bar `time` and speeds);
/// else why not. `shown` is how the report names the scanned data (its path, or the bucket
/// URL a local copy was made of).
pub fn check(
    rpath: &Path,
    scanned: &Path,
    shown: &str,
    is_shards: bool,
    want: &RecordedArgs,
) -> Result<DecontamReport, String> {
    let rep = report::load(rpath).map_err(|_| "no readable report".to_string())?;
    if !rep.tool.starts_with("dlm-data") {
        return Err("a foreign report".into());
    }
    if rep.args.as_ref() != Some(want) {
        return Err("arguments or benchmark files differ".into());
    }
    if rep.scanned.path != shown
        || Some(&rep.scanned.sha256) != scanned_sha(scanned, is_shards).as_ref()
    {
        return Err("the scanned data changed".into());
    }
    if let Some(d) = &want.drop {
        let d = Path::new(d);
        let copy = report::load(&report::default_path(d, is_shards))
            .map_err(|_| "the --drop copy has no report".to_string())?;
        let from_ok = copy
            .filtered_from
            .as_ref()
            .is_some_and(|f| f.sha256 == rep.scanned.sha256);
        if !from_ok || Some(&copy.scanned.sha256) != scanned_sha(d, is_shards).as_ref() {
            return Err("the --drop copy changed".into());
        }
        if is_shards {
            // Every file the copy's journal lists is present at its recorded size.
            let idx = crate::shards::index::load(d).map_err(|e| e.to_string())?;
            let bad = idx.shards.iter().find(|s| {
                std::fs::metadata(d.join(&s.file)).map(|m| m.len()).ok() != Some(s.bytes)
            });
            if let Some(s) = bad {
                return Err(format!(
                    "the --drop copy's {} is missing or resized",
                    s.file
                ));
            }
        }
    }
    Ok(rep)
}
