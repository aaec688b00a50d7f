//! The teacher checkpoint as the GPU engine sees it: `config.json` (Llama shape) and the
//! safetensors weights (one file or sharded with `model.safetensors.index.json`), validated
//! by name, shape and dtype before anything is uploaded, converted to bf16 and fused where
//! the engine wants it ([q;k;v] and [gate;up] become one GEMM each).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

/// The fields of an HF Llama `config.json` the engine uses.
#[derive(Debug, Clone, Deserialize)]
pub struct LlamaConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    pub intermediate_size: usize,
    pub vocab_size: usize,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default = "default_theta")]
    pub rope_theta: f64,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub mask_token_id: Option<u32>,
    #[serde(default)]
    pub is_causal: Option<bool>,
}

fn default_eps() -> f64 {
    1e-6
}
fn default_theta() -> f64 {
    10000.0
}

impl LlamaConfig {
    pub fn load(dir: &Path) -> Result<Self> {
        let p = dir.join("config.json");
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        let mut v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
        // transformers 5 may nest rope_theta under rope_parameters.
        if v.get("rope_theta").is_none() {
            if let Some(t) = v.pointer("/rope_parameters/rope_theta").cloned() {
                v["rope_theta"] = t;
            }
        }
        let c: LlamaConfig =
            serde_json::from_value(v).with_context(|| format!("parsing {}", p.display()))?;
        c.validate()
            .with_context(|| format!("in {}", p.display()))?;
        Ok(c)
    }
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads)
    }
    pub fn validate(&self) -> Result<()> {
        let (nh, kv, hd) = (self.num_attention_heads, self.kv_heads(), self.head_dim());
        if nh == 0 || kv == 0 || nh % kv != 0 {
            bail!("num_attention_heads {nh} must be a multiple of num_key_value_heads {kv}");
        }
        if ![32, 64, 128].contains(&hd) {
            bail!("head_dim {hd}: the GPU attention kernel supports 32, 64 and 128");
        }
        if self.hidden_size % 8 != 0 || self.intermediate_size % 8 != 0 {
            bail!("hidden_size and intermediate_size must be multiples of 8");
        }
        Ok(())
    }
}

/// Safetensors files of a checkpoint, memory-mapped, with a name → file map.
pub struct Checkpoint {
    maps: Vec<(PathBuf, memmap2::Mmap)>,
    index: BTreeMap<String, usize>,
}

