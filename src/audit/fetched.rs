//! The fetch half of the chain: every manifest source pinned in its lock; every locked file in
//! download.log, verified, with the same sha256; every locked file present in the cache with
//! the locked size (and sha256 with `--hash`); every local source's files (`path = …`)
//! re-hashed against the lock.

use std::collections::HashMap;

use super::context::{Ctx, LogLine};
use super::report::Check;
use crate::digest::{HexDigest, SHA1_HEX};
use crate::manifest::{LockedFile, Role};

/// A locked commit passes the one digest rule (40 hex digits, any case).
fn is_commit(s: &str) -> bool {
    HexDigest::parse(s, SHA1_HEX).is_some()
}

/// `manifest-pinned`
pub fn manifest_pinned(ctx: &Ctx) -> Check {
    let mut c = Check::new("manifest-pinned");
    let mut n = 0;
    for s in &ctx.sets {
        let lock = match &s.lock {
            Ok(l) => l,
            Err(e) => {
                c.fail(format!(
                    "{}: no lock ({e}); the manifest was never fetched",
                    s.manifest.path.display()
                ));
                continue;
            }
        };
        for src in &s.manifest.sources {
            n += 1;
            let Some(ls) = lock.source(&src.name) else {
                c.fail(format!(
                    "{}: source {:?} is not pinned in {}",
                    s.manifest.path.display(),
                    src.name,
                    s.lock_path.display()
                ));
                continue;
            };
            let mut diffs = Vec::new();
            if ls.repo != src.repo {
                diffs.push(format!("repo {} vs {}", ls.repo, src.repo));
            }
            if ls.revision != src.revision {
                diffs.push(format!("revision {} vs {}", ls.revision, src.revision));
            }
            if ls.split != src.split || ls.config != src.config {
                diffs.push(format!(
                    "config/split {}/{} vs {}/{}",
                    ls.config, ls.split, src.config, src.split
                ));
            }
            if ls.role != src.role {
                diffs.push(format!("role {:?} vs {:?}", ls.role, src.role));
            }
            if !src.is_local() && !is_commit(&ls.commit) {
                diffs.push(format!("commit {:?} is not a 40-hex sha", ls.commit));
            }
            if ls.files.is_empty() {
                diffs.push("no files locked".into());
            }
            if !diffs.is_empty() {
                c.fail(format!(
                    "source {:?}: lock {} disagrees with the manifest: {}",
                    src.name,
                    s.lock_path.display(),
                    diffs.join("; ")
                ));
            }
        }
        for ls in &lock.sources {
            if !s.manifest.sources.iter().any(|m| m.name == ls.name) {
                c.fail(format!(
                    "{}: locks source {:?}, which the manifest does not declare",
                    s.lock_path.display(),
                    ls.name
                ));
            }
        }
    }
    c.summary = format!("{n} declared source(s) checked against their locks");
    c.checked(n, "no declared source (no --manifest with a [[source]])")
}

/// `download-log`
pub fn download_log(ctx: &Ctx) -> Check {
    let mut c = Check::new("download-log");
    let hub_files = ctx
        .sets
        .iter()
        .filter_map(|s| s.lock.as_ref().ok())
        .flat_map(|l| &l.sources)
        .filter(|ls| !ls.repo.is_empty())
        .count();
    let lines = match &ctx.log {
        Ok(l) => l,
        // Only local sources (`path = …`): nothing was downloaded, nothing to log.
        Err(_) if hub_files == 0 => {
            return c.checked(
                0,
                "no Hub source locked: nothing downloaded, nothing to log",
            );
        }
        Err(e) => {
            c.fail(format!("download log missing: {e}"));
            c.summary = "no download log".into();
            return c;
        }
    };
    for (ln, e) in &ctx.log_bad {
        c.fail(format!(
            "{} line {ln}: not a log entry ({e})",
            ctx.log_path.display()
        ));
    }
    let mut by_file: HashMap<(&str, &str, &str), Vec<(usize, &LogLine)>> = HashMap::new();
    for (ln, l) in lines {
        by_file
            .entry((l.repo.as_str(), l.commit.as_str(), l.path.as_str()))
            .or_default()
            .push((*ln, l));
    }
    let mut files = 0;
    for s in &ctx.sets {
        // Local sources were never downloaded: `local-sources` re-hashes them.
        for (ls, f) in s.locked_files(|ls| !ls.repo.is_empty()) {
            files += 1;
            let entries = by_file
                .get(&(ls.repo.as_str(), ls.commit.as_str(), f.path.as_str()))
                .cloned()
                .unwrap_or_default();
            let good = entries
                .iter()
                .any(|(_, l)| l.verified && l.sha256.as_deref() == Some(f.sha256.as_str()));
            if entries.is_empty() {
                c.fail(format!(
                    "{} {}@{}: locked in {} but never logged as downloaded",
                    ls.name,
                    ls.repo,
                    &ls.commit[..ls.commit.len().min(12)],
                    f.path
                ));
            } else if !good {
                let (ln, l) = entries.last().unwrap();
                c.fail(format!(
                    "{} {}: no verified download with the locked sha256 {} (last: line {ln}, sha256 {}, verified {}{})",
                    ls.name,
                    f.path,
                    f.sha256,
                    l.sha256.as_deref().unwrap_or("-"),
                    l.verified,
                    l.error.as_deref().map(|e| format!(", error {e}")).unwrap_or_default()
                ));
            }
            for (ln, l) in &entries {
                if l.verified && l.sha256.as_deref() != Some(f.sha256.as_str()) {
                    c.fail(format!(
                        "{} line {ln}: {} verified with sha256 {} but the lock says {}",
                        ctx.log_path.display(),
                        f.path,
                        l.sha256.as_deref().unwrap_or("-"),
                        f.sha256
                    ));
                }
                let want = match ls.role {
                    Role::Train => "train",
                    Role::EvalReference => "eval-reference",
                };
                if !l.role.is_empty() && l.role != want {
                    c.fail(format!(
                        "{} line {ln}: {} logged with role {:?}, locked as {want}",
                        ctx.log_path.display(),
                        f.path,
                        l.role
                    ));
                }
            }
        }
    }
    for w in unlocked_downloads(ctx, lines) {
        c.warn(w);
    }
    c.summary = format!(
        "{files} locked file(s) against {} log line(s) in {}",
        lines.len(),
        ctx.log_path.display()
    );
    c
}

