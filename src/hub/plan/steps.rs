//! Steps 1–2 of a fetch run: every Hub source planned (commit, listing, files) or read from
//! the lock, local sources hashed (or checked against the lock), models planned the same way,
//! then the split policy applied to every training source before a byte is downloaded.

use anyhow::Result;

use super::models::{self, ModelPlan};
use super::{self as plan, SourcePlan};
use crate::hub::client::HubClient;
use crate::hub::names::RepoKind;
use crate::hub::short;
use crate::manifest::{Lock, LockedSource, Manifest, ModelLock};

/// The lock a run honours (`--locked` / `HF_HUB_OFFLINE=1`), if any, and how it is named.
pub(in crate::hub) struct Honoured<'a> {
    pub lock: Option<&'a Lock>,
    pub model_lock: Option<&'a ModelLock>,
    pub name: &'a str,
    pub offline: bool,
}

/// Every Hub source planned concurrently (no data downloaded yet), in manifest order. Policy
/// refusals (exit 2) win over any other planning error.
pub(in crate::hub) async fn sources(
    client: &HubClient,
    manifest: &Manifest,
    h: &Honoured<'_>,
) -> Result<Vec<SourcePlan>> {
    // (Local sources are hashed by [`local_sources`], never planned on the Hub.)
    let hub: Vec<&crate::manifest::Source> =
        manifest.sources.iter().filter(|s| !s.is_local()).collect();
    let planned = futures::future::join_all(hub.into_iter().map(|s| source(client, s, h))).await;
    let mut plans: Vec<SourcePlan> = Vec::new();
    let mut first_err = None;
    for r in planned {
        match r {
            Ok(p) => plans.push(p),
            Err(e)
                if crate::error::exit_code(&e) == 2
                    && first_err
                        .as_ref()
                        .is_none_or(|f| crate::error::exit_code(f) != 2) =>
            {
                first_err = Some(e)
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(plans),
    }
}

/// One Hub source: from the lock when offline, else listed on the Hub (and, under a lock,
/// checked against it).
async fn source(
    client: &HubClient,
    s: &crate::manifest::Source,
    h: &Honoured<'_>,
) -> Result<SourcePlan> {
    let locked = match h.lock {
        Some(l) => {
            let ls = locked_source(l, &s.name, h.name)?;
            plan::check_lock_matches(s, ls, h.name)?;
            Some(ls)
        }
        None => None,
    };
    let p = match (h.offline, locked) {
        (true, Some(l)) => SourcePlan {
            source: s.clone(),
            commit: l.commit.clone(),
            files: plan::tasks_from_lock(s, l, h.name)?,
        },
        _ => plan::plan_source(client, s, locked).await?,
    };
    tracing::info!(
        "{}: {}@{} → {} files, {} bytes",
        s.name,
        s.repo,
        short(&p.commit),
        p.files.len(),
        p.files.iter().map(|f| f.size).sum::<u64>()
    );
    Ok(p)
}

/// Local sources (`path = …`): hashed now into their lock entries; under a lock they must
/// match it exactly (and nothing new is returned).
pub(in crate::hub) fn local_sources(
    manifest: &Manifest,
    h: &Honoured<'_>,
) -> Result<Vec<LockedSource>> {
    let mut locals = Vec::new();
    for s in manifest.sources.iter().filter(|s| s.is_local()) {
        match h.lock {
            Some(l) => {
                let ls = locked_source(l, &s.name, h.name)?;
                let problems = crate::sources::local::verify(manifest, s, ls);
                if !problems.is_empty() {
                    anyhow::bail!(
                        "lock {}: local source {:?} differs from its lock:\n  {}",
                        h.name,
                        s.name,
                        problems.join("\n  ")
                    );
                }
            }
            None => {
                let ls = crate::sources::local::lock_source(manifest, s)?;
                tracing::info!(
                    "{}: local {} → {} files, {} bytes",
                    s.name,
                    s.path.as_deref().unwrap_or_default(),
                    ls.files.len(),
                    ls.files.iter().map(|f| f.size).sum::<u64>()
                );
                locals.push(ls);
            }
        }
    }
    Ok(locals)
}

/// The manifest's models, one after another, the way sources are planned (their own API; no
/// split policy: a model is not data).
pub(in crate::hub) async fn models(
    client: &HubClient,
    manifest: &Manifest,
    h: &Honoured<'_>,
) -> Result<Vec<ModelPlan>> {
    let model_client = client.with_kind(RepoKind::Model);
    let mut model_plans: Vec<ModelPlan> = Vec::new();
    for m in &manifest.models {
        let locked = match h.model_lock {
            Some(l) => {
                let lm = l.model(&m.name).ok_or_else(|| {
                    anyhow::anyhow!(
                        "lock {} has no model {:?} (run fetch without --locked)",
                        h.name,
                        m.name
                    )
                })?;
                models::check_lock_matches(m, lm, h.name)?;
                Some(lm)
            }
            None => None,
        };
        let p = match (h.offline, locked) {
            (true, Some(l)) => ModelPlan {
                model: m.clone(),
                commit: l.commit.clone(),
                files: models::tasks_from_lock(m, l, h.name)?,
            },
            _ => models::plan_model(&model_client, m, locked).await?,
        };
        tracing::info!(
            "{}: model {}@{} → {} files, {} bytes",
            m.name,
            m.repo,
            short(&p.commit),
            p.files.len(),
            p.files.iter().map(|f| f.size).sum::<u64>()
        );
        model_plans.push(p);
    }
    Ok(model_plans)
}

/// The split policy on every training source, before any download: every refusal at once
/// (exit 2).
pub(in crate::hub) fn refuse_eval_splits(plans: &[SourcePlan]) -> Result<()> {
    let refusals: Vec<anyhow::Error> = plans
        .iter()
        .filter_map(|p| {
            let names: Vec<String> = p.files.iter().map(|f| f.path.clone()).collect();
            plan::policy_check(&p.source, &names)
        })
        .collect();
    if refusals.is_empty() {
        return Ok(());
    }
    let msg = refusals
        .iter()
        .map(|e| format!("{e}"))
        .collect::<Vec<_>>()
        .join("\n  ");
    Err(crate::error::refused(
        msg.trim_start_matches("refused: ")
            .replace("\n  refused: ", "\n  "),
    ))
}

/// Source `name` of the lock being honoured (`--locked` / offline), or an error saying to
/// fetch without `--locked`.
fn locked_source<'a>(lock: &'a Lock, name: &str, lock_name: &str) -> Result<&'a LockedSource> {
    lock.source(name).ok_or_else(|| {
        anyhow::anyhow!("lock {lock_name} has no source {name:?} (run fetch without --locked)")
    })
}
