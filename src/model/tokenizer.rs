//! Tokenizer links of the model chain: a converted model's tokenizer.json against the base's
//! (equal, or differing only in the documented ways), and the mask id against the base
//! (a token the base never emits for text).
//!
//! Allowed differences (docs/model-chain.md): the `truncation` and `padding` settings, and the
//! `added_tokens` entry at the mask id (a reserved token renamed to the mask token, or a new
//! token in an embedding row the base's tokenizer never reached). Everything else — the model
//! (vocab, merges), normalizer, pre-tokenizer, post-processor, decoder, every other added
//! token — must be equal.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Keys of tokenizer.json that are runtime settings, not the vocabulary.
const SETTINGS: &[&str] = &["truncation", "padding"];

/// `id → entry` of a tokenizer.json's `added_tokens`.
pub fn added_tokens(tok: &Value) -> BTreeMap<u64, &Value> {
    tok["added_tokens"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| Some((t["id"].as_u64()?, t)))
                .collect()
        })
        .unwrap_or_default()
}

/// The token string of `id` in the model's own vocabulary (BPE/WordPiece map, Unigram list).
pub fn vocab_token(tok: &Value, id: u64) -> Option<String> {
    match &tok["model"]["vocab"] {
        Value::Object(m) => m
            .iter()
            .find(|(_, v)| v.as_u64() == Some(id))
            .map(|(k, _)| k.clone()),
        Value::Array(a) => a
            .get(id as usize)
            .and_then(|p| p.get(0))
            .and_then(|s| s.as_str())
            .map(str::to_string),
        _ => None,
    }
}

/// The id of `content` among added tokens, else in the vocabulary.
pub fn token_id(tok: &Value, content: &str) -> Option<u64> {
    if let Some((id, _)) = added_tokens(tok)
        .into_iter()
        .find(|(_, t)| t["content"].as_str() == Some(content))
    {
        return Some(id);
    }
    match &tok["model"]["vocab"] {
        Value::Object(m) => m.get(content).and_then(Value::as_u64),
        Value::Array(a) => a
            .iter()
            .position(|p| p.get(0).and_then(|s| s.as_str()) == Some(content))
            .map(|i| i as u64),
        _ => None,
    }
}

/// Problems (breaking) and notes (allowed differences) of `other` against `base`.
pub fn compare(base: &Value, other: &Value, mask_id: Option<u64>) -> (Vec<String>, Vec<String>) {
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let empty = Map::new();
    let (b, o) = (
        base.as_object().unwrap_or(&empty),
        other.as_object().unwrap_or(&empty),
    );
    let keys: std::collections::BTreeSet<&String> = b.keys().chain(o.keys()).collect();
    for k in keys {
        if k == "added_tokens" || b.get(k) == o.get(k) {
            continue;
        }
        if SETTINGS.contains(&k.as_str()) {
            notes.push(format!("tokenizer.json `{k}` differs (a runtime setting)"));
        } else {
            problems.push(format!("tokenizer.json `{k}` differs from the base's"));
        }
    }
    let (ba, oa) = (added_tokens(base), added_tokens(other));
    let ids: std::collections::BTreeSet<u64> = ba.keys().chain(oa.keys()).copied().collect();
    for id in ids {
        let (x, y) = (ba.get(&id), oa.get(&id));
        if x == y {
            continue;
        }
        let content = |t: Option<&&Value>| {
            t.and_then(|t| t["content"].as_str())
                .map_or("absent".to_string(), |s| format!("{s:?}"))
        };
        if Some(id) == mask_id {
            notes.push(format!(
                "added token {id} (the mask id): base {}, this {}",
                content(x),
                content(y)
            ));
        } else {
            problems.push(format!(
                "added token {id}: base {}, this {}",
                content(x),
                content(y)
            ));
        }
    }
    (problems, notes)
}

/// What the base emits that the mask id must not be: its EOS/BOS/PAD/UNK ids and every added
/// token its chat template writes.
pub struct BaseText<'a> {
    pub tokenizer: &'a Value,
    pub config: &'a Map<String, Value>,
    pub tokenizer_config: Option<&'a Value>,
    pub generation_config: Option<&'a Value>,
}

fn ids_of(v: &Value) -> Vec<u64> {
    match v {
        Value::Number(n) => n.as_u64().into_iter().collect(),
        Value::Array(a) => a.iter().filter_map(Value::as_u64).collect(),
        _ => vec![],
    }
}

