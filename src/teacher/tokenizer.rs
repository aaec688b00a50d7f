//! The teacher's tokenizer side: `tokenizer.json` for ids, `tokenizer_config.json` for the
//! special tokens and the chat template (rendered with minijinja, a user message plus
//! `add_generation_prompt=true`), and the letter ids A–J of the MCQ answer slot.
//!
//! Rendered text is encoded without adding special tokens: the chat template writes any BOS
//! it wants itself, so the ids are exactly the rendered text's.

use std::path::Path;

use anyhow::{Context, Result};
use minijinja::value::Value as JValue;
use minijinja::{Environment, Error as JError, ErrorKind};
use serde_json::Value;
use tokenizers::Tokenizer;

/// Tokenizer, special tokens and chat template of a teacher checkpoint.
pub struct TeacherTokenizer {
    pub tok: Tokenizer,
    pub chat_template: Option<String>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub eos_id: Option<u32>,
    pub pad_id: Option<u32>,
    /// The id of the tokenizer's `mask_token` (a fallback for the mask id).
    pub mask_id: Option<u32>,
}

/// `"tok"` or `{"content": "tok", ...}` as found in tokenizer_config.json.
fn token_str(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => m.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

impl TeacherTokenizer {
    pub fn open(dir: &Path) -> Result<Self> {
        let tj = dir.join("tokenizer.json");
        let tok = Tokenizer::from_file(&tj)
            .map_err(|e| anyhow::anyhow!("{}: cannot load tokenizer: {e}", tj.display()))?;
        let tc = dir.join("tokenizer_config.json");
        let cfg: Value = if tc.is_file() {
            let text = std::fs::read_to_string(&tc)
                .with_context(|| format!("reading {}", tc.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("{}: invalid JSON", tc.display()))?
        } else {
            Value::Null
        };
        let chat_template = match cfg.get("chat_template") {
            Some(Value::String(s)) => Some(s.clone()),
            // A list of named templates: take "default".
            Some(Value::Array(a)) => a
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
            _ => None,
        }
        .or_else(|| std::fs::read_to_string(dir.join("chat_template.jinja")).ok());
        let id = |s: &Option<String>| s.as_deref().and_then(|s| tok.token_to_id(s));
        let bos_token = token_str(cfg.get("bos_token"));
        let eos_token = token_str(cfg.get("eos_token"));
        let pad_token = token_str(cfg.get("pad_token"));
        let mask_token = token_str(cfg.get("mask_token"));
        Ok(TeacherTokenizer {
            eos_id: id(&eos_token),
            pad_id: id(&pad_token),
            mask_id: id(&mask_token),
            tok,
            chat_template,
            bos_token,
            eos_token,
        })
    }

    /// Vocabulary size including added tokens (the largest id + 1 must fit the embedding).
    pub fn vocab_size(&self) -> usize {
        self.tok.get_vocab_size(true)
    }

    /// The prompt as the model sees it: through the chat template when there is one and
    /// `use_template`, else unchanged.
    pub fn render(&self, prompt: &str, use_template: bool) -> Result<String> {
        match (&self.chat_template, use_template) {
            (Some(t), true) => render_chat(
                t,
                prompt,
                self.bos_token.as_deref(),
                self.eos_token.as_deref(),
            ),
            _ => Ok(prompt.to_string()),
        }
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self
            .tok
            .encode(text, false)
            .map_err(|e| anyhow::anyhow!("tokenizing: {e}"))?
            .get_ids()
            .to_vec())
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tok
            .decode(ids, true)
            .map_err(|e| anyhow::anyhow!("decoding: {e}"))
    }

    /// Token ids of the letters A..J as they follow `template`: the token that
    /// `encode(template + " " + letter)` adds to `encode(template)` when it adds exactly one,
    /// else the one `encode(template + letter)` adds. Errors name the letter.
    pub fn letter_ids(&self, template: &str, n: usize) -> Result<Vec<u32>> {
        let base = self.encode(template)?;
        let extends = |text: String| -> Result<Option<u32>> {
            let with = self.encode(&text)?;
            Ok(
                (with.len() == base.len() + 1 && with[..base.len()] == base[..])
                    .then(|| with[base.len()]),
            )
        };
        let mut out = Vec::with_capacity(n);
        for letter in LETTERS.iter().take(n) {
            let id = match extends(format!("{template} {letter}"))? {
                Some(id) => id,
                None => extends(format!("{template}{letter}"))?.ok_or_else(|| {
                    anyhow::anyhow!("letter {letter:?} is not a single token after {template:?}")
                })?,
            };
            out.push(id);
        }
        let mut uniq = out.clone();
        uniq.sort();
        uniq.dedup();
        anyhow::ensure!(
            uniq.len() == out.len(),
            "answer letters share token ids: {out:?}"
        );
        Ok(out)
    }
}

/// Answer letters, in order.
pub const LETTERS: [&str; 10] = ["A", "B", "C", "D", "E", "F", "G", "H", "I", "J"];

/// Python string methods HF chat templates commonly call.
fn py_methods(
    _: &minijinja::State,
    v: &JValue,
    method: &str,
    args: &[JValue],
) -> Result<JValue, JError> {
    let s = v
        .as_str()
        .ok_or_else(|| JError::from(ErrorKind::UnknownMethod))?;
    let arg = |i: usize| args.get(i).and_then(|a| a.as_str());
    Ok(match method {
        "strip" => JValue::from(match arg(0) {
            Some(c) => s.trim_matches(|x| c.contains(x)),
            None => s.trim(),
        }),
        "lstrip" => JValue::from(match arg(0) {
            Some(c) => s.trim_start_matches(|x| c.contains(x)),
            None => s.trim_start(),
        }),
        "rstrip" => JValue::from(match arg(0) {
            Some(c) => s.trim_end_matches(|x| c.contains(x)),
            None => s.trim_end(),
        }),
        "startswith" => JValue::from(arg(0).is_some_and(|p| s.starts_with(p))),
        "endswith" => JValue::from(arg(0).is_some_and(|p| s.ends_with(p))),
        "upper" => JValue::from(s.to_uppercase()),
        "lower" => JValue::from(s.to_lowercase()),
        _ => return Err(JError::from(ErrorKind::UnknownMethod)),
    })
}

/// Render a single-turn chat (one user message, generation prompt on).
pub fn render_chat(
    template: &str,
    prompt: &str,
    bos: Option<&str>,
    eos: Option<&str>,
) -> Result<String> {
    let mut env = Environment::new();
    env.set_unknown_method_callback(py_methods);
    env.add_function("raise_exception", |msg: String| -> Result<JValue, JError> {
        Err(JError::new(ErrorKind::InvalidOperation, msg))
    });
    let ctx = minijinja::context! {
        messages => vec![minijinja::context!{ role => "user", content => prompt }],
        add_generation_prompt => true,
        bos_token => bos.unwrap_or(""),
        eos_token => eos.unwrap_or(""),
    };
    env.render_str(template, ctx)
        .map_err(|e| anyhow::anyhow!("rendering the chat template: {e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_hf_style_template() {
        let t = "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'].strip() }}{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";
        let s = render_chat(t, "  Why?  ", Some("<s>"), None).unwrap();
        assert_eq!(s, "<s><|user|>\nWhy?<|assistant|>\n");
        let e =
            render_chat("{{ raise_exception('no system role') }}", "x", None, None).unwrap_err();
        assert!(format!("{e:#}").contains("no system role"));
    }
}