impl Checkpoint {
    pub fn open(dir: &Path) -> Result<Self> {
        let idx = dir.join("model.safetensors.index.json");
        let files: Vec<PathBuf> = if idx.exists() {
            let v: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(&idx)
                    .with_context(|| format!("reading {}", idx.display()))?,
            )
            .with_context(|| format!("parsing {}", idx.display()))?;
            let map = v["weight_map"]
                .as_object()
                .with_context(|| format!("{}: no weight_map", idx.display()))?;
            let mut f: Vec<String> = map
                .values()
                .filter_map(|s| s.as_str().map(String::from))
                .collect();
            f.sort();
            f.dedup();
            f.into_iter().map(|n| dir.join(n)).collect()
        } else {
            vec![dir.join("model.safetensors")]
        };
        let mut maps = Vec::new();
        let mut index = BTreeMap::new();
        for (i, p) in files.iter().enumerate() {
            let f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
            let m = unsafe { memmap2::Mmap::map(&f) }
                .with_context(|| format!("mapping {}", p.display()))?;
            let names: Vec<String> = {
                let st = SafeTensors::deserialize(&m)
                    .with_context(|| format!("{}: not a safetensors file", p.display()))?;
                st.names().into_iter().map(String::from).collect()
            };
            for n in names {
                index.insert(n, i);
            }
            maps.push((p.clone(), m));
        }
        Ok(Self { maps, index })
    }

    pub fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The tensor `name` as little-endian bf16 bytes, checked against `shape`.
    pub fn bf16(&self, name: &str, shape: &[usize]) -> Result<Cow<'_, [u8]>> {
        let &fi = self
            .index
            .get(name)
            .with_context(|| format!("tensor {name} missing from the checkpoint"))?;
        let (path, map) = &self.maps[fi];
        let st =
            SafeTensors::deserialize(map).with_context(|| format!("reading {}", path.display()))?;
        let t = st
            .tensor(name)
            .with_context(|| format!("{}: tensor {name}", path.display()))?;
        if t.shape() != shape {
            bail!(
                "{}: tensor {name} has shape {:?}, the config implies {:?}",
                path.display(),
                t.shape(),
                shape
            );
        }
        let data = t.data();
        // Re-borrow from the map so the returned slice lives as long as `self`.
        let off = data.as_ptr() as usize - map.as_ptr() as usize;
        let raw: &[u8] = &map[off..off + data.len()];
        Ok(match t.dtype() {
            Dtype::BF16 => Cow::Borrowed(raw),
            Dtype::F16 => Cow::Owned(
                raw.chunks_exact(2)
                    .flat_map(|c| {
                        bf16::from_f32(f16::from_le_bytes([c[0], c[1]]).to_f32()).to_le_bytes()
                    })
                    .collect(),
            ),
            Dtype::F32 => Cow::Owned(
                raw.chunks_exact(4)
                    .flat_map(|c| {
                        bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes()
                    })
                    .collect(),
            ),
            d => bail!(
                "{}: tensor {name} has dtype {d:?}; expected bf16, f16 or f32",
                path.display()
            ),
        })
    }

    /// Every tensor name the engine reads for `cfg`, with its shape.
    pub fn expected(cfg: &LlamaConfig) -> Vec<(String, Vec<usize>)> {
        let (h, i, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
        let (qd, kd) = (
            cfg.num_attention_heads * cfg.head_dim(),
            cfg.kv_heads() * cfg.head_dim(),
        );
        let mut e = vec![("model.embed_tokens.weight".to_string(), vec![v, h])];
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            e.push((format!("{p}.input_layernorm.weight"), vec![h]));
            e.push((format!("{p}.self_attn.q_proj.weight"), vec![qd, h]));
            e.push((format!("{p}.self_attn.k_proj.weight"), vec![kd, h]));
            e.push((format!("{p}.self_attn.v_proj.weight"), vec![kd, h]));
            e.push((format!("{p}.self_attn.o_proj.weight"), vec![h, qd]));
            e.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
            e.push((format!("{p}.mlp.gate_proj.weight"), vec![i, h]));
            e.push((format!("{p}.mlp.up_proj.weight"), vec![i, h]));
            e.push((format!("{p}.mlp.down_proj.weight"), vec![h, i]));
        }
        e.push(("model.norm.weight".to_string(), vec![h]));
        if !cfg.tie_word_embeddings {
            e.push(("lm_head.weight".to_string(), vec![v, h]));
        }
        e
    }

    /// Check every expected tensor's presence and shape before any upload.
    pub fn validate(&self, cfg: &LlamaConfig) -> Result<()> {
        for (name, shape) in Self::expected(cfg) {
            let &fi = self
                .index
                .get(&name)
                .with_context(|| format!("tensor {name} missing from the checkpoint"))?;
            let (path, map) = &self.maps[fi];
            let st = SafeTensors::deserialize(map)?;
            let t = st.tensor(&name)?;
            if t.shape() != shape.as_slice() {
                bail!(
                    "{}: tensor {name} has shape {:?}, the config implies {:?}",
                    path.display(),
                    t.shape(),
                    shape
                );
            }
            if !matches!(t.dtype(), Dtype::BF16 | Dtype::F16 | Dtype::F32) {
                bail!(
                    "{}: tensor {name} has dtype {:?}; expected bf16, f16 or f32",
                    path.display(),
                    t.dtype()
                );
            }
        }
        Ok(())
    }

    /// The weight files, in file-name order.
    pub fn files(&self) -> Vec<PathBuf> {
        self.maps.iter().map(|(p, _)| p.clone()).collect()
    }
}
