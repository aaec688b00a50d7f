//! The `shards` link: each `--shards DIR` has a complete index.json built from an audited lock;
//! every shard path is relative, normalized and inside DIR; every shard file's bytes and sha256
//! match it; rows, tokens and documents add up; every provenance entry names a locked training
//! file; nothing unlisted sits where a directory reader looks (a MosaicML decompressed twin
//! is checked against its shard instead). With `--deep` every shard is decoded too
//! ([`super::deep`]). Provenance uses are returned for the split and eval-reference checks.

use std::path::{Path, PathBuf};

use super::context::Ctx;
use super::policy::Use;
use super::report::Check;
use crate::shards::index as shard_index;

pub fn check(ctx: &Ctx, dirs: &[PathBuf], hash: bool, deep: bool, uses: &mut Vec<Use>) -> Check {
    if dirs.is_empty() {
        return Check::skip("shards", "no --shards given");
    }
    let mut c = Check::new("shards");
    let mut total_rows = 0;
    let mut total_files = 0;
    for dir in dirs {
        let idx = match shard_index::load(dir) {
            Ok(i) => i,
            Err(e) => {
                c.fail(format!("{}: {e:#}", dir.display()));
                continue;
            }
        };
        total_files += idx.shards.len();
        total_rows += check_dir(&mut c, ctx, dir, &idx, (hash, deep), uses);
    }
    c.summary = format!(
        "{} dir(s), {total_files} shard file(s), {total_rows} rows re-hashed and counted{}",
        dirs.len(),
        if deep { ", every shard decoded" } else { "" }
    );
    c
}

/// One `--shards DIR` with its index.json, in order: complete and traced to an audited lock,
/// its files, (`--deep`) decoded, its card, nothing unlisted, the totals, the provenance.
/// Returns the rows its shards hold.
fn check_dir(
    c: &mut Check,
    ctx: &Ctx,
    dir: &Path,
    idx: &shard_index::Index,
    (hash, deep): (bool, bool),
    uses: &mut Vec<Use>,
) -> u64 {
    let d = dir.display();
    if !idx.complete {
        c.fail(format!(
            "{d}/index.json: complete is false (an interrupted run)"
        ));
    }
    traced_to_lock(c, ctx, &d.to_string(), idx, hash);
    let (rows, tokens) = shard_files(c, dir, idx);
    if deep {
        deep_check(c, dir, idx);
    }
    if let Some(m) = card_mismatch(dir, idx) {
        c.fail(format!("{d}: {m}"));
    }
    for name in unlisted(dir, idx) {
        c.fail(format!(
            "{d}: holds {name}, which index.json does not list: a directory reader would \
             read data this audit never checked (remove it, or re-run the stage)"
        ));
    }
    for note in mds_twins(c, dir, idx) {
        c.note(note);
    }
    let docs = totals_add_up(c, &d.to_string(), idx, rows, tokens);
    provenance_locked(c, ctx, &d.to_string(), idx, uses);
    c.note(format!(
        "{d}: {} {} shard(s), {rows} rows, {tokens} tokens, {docs} documents from {} file(s)",
        idx.shards.len(),
        idx.format.name(),
        idx.provenance.len()
    ));
    rows
}

/// The output was built from one of the audited locks, or (`pack --input`) from own files,
/// each a link of the chain.
fn traced_to_lock(c: &mut Check, ctx: &Ctx, d: &str, idx: &shard_index::Index, hash: bool) {
    match &idx.lock_sha256 {
        Some(h) if ctx.lock_shas.contains(h) => {}
        Some(h) => c.fail(format!(
            "{d}/index.json: built from a lock with sha256 {h}, which is none of the audited locks (re-run the stage or audit with its manifest)"
        )),
        None => match idx.args.as_ref().and_then(|a| a.inputs.as_ref()) {
            // Own files (`pack --input`): each recorded file is a link of the chain.
            Some(inputs) => super::local::check_inputs(c, d, inputs, hash),
            None => c.fail(format!("{d}/index.json: records no lock_sha256; its inputs cannot be traced")),
        },
    }
}

/// The shards' `rows` and `tokens` are index.json's totals (rows × seq_len for fixed-length
/// pretrain rows), and the provenance accounts for every document. Returns the documents.
fn totals_add_up(c: &mut Check, d: &str, idx: &shard_index::Index, rows: u64, tokens: u64) -> u64 {
    if rows != idx.totals.rows {
        c.fail(format!(
            "{d}: shards hold {rows} rows, totals.rows says {}",
            idx.totals.rows
        ));
    }
    if tokens != idx.totals.tokens {
        c.fail(format!(
            "{d}: shards hold {tokens} tokens, totals.tokens says {}",
            idx.totals.tokens
        ));
    }
    if idx.kind == shard_index::Kind::Pretrain
        && idx.format != crate::shards::ShardFormat::Megatron
        && rows.checked_mul(idx.seq_len) != Some(tokens)
    {
        c.fail(format!(
            "{d}: {tokens} tokens is not rows × seq_len ({rows} × {})",
            idx.seq_len
        ));
    }
    let docs: u64 = idx.provenance.iter().map(|p| p.documents).sum();
    if docs != idx.totals.documents {
        c.fail(format!(
            "{d}: provenance accounts for {docs} documents, totals.documents says {}",
            idx.totals.documents
        ));
    }
    docs
}

