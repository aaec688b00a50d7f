//! The training links of the chain: `checkpoints` (lineage.json, link by link from the pinned
//! base: each stage starts from the previous stage's output, trains only on audited outputs
//! of this tool of the stage's kind — pack shards, then the SFT shards, then distilled.json —
//! and stage 3 starts from the teacher that wrote distilled.json) and `shipped-model` (the
//! shipped directory is the last checkpoint, file for file by sha256).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::model::{Base, Teacher};
use super::report::Check;
use crate::model::checkpoint::{file_differences, Checkpoint};
use crate::model::lineage::{index_kind, DataInput, DataKind, Lineage, Stage};

fn short(s: &str) -> &str {
    &s[..12.min(s.len())]
}

/// The outputs this audit run checks: index.json of each `--shards` dir, `--distilled`,
/// by sha256, with their actual kind.
pub fn audited_outputs(shards: &[PathBuf], distilled: Option<&Path>) -> Audited {
    let mut out = BTreeMap::new();
    for d in shards {
        let idx = d.join(crate::shards::index::INDEX_FILE);
        if let Ok(sha) = crate::util::sha256_file(&idx) {
            let k = index_kind(&idx).map_err(|e| format!("{e:#}"));
            out.insert(sha, (idx, k));
        }
    }
    if let Some(p) = distilled {
        if let Ok(sha) = crate::util::sha256_file(p) {
            out.insert(sha, (p.to_path_buf(), Ok(DataKind::Distilled)));
        }
    }
    out
}

fn kind_name(k: DataKind) -> &'static str {
    match k {
        DataKind::Pretrain => "pack shards (pretrain)",
        DataKind::Sft => "the SFT shards",
        DataKind::Distilled => "distilled.json",
    }
}

/// The audited outputs by sha256, each with its path and actual kind (or why it has none).
pub type Audited = BTreeMap<String, (PathBuf, Result<DataKind, String>)>;

/// `checkpoints`; returns the lineage for `shipped-model` and the report's chain.
pub fn check(
    path: Option<&Path>,
    base: Option<&Base>,
    teacher: Option<&Teacher>,
    audited: &Audited,
) -> (Check, Option<Lineage>) {
    let Some(path) = path else {
        return (Check::skip("checkpoints", "no --lineage given"), None);
    };
    let mut c = Check::new("checkpoints");
    let lineage = match Lineage::load(path) {
        Ok(l) => l,
        Err(e) => {
            c.fail(format!("{e:#}"));
            return (c, None);
        }
    };
    if lineage.stages.is_empty() {
        c.fail(format!("{}: no stages recorded", path.display()));
        return (c, Some(lineage));
    }
    starts_at_base(&mut c, &lineage.stages[0], base);
    let names = check_stages(&mut c, &lineage, audited);
    teacher_in_chain(&mut c, &lineage, teacher, path);
    c.summary = format!(
        "{} entr{} in {}: {}",
        lineage.stages.len(),
        if lineage.stages.len() == 1 {
            "y"
        } else {
            "ies"
        },
        path.display(),
        names.join(" → ")
    );
    (c, Some(lineage))
}

/// Link 0: the first stage starts at the pinned base, file for file.
fn starts_at_base(c: &mut Check, first: &Stage, base: Option<&Base>) {
    let (b, l) = match base.map(|b| (b, &b.locked)) {
        None => {
            return c.fail("no pinned base to start from (no [[model]] in the manifests)");
        }
        Some((b, Err(e))) => return c.fail(format!("the base {}: {e}", b.pin())),
        Some((b, Ok(l))) => (b, l),
    };
    let have = first.from.by_path();
    let mut diffs = Vec::new();
    for f in &l.files {
        match have.get(f.path.as_str()) {
            None => diffs.push(format!("{} is missing", f.path)),
            Some(s) if *s != f.sha256 => {
                diffs.push(format!("{}: sha256 {s}, locked {}", f.path, f.sha256))
            }
            Some(_) => {}
        }
    }
    if !diffs.is_empty() {
        c.fail(format!(
            "stage {} starts from {}, which is not the pinned base {}: {}",
            first.stage,
            first.from.path,
            b.pin(),
            diffs.join("; ")
        ));
    }
    let extra: Vec<&str> = have
        .keys()
        .filter(|p| !l.files.iter().any(|f| f.path == **p))
        .copied()
        .collect();
    if !extra.is_empty() {
        c.note(format!(
            "stage {}'s starting directory also holds unlocked files: {}",
            first.stage,
            extra.join(", ")
        ));
    }
}

/// Every entry in order: stages by name (1 pack shards, 2 SFT shards, 3 distilled.json), each
/// starting from the previous output and trained on audited data of its kind. Returns the
/// stage names, in order.
fn check_stages<'a>(c: &mut Check, lineage: &'a Lineage, audited: &Audited) -> Vec<&'a str> {
    let mut names: Vec<&str> = Vec::new();
    for (i, s) in lineage.stages.iter().enumerate() {
        let n = i + 1;
        if names.last() != Some(&s.stage.as_str()) {
            if names.contains(&s.stage.as_str()) {
                c.fail(format!(
                    "entry {n}: stage {:?} appears again after {:?}",
                    s.stage,
                    names.last().unwrap()
                ));
            }
            names.push(&s.stage);
        }
        let k = names.len() - 1;
        for (which, ck) in [("parent", &s.from), ("output", &s.to)] {
            for why in ck.inconsistencies() {
                c.fail(format!(
                    "entry {n} (stage {}): its {which} {}: {why} (lineage.json edited?)",
                    s.stage, ck.path
                ));
            }
        }
        if i > 0 {
            follows(c, n, s, &lineage.stages[i - 1]);
        }
        if s.to.sha256 == s.from.sha256 {
            c.warn(format!(
                "entry {n} (stage {}): the output equals its parent (nothing was trained?)",
                s.stage
            ));
        }
        let Some(want) = DataKind::for_stage(k) else {
            c.fail(format!(
                "entry {n}: stage {:?} is a stage {}; the chain has three (pack shards, SFT shards, distilled.json)",
                s.stage,
                k + 1
            ));
            continue;
        };
        if s.data.is_empty() {
            c.fail(format!("entry {n} (stage {}): no data recorded", s.stage));
        }
        for d in &s.data {
            check_data(c, (n, k), s, want, d, audited);
        }
    }
    names
}

