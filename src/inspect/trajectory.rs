//! Why a distilled record's trajectory is shown as blocks of steps: a student trained on it
//! reads which positions the teacher unmasked in which order, block by block; and the soft
//! labels at one position (`--position P`) are what token-level KD trains on. Reads the fields
//! `distill --trajectory` writes and row group `k` of `OUT.topk.parquet` for record `k`
//! (docs/formats/distilled-json.md#trajectory).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use crate::distill::topk_sidecar;

fn ints(v: Option<&Value>) -> Option<Vec<i64>> {
    v?.as_array()?.iter().map(Value::as_i64).collect()
}

/// Record `k`'s trajectory (when it has one) and, with `position`, its top-k from the sidecar
/// beside `path` (when there is one), as indented lines.
pub fn show(
    path: &Path,
    k: usize,
    r: &Value,
    position: Option<usize>,
    tok: Option<&tokenizers::Tokenizer>,
) -> Result<String> {
    let mut out = String::new();
    let piece = |id: u32| match tok {
        Some(t) => format!("{id} {:?}", t.decode(&[id], false).unwrap_or_default()),
        None => id.to_string(),
    };
    let (Some(mut steps), Some(tail)) =
        (ints(r.get("commit_step")), ints(r.get("tail_commit_step")))
    else {
        if position.is_some() {
            out.push_str("  (no trajectory: run distill with --trajectory)\n");
        }
        return topk(path, k, r, position, None, &piece, out);
    };
    let resp = ints(r.get("response_ids")).unwrap_or_default();
    steps.extend(tail);
    let bl = r["gen"]["block_length"].as_u64().unwrap_or(0).max(1) as usize;
    // block → step → positions, in step order.
    let mut blocks: BTreeMap<usize, BTreeMap<i64, Vec<usize>>> = BTreeMap::new();
    let mut never = 0usize;
    for (i, &s) in steps.iter().enumerate() {
        if s < 0 {
            never += 1;
        } else {
            blocks
                .entry(i / bl)
                .or_default()
                .entry(s)
                .or_default()
                .push(i);
        }
    }
    out.push_str(&format!(
        "  trajectory ({} positions, {} response; {never} never decoded) — block: step [positions]\n",
        steps.len(),
        resp.len()
    ));
    for (b, st) in &blocks {
        let steps: Vec<String> = st
            .iter()
            .map(|(s, ps)| {
                let ps: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
                format!("{s} [{}]", ps.join(" "))
            })
            .collect();
        out.push_str(&format!("    block {b}: {}\n", steps.join("  ")));
    }
    topk(path, k, r, position, Some(&steps), &piece, out)
}

fn topk(
    path: &Path,
    k: usize,
    r: &Value,
    position: Option<usize>,
    steps: Option<&[i64]>,
    piece: &dyn Fn(u32) -> String,
    mut out: String,
) -> Result<String> {
    let Some(p) = position else { return Ok(out) };
    let side = topk_sidecar::sidecar_path(path);
    if !side.is_file() {
        out.push_str(&format!(
            "  (no {}: run distill with --top-k)\n",
            side.display()
        ));
        return Ok(out);
    }
    let rows = topk_sidecar::read_group(&side, k)?.unwrap_or_default();
    let id = r.get("id").and_then(Value::as_str).unwrap_or("");
    match rows.iter().find(|x| x.position as usize == p && x.id == id) {
        None => out.push_str(&format!(
            "  top-k @{p}: no row (position never committed)\n"
        )),
        Some(x) => {
            let at = steps
                .and_then(|s| s.get(p))
                .map_or(String::new(), |s| format!(", committed at step {s}"));
            out.push_str(&format!("  top-k @{p}{at} (logsumexp {}):\n", x.logsumexp));
            for (i, lp) in x.ids.iter().zip(&x.logprobs) {
                out.push_str(&format!(
                    "    {lp:>10.4}  p={:.4}  {}\n",
                    lp.exp(),
                    piece(*i)
                ));
            }
        }
    }
    Ok(out)
}
