//! The model links of the chain, base first: `base-pinned` (the pinned base is locked, logged
//! as verified, cached, and described by architecture.json), `teacher-architecture` (the
//! teacher is the base converted: same architecture and tokenizer but for the documented
//! conversion changes, a mask id the base never emits for text), `teacher-weights` (the
//! `--teacher` directory is the one every distilled record names).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::context::Ctx;
use super::report::Check;
use crate::hub::cache::Area;
use crate::manifest::{LockedModel, ModelLock, ModelSource};
use crate::model::architecture::{compare, ArchitectureFile, ModelArchitecture, ARCHITECTURE_FILE};
use crate::model::checkpoint::weights_digest;
use crate::model::tokenizer::{check_mask_id, token_id, BaseText};

/// The pinned base model: its declaration, lock entry, architecture.json and cached files.
pub struct Base {
    pub manifest: PathBuf,
    pub lock_path: PathBuf,
    pub model: ModelSource,
    pub locked: Result<LockedModel, String>,
    pub arch_path: PathBuf,
    pub arch: Result<ModelArchitecture, String>,
}

impl Base {
    /// `repo@commit` (the revision when the lock has none).
    pub fn pin(&self) -> String {
        let c = self
            .locked
            .as_ref()
            .map(|l| l.commit.clone())
            .unwrap_or_else(|_| self.model.revision.clone());
        format!("{}@{c}", self.model.repo)
    }

    /// Where a locked file of the base is cached.
    pub fn cached(&self, ctx: &Ctx, path: &str) -> Option<PathBuf> {
        let l = self.locked.as_ref().ok()?;
        Some(
            ctx.cache
                .snapshot_path(Area::MODEL, &l.repo, &l.commit, path),
        )
    }
}