/// Verified downloads the log records for a locked source (same name, repo and commit) whose
/// file its lock no longer lists: a lock entry removed by hand, whose data `pack` would then
/// leave out without a word. A WARN per source (another manifest may select other files of
/// the same commit under the same name).
fn unlocked_downloads(ctx: &Ctx, lines: &[(usize, LogLine)]) -> Vec<String> {
    let mut out = Vec::new();
    for s in &ctx.sets {
        let Ok(lock) = &s.lock else { continue };
        for ls in &lock.sources {
            let locked: std::collections::HashSet<&str> =
                ls.files.iter().map(|f| f.path.as_str()).collect();
            let mut extra: Vec<(usize, &str)> = lines
                .iter()
                .filter(|(_, l)| {
                    l.verified
                        && l.source == ls.name
                        && l.repo == ls.repo
                        && l.commit == ls.commit
                        && !locked.contains(l.path.as_str())
                })
                .map(|(ln, l)| (*ln, l.path.as_str()))
                .collect();
            extra.sort_by(|a, b| a.1.cmp(b.1));
            extra.dedup_by(|a, b| a.1 == b.1);
            if let Some((ln, first)) = extra.first() {
                out.push(format!(
                    "{} {}@{}: the log records {} verified download(s) its lock does not list \
                     (first: {first}, line {ln}): a lock entry removed by hand? pack reads only \
                     what the lock lists",
                    ls.name,
                    ls.repo,
                    &ls.commit[..ls.commit.len().min(12)],
                    extra.len()
                ));
            }
        }
    }
    out
}

/// One locked file at its cache path `p`: present, the locked size, and (`hash`) the locked
/// sha256; each problem failed on `c`. Returns the bytes found.
pub fn check_cached(c: &mut Check, p: &std::path::Path, f: &LockedFile, hash: bool) -> u64 {
    match std::fs::metadata(p) {
        Err(_) => c.fail(format!(
            "{}: locked file missing from the cache",
            p.display()
        )),
        Ok(m) if m.len() != f.size => c.fail(format!(
            "{}: {} bytes, the lock says {}",
            p.display(),
            m.len(),
            f.size
        )),
        Ok(m) => {
            if hash {
                c.sha256_matches(p, &f.sha256, |h| {
                    format!("{}: sha256 {h}, the lock says {}", p.display(), f.sha256)
                });
            }
            return m.len();
        }
    }
    0
}

/// `cache`
pub fn cache(ctx: &Ctx, hash: bool) -> Check {
    let mut c = Check::new("cache");
    let mut files = 0;
    let mut bytes = 0u64;
    for s in &ctx.sets {
        for (ls, f) in s.locked_files(|ls| !ls.repo.is_empty()) {
            files += 1;
            let p = ctx
                .cache
                .snapshot_path(ls.role, &ls.repo, &ls.commit, &f.path);
            // The readers' symlink rule: what pack would refuse is a broken link here.
            if let Err(e) = ctx.cache.check_resolved(ls.role, &ls.repo, &p) {
                c.fail(format!("{e:#}"));
                continue;
            }
            bytes += check_cached(&mut c, &p, f, hash);
        }
    }
    c.summary = format!(
        "{files} locked file(s), {:.1} MB, present in {}{}",
        bytes as f64 / 1e6,
        ctx.cache.root.display(),
        if hash {
            " (sha256 re-hashed)"
        } else {
            " (sizes; --hash re-hashes)"
        }
    );
    c
}

/// `local-sources`: every file of every local source (`path = …`) present with its locked
/// size and sha256 (always re-hashed: the user's files can change under the lock), and no
/// file under the source's path left out of the lock.
pub fn local_sources(ctx: &Ctx) -> Check {
    let mut c = Check::new("local-sources");
    let (mut n, mut files) = (0, 0);
    for s in &ctx.sets {
        let Ok(lock) = &s.lock else { continue };
        for src in s.manifest.sources.iter().filter(|x| x.is_local()) {
            let Some(ls) = lock.source(&src.name) else {
                continue; // `manifest-pinned` reports it
            };
            n += 1;
            files += ls.files.len();
            for p in crate::sources::local::verify(&s.manifest, src, ls) {
                c.fail(p);
            }
        }
    }
    c.summary = format!("{n} local source(s), {files} file(s) re-hashed against their locks");
    c.checked(n, "no local source (`path = …`) declared")
}
