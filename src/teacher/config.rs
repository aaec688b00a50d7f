//! The teacher's HF `config.json`, parsed and validated into the plain [`LlamaConfig`] the
//! forward pass and the weight checks use. Anything we do not implement is refused here, by
//! name, instead of silently producing wrong logits; every field the forward uses is range
//! checked and every size derived from them is computed with checked arithmetic, before any
//! allocation (a hostile `num_hidden_layers: 1e9` is a named error, not an allocator abort).
//!
//! Logit alignment (`logits_shift`): 0 means position i predicts token i (LLaDA, MDLM, dllm
//! "A2D"); 1 means position i predicts token i+1 (Dream, DiffuLLaMA, RND1). The config may say
//! so with `"logits_shift": 0|1` or dllm's `"right_shift_logits": true|false`; `--logits-shift`
//! overrides it; absent both, 0.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{Map, Value};

/// Largest config.json (or tokenizer_config.json) read; real ones are a few KB.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Upper bounds of the architecture fields: far above any released Llama-family model
/// (Llama 3.1 405B: hidden 16384, 126 layers, 128 heads, intermediate 53248; vocabularies
/// ≤ 262144), low enough that every derived size fits `usize`/`i32` and the tensor list
/// stays small.
pub const LIMITS: &[(&str, u64)] = &[
    ("vocab_size", 1 << 22),
    ("hidden_size", 1 << 17),
    ("intermediate_size", 1 << 20),
    ("num_hidden_layers", 1024),
    ("num_attention_heads", 1024),
    ("num_key_value_heads", 1024),
    ("head_dim", 1024),
    ("max_position_embeddings", 1 << 24),
];

fn limit(field: &str) -> u64 {
    LIMITS
        .iter()
        .find(|(f, _)| *f == field)
        .map_or(u64::MAX, |(_, l)| *l)
}

/// The resolved architecture of a Llama-family checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: Option<usize>,
    /// `is_causal` from the config (absent = causal, as transformers treats it).
    pub is_causal: bool,
    pub mask_token_id: Option<u32>,
    pub pad_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// Logit alignment stated by the config, if any (see the module doc).
    pub logits_shift: Option<u8>,
}

/// Typed, named access to the fields of the config object.
struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    /// A non-negative integer within the field's limit, or absent/null.
    fn uint(&self, name: &str) -> Result<Option<u64>> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let n = v
            .as_u64()
            .with_context(|| format!("field `{name}`: expected a non-negative integer, got {v}"))?;
        let max = limit(name);
        anyhow::ensure!(
            n <= max,
            "field `{name}` = {n} is out of range (at most {max} supported)"
        );
        Ok(Some(n))
    }

    /// A required integer in 1..=limit.
    fn need(&self, name: &str) -> Result<usize> {
        match self.uint(name)? {
            Some(0) => anyhow::bail!("field `{name}` is 0"),
            Some(x) => usize::try_from(x).with_context(|| format!("field `{name}` = {x}")),
            None => anyhow::bail!("missing field `{name}`"),
        }
    }

    fn float(&self, name: &str) -> Result<Option<f64>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .with_context(|| format!("field `{name}`: expected a number, got {v}")),
        }
    }

    fn boolean(&self, name: &str) -> Result<Option<bool>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => anyhow::bail!("field `{name}`: expected true or false, got {v}"),
        }
    }

    fn string(&self, name: &str) -> Result<Option<&str>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => anyhow::bail!("field `{name}`: expected a string, got {v}"),
        }
    }

    /// Token ids (`5` or `[1, 5]`): each an integer that fits u32 and lies below `vocab`.
    fn token_ids(&self, name: &str, vocab: usize, list_ok: bool) -> Result<Vec<u32>> {
        let one = |v: &Value| -> Result<u32> {
            let n = v
                .as_u64()
                .with_context(|| format!("field `{name}`: {v} is not a non-negative integer"))?;
            let id = u32::try_from(n)
                .ok()
                .filter(|&id| (id as usize) < vocab)
                .with_context(|| {
                    format!("field `{name}`: token id {n} is out of range for vocab_size {vocab}")
                })?;
            Ok(id)
        };
        match self.get(name) {
            None => Ok(vec![]),
            Some(Value::Array(a)) if list_ok => a.iter().map(one).collect(),
            Some(v @ Value::Number(_)) => Ok(vec![one(v)?]),
            Some(v) => anyhow::bail!(
                "field `{name}`: expected a token id{}, got {v}",
                if list_ok { " or a list of them" } else { "" }
            ),
        }
    }
}