/// The base among the manifests' `[[model]]`s: `--base NAME`, else the only one declared.
pub fn find_base(ctx: &Ctx, name: Option<&str>) -> anyhow::Result<Option<Base>> {
    let declared: Vec<(&super::context::ManifestSet, &ModelSource)> = ctx
        .sets
        .iter()
        .flat_map(|s| s.manifest.models.iter().map(move |m| (s, m)))
        .collect();
    let pick = match (name, declared.len()) {
        (_, 0) => {
            if let Some(n) = name {
                return Err(crate::error::usage(format!(
                    "--base {n:?}: no manifest declares a [[model]]"
                )));
            }
            return Ok(None);
        }
        (None, 1) => declared[0],
        (None, _) => {
            return Err(crate::error::usage(format!(
                "the manifests declare {} models ({}): name the base with --base",
                declared.len(),
                declared
                    .iter()
                    .map(|(_, m)| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
        (Some(n), _) => *declared
            .iter()
            .find(|(_, m)| m.name == n)
            .ok_or_else(|| crate::error::usage(format!("--base {n:?}: no such [[model]]")))?,
    };
    let (set, m) = pick;
    let locked = ModelLock::load(&set.lock_path)
        .map_err(|e| format!("{e:#}"))
        .and_then(|l| {
            l.model(&m.name).cloned().ok_or_else(|| {
                format!(
                    "{} does not pin model {:?} (run fetch)",
                    set.lock_path.display(),
                    m.name
                )
            })
        });
    let arch_path = set.lock_path.with_file_name(ARCHITECTURE_FILE);
    let arch = ArchitectureFile::load(&arch_path)
        .map_err(|e| format!("{e:#}"))
        .and_then(|f| {
            f.model(&m.name)
                .cloned()
                .ok_or_else(|| format!("{} has no model {:?}", arch_path.display(), m.name))
        });
    Ok(Some(Base {
        manifest: set.manifest.path.clone(),
        lock_path: set.lock_path.clone(),
        model: m.clone(),
        locked,
        arch_path,
        arch,
    }))
}

/// `base-pinned`
pub fn base_pinned(ctx: &Ctx, base: Option<&Base>, hash: bool) -> Check {
    // Nothing configured is not a broken link: the chain simply starts later.
    let Some(b) = base else {
        return Check::skip(
            "base-pinned",
            "not configured: no --manifest declares a [[model]] (e.g. manifests/base.toml)",
        );
    };
    let mut c = Check::new("base-pinned");
    c.summary = format!("{} ({})", b.pin(), b.manifest.display());
    let l = match &b.locked {
        Ok(l) => l,
        Err(e) => {
            c.fail(e.clone());
            return c;
        }
    };
    lock_is_declared(&mut c, b, l);
    let bytes = logged_and_cached(&mut c, ctx, l, hash);
    match &b.arch {
        Err(e) => c.fail(format!("architecture.json: {e} (run fetch)")),
        Ok(a) => {
            architecture_is_locked(&mut c, ctx, b, l, a, hash);
            c.summary = format!(
                "{}: {} file(s), {:.1} MB locked, logged verified, cached{}; {} tensors, {} parameters in architecture.json",
                b.pin(),
                l.files.len(),
                bytes as f64 / 1e6,
                if hash { " (sha256 re-hashed)" } else { " (sizes; --hash re-hashes)" },
                a.tensors.len(),
                a.parameters
            );
        }
    }
    c
}

/// The lock pins what the manifest declares, at the declared commit, with files.
fn lock_is_declared(c: &mut Check, b: &Base, l: &LockedModel) {
    if l.repo != b.model.repo || l.revision != b.model.revision {
        c.fail(format!(
            "{} pins {}@{}, the manifest declares {}@{}",
            b.lock_path.display(),
            l.repo,
            l.revision,
            b.model.repo,
            b.model.revision
        ));
    }
    if !l.commit.eq_ignore_ascii_case(&b.model.revision) {
        c.fail(format!(
            "locked commit {} is not the declared revision {}",
            l.commit, b.model.revision
        ));
    }
    if l.files.is_empty() {
        c.fail(format!(
            "{}: no files locked for the base",
            b.lock_path.display()
        ));
    }
}

/// download.log: a verified line with the locked sha256 for every file; every file cached
/// (sizes, or sha256 with `hash`). Returns the cached bytes.
fn logged_and_cached(c: &mut Check, ctx: &Ctx, l: &LockedModel, hash: bool) -> u64 {
    let log = match &ctx.log {
        Ok(lines) => Some(lines),
        Err(e) => {
            c.fail(format!("download log missing: {e}"));
            None
        }
    };
    let mut bytes = 0u64;
    for f in &l.files {
        if let Some(lines) = log {
            let good = lines.iter().any(|(_, x)| {
                x.repo == l.repo
                    && x.commit == l.commit
                    && x.path == f.path
                    && x.verified
                    && x.sha256.as_deref() == Some(f.sha256.as_str())
            });
            if !good {
                c.fail(format!(
                    "{}: no verified download of the locked sha256 {} in {}",
                    f.path,
                    f.sha256,
                    ctx.log_path.display()
                ));
            }
        }
        let p = ctx
            .cache
            .snapshot_path(Area::MODEL, &l.repo, &l.commit, &f.path);
        bytes += super::fetched::check_cached(c, &p, f, hash);
    }
    bytes
}

/// architecture.json: the locked config and weights, and (`hash`) the headers read again.
fn architecture_is_locked(
    c: &mut Check,
    ctx: &Ctx,
    b: &Base,
    l: &LockedModel,
    a: &ModelArchitecture,
    hash: bool,
) {
    let sha: BTreeMap<&str, &str> = l
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.sha256.as_str()))
        .collect();
    if a.repo != l.repo || !a.commit.eq_ignore_ascii_case(&l.commit) {
        c.fail(format!(
            "{} describes {}@{}, the lock pins {}@{}",
            b.arch_path.display(),
            a.repo,
            a.commit,
            l.repo,
            l.commit
        ));
    }
    if sha.get("config.json") != Some(&a.config_sha256.as_str()) {
        c.fail(format!(
            "{}: config_sha256 {} is not the locked config.json's ({})",
            b.arch_path.display(),
            a.config_sha256,
            sha.get("config.json").unwrap_or(&"not locked")
        ));
    }
    let mut weight_shas = BTreeMap::new();
    for t in &a.tensors {
        match sha.get(t.file.as_str()) {
            Some(s) => {
                weight_shas.insert(t.file.clone(), s.to_string());
            }
            None => c.fail(format!(
                "{}: tensor `{}` is in {}, which is not locked",
                b.arch_path.display(),
                t.name,
                t.file
            )),
        }
    }
    if weights_digest(&weight_shas) != a.weights_sha256 {
        c.fail(format!(
            "{}: weights_sha256 {} is not the digest of the locked weight files",
            b.arch_path.display(),
            a.weights_sha256
        ));
    }
    if !hash {
        return;
    }
    let dir = ctx
        .cache
        .repo_dir(Area::MODEL, &l.repo)
        .join("snapshots")
        .join(&l.commit);
    match ModelArchitecture::from_dir(&dir) {
        Ok(now) => {
            if now.config != a.config || now.tensors != a.tensors {
                c.fail(format!(
                    "{}: the cached files' config and tensor headers differ from it",
                    b.arch_path.display()
                ));
            }
        }
        Err(e) => c.fail(format!("{}: {e:#}", dir.display())),
    }
}

/// The `--teacher` directory, read once.
pub struct Teacher {
    pub dir: PathBuf,
    pub arch: Result<ModelArchitecture, String>,
}

impl Teacher {
    pub fn open(dir: &Path) -> Teacher {
        Teacher {
            dir: dir.to_path_buf(),
            arch: ModelArchitecture::from_dir(dir).map_err(|e| format!("{e:#}")),
        }
    }
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: not JSON ({e})", path.display()))
}

/// The teacher's mask id: config `mask_token_id`, else tokenizer_config's `mask_token`.
fn teacher_mask_id(t: &Teacher, a: &ModelArchitecture, tok: Option<&Value>) -> Option<u64> {
    if let Some(id) = a.conversion.get("mask_token_id").and_then(Value::as_u64) {
        return Some(id);
    }
    let tc = read_json(&t.dir.join("tokenizer_config.json")).ok()?;
    let content = match &tc["mask_token"] {
        Value::String(s) => s.clone(),
        Value::Object(o) => o.get("content")?.as_str()?.to_string(),
        _ => return None,
    };
    token_id(tok?, &content)
}

/// The base's cached config.json, its sha256 checked against the lock's (always: it is
/// small), as a JSON object.
fn pinned_config(ctx: &Ctx, b: &Base) -> Result<Map<String, Value>, String> {
    let l = b.locked.as_ref().map_err(|e| e.clone())?;
    let f = l
        .files
        .iter()
        .find(|f| f.path == "config.json")
        .ok_or_else(|| {
            format!(
                "{} pins no config.json for {}",
                b.lock_path.display(),
                b.pin()
            )
        })?;
    let p = b
        .cached(ctx, "config.json")
        .ok_or_else(|| "no lock entry".to_string())?;
    let sha =
        crate::util::sha256_file(&p).map_err(|e| format!("{} (run fetch): {e:#}", p.display()))?;
    if !sha.eq_ignore_ascii_case(&f.sha256) {
        return Err(format!(
            "cached {} has sha256 {sha}, not the sha256 the lock pins ({})",
            p.display(),
            f.sha256
        ));
    }
    match read_json(&p)? {
        Value::Object(m) => Ok(m),
        _ => Err(format!("{}: not a JSON object", p.display())),
    }
}

/// `teacher-architecture`
pub fn teacher_architecture(ctx: &Ctx, base: Option<&Base>, t: Option<&Teacher>) -> Check {
    let Some(t) = t else {
        return Check::skip("teacher-architecture", "no --teacher given");
    };
    let Some(b) = base else {
        return Check::skip(
            "teacher-architecture",
            "not configured: no pinned base to compare with (no [[model]] in the manifests)",
        );
    };
    let mut c = Check::new("teacher-architecture");
    c.summary = format!("{} against the base", t.dir.display());
    let ba = match &b.arch {
        Ok(a) => a,
        Err(e) => {
            c.fail(format!("the base's architecture.json: {e}"));
            return c;
        }
    };
    let ta = match &t.arch {
        Ok(a) => a,
        Err(e) => {
            c.fail(format!("teacher {}: {e}", t.dir.display()));
            return c;
        }
    };
    // The base's config as the lock pins it, not architecture.json's copy (which an edit
    // could make agree with an edited teacher).
    let pinned = match pinned_config(ctx, b) {
        Ok(cfg) => {
            let (config, conversion) = crate::model::architecture::split_config(&cfg);
            ModelArchitecture {
                config,
                conversion,
                ..ba.clone()
            }
        }
        Err(e) => {
            c.fail(format!("the base's config.json: {e}"));
            return c;
        }
    };
    let ba = &pinned;
    let (broken, allowed) = compare(ba, ta);
    for p in broken {
        c.fail(format!("teacher {}: {p}", t.dir.display()));
    }
    for n in &allowed {
        c.note(format!("conversion change: {n}"));
    }
    if ta.conversion.get("is_causal") != Some(&Value::Bool(false)) {
        c.fail(format!(
            "teacher {}: config.json does not say `\"is_causal\": false` (not converted to bidirectional attention)",
            t.dir.display()
        ));
    }
    // Tokenizer: equal to the base's, or differing only in the documented ways.
    let base_tok = b.cached(ctx, "tokenizer.json").map(|p| read_json(&p));
    let teacher_tok = read_json(&t.dir.join("tokenizer.json"));
    let tt = teacher_tok.as_ref().ok();
    let mask = teacher_mask_id(t, ta, tt);
    match (&base_tok, &teacher_tok) {
        (Some(Ok(bt)), Ok(tt)) => {
            let (problems, notes) = crate::model::tokenizer::compare(bt, tt, mask);
            for p in problems {
                c.fail(format!("teacher tokenizer: {p}"));
            }
            for n in notes {
                c.note(format!("tokenizer: {n}"));
            }
        }
        (Some(Err(e)), _) | (_, Err(e)) => c.fail(format!("tokenizer: {e}")),
        (None, _) => c.fail("the base's lock has no tokenizer.json to compare with"),
    }
    // The mask id: a token the base never emits for text.
    match (mask, &base_tok) {
        (None, _) => c.fail(format!(
            "teacher {}: no mask id (no mask_token_id in config.json, no mask_token in tokenizer_config.json)",
            t.dir.display()
        )),
        (Some(id), Some(Ok(bt))) => {
            let cfg: Map<String, Value> = b
                .cached(ctx, "config.json")
                .and_then(|p| read_json(&p).ok())
                .and_then(|v| v.as_object().cloned())
                .unwrap_or_else(|| ba.config.clone());
            let tc = b.cached(ctx, "tokenizer_config.json").and_then(|p| read_json(&p).ok());
            let gc = b
                .cached(ctx, "generation_config.json")
                .and_then(|p| read_json(&p).ok());
            match check_mask_id(
                &BaseText {
                    tokenizer: bt,
                    config: &cfg,
                    tokenizer_config: tc.as_ref(),
                    generation_config: gc.as_ref(),
                },
                id,
            ) {
                Ok(n) => c.note(n),
                Err(p) => c.fail(p),
            }
        }
        (Some(_), _) => {}
    }
    if c.problems.is_empty() {
        c.summary = format!(
            "{} = the base converted: {} tensors, same config but {} conversion change(s)",
            t.dir.display(),
            ta.tensors.len(),
            allowed.len()
        );
    }
    c
}

/// `teacher-weights`
pub fn teacher_weights(t: Option<&Teacher>, distilled: Option<&Path>) -> Check {
    let Some(t) = t else {
        return Check::skip("teacher-weights", "no --teacher given");
    };
    let Some(path) = distilled else {
        return Check::skip("teacher-weights", "no --distilled given");
    };
    let mut c = Check::new("teacher-weights");
    let a = match &t.arch {
        Ok(a) => a,
        Err(e) => {
            c.fail(format!("teacher {}: {e}", t.dir.display()));
            return c;
        }
    };
    // Streamed: one record in memory at a time.
    let mut bad_w = Vec::new();
    let mut bad_c = Vec::new();
    let mut n = 0usize;
    let read = crate::model::lineage::for_each_record(
        path,
        crate::model::lineage::RECORD_MAX,
        &mut |i, r| {
            n += 1;
            let id = r["id"]
                .as_str()
                .map_or(format!("record {i}"), str::to_string);
            match r["teacher"]["weights_sha256"].as_str() {
                Some(w) if w == a.weights_sha256 => {}
                w => bad_w.push(format!("{id} ({})", w.unwrap_or("none"))),
            }
            match r["teacher"]["config_sha256"].as_str() {
                Some(x) if x == a.config_sha256 => {}
                x => bad_c.push(format!("{id} ({})", x.unwrap_or("none"))),
            }
            Ok(())
        },
    );
    if let Err(e) = read {
        c.fail(format!("{e:#}"));
        return c;
    }
    let list = |v: &[String]| {
        let mut s = v.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
        if v.len() > 5 {
            s.push_str(&format!(", … {} more", v.len() - 5));
        }
        s
    };
    if !bad_w.is_empty() {
        c.fail(format!(
            "{} of {} record(s) in {} carry another weights_sha256 than the teacher {} ({}): {}",
            bad_w.len(),
            n,
            path.display(),
            t.dir.display(),
            a.weights_sha256,
            list(&bad_w)
        ));
    }
    if !bad_c.is_empty() {
        c.fail(format!(
            "{} record(s) carry another config_sha256 than the teacher's config.json ({}): {}",
            bad_c.len(),
            a.config_sha256,
            list(&bad_c)
        ));
    }
    if n == 0 {
        c.fail(format!("{}: no records", path.display()));
    }
    c.summary = format!(
        "{} hashes to weights {}…; {} distilled record(s) checked",
        t.dir.display(),
        &a.weights_sha256[..16.min(a.weights_sha256.len())],
        n
    );
    c
}
