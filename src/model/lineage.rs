//! `lineage.json`: which checkpoint each training stage started from, which it produced, and
//! the data it trained on — one entry per `dlm-data lineage add --stage NAME --from DIR
//! --data PATH... --to DIR`, run by the training script after each stage. `audit --lineage`
//! checks it link by link from the pinned base (docs/model-chain.md).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::checkpoint::Checkpoint;

/// What a stage trained on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataKind {
    /// Pack shards (index.json `kind: pretrain`): stage 1.
    Pretrain,
    /// The MCQ SFT shards (index.json `kind: sft`): stage 2.
    Sft,
    /// distilled.json: stage 3.
    Distilled,
}

impl DataKind {
    /// The kind stage `k` (0-based, by distinct stage name) trains on.
    pub fn for_stage(k: usize) -> Option<DataKind> {
        [DataKind::Pretrain, DataKind::Sft, DataKind::Distilled]
            .get(k)
            .copied()
    }
}

/// One data input of a stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataInput {
    /// The file hashed: a shard directory's index.json, or distilled.json.
    pub path: String,
    pub kind: DataKind,
    pub sha256: String,
    /// distilled.json: the one `teacher.weights_sha256` its records carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub teacher_weights_sha256: Option<String>,
}

/// One training stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stage {
    pub stage: String,
    /// RFC3339 UTC, when it was recorded.
    pub time: String,
    /// `dlm-data <version>` that recorded it.
    pub tool: String,
    /// The tool build (version, commit, features) that recorded it; absent in stages recorded
    /// before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_build: Option<crate::build_info::ToolBuild>,
    pub from: Checkpoint,
    pub to: Checkpoint,
    pub data: Vec<DataInput>,
}

/// The file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lineage {
    pub version: u32,
    pub stages: Vec<Stage>,
}

impl Lineage {
    pub fn load(path: &Path) -> Result<Lineage> {
        let text = crate::bounded::read_regular_text(path, LINEAGE_MAX)?;
        let l: Lineage =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if l.version != 1 {
            bail!("{}: unsupported version {}", path.display(), l.version);
        }
        Ok(l)
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        crate::util::atomic_write(path, text.as_bytes())
    }
}

/// The most bytes a lineage.json or an index.json is read to (a regular file only).
const LINEAGE_MAX: crate::bounded::Bound = crate::bounded::Bound::new(
    256 << 20,
    "a lineage.json or index.json is at most that; no flag raises it",
);

/// The bound on one distilled record while it is read.
pub const RECORD_MAX: crate::bounded::Bound = crate::bounded::Bound::new(
    crate::sources::ROW_BYTES,
    "a distilled record is at most that; no flag raises it here",
);

/// Every record of a distilled.json (one array, or JSON lines; plain, `.gz` or `.zst`),
/// streamed through [`crate::sources::records`]: one record in memory at a time.
pub fn for_each_record(
    path: &Path,
    bound: crate::bounded::Bound,
    f: &mut crate::sources::records::OnRecord,
) -> Result<()> {
    let name = path.display().to_string();
    match crate::sources::records::for_each_in(path, &name, bound, 0, f) {
        Err(e) if crate::sources::is_stop(&e) => Ok(()),
        r => r,
    }
}

/// The JSON records of a distilled.json (one array, or JSON lines), all in memory: for the
/// callers that need them together; [`for_each_record`] streams them.
pub fn read_records(path: &Path) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for_each_record(path, RECORD_MAX, &mut |_, v| {
        out.push(v);
        Ok(())
    })?;
    Ok(out)
}

/// Checks that records carry one `teacher.weights_sha256`, record by record.
#[derive(Default)]
struct OneTeacher {
    seen: Option<String>,
}