/// `a · b` or an error naming what overflowed.
fn mul(a: u64, b: u64, what: &str) -> Result<u64> {
    a.checked_mul(b)
        .with_context(|| format!("{what} overflows ({a} × {b})"))
}

/// `architectures` / `model_type` name a Llama (`LlamaForCausalLM`, `"llama"`).
fn check_architecture(f: &Fields) -> Result<()> {
    let architectures: Vec<&str> = match f.get("architectures") {
        None => vec![],
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .with_context(|| format!("field `architectures`: {x} is not a string"))
            })
            .collect::<Result<_>>()?,
        Some(other) => anyhow::bail!("field `architectures`: expected a list, got {other}"),
    };
    let model_type = f.string("model_type")?;
    if !architectures.contains(&"LlamaForCausalLM") && model_type != Some("llama") {
        anyhow::bail!(
            "architectures {architectures:?} / model_type {model_type:?}: only \
             LlamaForCausalLM (model_type \"llama\") is supported"
        );
    }
    Ok(())
}

/// `(num_key_value_heads, head_dim)`: key/value heads dividing the query heads (default: as
/// many), and an even head size within the kernels' limit (default: hidden / heads).
fn heads(f: &Fields, hidden_size: usize, num_heads: usize) -> Result<(usize, usize)> {
    let num_kv_heads = match f.uint("num_key_value_heads")? {
        None => num_heads,
        Some(k) => k as usize,
    };
    if num_kv_heads == 0 || num_kv_heads > num_heads || num_heads % num_kv_heads != 0 {
        anyhow::bail!(
            "num_attention_heads {num_heads} is not a multiple of num_key_value_heads {num_kv_heads}"
        );
    }
    let head_dim = match f.uint("head_dim")? {
        Some(d) => d as usize,
        None => {
            if hidden_size % num_heads != 0 {
                anyhow::bail!("hidden_size {hidden_size} not divisible by num_attention_heads {num_heads} and no head_dim given");
            }
            hidden_size / num_heads
        }
    };
    if head_dim == 0 || head_dim % 2 != 0 {
        anyhow::bail!("head_dim {head_dim} must be even and > 0 for rotary embeddings");
    }
    if head_dim as u64 > limit("head_dim") {
        anyhow::bail!(
            "head_dim {head_dim} (hidden_size / num_attention_heads) is out of range (at most {} supported)",
            limit("head_dim")
        );
    }
    Ok((num_kv_heads, head_dim))
}

/// What the forward does not implement is refused: an activation other than SiLU, biases.
fn check_supported(f: &Fields) -> Result<()> {
    if let Some(act) = f.string("hidden_act")? {
        if act != "silu" {
            anyhow::bail!("hidden_act {act:?}: only \"silu\" is supported");
        }
    }
    if f.boolean("attention_bias")? == Some(true) || f.boolean("mlp_bias")? == Some(true) {
        anyhow::bail!("attention_bias / mlp_bias = true is not supported");
    }
    Ok(())
}

/// The RoPE base: `rope_theta`, or the one inside `rope_scaling` / `rope_parameters` (plain
/// RoPE only), default 10 000; finite and > 1.
fn rope_theta(f: &Fields) -> Result<f64> {
    let mut rope_theta = f.float("rope_theta")?;
    for field in ["rope_scaling", "rope_parameters"] {
        match f.get(field) {
            None => {}
            Some(Value::Object(m)) => {
                let ty = m
                    .get("rope_type")
                    .or_else(|| m.get("type"))
                    .and_then(|t| t.as_str())
                    .unwrap_or("default");
                if ty != "default" {
                    anyhow::bail!("{field}.rope_type {ty:?}: only plain RoPE (\"default\", no scaling) is supported");
                }
                match m.get("rope_theta") {
                    None | Some(Value::Null) => {}
                    Some(t) => {
                        rope_theta = Some(t.as_f64().with_context(|| {
                            format!("field `{field}.rope_theta`: expected a number, got {t}")
                        })?)
                    }
                }
            }
            Some(other) => anyhow::bail!("{field}: unexpected value {other}"),
        }
    }
    let rope_theta = rope_theta.unwrap_or(10_000.0);
    if !(rope_theta.is_finite() && rope_theta > 1.0) {
        anyhow::bail!(
            "field `rope_theta` = {rope_theta}: the RoPE base must be a finite number > 1"
        );
    }
    Ok(rope_theta)
}