/// Entry `n` starts from the previous entry's output.
fn follows(c: &mut Check, n: usize, s: &Stage, prev: &Stage) {
    if s.from.sha256 != prev.to.sha256 {
        c.fail(format!(
            "entry {n} (stage {}) starts from {} ({}…), not the previous output {} ({}…, stage {})",
            s.stage,
            s.from.path,
            short(&s.from.sha256),
            prev.to.path,
            short(&prev.to.sha256),
            prev.stage
        ));
    }
}

/// One data input of entry `n` (stage `k` of the chain, 0-based): an audited output of the
/// kind the stage trains on; distilled data starts from the teacher that wrote it.
fn check_data(
    c: &mut Check,
    (n, k): (usize, usize),
    s: &Stage,
    want: DataKind,
    d: &DataInput,
    audited: &Audited,
) {
    let actual = match audited.get(&d.sha256) {
        None => {
            c.fail(format!(
                "entry {n} (stage {}): data {} (sha256 {}…) is not among this audit's outputs (give it with --shards / --distilled)",
                s.stage,
                d.path,
                short(&d.sha256)
            ));
            d.kind
        }
        Some((_, Err(e))) => {
            c.fail(format!("entry {n} (stage {}): {e}", s.stage));
            d.kind
        }
        Some((_, Ok(k))) => *k,
    };
    if actual != want {
        c.fail(format!(
            "entry {n} (stage {}, stage {} of the chain) trained on {} {}; stage {} trains on {} only",
            s.stage,
            k + 1,
            kind_name(actual),
            d.path,
            k + 1,
            kind_name(want)
        ));
    }
    if let Some(tw) = &d.teacher_weights_sha256 {
        if s.from.weights_sha256.as_deref() != Some(tw.as_str()) {
            c.fail(format!(
                "entry {n} (stage {}) starts from weights {}, but {} was written by the teacher {}",
                s.stage,
                s.from.weights_sha256.as_deref().unwrap_or("none"),
                d.path,
                tw
            ));
        }
    }
}

/// The teacher is a checkpoint of this chain (it came from the pinned base).
fn teacher_in_chain(c: &mut Check, lineage: &Lineage, teacher: Option<&Teacher>, path: &Path) {
    let Some(t) = teacher else { return };
    let Ok(ta) = &t.arch else { return };
    match lineage
        .stages
        .iter()
        .find(|s| s.to.weights_sha256.as_deref() == Some(ta.weights_sha256.as_str()))
    {
        Some(s) => c.note(format!(
            "the teacher {} is the output of stage {}",
            t.dir.display(),
            s.stage
        )),
        None => c.fail(format!(
            "the teacher {} (weights {}…) is no stage's output in {}",
            t.dir.display(),
            short(&ta.weights_sha256),
            path.display()
        )),
    }
}

/// `shipped-model`
pub fn shipped(dir: Option<&Path>, lineage: Option<&Lineage>) -> Check {
    let Some(dir) = dir else {
        return Check::skip("shipped-model", "no --shipped given");
    };
    let mut c = Check::new("shipped-model");
    let Some(last) = lineage.and_then(|l| l.stages.last()) else {
        c.fail("no checkpoint to compare with (needs --lineage with at least one stage)");
        return c;
    };
    let got = match Checkpoint::hash_dir(dir) {
        Ok(g) => g,
        Err(e) => {
            c.fail(format!("{e:#}"));
            return c;
        }
    };
    for d in file_differences(&last.to, &got) {
        c.fail(format!(
            "{}: {d} (stage {}'s output {})",
            dir.display(),
            last.stage,
            last.to.path
        ));
    }
    c.summary = format!(
        "{} against stage {}'s output {}: {} file(s) by sha256",
        dir.display(),
        last.stage,
        last.to.path,
        last.to.files.len()
    );
    c
}

/// The chain for the report, base first: `repo@commit`, each stage and its output, shipped.
pub fn chain(
    base: Option<&Base>,
    teacher: Option<&Teacher>,
    lineage: Option<&Lineage>,
    shipped: Option<&Path>,
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(b) = base {
        out.push(b.pin());
    }
    let tw = teacher.and_then(|t| t.arch.as_ref().ok().map(|a| a.weights_sha256.clone()));
    match lineage {
        Some(l) => {
            for s in &l.stages {
                let kinds: Vec<&str> = s
                    .data
                    .iter()
                    .map(|d| match d.kind {
                        DataKind::Pretrain => "pack shards",
                        DataKind::Sft => "SFT shards",
                        DataKind::Distilled => "distilled.json",
                    })
                    .collect();
                let is_teacher = tw.is_some() && s.to.weights_sha256 == tw;
                out.push(format!(
                    "{} [{}] → {} ({}…){}",
                    s.stage,
                    kinds.join(", "),
                    s.to.path,
                    short(&s.to.sha256),
                    if is_teacher { " = the teacher" } else { "" }
                ));
            }
        }
        None => {
            if let Some(t) = teacher {
                out.push(format!("teacher {}", t.dir.display()));
            }
        }
    }
    if let Some(d) = shipped {
        out.push(format!("shipped {}", d.display()));
    }
    out
}