/// Every provenance entry names a locked training file of its source (or one of the output's
/// own `--input` files); each is a use for the split and eval-reference checks.
fn provenance_locked(
    c: &mut Check,
    ctx: &Ctx,
    d: &str,
    idx: &shard_index::Index,
    uses: &mut Vec<Use>,
) {
    let local: std::collections::BTreeSet<&str> = idx
        .args
        .as_ref()
        .and_then(|a| a.inputs.as_ref())
        .map(|v| v.iter().map(|f| f.path.as_str()).collect())
        .unwrap_or_default();
    for (k, p) in idx.provenance.iter().enumerate() {
        let key = (p.repo.clone(), p.commit.clone(), p.file.clone());
        match ctx.train_files.get(&key) {
            _ if p.repo == super::local::REPO && local.contains(p.file.as_str()) => {}
            Some(tf) if tf.source == p.source => {}
            Some(tf) => c.fail(format!(
                "{d} provenance[{k}]: {} is locked under source {:?}, not {:?}",
                p.file, tf.source, p.source
            )),
            None => c.fail(format!(
                "{d} provenance[{k}]: {}@{} {} is not a locked training file",
                p.repo, p.commit, p.file
            )),
        }
        if p.row_end < p.row_start {
            c.fail(format!("{d} provenance[{k}]: row_end < row_start"));
        }
        uses.push(Use {
            what: format!("{d} provenance[{k}]"),
            repo: p.repo.clone(),
            commit: p.commit.clone(),
            file: p.file.clone(),
            split: Some(p.split.clone()),
            role: Some(p.role.clone()),
        });
    }
}

/// A path index.json records for a file of the output, confined to it (the rule lives with
/// the index: `inspect` applies it too).
pub use crate::shards::index::confined;

/// Every listed shard (and extra file): confined to `dir`, present with its recorded size and
/// sha256. Returns the rows and tokens index.json records for them.
fn shard_files(c: &mut Check, dir: &Path, idx: &shard_index::Index) -> (u64, u64) {
    let (mut rows, mut tokens) = (0u64, 0u64);
    for (k, sh) in idx.shards.iter().enumerate() {
        rows = rows.saturating_add(sh.rows);
        tokens = tokens.saturating_add(sh.tokens);
        let bad = std::iter::once(sh.file.as_str())
            .chain(sh.extra_files.keys().map(String::as_str))
            .find_map(|f| confined(f).err().map(|why| (f, why)));
        if let Some((f, why)) = bad {
            c.fail(format!(
                "{}/index.json shards[{k}]: file {f:?} {why}: a shard path must be relative \
                 and inside the output directory (a reader of the directory never reads it)",
                dir.display()
            ));
            continue;
        }
        let p = dir.join(&sh.file);
        match std::fs::metadata(&p) {
            Err(_) => {
                c.fail(format!("{}: listed in index.json but missing", p.display()));
                continue;
            }
            Ok(m) if m.len() != sh.bytes => c.fail(format!(
                "{}: {} bytes, index.json says {}",
                p.display(),
                m.len(),
                sh.bytes
            )),
            Ok(_) => {}
        }
        c.sha256_matches(&p, &sh.sha256, |h| {
            format!(
                "{}: sha256 {h} does not match index.json ({}) — the shard was modified",
                p.display(),
                sh.sha256
            )
        });
        for (name, want) in &sh.extra_files {
            let ep = dir.join(name);
            c.sha256_matches(&ep, want, |h| {
                format!(
                    "{}: sha256 {h} does not match index.json ({want})",
                    ep.display()
                )
            });
        }
    }
    (rows, tokens)
}

/// `--deep`: decode every (confined, present) shard against its format's contract, then the
/// decoded totals against index.json's.
fn deep_check(c: &mut Check, dir: &Path, idx: &shard_index::Index) {
    let d = dir.display();
    // MDS: the MosaicML entries (raw sizes, sample counts) sit beside our index object.
    let mds: Vec<serde_json::Value> = std::fs::read(shard_index::index_path(dir))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["shards"].as_array().cloned())
        .unwrap_or_default();
    let (mut rows, mut tokens, mut ok) = (0u64, 0u64, true);
    for (k, sh) in idx.shards.iter().enumerate() {
        if confined(&sh.file).is_err() || !dir.join(&sh.file).is_file() {
            ok = false; // reported above
            continue;
        }
        match super::deep::check_shard(dir, idx, k, mds.get(k)) {
            Ok(got) => {
                rows = rows.saturating_add(got.rows);
                tokens = tokens.saturating_add(got.tokens);
            }
            Err(e) => {
                ok = false;
                c.fail(format!("{d} shards[{k}] (--deep): {e:#}"));
            }
        }
    }
    if !ok {
        return;
    }
    if rows != idx.totals.rows || tokens != idx.totals.tokens {
        c.fail(format!(
            "{d} (--deep): the shards decode to {rows} rows, {tokens} tokens; totals say {} rows, {} tokens",
            idx.totals.rows, idx.totals.tokens
        ));
    } else {
        c.note(format!(
            "{d}: --deep: {} shard(s) decoded, {rows} rows and {tokens} tokens as index.json says",
            idx.shards.len()
        ));
    }
}