/// `logits_shift` (0 or 1) or its spelling `right_shift_logits`; both given must agree.
fn logits_shift(f: &Fields) -> Result<Option<u8>> {
    Ok(
        match (f.uint("logits_shift")?, f.boolean("right_shift_logits")?) {
            (Some(s), _) if s > 1 => anyhow::bail!("logits_shift {s}: must be 0 or 1"),
            (Some(s), Some(r)) if (s == 1) != r => {
                anyhow::bail!("logits_shift {s} contradicts right_shift_logits {r}")
            }
            (Some(s), _) => Some(s as u8),
            (None, Some(r)) => Some(r as u8),
            (None, None) => None,
        },
    )
}

impl LlamaConfig {
    /// Read and validate `config.json`; errors name the file and the field.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = read_bounded(path, MAX_CONFIG_BYTES)?;
        Self::from_json(&text).with_context(|| format!("teacher config {}", path.display()))
    }

    /// Parse and validate a config.json text: the architecture, then each group of fields
    /// in turn (shape, supported features, RoPE, norm, logits shift, special tokens).
    pub fn from_json(text: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(text).context("not a valid config.json")?;
        let obj = v.as_object().context("config.json is not a JSON object")?;
        let f = Fields(obj);
        check_architecture(&f)?;
        let vocab_size = f.need("vocab_size")?;
        let hidden_size = f.need("hidden_size")?;
        let intermediate_size = f.need("intermediate_size")?;
        let num_layers = f.need("num_hidden_layers")?;
        let num_heads = f.need("num_attention_heads")?;
        let (num_kv_heads, head_dim) = heads(&f, hidden_size, num_heads)?;
        check_supported(&f)?;
        let rope_theta = rope_theta(&f)?;
        let rms_norm_eps = f.float("rms_norm_eps")?.unwrap_or(1e-6);
        if !(rms_norm_eps > 0.0 && rms_norm_eps < 1.0 && (rms_norm_eps as f32) > 0.0) {
            anyhow::bail!(
                "field `rms_norm_eps` = {rms_norm_eps}: must be a number in (0, 1) (and not 0 in f32)"
            );
        }
        let max_position_embeddings = match f.uint("max_position_embeddings")? {
            Some(0) => anyhow::bail!("field `max_position_embeddings` is 0"),
            m => m.map(|m| m as usize),
        };
        let logits_shift = logits_shift(&f)?;
        let mask_token_id = f
            .token_ids("mask_token_id", vocab_size, false)?
            .first()
            .copied();
        // `-1` is the old transformers spelling of "no pad token".
        let pad_token_id = if f.get("pad_token_id").and_then(Value::as_i64) == Some(-1) {
            None
        } else {
            f.token_ids("pad_token_id", vocab_size, true)?
                .first()
                .copied()
        };
        let eos_token_ids = f.token_ids("eos_token_id", vocab_size, true)?;
        let c = LlamaConfig {
            vocab_size,
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rope_theta,
            rms_norm_eps,
            tie_word_embeddings: f.boolean("tie_word_embeddings")?.unwrap_or(false),
            max_position_embeddings,
            is_causal: f.boolean("is_causal")?.unwrap_or(true),
            mask_token_id,
            pad_token_id,
            eos_token_ids,
            logits_shift,
        };
        c.parameter_count()?;
        Ok(c)
    }

    /// Number of query heads sharing one key/value head (GQA).
    pub fn kv_groups(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }

    /// Elements of every tensor the forward reads, summed with checked arithmetic (an
    /// error names the size that overflowed); also proves that the per-tensor sizes and the
    /// f32 byte count fit.
    pub fn parameter_count(&self) -> Result<u64> {
        let u = |x: usize| x as u64;
        let (h, i, hd) = (
            u(self.hidden_size),
            u(self.intermediate_size),
            u(self.head_dim),
        );
        let q = mul(u(self.num_heads), hd, "num_attention_heads × head_dim")?;
        let kv = mul(u(self.num_kv_heads), hd, "num_key_value_heads × head_dim")?;
        let attn = mul(
            q.checked_mul(2)
                .and_then(|x| x.checked_add(2 * kv))
                .context("attention width overflows")?,
            h,
            "attention weights",
        )?;
        let mlp = mul(
            mul(i, h, "intermediate_size × hidden_size")?,
            3,
            "MLP weights",
        )?;
        let per_layer = attn
            .checked_add(mlp)
            .and_then(|x| x.checked_add(2 * h))
            .context("layer size overflows")?;
        let layers = mul(
            per_layer,
            u(self.num_layers),
            "num_hidden_layers × layer size",
        )?;
        let embed = mul(u(self.vocab_size), h, "vocab_size × hidden_size")?;
        let heads = if self.tie_word_embeddings { 1 } else { 2 };
        let total = layers
            .checked_add(mul(embed, heads, "embedding + LM head")?)
            .and_then(|x| x.checked_add(h))
            .context("parameter count overflows")?;
        let bytes = mul(total, 4, "f32 weight bytes")?;
        usize::try_from(bytes).context("f32 weight bytes do not fit this machine's usize")?;
        Ok(total)
    }
}

