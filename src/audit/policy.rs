//! The policy links: no evaluation split anywhere (manifests, locks, shard provenance,
//! prompts, distilled records), and no eval-reference file used as training input.

use super::context::Ctx;
use super::report::Check;
use crate::manifest::Role;

/// One use of a source file by an output, gathered from shards / prompts / distilled.
#[derive(Debug, Clone)]
pub struct Use {
    /// Where the use was found, e.g. `out/sft provenance[0]` or `prompts.jsonl line 3`.
    pub what: String,
    pub repo: String,
    pub commit: String,
    pub file: String,
    pub split: Option<String>,
    pub role: Option<String>,
}

/// `split-policy`
pub fn splits(ctx: &Ctx, uses: &[Use]) -> Check {
    let mut c = Check::new("split-policy");
    let mut seen = 0;
    for s in &ctx.sets {
        for src in s.manifest.train_sources() {
            seen += 1;
            for name in [&src.split, &src.config] {
                if let Some(k) = crate::policy::eval_keyword(name) {
                    c.fail(format!(
                        "{}: training source {:?} uses {name:?} (evaluation keyword {k:?})",
                        s.manifest.path.display(),
                        src.name
                    ));
                }
            }
        }
        for (ls, f) in s.locked_files(|l| l.role == Role::Train) {
            seen += 1;
            if let Some(k) = crate::policy::eval_keyword(&f.path) {
                c.fail(format!(
                    "{} (evaluation keyword {k:?})",
                    train_lock(s, ls, f)
                ));
            }
        }
    }
    for u in uses {
        seen += 1;
        if let Some(k) = crate::policy::eval_keyword(&u.file) {
            c.fail(format!(
                "{}: uses {} (evaluation keyword {k:?})",
                u.what, u.file
            ));
        } else if let Some(k) = u.split.as_deref().and_then(crate::policy::eval_keyword) {
            c.fail(format!(
                "{}: split {:?} is an evaluation split (keyword {k:?})",
                u.what,
                u.split.as_deref().unwrap_or("")
            ));
        }
    }
    c.summary = format!("{seen} split/file name(s) checked against the evaluation keywords");
    c.checked(seen, "no training file or split to check")
}

/// A training source's locked file, as both checks name it: `LOCK: training source NAME
/// locks PATH`.
fn train_lock(
    s: &super::context::ManifestSet,
    ls: &crate::manifest::LockedSource,
    f: &crate::manifest::LockedFile,
) -> String {
    format!(
        "{}: training source {:?} locks {}",
        s.lock_path.display(),
        ls.name,
        f.path
    )
}

/// `eval-reference-isolation`
pub fn eval_isolation(ctx: &Ctx, uses: &[Use]) -> Check {
    let mut c = Check::new("eval-reference-isolation");
    let mut locked = 0;
    for s in &ctx.sets {
        for (ls, f) in s.locked_files(|l| l.role == Role::Train) {
            locked += 1;
            let key = (ls.repo.clone(), ls.commit.clone(), f.path.clone());
            if ctx.eval_files.contains(&key) {
                c.fail(format!(
                    "{} which is an eval-reference file",
                    train_lock(s, ls, f)
                ));
            }
        }
    }
    for u in uses {
        let key = (u.repo.clone(), u.commit.clone(), u.file.clone());
        if u.role.as_deref().is_some_and(|r| r != "train") {
            c.fail(format!(
                "{}: {} has role {:?}; only role train may be training input",
                u.what,
                u.file,
                u.role.as_deref().unwrap_or("")
            ));
        } else if ctx.eval_files.contains(&key) || u.file.contains("eval-reference/") {
            c.fail(format!(
                "{}: {}@{} {} is an eval-reference (benchmark) file",
                u.what, u.repo, u.commit, u.file
            ));
        }
    }
    c.summary = format!(
        "{} eval-reference file(s) known; {} training use(s) checked",
        ctx.eval_files.len(),
        uses.len()
    );
    c.checked(locked + uses.len(), "no training file or use to check")
}
