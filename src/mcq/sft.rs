//! The stage-2 SFT set: each item tokenized as `prompt ++ answer ++ EOS`, with `prompt_len`
//! so the trainer never masks (or takes loss on) the prompt; one row per item.
//!
//! Prompt and answer are encoded separately and concatenated, so `input_ids[..prompt_len]`
//! decodes to exactly the rendered prompt that `prompts.jsonl` carries. The question and
//! option text inside them is data: added-token text there follows `--special-tokens-in-text`
//! (plain by default; see [`crate::added_text`]), the template's own text is encoded as is.

use anyhow::{anyhow, Result};
use rayon::prelude::*;

use super::item::McqItem;
use super::template::Templates;
use super::tokenizer::LoadedTokenizer;
use crate::added_text::{AddedTextCounts, Hit, SpecialTokensInText, EXAMPLES_LOGGED};

/// One SFT row.
#[derive(Debug, Clone, PartialEq)]
pub struct SftRow {
    pub id: String,
    /// Where the item came from (written as columns so every row traces to a locked file).
    pub prov: crate::provenance::Provenance,
    pub input_ids: Vec<u32>,
    pub prompt_len: u32,
}

/// Tokenize every item (rayon); rows longer than `seq_len` are dropped and counted. Also
/// returns the items whose question / options held added-token text, per source and token.
pub fn build_rows(
    items: &[McqItem],
    templates: &Templates,
    tok: &LoadedTokenizer,
    seq_len: usize,
) -> Result<(Vec<Option<SftRow>>, u64, AddedTextCounts)> {
    let eos = tok.info.eos_id;
    let plain = tok.mode != SpecialTokensInText::Split;
    let encode =
        |item: &McqItem, what: &str, (text, data): (String, Vec<std::ops::Range<usize>>)| {
            let mut hits = Vec::new();
            let ids = tok
                .ranged
                .encode(&tok.tok, &text, &data, plain, &mut hits)
                .and_then(|ids| {
                    crate::added_text::check_policy(
                        tok.mode,
                        tok.mask.as_ref(),
                        &text,
                        &ids,
                        &hits,
                        |i| tok.ranged.tries.name(i),
                    )?;
                    Ok(ids)
                })
                .map_err(|e| {
                    anyhow!(
                        "{} row {} (item {}): {what}: {e:#}",
                        item.prov.file,
                        item.prov.row,
                        item.id
                    )
                })?;
            Ok::<_, anyhow::Error>((ids, hits, text))
        };
    let rows: Vec<(Option<SftRow>, Vec<Hit>, String)> = items
        .par_iter()
        .map(|item| -> Result<(Option<SftRow>, Vec<Hit>, String)> {
            let (p, mut hits, ptext) = encode(item, "prompt", templates.prompt_ranges(item))?;
            let (a, ahits, atext) = encode(item, "answer", templates.answer_ranges(item))?;
            let first = if hits.is_empty() && !ahits.is_empty() {
                format!(
                    "answer {}",
                    crate::added_text::excerpt(&atext, ahits[0].offset)
                )
            } else if !hits.is_empty() {
                format!(
                    "prompt {}",
                    crate::added_text::excerpt(&ptext, hits[0].offset)
                )
            } else {
                String::new()
            };
            hits.extend(ahits);
            let mut ids = Vec::with_capacity(p.len() + a.len() + 1);
            ids.extend_from_slice(&p);
            ids.extend_from_slice(&a);
            ids.push(eos);
            if ids.len() > seq_len {
                return Ok((None, hits, first));
            }
            Ok((
                Some(SftRow {
                    id: item.id.clone(),
                    prov: item.prov.clone(),
                    prompt_len: p.len() as u32,
                    input_ids: ids,
                }),
                hits,
                first,
            ))
        })
        .collect::<Result<_>>()?;
    let mut counts = AddedTextCounts::new(tok.mode);
    let mut out = Vec::with_capacity(rows.len());
    for (item, (row, hits, first)) in items.iter().zip(rows) {
        if !hits.is_empty() {
            counts.add(&item.prov.source, &hits, |i| tok.ranged.tries.name(i));
            if counts.documents <= EXAMPLES_LOGGED as u64 {
                tracing::warn!(
                    "{} row {} (item {}): {:?} (added token {}) in the item's text, encoded as {}: {first}",
                    item.prov.file,
                    item.prov.row,
                    item.id,
                    tok.ranged.tries.name(hits[0].id),
                    hits[0].id,
                    if plain { "plain text" } else { "that token" }
                );
            }
        }
        out.push(row);
    }
    let too_long = out.iter().filter(|r| r.is_none()).count() as u64;
    Ok((out, too_long, counts))
}
