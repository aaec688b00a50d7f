//! The `shards` link: each `--shards DIR` has a complete index.json built from an audited lock;
//! every shard file's bytes and sha256 match it; rows, tokens and documents add up; every
//! provenance entry names a locked training file. Provenance uses are returned for the
//! split and eval-reference checks.

use std::path::PathBuf;

use super::context::Ctx;
use super::policy::Use;
use super::report::Check;
use crate::shards::index as shard_index;

pub fn check(ctx: &Ctx, dirs: &[PathBuf], hash: bool, uses: &mut Vec<Use>) -> Check {
    if dirs.is_empty() {
        return Check::skip("shards", "no --shards given");
    }
    let mut c = Check::new("shards");
    let mut total_rows = 0;
    let mut total_files = 0;
    for dir in dirs {
        let d = dir.display();
        let idx = match shard_index::load(dir) {
            Ok(i) => i,
            Err(e) => {
                c.fail(format!("{d}: {e:#}"));
                continue;
            }
        };
        if !idx.complete {
            c.fail(format!(
                "{d}/index.json: complete is false (an interrupted run)"
            ));
        }
        match &idx.lock_sha256 {
            Some(h) if ctx.lock_shas.contains(h) => {}
            Some(h) => c.fail(format!(
                "{d}/index.json: built from a lock with sha256 {h}, which is none of the audited locks (re-run the stage or audit with its manifest)"
            )),
            None => match idx.args.as_ref().and_then(|a| a.inputs.as_ref()) {
                // Own files (`pack --input`): each recorded file is a link of the chain.
                Some(inputs) => super::local::check_inputs(&mut c, &d.to_string(), inputs, hash),
                None => c.fail(format!("{d}/index.json: records no lock_sha256; its inputs cannot be traced")),
            },
        }
        let local: std::collections::BTreeSet<&str> = idx
            .args
            .as_ref()
            .and_then(|a| a.inputs.as_ref())
            .map(|v| v.iter().map(|f| f.path.as_str()).collect())
            .unwrap_or_default();
        let (mut rows, mut tokens) = (0u64, 0u64);
        for sh in &idx.shards {
            total_files += 1;
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
            match crate::util::sha256_file(&p) {
                Ok(h) if h == sh.sha256 => {}
                Ok(h) => c.fail(format!(
                    "{}: sha256 {h} does not match index.json ({}) — the shard was modified",
                    p.display(),
                    sh.sha256
                )),
                Err(e) => c.fail(format!("{}: {e:#}", p.display())),
            }
            for (name, want) in &sh.extra_files {
                let ep = dir.join(name);
                match crate::util::sha256_file(&ep) {
                    Ok(h) if &h == want => {}
                    Ok(h) => c.fail(format!(
                        "{}: sha256 {h} does not match index.json ({want})",
                        ep.display()
                    )),
                    Err(e) => c.fail(format!("{}: {e:#}", ep.display())),
                }
            }
            rows += sh.rows;
            tokens += sh.tokens;
        }
        if let Some(m) = card_mismatch(dir, &idx) {
            c.fail(format!("{d}: {m}"));
        }
        for name in unlisted(dir, &idx) {
            c.fail(format!(
                "{d}: holds {name}, which index.json does not list: a directory reader would \
                 read data this audit never checked (remove it, or re-run the stage)"
            ));
        }
        total_rows += rows;
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
            && tokens != rows * idx.seq_len
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
        c.note(format!(
            "{d}: {} {} shard(s), {rows} rows, {tokens} tokens, {docs} documents from {} file(s)",
            idx.shards.len(),
            idx.format.name(),
            idx.provenance.len()
        ));
    }
    c.summary = format!(
        "{} dir(s), {total_files} shard file(s), {total_rows} rows re-hashed and counted",
        dirs.len()
    );
    c
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
fn unlisted(dir: &std::path::Path, idx: &shard_index::Index) -> Vec<String> {
    let mut known: std::collections::BTreeSet<String> = crate::shards::outdir::journal_files(idx)
        .into_iter()
        .collect();
    known.insert(crate::shards::outdir::DECONTAM_REPORT.to_string());
    known.insert(crate::lock::DIR_LOCK.to_string());
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
