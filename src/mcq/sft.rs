//! The stage-2 SFT set: each item tokenized as `[BOS] prompt ++ answer ++ EOS`, with
//! `prompt_len` (BOS included) so the trainer never masks (or takes loss on) the prompt; one
//! row per item. BOS is there when [`crate::tokenize::files`]'s rule gives one (`--bos-token`, or
//! tokenizer_config.json `add_bos_token: true`).
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
    // Off a terminal: a plain line every --progress-interval seconds.
    let ticker = crate::progress::SharedTicker::new("mcq tokenize", "items", items.len() as u64);
    let rows: Vec<(Option<SftRow>, Vec<Hit>, String)> = items
        .par_iter()
        .map(|item| -> Result<(Option<SftRow>, Vec<Hit>, String)> {
            ticker.add(1);
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
            let mut ids = Vec::with_capacity(p.len() + a.len() + 2);
            ids.extend(tok.bos.as_ref().map(|b| b.1));
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
                    prompt_len: (p.len() + tok.bos.is_some() as usize) as u32,
                    input_ids: ids,
                }),
                hits,
                first,
            ))
        })
        .collect::<Result<_>>()?;
    ticker.finish();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provenance::Provenance;

    fn item(q: &str, opts: &[&str]) -> McqItem {
        McqItem::new(
            "sciq-train-000003".into(),
            Provenance {
                source: "sciq".into(),
                repo: "allenai/sciq".into(),
                commit: "c".into(),
                file: "data/train.parquet".into(),
                row: 3,
            },
            q.into(),
            opts.iter().map(|o| o.to_string()).collect(),
            1,
            "t",
        )
        .unwrap()
    }

    /// Item text is plain, the template's own markers stay tokens; split refuses the mask
    /// naming file and row; refuse names the offset.
    #[test]
    fn item_text_is_plain_template_markers_are_tokens() {
        let d = tempfile::tempdir().unwrap();
        crate::fixtures::tokenizer::write_tokenizer(d.path()).unwrap();
        let t = Templates::new(
            "<|im_start|>user\n{question}\n{options}<|im_end|>",
            DEFAULT_ANSWER_FOR_TEST,
            "t",
        )
        .unwrap();
        let items = vec![
            item(
                "What does <|im_start|> mean?",
                &["the literal <unused_token_0> string", "water", "air"],
            ),
            item("What is H2O?", &["salt", "water", "air"]),
        ];
        let load = |mode| {
            super::super::tokenizer::load(d.path(), &Default::default(), None, mode).unwrap()
        };
        let tok = load(SpecialTokensInText::Plain);
        let (rows, _, counts) = build_rows(&items, &t, &tok, 4096).unwrap();
        let id = |s: &str| tok.tok.token_to_id(s).unwrap();
        let mask = tok.mask.as_ref().unwrap().1;
        assert_eq!(mask, id("<unused_token_0>"));
        for (r, it) in rows.iter().zip(&items) {
            let r = r.as_ref().unwrap();
            let p = &r.input_ids[..r.prompt_len as usize];
            // The template's markers are the prompt's first and last ids; no other marker.
            assert_eq!(p[0], id("<|im_start|>"));
            assert_eq!(*p.last().unwrap(), id("<|im_end|>"));
            assert_eq!(p.iter().filter(|&&i| i == id("<|im_start|>")).count(), 1);
            assert!(!r.input_ids.contains(&mask));
            assert_eq!(
                tok.tok.decode(p, false).unwrap(),
                t.prompt(it),
                "the ids decode to the rendered prompt"
            );
        }
        // The plain item's ids are the crate's own.
        let plain_item = rows[1].as_ref().unwrap();
        let want = tok.tok.encode(t.prompt(&items[1]), false).unwrap();
        assert_eq!(
            &plain_item.input_ids[..plain_item.prompt_len as usize],
            want.get_ids()
        );
        assert_eq!(counts.documents, 1);
        let s = &counts.per_source["sciq"];
        assert_eq!(s.per_token["<unused_token_0>"], 1);
        assert_eq!(s.per_token["<|im_start|>"], 1);
        // split: the mask's text is refused, naming file and row.
        let e = build_rows(&items, &t, &load(SpecialTokensInText::Split), 4096).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("data/train.parquet row 3") && e.contains("mask"),
            "{e}"
        );
        // refuse: the first added-token text, with its offset in the rendered prompt.
        let e = build_rows(&items, &t, &load(SpecialTokensInText::Refuse), 4096).unwrap_err();
        let at = t
            .prompt(&items[0])
            .find("<|im_start|>user\nWhat does <|im_start|>")
            .unwrap()
            + "<|im_start|>user\nWhat does ".len();
        assert!(
            format!("{e:#}").contains(&format!("byte offset {at}")),
            "{e:#}"
        );
    }

    const DEFAULT_ANSWER_FOR_TEST: &str = super::super::template::DEFAULT_ANSWER;
}
