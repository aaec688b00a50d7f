//! distill's output: JSONL part files written batch by batch (fsynced), and their atomic
//! finalisation into `distilled.json` (a JSON array) or JSONL.
//!
//! ## Part layout (what `dlm-data merge` and resume read)
//!
//! Worker `I` of `N` writes `OUT.parts/IIIII-of-NNNNN.jsonl` beside `--out` (a single process
//! is worker `00000-of-00001`). Each part is UTF-8 lines:
//!
//! 1. a header: `{"dlm_data_distill_part":1,"worker":"I/N","batches":B,"prompts":P,
//!    "fingerprint":{...}}` — `B` batches in the global plan, `P` prompts, and the fingerprint
//!    of everything that determines the output (prompts file sha256, teacher hashes, sampler
//!    settings, batch size, limit, ...). A rerun with a different fingerprint is refused.
//! 2. per completed batch, in one `write` + `fsync`: its records, one compact JSON object per
//!    line (the exact bytes of the final file), then a commit line
//!    `{"batch":k,"index":[i0,i1,...]}` giving the prompt index (0-based position in the
//!    prompts file after `--limit`) of each preceding record, in order.
//!
//! Each worker holds `OUT.parts/IIIII-of-NNNNN.lock` (an exclusive `flock`, see [`claim`]) for
//! its whole run, so a part is never written by two processes; `merge` takes every worker's
//! lock before it reads the parts.
//!
//! Record lines not followed by their commit line are a torn write (the process died): they
//! are dropped, and resume truncates the part to its last commit line before appending.
//! [`finalize`] takes any set of parts with one fingerprint, checks that every batch
//! `0..B` is present (identical duplicates tolerated) and every prompt exactly once, and
//! writes the records ordered by prompt index, byte for byte as they were written.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

use super::OutFormat;
use crate::worker::WorkerSlice;

pub const PART_MAGIC: &str = "dlm_data_distill_part";

/// `OUT.parts` for `--out OUT`.
pub fn parts_dir(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".parts");
    PathBuf::from(s)
}

/// `OUT.parts/IIIII-of-NNNNN.jsonl`.
pub fn part_path(out: &Path, slice: WorkerSlice) -> PathBuf {
    parts_dir(out).join(format!("{}.jsonl", slice.part_dir_name()))
}

/// `OUT.parts/IIIII-of-NNNNN.gemm-plans.json`: the GEMM kernels `--gemm-tune` chose for this
/// worker, one file per worker so that each worker's resume reuses exactly its own choices.
pub fn gemm_plans_path(out: &Path, slice: WorkerSlice) -> PathBuf {
    parts_dir(out).join(format!("{}.gemm-plans.json", slice.part_dir_name()))
}

/// Every `*.jsonl` part in `dir`, sorted by name.
pub fn list_parts(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        return Ok(vec![]);
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    v.sort();
    Ok(v)
}

/// [`crate::util::atomic_write`], removing its hidden temp file when the write fails (disk
/// full, an unwritable or occupied target), so a failed run leaves no `.NAME.tmp-PID` behind.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let r = crate::util::atomic_write(path, bytes);
    if r.is_err() {
        let tmp = crate::util::temp_path(path);
        if tmp.is_file() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    r
}

/// `OUT.parts/IIIII-of-NNNNN.lock`: the lock one worker's part is written under.
pub fn part_lock_path(out: &Path, slice: WorkerSlice) -> PathBuf {
    parts_dir(out).join(format!("{}.lock", slice.part_dir_name()))
}

