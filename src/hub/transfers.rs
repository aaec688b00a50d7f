//! Step 3 of a fetch run: this worker's files, in the one global order every worker shares,
//! downloaded with `--jobs` parallel transfers (or, offline, verified in the cache), each
//! appended to the download log as it ends; any failure fails the run, naming every file.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};

use super::cache::Cache;
use super::client::HubClient;
use super::download::{self, Downloader, FileTask, Outcome};
use super::log::{self, DownloadLog, LogRecord};
use super::plan::models::ModelPlan;
use super::plan::SourcePlan;
use super::settings::FetchSettings;
use super::short;
use crate::worker::WorkerSlice;

/// One file's end: (global number, index of its source or model, the file, how it went).
/// Sources come first, then models, so a model's index is `plans.len() + j`.
pub(super) type Fetched = (usize, usize, FileTask, Result<Outcome>);

/// Every file of every plan numbered in manifest order, then path order; this worker's
/// share of them, as (global number, plan index, file).
fn worker_files(
    plans: &[SourcePlan],
    model_plans: &[ModelPlan],
    slice: WorkerSlice,
) -> Vec<(usize, usize, FileTask)> {
    let all: Vec<(usize, FileTask)> = plans
        .iter()
        .map(|p| &p.files)
        .chain(model_plans.iter().map(|p| &p.files))
        .enumerate()
        .flat_map(|(i, files)| files.iter().map(move |f| (i, f.clone())))
        .collect();
    all.into_iter()
        .enumerate()
        .filter(|(k, _)| slice.owns(*k))
        .map(|(k, (i, f))| (k, i, f))
        .collect()
}

/// Download (or verify offline) this worker's files, logging each; the results in global
/// order, or an error naming every failed file (no lock is written then).
pub(super) async fn download_all(
    st: &FetchSettings,
    client: &Arc<HubClient>,
    plans: &[SourcePlan],
    model_plans: &[ModelPlan],
) -> Result<Vec<Fetched>> {
    let (cache, log_path, slice, offline) = (&st.cache, &st.log_path, st.slice, st.offline);
    // Nothing on the Hub at all (a manifest of local sources only): nothing is downloaded,
    // so nothing is written outside the manifest's own lock — no empty log in the cache.
    if plans.iter().all(|p| p.files.is_empty()) && model_plans.iter().all(|m| m.files.is_empty()) {
        return Ok(Vec::new());
    }
    let mine = worker_files(plans, model_plans, slice);
    let dlog = Arc::new(DownloadLog::open(log_path)?);
    let dl = Arc::new(
        Downloader::new(client.clone(), cache.clone(), st.jobs, st.chunk_bytes)
            .expect_bytes(mine.iter().map(|(_, _, t)| t.size).sum()),
    );
    let file_sem = Arc::new(tokio::sync::Semaphore::new(st.jobs));
    let mut handles = Vec::new();
    for (k, i, t) in mine {
        let (dl, dlog, file_sem) = (dl.clone(), dlog.clone(), file_sem.clone());
        handles.push(tokio::spawn(async move {
            let _p = file_sem.acquire_owned().await?;
            let r = one_file(&dl, &dlog, &t, offline).await?;
            Ok::<_, anyhow::Error>((k, i, t, r))
        }));
    }
    let mut results: Vec<Fetched> = Vec::new();
    for h in handles {
        results.push(h.await.context("download task panicked")??);
    }
    dl.progress.finish();
    results.sort_by_key(|r| r.0);
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(_, _, t, r)| {
            r.as_ref()
                .err()
                .map(|e| format!("{}/{}: {e:#}", t.repo, t.path))
        })
        .collect();
    if !failures.is_empty() {
        anyhow::bail!(
            "{} of {} files failed (see {}); no lock written:\n  {}",
            failures.len(),
            results.len(),
            log_path.display(),
            failures.join("\n  ")
        );
    }
    Ok(results)
}

/// One file fetched (or verified offline), its log line appended and its progress line
/// printed. The outer error is the log's (fatal); the inner one the file's.
async fn one_file(
    dl: &Downloader,
    dlog: &DownloadLog,
    t: &FileTask,
    offline: bool,
) -> Result<Result<Outcome>> {
    let r = if offline {
        offline_file(&dl.cache, t).await
    } else {
        dl.fetch(t).await
    };
    let url = dl
        .client_for(t.kind)
        .resolve_url(&t.repo, &t.commit, &t.path);
    let rec = record(t, &url, &r);
    dlog.append_new(&rec)?;
    match &r {
        Ok(o) => {
            // Bytes not streamed now: a cached file, a resumed file's earlier part.
            dl.progress.add_done(t.size.saturating_sub(o.downloaded));
            // One line per file is progress: `--quiet` keeps failures only.
            if !crate::progress::settings().quiet {
                dl.progress.println(&file_line(t, o))
            }
        }
        Err(e) => dl.progress.println(&format!(
            "FAILED {}@{} {}: {e:#}",
            t.repo,
            short(&t.commit),
            t.path
        )),
    }
    Ok(r)
}

fn file_line(t: &FileTask, o: &Outcome) -> String {
    if o.cached {
        format!(
            "cached  {}@{} {} ({} B, verified)",
            t.repo,
            short(&t.commit),
            t.path,
            t.size
        )
    } else {
        format!(
            "fetched {}@{} {} ({} B, {:.1} MB/s, {} attempt{})",
            t.repo,
            short(&t.commit),
            t.path,
            t.size,
            o.downloaded as f64 / 1e6 / o.seconds.max(1e-6),
            o.attempts,
            if o.attempts == 1 { "" } else { "s" }
        )
    }
}

fn record(t: &FileTask, url: &str, r: &Result<Outcome>) -> LogRecord {
    let (sha256, verified, cached, attempts, seconds, downloaded, error) = match r {
        Ok(o) => (
            o.sha256.clone(),
            true,
            o.cached,
            o.attempts,
            o.seconds,
            o.downloaded,
            None,
        ),
        Err(e) => (
            t.lfs_sha256.clone().unwrap_or_default(),
            false,
            false,
            0,
            0.0,
            0,
            Some(format!("{e:#}")),
        ),
    };
    LogRecord {
        time: log::now_rfc3339(),
        source: t.source.clone(),
        role: t.role,
        repo: t.repo.clone(),
        revision: t.revision.clone(),
        commit: t.commit.clone(),
        path: t.path.clone(),
        url: url.to_string(),
        bytes: t.size,
        sha256,
        verified,
        cached,
        attempts,
        seconds,
        downloaded,
        error,
    }
}

async fn offline_file(cache: &Cache, t: &FileTask) -> Result<Outcome> {
    let t0 = Instant::now();
    let blob = cache.blob_path(t.area(), &t.repo, t.etag())?;
    if !blob.is_file() {
        anyhow::bail!(
            "HF_HUB_OFFLINE=1 and {}@{} {} is not in the cache ({})",
            t.repo,
            short(&t.commit),
            t.path,
            blob.display()
        );
    }
    let (t2, b2) = (t.clone(), blob.clone());
    let sha = tokio::task::spawn_blocking(move || download::verify_file(&t2, &b2)).await??;
    download::link_snapshot(cache, t, &blob)?;
    Ok(Outcome {
        sha256: sha,
        downloaded: 0,
        attempts: 0,
        cached: true,
        seconds: t0.elapsed().as_secs_f64(),
    })
}