impl OneTeacher {
    fn add(&mut self, path: &Path, i: usize, r: &Value) -> Result<()> {
        let w = r["teacher"]["weights_sha256"].as_str().with_context(|| {
            format!(
                "{} record {i} ({}): no teacher.weights_sha256",
                path.display(),
                r["id"]
            )
        })?;
        match &self.seen {
            None => self.seen = Some(w.to_string()),
            Some(s) if s != w => bail!(
                "{} record {i} ({}): a second teacher {w} (first {s})",
                path.display(),
                r["id"]
            ),
            Some(_) => {}
        }
        Ok(())
    }
    fn done(self, path: &Path) -> Result<String> {
        self.seen
            .with_context(|| format!("{}: no records", path.display()))
    }
}

/// The one `teacher.weights_sha256` of distilled records; an error names a record without
/// one or a second teacher.
pub fn distilled_teacher(path: &Path, recs: &[Value]) -> Result<String> {
    let mut t = OneTeacher::default();
    for (i, r) in recs.iter().enumerate() {
        t.add(path, i, r)?;
    }
    t.done(path)
}

/// [`distilled_teacher`] of a distilled.json, read streaming.
pub fn distilled_teacher_of(path: &Path) -> Result<String> {
    let mut t = OneTeacher::default();
    for_each_record(path, RECORD_MAX, &mut |i, r| t.add(path, i as usize, &r))?;
    t.done(path)
}

/// The kind of an index.json (`kind`, or `dlm_data.kind` in an MDS index), refusing an
/// incomplete one.
pub fn index_kind(path: &Path) -> Result<DataKind> {
    let text = crate::bounded::read_regular_text(path, LINEAGE_MAX)?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let obj = if v.get("dlm_data").is_some() {
        &v["dlm_data"]
    } else {
        &v
    };
    if obj["complete"].as_bool() != Some(true) {
        bail!(
            "{}: the index is not complete (a run in progress or killed)",
            path.display()
        );
    }
    match obj["kind"].as_str() {
        Some("pretrain") => Ok(DataKind::Pretrain),
        Some("sft") => Ok(DataKind::Sft),
        k => bail!(
            "{}: index kind {k:?} is neither pretrain nor sft",
            path.display()
        ),
    }
}

/// A `--data PATH`: a shard directory (its index.json), an index.json, or a distilled.json.
/// A bucket URL names the object (or the prefix whose index.json it is), read from its local
/// copy ([`crate::storage::materialize::local_file`]) and recorded by its URL.
pub fn data_input(path: &Path) -> Result<DataInput> {
    use crate::storage::Location;
    let url = match Location::of_path(path, "--data")? {
        Location::Object(url) => url,
        Location::Local(p) if p != path => return data_input(&p), // file:///PATH
        Location::Local(_) => return local_data_input(path),
        Location::Hub(_) => {
            return Err(crate::error::usage(
                "--data: an hf:// URL names a dataset input, not a stage's data output",
            ))
        }
    };
    use crate::storage::materialize::local_file;
    let index = url.child(crate::shards::index::INDEX_FILE);
    let (shown, file) = match local_file(path, "--data", &[]) {
        Ok(f) => (url.to_string(), f),
        Err(first) => match local_file(Path::new(&index.to_string()), "--data", &[]) {
            Ok(f) => (index.to_string(), f),
            Err(_) => return Err(first),
        },
    };
    Ok(DataInput {
        path: shown,
        ..local_data_input(&file)?
    })
}

/// [`data_input`] of a local path.
fn local_data_input(path: &Path) -> Result<DataInput> {
    let file = if path.is_dir() {
        path.join(crate::shards::index::INDEX_FILE)
    } else {
        path.to_path_buf()
    };
    if !file.is_file() {
        bail!(
            "--data {}: no such file (a shard directory needs its index.json)",
            path.display()
        );
    }
    let sha256 = crate::util::sha256_file(&file)?;
    let is_index = file
        .file_name()
        .is_some_and(|n| n == crate::shards::index::INDEX_FILE);
    let (kind, teacher) = if is_index {
        (index_kind(&file)?, None)
    } else {
        let t = distilled_teacher_of(&file).with_context(|| {
            format!(
                "--data {}: not an index.json, nor a distilled.json",
                path.display()
            )
        })?;
        (DataKind::Distilled, Some(t))
    };
    Ok(DataInput {
        path: file.display().to_string(),
        kind,
        sha256,
        teacher_weights_sha256: teacher,
    })
}