/// Everything `distill` checks and takes before any work: UTF-8 paths, an `--out` (and its
/// `OUT.parts`) name within NAME_MAX, `--out` never an input (the prompts, any file of the
/// teacher directory), then the worker's exclusive lock ([`crate::lock`]); temp files that
/// dead runs left beside `--out` and in `OUT.parts/` are removed. Hold the result for the
/// whole run.
pub fn claim(
    out: &Path,
    slice: WorkerSlice,
    prompts: &Path,
    teacher: &Path,
) -> Result<crate::lock::OutputLock> {
    crate::lock::require_utf8_all([
        ("--out", out),
        ("--prompts", prompts),
        ("--teacher", teacher),
    ])?;
    let parts = parts_dir(out);
    if let Some(n) = parts.file_name() {
        if n.len() > crate::util::NAME_MAX {
            return Err(crate::error::usage(format!(
                "--out {}: the name is too long for the {} directory beside it ({} bytes, the \
                 file system allows {}); choose a name of at most {} bytes",
                out.display(),
                ".parts",
                n.len(),
                crate::util::NAME_MAX,
                crate::util::NAME_MAX - ".parts".len()
            )));
        }
    }
    let mut inputs: Vec<(String, PathBuf)> = vec![("prompts file".into(), prompts.to_path_buf())];
    inputs.push(("teacher directory".into(), teacher.to_path_buf()));
    if let Ok(rd) = std::fs::read_dir(teacher) {
        for e in rd.flatten() {
            inputs.push(("teacher file".into(), e.path()));
        }
    }
    let named: Vec<(&str, &Path)> = inputs
        .iter()
        .map(|(n, p)| (n.as_str(), p.as_path()))
        .collect();
    crate::lock::refuse_inputs("--out", out, &named)?;
    crate::lock::refuse_inputs("--out", &parts, &named)?;
    refuse_orphaned_output(out, &parts)?;
    let created = !parts.exists();
    std::fs::create_dir_all(&parts).with_context(|| format!("creating {}", parts.display()))?;
    let lock = crate::lock::OutputLock::file(&part_lock_path(out, slice), "distill", out);
    let lock = match lock {
        Ok(l) => l,
        Err(e) => {
            if created {
                let _ = std::fs::remove_dir(&parts);
            }
            return Err(e);
        }
    };
    let own = crate::util::temp_prefix(out);
    if let Some(dir) = out.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        crate::util::sweep_dead_temps(dir, |p| p == own.as_os_str());
    }
    crate::util::sweep_dead_temps(&parts, |_| true);
    // A run that committed nothing leaves nothing: the directory goes with the lock when
    // this run created it and nothing else is in it.
    Ok(if created {
        lock.remove_dir_on_release(&parts)
    } else {
        lock
    })
}

/// A finished `OUT` whose `OUT.parts/` (the journal that proves what it holds and lets a rerun
/// be a no-op) is gone, or holds no part: refused (exit 2), never silently redone.
fn refuse_orphaned_output(out: &Path, parts: &Path) -> Result<()> {
    if !out.is_file() {
        return Ok(());
    }
    let journal_gone = !parts.is_dir() || list_parts(parts)?.is_empty();
    if journal_gone {
        return Err(crate::error::refused(format!(
            "--out {} exists but {} (the journal of the run that wrote it: its batches and the              settings they were made with) is missing or holds no part, so distill cannot tell              whether it is up to date and will not redo every batch silently; to regenerate it,              remove {} (it is replaced only by a run that can account for it); to keep it,              restore {} or leave it be (docs/formats/parts.md)",
            out.display(),
            parts.display(),
            out.display(),
            parts.display()
        )));
    }
    Ok(())
}

/// Between batches: the test hook `distill-batch` ([`crate::signals::pause_point`]), then stop
/// here when SIGTERM/SIGINT/SIGHUP arrived (committed batches stay; an empty part goes).
pub fn safe_point() -> Result<()> {
    crate::signals::pause_point("distill-batch");
    crate::signals::check()
}

/// The header line of a part.
pub fn header(worker: WorkerSlice, batches: usize, prompts: usize, fingerprint: &Value) -> Value {
    serde_json::json!({
        PART_MAGIC: 1,
        "worker": worker.to_string(),
        "batches": batches,
        "prompts": prompts,
        "fingerprint": fingerprint,
    })
}

/// A completed batch read back from a part.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRecords {
    pub index: Vec<usize>,
    /// The records' exact JSON text, one per index.
    pub records: Vec<String>,
    /// The sha256 of the batch's top-k unit file (`--top-k`), from its commit line.
    pub topk_sha256: Option<String>,
}

/// A part file's committed content.
#[derive(Debug)]
pub struct Part {
    pub header: Value,
    pub batches: BTreeMap<usize, BatchRecords>,
    /// Byte length up to the end of the last commit line.
    pub valid_len: u64,
}

/// The header without the worker field (what must agree across parts and reruns).
fn run_identity(h: &Value) -> Value {
    let mut h = h.clone();
    if let Some(o) = h.as_object_mut() {
        o.remove("worker");
    }
    h
}