/// `Ok(what the id is)` when `mask_id` is a token the base never emits for text, else
/// `Err(why not)`.
pub fn check_mask_id(base: &BaseText, mask_id: u64) -> Result<String, String> {
    let vocab = base.config.get("vocab_size").and_then(Value::as_u64);
    if let Some(v) = vocab {
        if mask_id >= v {
            return Err(format!(
                "mask id {mask_id} is outside the base's embedding (vocab_size {v})"
            ));
        }
    }
    let mut used: BTreeMap<u64, String> = BTreeMap::new();
    for k in ["eos_token_id", "bos_token_id", "pad_token_id"] {
        for src in [
            Some(base.config),
            base.generation_config.and_then(Value::as_object),
        ] {
            if let Some(v) = src.and_then(|s| s.get(k)) {
                for id in ids_of(v) {
                    used.insert(id, format!("the base's {k}"));
                }
            }
        }
    }
    if let Some(tc) = base.tokenizer_config {
        for k in ["eos_token", "bos_token", "pad_token", "unk_token"] {
            let content = match &tc[k] {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) => o.get("content").and_then(Value::as_str),
                _ => None,
            };
            if let Some(id) = content.and_then(|c| token_id(base.tokenizer, c)) {
                used.insert(id, format!("the base's {k}"));
            }
        }
    }
    let template = base
        .tokenizer_config
        .and_then(|tc| tc["chat_template"].as_str())
        .unwrap_or_default();
    let added = added_tokens(base.tokenizer);
    if let Some(t) = added.get(&mask_id) {
        let content = t["content"].as_str().unwrap_or_default();
        if let Some(why) = used.get(&mask_id) {
            return Err(format!("mask id {mask_id} ({content:?}) is {why}"));
        }
        if !content.is_empty() && template.contains(content) {
            return Err(format!(
                "mask id {mask_id} ({content:?}) is written by the base's chat template"
            ));
        }
        return Ok(format!(
            "mask id {mask_id} is the base's reserved added token {content:?} (ordinary text \
             never encodes to it; the literal string {content:?} would)"
        ));
    }
    if let Some(why) = used.get(&mask_id) {
        return Err(format!("mask id {mask_id} is {why}"));
    }
    if let Some(tok) = vocab_token(base.tokenizer, mask_id) {
        return Err(format!(
            "mask id {mask_id} is the base's ordinary vocabulary token {tok:?}: text encodes to it"
        ));
    }
    Ok(format!(
        "mask id {mask_id} is an embedding row no base token reaches"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tok() -> Value {
        json!({"version": "1.0", "truncation": null, "padding": null,
            "added_tokens": [
                {"id": 0, "content": "<|endoftext|>", "special": true},
                {"id": 5, "content": "<unused_token_0>", "special": false}],
            "model": {"type": "BPE", "vocab": {"<|endoftext|>": 0, "a": 1, "b": 2, "ab": 3, "c": 4}, "merges": ["a b"]}})
    }

    #[test]
    fn mask_rules() {
        let t = tok();
        let cfg = json!({"vocab_size": 8, "eos_token_id": 0});
        let tc = json!({"eos_token": "<|endoftext|>", "chat_template": "<|im_start|>{{ m }}"});
        let b = BaseText {
            tokenizer: &t,
            config: cfg.as_object().unwrap(),
            tokenizer_config: Some(&tc),
            generation_config: None,
        };
        assert!(check_mask_id(&b, 5).unwrap().contains("<unused_token_0>"));
        assert!(check_mask_id(&b, 7).unwrap().contains("no base token"));
        assert!(check_mask_id(&b, 0).unwrap_err().contains("eos"));
        assert!(check_mask_id(&b, 3)
            .unwrap_err()
            .contains("ordinary vocabulary token \"ab\""));
        assert!(check_mask_id(&b, 8).unwrap_err().contains("outside"));
    }

    #[test]
    fn tokenizer_differences() {
        let base = tok();
        let mut renamed = tok();
        renamed["added_tokens"][1]["content"] = json!("<|mask|>");
        let (p, n) = compare(&base, &renamed, Some(5));
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(n.len(), 1);
        let (p, _) = compare(&base, &renamed, Some(7));
        assert!(p[0].contains("added token 5"), "{p:?}");
        let mut merged = tok();
        merged["model"]["merges"] = json!(["a b", "ab c"]);
        let (p, _) = compare(&base, &merged, Some(5));
        assert!(p[0].contains("`model`"), "{p:?}");
        let mut padded = tok();
        padded["padding"] = json!({"strategy": "BatchLongest"});
        let (p, n) = compare(&base, &padded, Some(5));
        assert!(p.is_empty() && n[0].contains("padding"), "{p:?} {n:?}");
    }
}