/// `dlm-data lineage ...`
#[derive(Args, Debug, Clone)]
pub struct LineageArgs {
    #[command(subcommand)]
    pub command: LineageCommand,
}

#[derive(Subcommand, Debug, Clone)]
pub enum LineageCommand {
    /// Record one training stage: its parent and output checkpoints and the data it trained on.
    Add(AddArgs),
}

/// `dlm-data lineage add --stage NAME --from DIR --data PATH... --to DIR [--lineage FILE]`
#[derive(Args, Debug, Clone)]
pub struct AddArgs {
    /// The stage's name (e.g. stage1); repeated entries of one name continue that stage.
    #[arg(long)]
    pub stage: String,
    /// The checkpoint directory training started from.
    #[arg(long)]
    pub from: PathBuf,
    /// What it trained on: shard directories (or their index.json), or distilled.json.
    #[arg(long, required = true, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// The checkpoint directory it produced.
    #[arg(long)]
    pub to: PathBuf,
    /// The lineage file to extend (created when missing).
    #[arg(long, default_value = "lineage.json")]
    pub lineage: PathBuf,
    /// Print one line of JSON on stdout at the end: the stage as recorded, the lineage file,
    /// and whether this run added it (`false`: already recorded).
    /// Set from the global `--json` by the CLI (not a flag of its own).
    #[arg(skip)]
    pub json: bool,
}

impl LineageArgs {
    /// The global `--json`, handed to the subcommand.
    pub fn with_json(self, json: bool) -> LineageArgs {
        match self.command {
            LineageCommand::Add(a) => LineageArgs {
                command: LineageCommand::Add(AddArgs { json, ..a }),
            },
        }
    }
}

/// Run a `lineage` command; `now` is the RFC3339 time recorded (the caller's clock).
pub fn run(args: LineageArgs, now: String) -> Result<()> {
    match args.command {
        LineageCommand::Add(a) => {
            if let crate::storage::Location::Object(url) =
                crate::storage::Location::of_path(&a.lineage, "--lineage")?
            {
                return add_on_bucket(a, &url, now);
            }
            // One writer: the lock is held until the --json line has counted the stages.
            let _lock = claim(&a)?;
            let (stage, added) = add_stage(&a, now)?;
            if a.json {
                crate::cron::json_line(serde_json::json!({
                    "lineage": a.lineage.display().to_string(),
                    "added": added,
                    "stages": Lineage::load(&a.lineage)?.stages.len(),
                    "stage": stage,
                }));
            }
            Ok(())
        }
    }
}

/// `--lineage s3://…/lineage.json`: the object as the bucket holds it now, extended on a
/// staging copy under a lease beside it (`.lineage.json.dlm-data.lease`: a second writer
/// exits 75 naming the holder), and put back whole (not when unchanged). Every stage another
/// machine recorded is kept: the read comes after the lease is taken.
fn add_on_bucket(a: AddArgs, url: &crate::storage::ObjectUrl, now: String) -> Result<()> {
    use crate::storage::file_output::{split, FileOutput};
    let (_, name) = split(url, "--lineage")?;
    let lease = format!(".{name}.dlm-data.lease");
    let fo = FileOutput::open(url, "--lineage", &lease, "lineage add")?;
    let local = fo.local();
    let ran = (|| -> Result<(Stage, bool, usize)> {
        match fo.bucket.get(&fo.name)? {
            Some((b, _)) => crate::util::atomic_write(&local, &b)?,
            None => crate::storage::materialize::remove_stale(&local)?,
        }
        let staged = AddArgs {
            lineage: local.clone(),
            ..a.clone()
        };
        let (stage, added) = add_stage(&staged, now)?;
        let stages = Lineage::load(&local)?.stages.len();
        fo.commit(std::slice::from_ref(&fo.name))?;
        Ok((stage, added, stages))
    })();
    let finished = fo.finish(ran.is_ok());
    let (stage, added, stages) = ran?;
    finished?;
    if a.json {
        crate::cron::json_line(serde_json::json!({
            "lineage": url.to_string(),
            "added": added,
            "stages": stages,
            "stage": stage,
        }));
    }
    Ok(())
}