/// Names of the header/fingerprint fields whose values differ between two headers.
fn differing(a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let empty = serde_json::Map::new();
    let (fa, fb) = (
        a["fingerprint"].as_object().unwrap_or(&empty),
        b["fingerprint"].as_object().unwrap_or(&empty),
    );
    for k in fa.keys().chain(fb.keys().filter(|k| !fa.contains_key(*k))) {
        if fa.get(k) != fb.get(k) {
            out.push(format!(
                "{k}: {} vs now {}",
                fa.get(k).unwrap_or(&Value::Null),
                fb.get(k).unwrap_or(&Value::Null)
            ));
        }
    }
    for k in ["worker", "batches", "prompts"] {
        if a[k] != b[k] {
            out.push(format!("{k}: {} vs now {}", a[k], b[k]));
        }
    }
    out
}

/// Read a part; a torn tail is ignored (see `valid_len`), anything else malformed is an error
/// naming the line.
pub fn read_part(path: &Path) -> Result<Part> {
    let mut bytes = Vec::new();
    File::open(path)
        .with_context(|| format!("opening {}", path.display()))?
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    let mut pos = 0usize;
    let mut header: Option<Value> = None;
    let mut pending: Vec<String> = Vec::new();
    let mut batches = BTreeMap::new();
    let mut valid_len = 0u64;
    let mut line_no = 0usize;
    while pos < bytes.len() {
        let Some(nl) = bytes[pos..].iter().position(|&b| b == b'\n') else {
            break; // torn last line
        };
        line_no += 1;
        let raw = &bytes[pos..pos + nl];
        pos += nl + 1;
        let text = std::str::from_utf8(raw)
            .with_context(|| format!("{}:{line_no}: not UTF-8", path.display()))?;
        if header.is_none() {
            let h: Value = serde_json::from_str(text)
                .ok()
                .filter(|h: &Value| h.get(PART_MAGIC).is_some())
                .with_context(|| {
                    format!("{}:{line_no}: not a distill part header", path.display())
                })?;
            header = Some(h);
            valid_len = pos as u64;
            continue;
        }
        if text.starts_with("{\"batch\":") {
            let c: Value = serde_json::from_str(text)
                .with_context(|| format!("{}:{line_no}: bad commit line", path.display()))?;
            let k = c["batch"].as_u64().context("batch")? as usize;
            let index: Vec<usize> = c["index"]
                .as_array()
                .with_context(|| format!("{}:{line_no}: commit without index", path.display()))?
                .iter()
                .map(|v| v.as_u64().map(|x| x as usize))
                .collect::<Option<_>>()
                .with_context(|| format!("{}:{line_no}: bad index", path.display()))?;
            if index.len() != pending.len() {
                anyhow::bail!(
                    "{}:{line_no}: batch {k} commits {} records but {} precede it",
                    path.display(),
                    index.len(),
                    pending.len()
                );
            }
            let b = BatchRecords {
                index,
                records: std::mem::take(&mut pending),
                topk_sha256: c["topk_sha256"].as_str().map(str::to_string),
            };
            if let Some(prev) = batches.insert(k, b.clone()) {
                if prev != b {
                    anyhow::bail!(
                        "{}:{line_no}: batch {k} written twice, differently",
                        path.display()
                    );
                }
            }
            valid_len = pos as u64;
        } else {
            pending.push(text.to_string());
        }
    }
    let header = header.with_context(|| format!("{}: empty part (no header)", path.display()))?;
    Ok(Part {
        header,
        batches,
        valid_len,
    })
}

/// Appends committed batches to this worker's part, resuming an existing one.
pub struct PartWriter {
    file: File,
    pub path: PathBuf,
    /// Batches already committed in this part.
    pub done: BTreeSet<usize>,
    /// This run created the part (and `parts_dir_created`: its directory).
    pub created: bool,
    pub parts_dir_created: bool,
}