/// Read a small text file whole, refusing one larger than `max` bytes before reading it.
pub fn read_bounded(path: &Path, max: u64) -> Result<String> {
    use std::io::Read;
    let f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut buf = String::new();
    f.take(max + 1)
        .read_to_string(&mut buf)
        .with_context(|| format!("reading {}", path.display()))?;
    anyhow::ensure!(
        buf.len() as u64 <= max,
        "{}: larger than {} MiB, not a config file",
        path.display(),
        max >> 20
    );
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama",
        "vocab_size":130560,"hidden_size":2048,"intermediate_size":6144,"num_hidden_layers":42,
        "num_attention_heads":16,"num_key_value_heads":2,"rope_theta":5000000.0,
        "rms_norm_eps":1e-6,"tie_word_embeddings":false,"is_causal":false,
        "mask_token_id":130082,"eos_token_id":[1,130073],"pad_token_id":1}"#;

    fn with(patch: &str) -> String {
        let mut v: Value = serde_json::from_str(BASE).unwrap();
        let p: Value = serde_json::from_str(patch).unwrap();
        for (k, x) in p.as_object().unwrap() {
            v[k] = x.clone();
        }
        v.to_string()
    }

    #[test]
    fn minicpm5_shape() {
        let c = LlamaConfig::from_json(BASE).unwrap();
        assert_eq!(c.head_dim, 128);
        assert_eq!(c.kv_groups(), 8);
        assert!(!c.is_causal);
        assert_eq!(c.mask_token_id, Some(130082));
        assert_eq!(c.eos_token_ids, vec![1, 130073]);
        assert_eq!(c.logits_shift, None);
        assert_eq!(c.rope_theta, 5e6);
    }

    #[test]
    fn shift_and_rope_parameters() {
        let c = LlamaConfig::from_json(&with(r#"{"right_shift_logits":true}"#)).unwrap();
        assert_eq!(c.logits_shift, Some(1));
        let c = LlamaConfig::from_json(&with(
            r#"{"rope_parameters":{"rope_type":"default","rope_theta":1e4}}"#,
        ))
        .unwrap();
        assert_eq!(c.rope_theta, 1e4);
        let c = LlamaConfig::from_json(&with(r#"{"is_causal":null}"#)).unwrap();
        assert!(c.is_causal, "absent is_causal means causal");
    }

    #[test]
    fn refusals_name_the_field() {
        for (patch, needle) in [
            (r#"{"num_key_value_heads":3}"#, "num_key_value_heads"),
            (r#"{"hidden_act":"gelu"}"#, "hidden_act"),
            (
                r#"{"rope_scaling":{"rope_type":"llama3","factor":8}}"#,
                "rope_scaling",
            ),
            (r#"{"logits_shift":2}"#, "logits_shift"),
            (r#"{"attention_bias":true}"#, "attention_bias"),
            (r#"{"hidden_size":null}"#, "hidden_size"),
            (
                r#"{"architectures":["MistralForCausalLM"],"model_type":"mistral"}"#,
                "LlamaForCausalLM",
            ),
        ] {
            let e = LlamaConfig::from_json(&with(patch)).unwrap_err();
            assert!(format!("{e:#}").contains(needle), "{patch}: {e:#}");
        }
    }

    #[test]
    fn hostile_values_are_refused_by_field() {
        for (patch, needle) in [
            (
                r#"{"num_hidden_layers":10000000}"#,
                "field `num_hidden_layers` = 10000000 is out of range",
            ),
            (r#"{"num_hidden_layers":1000000000}"#, "num_hidden_layers"),
            (
                r#"{"num_hidden_layers":-3}"#,
                "field `num_hidden_layers`: expected a non-negative integer",
            ),
            (r#"{"num_hidden_layers":"42"}"#, "field `num_hidden_layers`"),
            (
                r#"{"num_hidden_layers":4.2e1}"#,
                "field `num_hidden_layers`",
            ),
            (r#"{"head_dim":4611686018427387904}"#, "field `head_dim`"),
            (
                r#"{"num_attention_heads":16,"head_dim":1000000}"#,
                "field `head_dim`",
            ),
            (r#"{"num_key_value_heads":32}"#, "num_key_value_heads"),
            (
                r#"{"vocab_size":18446744073709551615}"#,
                "field `vocab_size`",
            ),
            (
                r#"{"eos_token_id":4294967296}"#,
                "field `eos_token_id`: token id 4294967296 is out of range",
            ),
            (r#"{"eos_token_id":4294967301}"#, "token id 4294967301"),
            (r#"{"eos_token_id":[1,4294967301]}"#, "token id 4294967301"),
            (
                r#"{"eos_token_id":130560}"#,
                "out of range for vocab_size 130560",
            ),
            (r#"{"eos_token_id":"</s>"}"#, "field `eos_token_id`"),
            (r#"{"pad_token_id":4294967296}"#, "field `pad_token_id`"),
            (r#"{"pad_token_id":-2}"#, "field `pad_token_id`"),
            (r#"{"mask_token_id":4294967296}"#, "field `mask_token_id`"),
            (r#"{"mask_token_id":[5]}"#, "field `mask_token_id`"),
            (r#"{"rms_norm_eps":-1e-6}"#, "field `rms_norm_eps`"),
            (r#"{"rms_norm_eps":0}"#, "field `rms_norm_eps`"),
            (r#"{"rms_norm_eps":1e-60}"#, "field `rms_norm_eps`"),
            (r#"{"rope_theta":0}"#, "field `rope_theta`"),
            (r#"{"rope_theta":-10000}"#, "field `rope_theta`"),
            (r#"{"rope_theta":"1e4"}"#, "field `rope_theta`"),
            (
                r#"{"rope_parameters":{"rope_theta":0.0}}"#,
                "field `rope_theta`",
            ),
            (
                r#"{"max_position_embeddings":0}"#,
                "max_position_embeddings",
            ),
            (
                r#"{"max_position_embeddings":1e30}"#,
                "max_position_embeddings",
            ),
            (r#"{"is_causal":"no"}"#, "field `is_causal`"),
            (
                r#"{"tie_word_embeddings":1}"#,
                "field `tie_word_embeddings`",
            ),
            (
                r#"{"architectures":"LlamaForCausalLM","model_type":null}"#,
                "field `architectures`",
            ),
        ] {
            let e = LlamaConfig::from_json(&with(patch)).unwrap_err();
            assert!(format!("{e:#}").contains(needle), "{patch}: {e:#}");
        }
        // Sizes at the limits are accepted and counted without overflow.
        let big = with(
            r#"{"vocab_size":4194304,"hidden_size":131072,"intermediate_size":1048576,
               "num_hidden_layers":1024,"num_attention_heads":1024,"num_key_value_heads":1024,
               "head_dim":1024}"#,
        );
        let c = LlamaConfig::from_json(&big).unwrap();
        assert!(c.parameter_count().unwrap() > 1 << 49);
        // The old "no pad" spelling is not an id.
        let c = LlamaConfig::from_json(&with(r#"{"pad_token_id":-1}"#)).unwrap();
        assert_eq!(c.pad_token_id, None);
    }

    #[test]
    fn oversized_config_file_is_refused_before_reading() {
        let (_d, p) = crate::testkit::temp_path("config.json");
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(MAX_CONFIG_BYTES + 1).unwrap();
        let e = LlamaConfig::from_file(&p).unwrap_err();
        assert!(format!("{e:#}").contains("larger than 16 MiB"), "{e:#}");
    }
}
