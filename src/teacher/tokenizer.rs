//! The teacher's tokenizer side: `tokenizer.json` for ids, `tokenizer_config.json` for the
//! special tokens and the chat template (rendered with minijinja, a user message plus
//! `add_generation_prompt=true`), and the letter ids A–J of the MCQ answer slot.
//!
//! Rendered text is encoded without adding special tokens: the chat template writes any BOS
//! it wants itself, so the ids are exactly the rendered text's — except that the bytes which
//! came from the prompt (data) hold no added token unless `--special-tokens-in-text split`:
//! [`TeacherTokenizer::render_ranges`] finds them by rendering a second time with the prompt
//! between two sentinel noncharacters (U+FDD0 / U+FDD1; the Python string methods templates
//! call see through them) and checking that, with the sentinels removed, that rendering is
//! byte-identical to the plain one; [`crate::added_text::ranged`] then matches template
//! bytes against all added tokens and prompt bytes against the non-marker ones only.

use std::path::Path;

use anyhow::{Context, Result};
use minijinja::value::Value as JValue;
use minijinja::{Environment, Error as JError, ErrorKind};
use serde_json::Value;
use tokenizers::Tokenizer;

use crate::added_text::ranged::Ranged;
use crate::added_text::Hit;

/// Marks the start of the prompt in the tracking rendering (a noncharacter: never in text).
const DATA_OPEN: char = '\u{FDD0}';
/// Marks the end of the prompt in the tracking rendering.
const DATA_CLOSE: char = '\u{FDD1}';

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
    /// The added-token tries (prompt text stays text).
    pub ranged: Ranged,
}

/// `"tok"` or `{"content": "tok", ...}` as found in tokenizer_config.json.
fn token_str(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => m.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// Largest tokenizer.json accepted (real ones are at most a few tens of MB).
pub const MAX_TOKENIZER_BYTES: u64 = 1 << 30;

/// Instructions one chat-template rendering may execute (minijinja fuel). A real HF
/// template spends a few hundred on a single user turn; a template looping without end (or
/// nested loops of 10^10 iterations) stops here with an error instead of running until killed.
pub const TEMPLATE_FUEL: u64 = 5_000_000;

/// Longest rendered prompt accepted from the template (bytes), beyond the prompt itself.
pub const MAX_RENDERED_EXTRA: usize = 1 << 20;

/// `bos_token`/`eos_token`/…: a string, `{"content": …}`, or absent/null; anything else is an
/// error naming the field.
fn token_field(cfg: &Value, name: &str, file: &Path) -> Result<Option<String>> {
    match cfg.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => token_str(Some(v)).map(Some).with_context(|| {
            format!(
                "{}: field `{name}` must be a string or {{\"content\": string}}, got {v}",
                file.display()
            )
        }),
    }
}

