//! Why `audit --distilled` reads the top-k sidecar too: soft labels that drifted from their
//! records (a position missing or twice, a row group of another prompt, a unit file that is not
//! the one its commit line names) would train a student on the wrong targets silently. Checks
//! `OUT.topk.parquet` (`distill --top-k`, docs/formats/distilled-json.md#top-k-sidecar) against
//! the records: one row group per record with its id, every committed position exactly once
//! (from the trajectory when recorded, else at least the response and its EOS/EoT), K ids with
//! non-increasing log-probabilities ≤ 0, the committed token inside its top-k whenever sampling
//! was greedy; and, where `OUT.parts/` remains, each unit file's sha256 against its commit line.

use std::path::Path;

use serde_json::Value;

use super::report::Check;
use crate::distill::{output, topk_sidecar};

fn ints(v: Option<&Value>) -> Option<Vec<i64>> {
    v?.as_array()?.iter().map(Value::as_i64).collect()
}

/// The problems of record `k`'s rows (`rows`, its row group) against the record `r`.
fn record_problems(k: usize, r: &Value, rows: &[topk_sidecar::SidecarRow]) -> Vec<String> {
    let mut out = Vec::new();
    let id = r["id"].as_str().unwrap_or("");
    let at = |m: String| format!("record {k} ({id:?}): {m}");
    let kk = r["gen"]["top_k"].as_u64().unwrap_or(0) as usize;
    let resp = ints(r.get("response_ids")).unwrap_or_default();
    let gen_len = r["gen"]["gen_length"].as_u64().unwrap_or(0) as usize;
    if let Some(bad) = rows.iter().find(|x| x.id != id) {
        out.push(at(format!("its row group holds id {:?}", bad.id)));
        return out;
    }
    let pos: Vec<usize> = rows.iter().map(|x| x.position.max(0) as usize).collect();
    if pos.windows(2).any(|w| w[0] >= w[1]) || rows.iter().any(|x| x.position < 0) {
        out.push(at(format!("positions not strictly increasing: {pos:?}")));
    }
    // Which positions were committed, and with which token.
    let token = |p: usize, tail: &[Option<u32>]| -> Option<u32> {
        if p < resp.len() {
            Some(resp[p] as u32)
        } else {
            tail.get(p - resp.len()).copied().flatten()
        }
    };
    let mut tail: Vec<Option<u32>> = vec![];
    match (ints(r.get("commit_step")), ints(r.get("tail_commit_step"))) {
        (Some(mut steps), Some(ts)) => {
            steps.extend(ts);
            tail = r["tail_ids"]
                .as_array()
                .map(|a| a.iter().map(|x| x.as_u64().map(|v| v as u32)).collect())
                .unwrap_or_default();
            let want: Vec<usize> = (0..steps.len()).filter(|&i| steps[i] >= 0).collect();
            if pos != want {
                let missing: Vec<usize> =
                    want.iter().filter(|p| !pos.contains(p)).copied().collect();
                let extra: Vec<usize> = pos.iter().filter(|p| !want.contains(p)).copied().collect();
                out.push(at(format!(
                    "committed positions differ from the trajectory's (missing {missing:?}, not committed {extra:?})"
                )));
            }
        }
        _ => {
            let need = resp.len() + usize::from(r["stop"] == "eos");
            if let Some(p) = (0..need).find(|p| !pos.contains(p)) {
                out.push(at(format!("committed position {p} has no top-k row")));
            }
            if let Some(p) = pos.iter().find(|&&p| p >= gen_len) {
                out.push(at(format!("position {p} is beyond gen_length {gen_len}")));
            }
        }
    }
    let greedy = r["gen"]["temperature"].as_f64() == Some(0.0);
    for x in rows {
        let p = x.position.max(0) as usize;
        if x.ids.len() != x.logprobs.len() || x.ids.is_empty() || (kk > 0 && x.ids.len() > kk) {
            out.push(at(format!(
                "position {p}: {} ids and {} log-probs (K = {kk})",
                x.ids.len(),
                x.logprobs.len()
            )));
        }
        let ok_lp = x.logprobs.iter().all(|l| l.is_finite() && *l <= 0.0)
            && x.logprobs.windows(2).all(|w| w[0] >= w[1]);
        if !ok_lp || !x.logsumexp.is_finite() {
            out.push(at(format!(
                "position {p}: log-probs not finite, ≤ 0 and non-increasing"
            )));
        }
        if greedy {
            if let Some(t) = token(p, &tail) {
                if !x.ids.contains(&t) {
                    out.push(at(format!(
                        "position {p}: greedy sampling committed {t}, not in its top-k {:?}",
                        x.ids
                    )));
                }
            }
        }
    }
    out
}

/// The sidecar check of `audit --distilled PATH`, into its `distilled` check (nothing when no
/// record asked for top-k and no sidecar is there).
pub fn check_into(path: &Path, c: &mut Check) {
    let side = topk_sidecar::sidecar_path(path);
    let mut records = 0usize;
    let mut asked = false;
    let mut problems = Vec::new();
    let read = crate::model::lineage::for_each_record(
        path,
        crate::model::lineage::RECORD_MAX,
        &mut |k, r| {
            let k = k as usize;
            records += 1;
            if r["gen"].get("top_k").is_none() {
                return Ok(());
            }
            asked = true;
            if problems.len() < 20 && side.is_file() {
                match topk_sidecar::read_group(&side, k)? {
                    None => problems.push(format!("record {k}: no row group {k} in the sidecar")),
                    Some(rows) => problems.extend(record_problems(k, &r, &rows)),
                }
            }
            Ok(())
        },
    );
    if let Err(e) = read {
        c.fail(format!("{e:#}"));
        return;
    }
    if !asked && !side.is_file() {
        return;
    }
    if !side.is_file() {
        c.fail(format!(
            "{}: the records say --top-k but the sidecar is missing",
            side.display()
        ));
        return;
    }
    if !asked {
        c.fail(format!(
            "{}: a top-k sidecar beside records written without --top-k",
            side.display()
        ));
        return;
    }
    match topk_sidecar::read(&side) {
        Ok(rows) => {
            let groups = rows.last().map_or(0, |(g, _)| g + 1);
            if groups != records {
                c.fail(format!(
                    "{}: {groups} row groups for {records} records",
                    side.display()
                ));
            }
        }
        Err(e) => c.fail(format!("{e:#}")),
    }
    for p in problems {
        c.fail(p);
    }
    // The unit files against the digests their commit lines name.
    if let Ok(parts) = output::list_parts(&output::parts_dir(path)) {
        for f in &parts {
            match output::read_part(f) {
                Ok(part) => {
                    for (k, b) in &part.batches {
                        let unit = topk_sidecar::unit_path(f, *k);
                        if let Err(e) = topk_sidecar::check_unit(&unit, b.topk_sha256.as_deref()) {
                            c.fail(format!("{e:#}"));
                        }
                    }
                }
                Err(e) => c.fail(format!("{e:#}")),
            }
        }
        if !parts.is_empty() {
            c.note(format!(
                "unit files checked against the commit lines of {} part(s)",
                parts.len()
            ));
        }
    }
    c.note(format!(
        "{records} records' top-k rows checked against {}",
        side.display()
    ));
}
