//! Prompt ids for the teacher under `--special-tokens-in-text` ([`crate::added_text`]): each
//! prompt rendered through the chat template, the template's own markers encoded as they are,
//! the prompt's own bytes as plain text (default), added tokens (`split`, never the mask) or
//! refused (`refuse`); prompts holding added-token text counted per source and token, the
//! first few named in the log.

use std::path::Path;

use anyhow::Result;
use rayon::prelude::*;

use super::prompts::PromptItem;
use crate::added_text::{AddedTextCounts, Hit, SpecialTokensInText, EXAMPLES_LOGGED};
use crate::teacher::Teacher;

/// Ids of every prompt (in order) and the counts. Errors name the file and line.
pub fn encode_prompts(
    teacher: &Teacher,
    items: &[PromptItem],
    use_template: bool,
    mode: SpecialTokensInText,
    file: &Path,
) -> Result<(Vec<Vec<u32>>, AddedTextCounts)> {
    let tok = &teacher.tokenizer;
    let plain = mode != SpecialTokensInText::Split;
    let mask = tok
        .tok
        .id_to_token(teacher.mask_id)
        .map(|t| (t, teacher.mask_id));
    let name = |i: u32| tok.ranged.tries.name(i);
    let done: Vec<(Vec<u32>, Vec<Hit>, String)> = items
        .par_iter()
        .map(|it| {
            let mut hits = Vec::new();
            let r = tok
                .encode_prompt(&it.prompt, use_template, plain, &mut hits)
                .and_then(|(ids, rendered)| {
                    crate::added_text::check_policy(
                        mode,
                        mask.as_ref(),
                        &rendered,
                        &ids,
                        &hits,
                        name,
                    )?;
                    Ok((ids, hits, rendered))
                });
            r.map_err(|e| {
                anyhow::anyhow!("{}:{}: prompt {:?}: {e:#}", file.display(), it.line, it.id)
            })
        })
        .collect::<Vec<Result<_>>>()
        .into_iter()
        // The first bad prompt in file order, whatever the thread that hit it.
        .collect::<Result<_>>()?;
    let mut counts = AddedTextCounts::new(mode);
    let mut ids = Vec::with_capacity(done.len());
    for (it, (x, hits, rendered)) in items.iter().zip(done) {
        if !hits.is_empty() {
            let source = it.provenance[0].as_str().unwrap_or("(no source)");
            counts.add(source, &hits, name);
            if counts.documents <= EXAMPLES_LOGGED as u64 {
                tracing::warn!(
                    "{}:{}: prompt {:?}: {:?} (added token {}) in the prompt, encoded as {}: {}",
                    file.display(),
                    it.line,
                    it.id,
                    name(hits[0].id),
                    hits[0].id,
                    if plain { "plain text" } else { "that token" },
                    crate::added_text::excerpt(&rendered, hits[0].offset)
                );
            }
        }
        ids.push(x);
    }
    if counts.documents > 0 {
        tracing::warn!("distill {}: {}", file.display(), counts.summary("prompts"));
    }
    Ok((ids, counts))
}