impl PartWriter {
    /// Create the part with `header`, or reopen it: the header must match (else the rerun's
    /// arguments differ and mixing would corrupt the output), a torn tail is truncated.
    pub fn open(path: &Path, header: &Value) -> Result<Self> {
        let mut parts_dir_created = false;
        if let Some(d) = path.parent() {
            parts_dir_created = !d.exists();
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        // A part that committed no batch (a run stopped or failed before its first) locks
        // nothing: a rerun with other arguments starts it afresh.
        if path.exists()
            && read_part(path).is_ok_and(|p| p.batches.is_empty() && p.header != *header)
        {
            std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
        }
        if path.exists() {
            let part = read_part(path)?;
            if run_identity(&part.header) != run_identity(header)
                || part.header["worker"] != header["worker"]
            {
                return Err(crate::error::usage(format!(
                    "{} was written by a run with different arguments or inputs (differing: {}); \
                     rerun with the same arguments, or delete {} to start over",
                    path.display(),
                    differing(&part.header, header).join(", "),
                    path.parent().unwrap_or(path).display()
                )));
            }
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?;
            // Only a torn tail is cut: a whole part keeps its mtime (a truncate to the same
            // length still stamps it).
            if file.metadata()?.len() != part.valid_len {
                file.set_len(part.valid_len)?;
                file.sync_all()?;
            }
            file.seek(SeekFrom::End(0))?;
            return Ok(PartWriter {
                file,
                path: path.to_path_buf(),
                done: part.batches.keys().copied().collect(),
                created: false,
                parts_dir_created: false,
            });
        }
        // A new part appears complete-or-absent: header written to a temp file, renamed.
        let mut line = serde_json::to_string(header)?;
        line.push('\n');
        write_atomic(path, line.as_bytes())?;
        let mut file = OpenOptions::new()
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        file.seek(SeekFrom::End(0))?;
        Ok(PartWriter {
            file,
            path: path.to_path_buf(),
            done: BTreeSet::new(),
            created: true,
            parts_dir_created,
        })
    }

    /// Commit one batch: its records (compact JSON, no newlines) then the commit line, in one
    /// write, fsynced.
    pub fn append(&mut self, batch: usize, index: &[usize], records: &[String]) -> Result<()> {
        self.append_with(batch, index, records, None)
    }

    /// [`Self::append`], the commit line also naming the sha256 of the batch's top-k unit file
    /// (`"topk_sha256"`, `--top-k` only), which [`finalize`] and `audit` check it against.
    pub fn append_with(
        &mut self,
        batch: usize,
        index: &[usize],
        records: &[String],
        topk_sha256: Option<&str>,
    ) -> Result<()> {
        anyhow::ensure!(index.len() == records.len(), "index/records mismatch");
        let mut buf = String::new();
        for r in records {
            debug_assert!(!r.contains('\n') && !r.starts_with("{\"batch\":"));
            buf.push_str(r);
            buf.push('\n');
        }
        let mut commit = serde_json::json!({"batch": batch, "index": index});
        if let Some(sha) = topk_sha256 {
            commit["topk_sha256"] = sha.into();
        }
        buf.push_str(&serde_json::to_string(&commit)?);
        buf.push('\n');
        self.file
            .write_all(buf.as_bytes())
            .with_context(|| format!("writing {}", self.path.display()))?;
        self.file
            .sync_data()
            .with_context(|| format!("fsync {}", self.path.display()))?;
        self.done.insert(batch);
        Ok(())
    }
}

/// Removes, when dropped armed, a part that this run created and never committed a batch to
/// (and its directory when this run created it and it is empty): a run that fails before its
/// first batch leaves nothing behind, so the rerun after a fix is not refused as a run "with
/// different arguments". Parts with committed batches are resume state and always stay.
pub struct DiscardIfEmpty {
    part: Option<PathBuf>,
    dir: Option<PathBuf>,
}

impl DiscardIfEmpty {
    pub fn new(w: &PartWriter) -> Self {
        DiscardIfEmpty {
            part: w.created.then(|| w.path.clone()),
            dir: (w.created && w.parts_dir_created)
                .then(|| w.path.parent().map(Path::to_path_buf))
                .flatten(),
        }
    }

    /// The run succeeded: keep everything.
    pub fn disarm(&mut self) {
        self.part = None;
        self.dir = None;
    }
}

impl Drop for DiscardIfEmpty {
    fn drop(&mut self) {
        let Some(p) = self.part.take() else { return };
        if read_part(&p).is_ok_and(|part| part.batches.is_empty()) {
            let _ = std::fs::remove_file(&p);
            if let Some(d) = self.dir.take() {
                let _ = std::fs::remove_dir(d); // only when empty
            }
        }
    }
}

/// Batches committed in any part of `dir` written by the run with `header`'s identity.
pub fn committed_elsewhere(dir: &Path, header: &Value, own: &Path) -> Result<BTreeSet<usize>> {
    let mut done = BTreeSet::new();
    for p in list_parts(dir)? {
        if p == own {
            continue;
        }
        let part = read_part(&p)?;
        if run_identity(&part.header) == run_identity(header) {
            done.extend(part.batches.keys());
        }
    }
    Ok(done)
}

/// What [`finalize`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Finalized {
    pub records: usize,
    pub batches: usize,
    pub parts: usize,
}