/// Append one stage recorded at `time`; returns it.
pub fn add(a: &AddArgs, time: String) -> Result<Stage> {
    let _lock = claim(a)?;
    add_stage(a, time).map(|(s, _)| s)
}

/// Before any work: a `--lineage` file outside both checkpoints (inside one, it would change
/// the digest just recorded, or be hashed as part of the next stage), then the exclusive
/// lock beside it (`.lineage.json.lock`): two concurrent adds never lose a stage — the
/// second exits 75 naming the first.
fn claim(a: &AddArgs) -> Result<crate::lock::OutputLock> {
    if a.stage.trim().is_empty() {
        return Err(crate::error::usage("--stage: empty name"));
    }
    let file = crate::lock::resolved(&a.lineage);
    for (flag, dir) in [("--to", &a.to), ("--from", &a.from)] {
        let d = crate::lock::resolved(dir);
        if file.starts_with(&d) {
            return Err(crate::error::usage(format!(
                "--lineage {} is inside {flag} {}: the lineage file would change the \
                 checkpoint whose digest it records (and be hashed into the next stage's); \
                 keep it outside every checkpoint directory",
                a.lineage.display(),
                dir.display()
            )));
        }
    }
    crate::lock::OutputLock::beside(&a.lineage, "lineage add")
}

/// [`add`], also saying whether the stage was added (`false`: the same stage was recorded).
fn add_stage(a: &AddArgs, time: String) -> Result<(Stage, bool)> {
    if a.stage.trim().is_empty() {
        return Err(crate::error::usage("--stage: empty name"));
    }
    let mut lineage = if a.lineage.exists() {
        Lineage::load(&a.lineage)?
    } else {
        Lineage {
            version: 1,
            stages: Vec::new(),
        }
    };
    let data = a
        .data
        .iter()
        .map(|p| data_input(p).map_err(|e| crate::error::usage(format!("{e:#}"))))
        .collect::<Result<Vec<_>>>()?;
    let from =
        Checkpoint::hash_dir(&a.from).map_err(|e| crate::error::usage(format!("--from: {e:#}")))?;
    let to =
        Checkpoint::hash_dir(&a.to).map_err(|e| crate::error::usage(format!("--to: {e:#}")))?;
    // The same stage recorded again (a rerun of the documented pipeline): nothing to add.
    if let Some(same) = lineage.stages.iter().find(|s| {
        s.stage == a.stage
            && s.from.sha256 == from.sha256
            && s.to.sha256 == to.sha256
            && s.data == data
    }) {
        crate::progress::note(&format!(
            "lineage: {} already recorded in {} at {} (same checkpoints and data); unchanged",
            same.stage,
            a.lineage.display(),
            same.time
        ));
        return Ok((same.clone(), false));
    }
    if let Some(prev) = lineage.stages.last() {
        if prev.to.sha256 != from.sha256 {
            eprintln!(
                "lineage: warning: --from {} is not the previous stage's output {} ({}); recorded as given, `audit --lineage` will flag it",
                a.from.display(),
                prev.to.path,
                prev.stage
            );
        }
    }
    let stage = Stage {
        stage: a.stage.clone(),
        time,
        tool: crate::shards::index::Index::tool_name(),
        tool_build: Some(crate::build_info::ToolBuild::current()),
        from,
        to,
        data,
    };
    lineage.stages.push(stage.clone());
    lineage.save(&a.lineage)?;
    crate::progress::note(&format!(
        "lineage: {} recorded in {} ({} → {}, {} data input(s))",
        stage.stage,
        a.lineage.display(),
        &stage.from.sha256[..12],
        &stage.to.sha256[..12],
        stage.data.len()
    ));
    Ok((stage, true))
}
