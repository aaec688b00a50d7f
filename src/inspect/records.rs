//! The two JSON outputs: `prompts.jsonl` (contract 5, read and validated as `distill` reads
//! it, [`crate::distill::prompts::for_each_prompt`]) and `distilled.json` (an array or JSON
//! lines, read by [`crate::model::lineage::for_each_record`]), both streamed: one record in
//! memory at a time, each bounded by `--max-record-bytes` while it is read.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

use super::settings::InspectSettings;
use super::stats::Stats;
use super::{cut, show};

/// The first record of a `.json` array or JSON-lines file (None: no record), read alone.
pub fn first_record(path: &Path, bound: crate::bounded::Bound) -> Result<Option<Value>> {
    let mut first = None;
    crate::model::lineage::for_each_record(path, bound, &mut |_, v| {
        first = Some(v);
        Err(crate::sources::Stop.into())
    })?;
    Ok(first)
}

/// prompts.jsonl (MCQ items or open prompts, read as `distill` reads them): items per source,
/// prompt lengths (tokens with `--tokenizer`, else chars).
pub fn prompts(path: &Path, args: &InspectSettings, out: &mut String) -> Result<Stats> {
    let tok = super::decoder(args.tokenizer.as_deref(), None)?;
    let mut st = Stats {
        path: path.display().to_string(),
        kind: "prompts".into(),
        lengths_of: if tok.is_some() {
            "prompt tokens"
        } else {
            "prompt chars"
        }
        .into(),
        ..Default::default()
    };
    let mut gold = std::collections::BTreeMap::<String, u64>::new();
    let mut mcq = 0u64;
    let mut k = 0usize;
    crate::distill::prompts::for_each_prompt(path, args.max_record_bytes, &mut |r| {
        let n = match &tok {
            Some(t) => {
                let e = t
                    .encode(r.prompt.as_str(), false)
                    .map_err(|e| anyhow::anyhow!("tokenizing the prompt: {e}"))?;
                e.get_ids().len() as u64
            }
            None => r.prompt.chars().count() as u64,
        };
        let source = r.provenance[0].as_str().unwrap_or("(none)");
        st.rows += 1;
        st.documents += 1;
        let c = st.source(source);
        c.rows += 1;
        c.documents += 1;
        if tok.is_some() {
            st.tokens += n;
            st.source(source).tokens += n;
        }
        st.lengths.add(n);
        if let Some(g) = &r.gold {
            *gold.entry(g.clone()).or_default() += 1;
        }
        if r.options.is_some() {
            mcq += 1;
        }
        if args.shown(k) {
            let p = &r.provenance;
            out.push_str(&format!(
                "-- record {k}  {}  ({} {} row {})  gold {}\n  prompt {}\n",
                r.id,
                source,
                p[3].as_str().unwrap_or("-"),
                p[4],
                r.gold.as_deref().unwrap_or("-"),
                cut(&r.prompt, args.chars)
            ));
            for (i, o) in r.options.iter().flatten().enumerate() {
                let letter = crate::mcq::item::LETTERS.get(i).copied().unwrap_or('?');
                out.push_str(&format!("  {letter}. {}\n", cut(o, args.chars)));
            }
        }
        k += 1;
        Ok(())
    })?;
    st.extra.insert("mcq_items".into(), mcq.into());
    st.extra
        .insert("gold_letters".into(), serde_json::to_value(&gold)?);
    Ok(st)
}

/// distilled.json: records per source, response tokens, stop reasons, answer accuracy.
pub fn distilled(path: &Path, args: &InspectSettings, out: &mut String) -> Result<Stats> {
    let tok = super::decoder(args.tokenizer.as_deref(), None)?;
    let mut st = Stats {
        path: path.display().to_string(),
        kind: "distilled".into(),
        lengths_of: "response tokens".into(),
        ..Default::default()
    };
    let (mut eos, mut length, mut answered, mut correct, mut with_gold) = (0u64, 0, 0, 0, 0);
    crate::model::lineage::for_each_record(path, args.bound, &mut |k, r| {
        let k = k as usize;
        let at = || format!("{} record {k}", path.display());
        let id = r
            .get("id")
            .and_then(Value::as_str)
            .with_context(|| format!("{}: no id", at()))?;
        let ids: Vec<u32> = match r.get("response_ids") {
            Some(v) => serde_json::from_value(v.clone())
                .with_context(|| format!("{}: response_ids is not a list of token ids", at()))?,
            None => anyhow::bail!("{}: no response_ids (not a distilled record)", at()),
        };
        let source = r.get("source").and_then(Value::as_str).unwrap_or("(none)");
        let n = ids.len() as u64;
        st.rows += 1;
        st.documents += 1;
        st.tokens += n;
        let c = st.source(source);
        c.rows += 1;
        c.documents += 1;
        c.tokens += n;
        st.lengths.add(n);
        match r.get("stop").and_then(Value::as_str) {
            Some("eos") => eos += 1,
            Some("length") => length += 1,
            _ => {}
        }
        if r.get("answer").is_some_and(|a| !a.is_null()) {
            answered += 1;
        }
        if r.get("gold").is_some_and(|g| !g.is_null()) {
            with_gold += 1;
        }
        if r.get("correct") == Some(&Value::Bool(true)) {
            correct += 1;
        }
        if args.shown(k) {
            let prompt = r.get("prompt").and_then(Value::as_str).unwrap_or("");
            let response = r.get("response").and_then(Value::as_str).unwrap_or("");
            out.push_str(&format!(
                "-- record {k}  {id}  ({source})  {n} response tokens, stop {}, answer {}, gold {}\n  prompt   {}\n  response {}\n",
                r.get("stop").unwrap_or(&Value::Null),
                r.get("answer").unwrap_or(&Value::Null),
                r.get("gold").unwrap_or(&Value::Null),
                cut(prompt, args.chars),
                cut(response, args.chars),
            ));
            if tok.is_some() {
                out.push_str(&format!(
                    "  response_ids decoded {}\n",
                    show(tok.as_ref(), &ids, args.chars)
                ));
            }
            out.push_str(&super::trajectory::show(
                path,
                k,
                &r,
                args.position,
                tok.as_ref(),
            )?);
        }
        Ok(())
    })?;
    let e = &mut st.extra;
    e.insert("stop_eos".into(), eos.into());
    e.insert("stop_length".into(), length.into());
    e.insert("answered".into(), answered.into());
    e.insert("with_gold".into(), with_gold.into());
    e.insert("correct".into(), correct.into());
    Ok(st)
}