impl TeacherTokenizer {
    pub fn open(dir: &Path) -> Result<Self> {
        let tj = dir.join("tokenizer.json");
        let len = std::fs::metadata(&tj)
            .with_context(|| format!("{}: cannot load tokenizer", tj.display()))?
            .len();
        anyhow::ensure!(
            len <= MAX_TOKENIZER_BYTES,
            "{}: {len} bytes, larger than the {} MiB a tokenizer may have",
            tj.display(),
            MAX_TOKENIZER_BYTES >> 20
        );
        let tok = Tokenizer::from_file(&tj)
            .map_err(|e| anyhow::anyhow!("{}: cannot load tokenizer: {e}", tj.display()))?;
        // tokenizer_config.json read once, checked (bounded, valid JSON, an object).
        let files = crate::tokenize::files::TokenizerFiles::open_checked(dir, |p| {
            super::config::read_bounded(p, super::config::MAX_CONFIG_BYTES)
        })?;
        let tc = files.config_path.clone();
        let cfg: Value = files.config.map(|c| c.raw).unwrap_or(Value::Null);
        let bad = |what: String| anyhow::anyhow!("{}: field `chat_template` {what}", tc.display());
        let chat_template = match cfg.get("chat_template") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            // A list of named templates: take "default" (as transformers does).
            Some(Value::Array(a)) => {
                let t = a
                    .iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                    .ok_or_else(|| bad("is a list without an entry named \"default\"".into()))?;
                match t.get("template") {
                    Some(Value::String(s)) => Some(s.clone()),
                    other => {
                        return Err(bad(format!(
                            "entry \"default\": `template` must be a string, got {}",
                            other.unwrap_or(&Value::Null)
                        )))
                    }
                }
            }
            Some(other) => {
                return Err(bad(format!(
                    "must be a string (or a list of named templates), got {other}"
                )))
            }
        };
        let chat_template = match chat_template {
            Some(t) => Some(t),
            None => {
                let jf = dir.join("chat_template.jinja");
                if jf.is_file() {
                    Some(super::config::read_bounded(
                        &jf,
                        super::config::MAX_CONFIG_BYTES,
                    )?)
                } else {
                    None
                }
            }
        };
        if let Some(t) = &chat_template {
            // Syntax errors surface now, naming the file, not at the first prompt.
            let env = template_env();
            env.template_from_str(t).map_err(|e| {
                anyhow::anyhow!("{}: chat template does not parse: {e:#}", tc.display())
            })?;
        }
        let id = |s: &Option<String>| s.as_deref().and_then(|s| tok.token_to_id(s));
        let bos_token = token_field(&cfg, "bos_token", &tc)?;
        let eos_token = token_field(&cfg, "eos_token", &tc)?;
        let pad_token = token_field(&cfg, "pad_token", &tc)?;
        let mask_token = token_field(&cfg, "mask_token", &tc)?;
        Ok(TeacherTokenizer {
            ranged: Ranged::new(&tok)?,
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

    /// The prompt as the model sees it ([`Self::render`]) and the byte ranges of it that came
    /// from `prompt`. Without a template: all of it. With one: found by a second rendering
    /// with the prompt between sentinels, accepted only when it equals the first with the
    /// sentinels removed; failing that, the single occurrence of the prompt (or of its trimmed
    /// text) in the rendering; failing that, none (`None`), for the caller to refuse when the
    /// prompt holds added-token text.
    pub fn render_ranges(
        &self,
        prompt: &str,
        use_template: bool,
    ) -> Result<(String, Option<Vec<std::ops::Range<usize>>>)> {
        let rendered = self.render(prompt, use_template)?;
        let Some(t) = self.chat_template.as_ref().filter(|_| use_template) else {
            let n = rendered.len();
            return Ok((rendered, Some(vec![0..n])));
        };
        if !prompt.contains([DATA_OPEN, DATA_CLOSE]) {
            let marked = format!("{DATA_OPEN}{prompt}{DATA_CLOSE}");
            if let Ok(r) = render_chat(
                t,
                &marked,
                self.bos_token.as_deref(),
                self.eos_token.as_deref(),
            ) {
                let mut plain = String::with_capacity(r.len());
                let mut ranges = Vec::new();
                let mut open = None;
                let mut ok = true;
                for c in r.chars() {
                    match c {
                        DATA_OPEN if open.is_none() => open = Some(plain.len()),
                        DATA_CLOSE => match open.take() {
                            Some(a) => {
                                if plain.len() > a {
                                    ranges.push(a..plain.len());
                                }
                            }
                            None => ok = false,
                        },
                        DATA_OPEN => ok = false,
                        c => plain.push(c),
                    }
                }
                if ok && open.is_none() && plain == rendered {
                    return Ok((rendered, Some(ranges)));
                }
            }
        }
        let found = [prompt, prompt.trim()].into_iter().find_map(|p| {
            let mut it = rendered.match_indices(p);
            match (it.next(), it.next()) {
                (Some((a, _)), None) if !p.is_empty() => Some(vec![a..a + p.len()]),
                _ => None,
            }
        });
        Ok((rendered, found))
    }

    /// Ids of `prompt` as the model sees it: rendered, the template's own text encoded as it
    /// is, the prompt's bytes with marker added tokens matched only when `!plain`. Marker
    /// contents found in the prompt's bytes go to `hits` (offsets in the rendering, returned
    /// too). A prompt holding added-token text whose bytes cannot be told apart in the
    /// rendering is an error.
    pub fn encode_prompt(
        &self,
        prompt: &str,
        use_template: bool,
        plain: bool,
        hits: &mut Vec<Hit>,
    ) -> Result<(Vec<u32>, String)> {
        let (rendered, ranges) = self.render_ranges(prompt, use_template)?;
        let ranges = match ranges {
            Some(r) => r,
            None => {
                let mut probe = Vec::new();
                let n = prompt.len();
                self.ranged
                    .encode(&self.tok, prompt, &[0..n], true, &mut probe)?;
                anyhow::ensure!(
                    probe.is_empty(),
                    "the prompt holds added-token text ({:?}) and the chat template transforms it \
                     so that its bytes cannot be found in the rendering; pass --no-chat-template \
                     or --special-tokens-in-text split",
                    self.ranged.tries.name(probe[0].id)
                );
                Vec::new()
            }
        };
        let ids = self
            .ranged
            .encode(&self.tok, &rendered, &ranges, plain, hits)?;
        Ok((ids, rendered))
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
    let whole = v
        .as_str()
        .ok_or_else(|| JError::from(ErrorKind::UnknownMethod))?;
    // A prompt between the tracking sentinels (TeacherTokenizer::render_ranges): the methods
    // act on what is inside and keep the sentinels around the result.
    let (pre, s, post) = match whole
        .strip_prefix(DATA_OPEN)
        .and_then(|x| x.strip_suffix(DATA_CLOSE))
    {
        Some(inner) => (DATA_OPEN.to_string(), inner, DATA_CLOSE.to_string()),
        None => (String::new(), whole, String::new()),
    };
    let wrap = |x: &str| JValue::from(format!("{pre}{x}{post}"));
    let arg = |i: usize| args.get(i).and_then(|a| a.as_str());
    Ok(match method {
        "strip" => wrap(match arg(0) {
            Some(c) => s.trim_matches(|x| c.contains(x)),
            None => s.trim(),
        }),
        "lstrip" => wrap(match arg(0) {
            Some(c) => s.trim_start_matches(|x| c.contains(x)),
            None => s.trim_start(),
        }),
        "rstrip" => wrap(match arg(0) {
            Some(c) => s.trim_end_matches(|x| c.contains(x)),
            None => s.trim_end(),
        }),
        "startswith" => JValue::from(arg(0).is_some_and(|p| s.starts_with(p))),
        "endswith" => JValue::from(arg(0).is_some_and(|p| s.ends_with(p))),
        "upper" => wrap(&s.to_uppercase()),
        "lower" => wrap(&s.to_lowercase()),
        _ => return Err(JError::from(ErrorKind::UnknownMethod)),
    })
}

/// The minijinja environment chat templates run in: Python string methods,
/// `raise_exception`, and a fuel limit.
fn template_env() -> Environment<'static> {
    let mut env = Environment::new();
    // No debug snapshot in errors: its source-span renderer panics on some spans (fuzz
    // chat_template, seed 1, case 3533: end column before start column), and the error's
    // message and line are all a user needs.
    env.set_debug(false);
    env.set_unknown_method_callback(py_methods);
    env.add_function("raise_exception", |msg: String| -> Result<JValue, JError> {
        Err(JError::new(ErrorKind::InvalidOperation, msg))
    });
    env.set_fuel(Some(TEMPLATE_FUEL));
    env
}

/// A writer that refuses to grow past `max` bytes.
struct Bounded {
    buf: Vec<u8>,
    max: usize,
    over: bool,
}

impl std::io::Write for Bounded {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().saturating_add(b.len()) > self.max {
            self.over = true;
            return Err(std::io::Error::other("rendered text over the limit"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Render a single-turn chat (one user message, generation prompt on). A template that runs
/// out of fuel ([`TEMPLATE_FUEL`]) or writes more than [`MAX_RENDERED_EXTRA`] bytes beyond
/// the prompt is an error.
pub fn render_chat(
    template: &str,
    prompt: &str,
    bos: Option<&str>,
    eos: Option<&str>,
) -> Result<String> {
    let env = template_env();
    let ctx = minijinja::context! {
        messages => vec![minijinja::context!{ role => "user", content => prompt }],
        add_generation_prompt => true,
        bos_token => bos.unwrap_or(""),
        eos_token => eos.unwrap_or(""),
    };
    let max = prompt
        .len()
        .saturating_mul(4)
        .saturating_add(MAX_RENDERED_EXTRA);
    let too_long = || {
        anyhow::anyhow!(
            "the chat template of tokenizer_config.json renders more than {max} bytes for a {}-byte prompt",
            prompt.len()
        )
    };
    // Rendered into a bounded buffer: the limit holds while the template runs (fuel alone
    // lets a loop emit a long literal millions of times).
    let mut w = Bounded {
        buf: Vec::new(),
        max,
        over: false,
    };
    let rendered = env
        .template_from_str(template)
        .and_then(|t| t.render_captured_to(ctx, &mut w).map(|_| ()));
    if let Err(e) = rendered {
        if w.over {
            return Err(too_long());
        }
        let why = if e.kind() == ErrorKind::OutOfFuel {
            format!(
                " (the template ran more than {TEMPLATE_FUEL} instructions for one message: \
                 an endless or deeply nested loop)"
            )
        } else {
            String::new()
        };
        anyhow::bail!("rendering the chat template of tokenizer_config.json{why}: {e:#}");
    }
    let out = String::from_utf8(w.buf)
        .map_err(|e| anyhow::anyhow!("the chat template rendered invalid UTF-8: {e}"))?;
    Ok(out)
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

    #[test]
    fn string_methods_see_through_the_tracking_sentinels() {
        let t =
            "[{{ messages[0]['content'].strip() }}|{{ messages[0]['content'].startswith('Why') }}]";
        let plain = render_chat(t, "Why?  ", None, None).unwrap();
        let marked = render_chat(t, "\u{FDD0}Why?  \u{FDD1}", None, None).unwrap();
        assert_eq!(plain, "[Why?|True]");
        assert_eq!(marked, "[\u{FDD0}Why?\u{FDD1}|True]");
    }
}