/// The decompressed copies MosaicML Streaming leaves beside MDS shards
/// (`StreamingDataset(local=OUT)` turns `shard.00000.mds.zstd` into `shard.00000.mds`): each
/// is compared, streaming, with its listed shard decompressed — a match is reported, never a
/// break; a mismatch is.
fn mds_twins(c: &mut Check, dir: &Path, idx: &shard_index::Index) -> Vec<String> {
    let mut notes = Vec::new();
    for (name, zipped) in twins(dir, idx) {
        let (t, z) = (dir.join(&name), dir.join(&zipped));
        match same_as_decompressed(&z, &t) {
            Ok(true) => notes.push(format!(
                "{}: {name} is {zipped} decompressed (left by MosaicML Streaming); bytes match",
                dir.display()
            )),
            Ok(false) => c.fail(format!(
                "{}: {name} is not {zipped} decompressed: a MosaicML reader would read it \
                 instead of the audited shard (remove it)",
                dir.display()
            )),
            Err(e) => c.fail(format!("{}: {name}: {e:#}", dir.display())),
        }
    }
    notes
}

/// `(twin, listed zstd shard)` for every MDS twin present in `dir`.
fn twins(dir: &Path, idx: &shard_index::Index) -> Vec<(String, String)> {
    if idx.format != crate::shards::ShardFormat::Mds {
        return Vec::new();
    }
    idx.shards
        .iter()
        .filter_map(|sh| {
            let raw = sh.file.strip_suffix(".zstd")?;
            (confined(raw).is_ok() && dir.join(raw).is_file())
                .then(|| (raw.to_string(), sh.file.clone()))
        })
        .collect()
}

/// Whether `plain` holds exactly the bytes `zstd_file` decompresses to (both read in chunks;
/// the decompression stops one byte past `plain`'s length).
fn same_as_decompressed(zstd_file: &Path, plain: &Path) -> anyhow::Result<bool> {
    use anyhow::Context;
    use std::io::Read;
    let open =
        |p: &Path| std::fs::File::open(p).with_context(|| format!("opening {}", p.display()));
    let len = open(plain)?.metadata()?.len();
    let mut z = zstd::stream::read::Decoder::new(open(zstd_file)?)?.take(len + 1);
    let mut p = open(plain)?;
    let (mut a, mut b) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = read_full(&mut z, &mut a)
            .with_context(|| format!("{}: not zstd", zstd_file.display()))?;
        let m = read_full(&mut p, &mut b[..n.max(1)])?;
        if n != m || a[..n] != b[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// Read until `buf` is full or the end; the count read.
fn read_full(r: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut at = 0;
    while at < buf.len() {
        match r.read(&mut buf[at..])? {
            0 => break,
            n => at += n,
        }
    }
    Ok(at)
}

/// The dataset card (README.md) is part of the audited set: when present it must be the one
/// index.json renders (an edited or stale card misstates the provenance of an upload). A
/// directory written before cards existed has none: not a failure.
fn card_mismatch(dir: &std::path::Path, idx: &shard_index::Index) -> Option<String> {
    use crate::shards::card;
    let text = std::fs::read(card::card_path(dir)).ok()?;
    (text != card::render(idx).as_bytes()).then(|| {
        format!(
            "{} does not match index.json (edited, or left from another run): re-run the stage \
             to rewrite it",
            card::CARD_FILE
        )
    })
}

/// Entries of a shard directory that are neither listed in its index (shards and their extra
/// files) nor dlm-data's own bookkeeping there (index.json, decontam.json, a run's lock).
fn unlisted(dir: &Path, idx: &shard_index::Index) -> Vec<String> {
    let mut known: std::collections::BTreeSet<String> = crate::shards::outdir::journal_files(idx)
        .into_iter()
        .collect();
    known.insert(crate::shards::outdir::DECONTAM_REPORT.to_string());
    known.insert(crate::lock::DIR_LOCK.to_string());
    known.extend(twins(dir, idx).into_iter().map(|(t, _)| t));
    let data = crate::shards::parquet::DATA_DIR;
    let mut out: Vec<String> = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if e.path().is_dir() && n == data {
            // Parquet shards sit in data/: every file there must be listed too (a directory
            // reader of data/ reads them all).
            for f in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
                let f = format!("{data}/{}", f.file_name().to_string_lossy());
                if !known.contains(&f) {
                    out.push(f);
                }
            }
        } else if e.path().is_dir() {
            out.push(format!("{n}/"));
        } else if !known.contains(&n) {
            out.push(n);
        }
    }
    out.sort();
    out
}
