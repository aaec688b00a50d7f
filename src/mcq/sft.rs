//! The stage-2 SFT set: each item tokenized as `prompt ++ answer ++ EOS`, with `prompt_len`
//! so the trainer never masks (or takes loss on) the prompt; one row per item.
//!
//! Prompt and answer are encoded separately and concatenated, so `input_ids[..prompt_len]`
//! decodes to exactly the rendered prompt that `prompts.jsonl` carries.

use anyhow::{anyhow, Result};
use rayon::prelude::*;

use super::item::McqItem;
use super::template::Templates;
use super::tokenizer::LoadedTokenizer;

/// One SFT row.
#[derive(Debug, Clone, PartialEq)]
pub struct SftRow {
    pub id: String,
    /// Where the item came from (written as columns so every row traces to a locked file).
    pub prov: crate::provenance::Provenance,
    pub input_ids: Vec<u32>,
    pub prompt_len: u32,
}

/// Tokenize every item (rayon); rows longer than `seq_len` are dropped and counted.
pub fn build_rows(
    items: &[McqItem],
    templates: &Templates,
    tok: &LoadedTokenizer,
    seq_len: usize,
) -> Result<(Vec<Option<SftRow>>, u64)> {
    let eos = tok.info.eos_id;
    let rows: Vec<Option<SftRow>> = items
        .par_iter()
        .map(|item| -> Result<Option<SftRow>> {
            let prompt = templates.prompt(item);
            let answer = templates.answer(item);
            let p = tok
                .tok
                .encode_fast(prompt.as_str(), false)
                .map_err(|e| anyhow!("{}: tokenizing prompt: {e}", item.id))?;
            let a = tok
                .tok
                .encode_fast(answer.as_str(), false)
                .map_err(|e| anyhow!("{}: tokenizing answer: {e}", item.id))?;
            let mut ids = Vec::with_capacity(p.len() + a.len() + 1);
            ids.extend_from_slice(p.get_ids());
            ids.extend_from_slice(a.get_ids());
            ids.push(eos);
            if ids.len() > seq_len {
                return Ok(None);
            }
            Ok(Some(SftRow {
                id: item.id.clone(),
                prov: item.prov.clone(),
                prompt_len: p.len() as u32,
                input_ids: ids,
            }))
        })
        .collect::<Result<_>>()?;
    let too_long = rows.iter().filter(|r| r.is_none()).count() as u64;
    Ok((rows, too_long))
}