/// Combine `parts` into `out` (JSON array or JSONL), ordered by prompt index, atomically.
/// Refuses parts of different runs, missing batches and missing or duplicate prompts.
pub fn finalize(parts: &[PathBuf], out: &Path, format: OutFormat) -> Result<Finalized> {
    anyhow::ensure!(
        !parts.is_empty(),
        "no distill parts to finalize into {}",
        out.display()
    );
    let mut identity: Option<(Value, PathBuf)> = None;
    let mut batches: BTreeMap<usize, BatchRecords> = BTreeMap::new();
    // The part that committed each batch first (its top-k unit file is read).
    let mut owner: BTreeMap<usize, PathBuf> = BTreeMap::new();
    for p in parts {
        let part = read_part(p)?;
        let id = run_identity(&part.header);
        match &identity {
            None => identity = Some((id, p.clone())),
            Some((first, fp)) if *first != id => anyhow::bail!(
                "{} and {} come from different runs (arguments or inputs differ)",
                fp.display(),
                p.display()
            ),
            _ => {}
        }
        for (k, b) in part.batches {
            if let Some(prev) = batches.get(&k) {
                if *prev != b {
                    anyhow::bail!("batch {k} differs between parts ({})", p.display());
                }
            } else {
                batches.insert(k, b);
                owner.insert(k, p.clone());
            }
        }
    }
    let (id, _) = identity.expect("non-empty");
    let nb = id["batches"].as_u64().context("header.batches")? as usize;
    let np = id["prompts"].as_u64().context("header.prompts")? as usize;
    // The header's counts are outside input: nothing is sized or iterated by them unchecked.
    let done = batches.keys().filter(|&&k| k < nb).count();
    if done < nb {
        let first: Vec<usize> = (0..nb)
            .filter(|k| !batches.contains_key(k))
            .take(8)
            .collect();
        anyhow::bail!(
            "{} of {nb} batches are not done yet (first: {first:?}); run the missing workers or rerun distill",
            nb - done
        );
    }
    let held: usize = batches.values().map(|b| b.index.len()).sum();
    anyhow::ensure!(
        np <= held,
        "the header says {np} prompts but the parts hold {held} records"
    );
    let mut by_index: Vec<Option<(&str, usize, usize)>> = vec![None; np];
    for (&k, b) in &batches {
        for (j, (i, r)) in b.index.iter().zip(&b.records).enumerate() {
            let slot = by_index
                .get_mut(*i)
                .with_context(|| format!("prompt index {i} out of range {np}"))?;
            anyhow::ensure!(slot.is_none(), "prompt index {i} appears twice");
            *slot = Some((r, k, j));
        }
    }
    let placed: Vec<(&str, usize, usize)> = by_index
        .iter()
        .enumerate()
        .map(|(i, r)| r.with_context(|| format!("prompt index {i} has no record")))
        .collect::<Result<_>>()?;
    let recs: Vec<&str> = placed.iter().map(|p| p.0).collect();
    // --top-k: the sidecar first, so a distilled.json in place always has its sidecar.
    if id["fingerprint"].get("top_k").is_some_and(|k| !k.is_null()) {
        let sources = placed
            .iter()
            .map(|&(r, k, j)| {
                let rid: Value = serde_json::from_str(r).context("a committed record")?;
                Ok(super::topk_sidecar::Source {
                    file: super::topk_sidecar::unit_path(&owner[&k], k),
                    sha256: batches[&k].topk_sha256.clone(),
                    row_group: j,
                    id: rid["id"].as_str().context("record id")?.to_string(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        super::topk_sidecar::finalize(out, &sources)?;
    }
    let mut buf = String::new();
    match format {
        OutFormat::Json => {
            buf.push_str("[\n");
            buf.push_str(&recs.join(",\n"));
            buf.push_str(if recs.is_empty() { "]\n" } else { "\n]\n" });
        }
        OutFormat::Jsonl => {
            for r in &recs {
                buf.push_str(r);
                buf.push('\n');
            }
        }
    }
    // The same records as last time: distilled.json keeps its bytes and mtime.
    if std::fs::read(out).ok().as_deref() != Some(buf.as_bytes()) {
        write_atomic(out, buf.as_bytes())?;
    }
    Ok(Finalized {
        records: recs.len(),
        batches: nb,
        parts: parts.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(w: WorkerSlice) -> Value {
        header(w, 3, 4, &serde_json::json!({"seed": 1}))
    }

    #[test]
    fn gemm_plans_sit_beside_each_workers_part_and_are_not_parts() {
        let (_d, out) = crate::testkit::temp_path("distilled.json");
        let w = WorkerSlice::new(2, 4).unwrap();
        let p = gemm_plans_path(&out, w);
        assert_eq!(p.parent().unwrap(), parts_dir(&out));
        assert_ne!(p, gemm_plans_path(&out, WorkerSlice::new(3, 4).unwrap()));
        let part = part_path(&out, w);
        assert_eq!(
            p.file_name().unwrap().to_str().unwrap(),
            part.with_extension("gemm-plans.json")
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
        );
        PartWriter::open(&part, &hdr(w)).unwrap();
        std::fs::write(&p, "{}").unwrap();
        assert_eq!(list_parts(&parts_dir(&out)).unwrap(), vec![part]);
    }

    #[test]
    fn failed_finalize_leaves_no_temp_file() {
        let (d, out) = crate::testkit::temp_path("distilled.json");
        let p = part_path(&out, WorkerSlice::WHOLE);
        let mut w = PartWriter::open(&p, &header(WorkerSlice::WHOLE, 1, 1, &Value::Null)).unwrap();
        w.append(0, &[0], &["{\"id\":\"a\"}".into()]).unwrap();
        // The rename onto `out` fails: it is a directory holding a file.
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("keep"), "x").unwrap();
        let e = finalize(&[p], &out, OutFormat::Json).unwrap_err();
        assert!(format!("{e:#}").contains("renaming"), "{e:#}");
        let left: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(left.is_empty(), "temp files left behind: {left:?}");
        assert_eq!(std::fs::read(out.join("keep")).unwrap(), b"x");
    }

    #[test]
    fn torn_tail_is_dropped_and_resume_truncates() {
        let (_d, out) = crate::testkit::temp_path("distilled.json");
        let p = part_path(&out, WorkerSlice::WHOLE);
        let mut w = PartWriter::open(&p, &hdr(WorkerSlice::WHOLE)).unwrap();
        w.append(
            1,
            &[2, 0],
            &["{\"id\":\"c\"}".into(), "{\"id\":\"a\"}".into()],
        )
        .unwrap();
        drop(w);
        // A crash mid-batch: one record line and half of another, no commit line.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"id\":\"b\"}\n{\"id\":").unwrap();
        drop(f);
        let part = read_part(&p).unwrap();
        assert_eq!(part.batches.len(), 1);
        let w = PartWriter::open(&p, &hdr(WorkerSlice::WHOLE)).unwrap();
        assert_eq!(w.done, BTreeSet::from([1]));
        assert_eq!(std::fs::metadata(&p).unwrap().len(), part.valid_len);
        // A different run is refused.
        let other = header(WorkerSlice::WHOLE, 3, 4, &serde_json::json!({"seed": 2}));
        let e = PartWriter::open(&p, &other).err().unwrap();
        assert!(format!("{e:#}").contains("different arguments"));
    }

    #[test]
    fn finalize_orders_by_prompt_and_checks_coverage() {
        let (_d, out) = crate::testkit::temp_path("distilled.json");
        let s0 = WorkerSlice::new(0, 2).unwrap();
        let s1 = WorkerSlice::new(1, 2).unwrap();
        let mut a = PartWriter::open(&part_path(&out, s0), &hdr(s0)).unwrap();
        let mut b = PartWriter::open(&part_path(&out, s1), &hdr(s1)).unwrap();
        a.append(
            0,
            &[1, 0],
            &["{\"id\":\"b\"}".into(), "{\"id\":\"a\"}".into()],
        )
        .unwrap();
        b.append(1, &[3], &["{\"id\":\"d\"}".into()]).unwrap();
        let parts = list_parts(&parts_dir(&out)).unwrap();
        let e = finalize(&parts, &out, OutFormat::Json).unwrap_err();
        assert!(format!("{e:#}").contains("1 of 3 batches"), "{e:#}");
        assert!(!out.exists());
        a.append(2, &[2], &["{\"id\":\"c\"}".into()]).unwrap();
        let f = finalize(&parts, &out, OutFormat::Json).unwrap();
        assert_eq!(f.records, 4);
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "[\n{\"id\":\"a\"},\n{\"id\":\"b\"},\n{\"id\":\"c\"},\n{\"id\":\"d\"}\n]\n"
        );
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 4);
        finalize(&parts, &out, OutFormat::Jsonl).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 4);
    }
}
