//! The teacher's HF `config.json`, parsed and validated into the plain [`LlamaConfig`] the
//! forward pass and the weight checks use. Anything we do not implement is refused here, by
//! name, instead of silently producing wrong logits.
//!
//! Logit alignment (`logits_shift`): 0 means position i predicts token i (LLaDA, MDLM, dllm
//! "A2D"); 1 means position i predicts token i+1 (Dream, DiffuLLaMA, RND1). The config may say
//! so with `"logits_shift": 0|1` or dllm's `"right_shift_logits": true|false`; `--logits-shift`
//! overrides it; absent both, 0.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::Value;

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

#[derive(Deserialize)]
struct Raw {
    architectures: Option<Vec<String>>,
    model_type: Option<String>,
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rope_theta: Option<f64>,
    rope_scaling: Option<Value>,
    rope_parameters: Option<Value>,
    rms_norm_eps: Option<f64>,
    tie_word_embeddings: Option<bool>,
    max_position_embeddings: Option<usize>,
    is_causal: Option<bool>,
    hidden_act: Option<String>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    mask_token_id: Option<u32>,
    pad_token_id: Option<Value>,
    eos_token_id: Option<Value>,
    logits_shift: Option<u8>,
    right_shift_logits: Option<bool>,
}

fn ids(v: &Option<Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_u64().map(|x| x as u32))
            .collect(),
        _ => vec![],
    }
}

impl LlamaConfig {
    /// Read and validate `config.json`; errors name the file and the field.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("teacher config {}", path.display()))
    }

    pub fn from_json(text: &str) -> Result<Self> {
        let raw: Raw = serde_json::from_str(text).context("not a valid config.json")?;
        let llama_arch = raw
            .architectures
            .as_ref()
            .is_some_and(|a| a.iter().any(|s| s == "LlamaForCausalLM"));
        let llama_type = raw.model_type.as_deref() == Some("llama");
        if !llama_arch && !llama_type {
            anyhow::bail!(
                "architectures {:?} / model_type {:?}: only LlamaForCausalLM (model_type \"llama\") is supported",
                raw.architectures,
                raw.model_type
            );
        }
        let need = |v: Option<usize>, name: &str| -> Result<usize> {
            match v {
                Some(0) => anyhow::bail!("field `{name}` is 0"),
                Some(x) => Ok(x),
                None => anyhow::bail!("missing field `{name}`"),
            }
        };
        let hidden_size = need(raw.hidden_size, "hidden_size")?;
        let num_heads = need(raw.num_attention_heads, "num_attention_heads")?;
        let num_kv_heads = raw.num_key_value_heads.unwrap_or(num_heads);
        if num_kv_heads == 0 || num_heads % num_kv_heads != 0 {
            anyhow::bail!(
                "num_attention_heads {num_heads} is not a multiple of num_key_value_heads {num_kv_heads}"
            );
        }
        let head_dim = match raw.head_dim {
            Some(d) => d,
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
        if let Some(act) = raw.hidden_act.as_deref() {
            if act != "silu" {
                anyhow::bail!("hidden_act {act:?}: only \"silu\" is supported");
            }
        }
        if raw.attention_bias == Some(true) || raw.mlp_bias == Some(true) {
            anyhow::bail!("attention_bias / mlp_bias = true is not supported");
        }
        let mut rope_theta = raw.rope_theta;
        for (field, v) in [
            ("rope_scaling", &raw.rope_scaling),
            ("rope_parameters", &raw.rope_parameters),
        ] {
            match v {
                None | Some(Value::Null) => {}
                Some(Value::Object(m)) => {
                    let ty = m
                        .get("rope_type")
                        .or_else(|| m.get("type"))
                        .and_then(|t| t.as_str())
                        .unwrap_or("default");
                    if ty != "default" {
                        anyhow::bail!("{field}.rope_type {ty:?}: only plain RoPE (\"default\", no scaling) is supported");
                    }
                    if let Some(t) = m.get("rope_theta").and_then(|t| t.as_f64()) {
                        rope_theta = Some(t);
                    }
                }
                Some(other) => anyhow::bail!("{field}: unexpected value {other}"),
            }
        }
        let logits_shift = match (raw.logits_shift, raw.right_shift_logits) {
            (Some(s), _) if s > 1 => anyhow::bail!("logits_shift {s}: must be 0 or 1"),
            (Some(s), Some(r)) if (s == 1) != r => {
                anyhow::bail!("logits_shift {s} contradicts right_shift_logits {r}")
            }
            (Some(s), _) => Some(s),
            (None, Some(r)) => Some(r as u8),
            (None, None) => None,
        };
        let pad = ids(&raw.pad_token_id);
        Ok(LlamaConfig {
            vocab_size: need(raw.vocab_size, "vocab_size")?,
            hidden_size,
            intermediate_size: need(raw.intermediate_size, "intermediate_size")?,
            num_layers: need(raw.num_hidden_layers, "num_hidden_layers")?,
            num_heads,
            num_kv_heads,
            head_dim,
            rope_theta: rope_theta.unwrap_or(10_000.0),
            rms_norm_eps: raw.rms_norm_eps.unwrap_or(1e-6),
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            max_position_embeddings: raw.max_position_embeddings,
            is_causal: raw.is_causal.unwrap_or(true),
            mask_token_id: raw.mask_token_id,
            pad_token_id: pad.first().copied(),
            eos_token_ids: ids(&raw.eos_token_id),
            logits_shift,
        })
    }

    /// Number of query heads sharing one key/value head (GQA).
    pub fn kv_groups(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }
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
}
