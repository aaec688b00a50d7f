//! The teacher's safetensors weights — one `model.safetensors` or shards listed by
//! `model.safetensors.index.json` — memory-mapped, with every tensor's name, shape and dtype
//! checked against the config before any compute. Errors name the tensor and the file.
//!
//! `weights_sha256` identifies the weights in distilled.json: for a single file it is that
//! file's sha256; for shards it is the sha256 of the text `"<sha256>  <file name>\n"` for each
//! shard, in file-name order (like `sha256sum` output of the shard set).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use memmap2::Mmap;
use safetensors::tensor::{Dtype, Metadata, SafeTensors, TensorInfo};

use super::config::LlamaConfig;

pub const SINGLE: &str = "model.safetensors";
pub const INDEX: &str = "model.safetensors.index.json";

struct Shard {
    path: PathBuf,
    map: Mmap,
    /// Byte offset of the data section (8 + header length).
    data_start: usize,
    meta: Metadata,
}

/// The memory-mapped weight files of one checkpoint.
pub struct Weights {
    shards: Vec<Shard>,
    /// tensor name → shard index.
    names: BTreeMap<String, usize>,
    pub sha256: String,
}

/// Every tensor the forward pass reads, with its expected shape, in checkpoint naming.
pub fn expected_tensors(cfg: &LlamaConfig) -> Vec<(String, Vec<usize>)> {
    let (h, hd, i) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
    let mut v = vec![(
        "model.embed_tokens.weight".to_string(),
        vec![cfg.vocab_size, h],
    )];
    for l in 0..cfg.num_layers {
        let p = format!("model.layers.{l}");
        v.push((format!("{p}.input_layernorm.weight"), vec![h]));
        v.push((
            format!("{p}.self_attn.q_proj.weight"),
            vec![cfg.num_heads * hd, h],
        ));
        v.push((
            format!("{p}.self_attn.k_proj.weight"),
            vec![cfg.num_kv_heads * hd, h],
        ));
        v.push((
            format!("{p}.self_attn.v_proj.weight"),
            vec![cfg.num_kv_heads * hd, h],
        ));
        v.push((
            format!("{p}.self_attn.o_proj.weight"),
            vec![h, cfg.num_heads * hd],
        ));
        v.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        v.push((format!("{p}.mlp.gate_proj.weight"), vec![i, h]));
        v.push((format!("{p}.mlp.up_proj.weight"), vec![i, h]));
        v.push((format!("{p}.mlp.down_proj.weight"), vec![h, i]));
    }
    v.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg.tie_word_embeddings {
        v.push(("lm_head.weight".to_string(), vec![cfg.vocab_size, h]));
    }
    v
}

fn open_shard(path: &Path) -> Result<Shard> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: the checkpoint is read-only input; a concurrent writer would be a user error
    // that at worst yields wrong numbers, which the sha256 recorded in the output exposes.
    let map = unsafe { Mmap::map(&f) }.with_context(|| format!("mapping {}", path.display()))?;
    // The one header reader (fetch and audit read headers through it too), then the crate's.
    crate::model::safetensors_header::check_bytes(&map)
        .with_context(|| format!("{}: not a valid safetensors file", path.display()))?;
    let (n, meta) = SafeTensors::read_metadata(&map)
        .map_err(|e| anyhow::anyhow!("{}: not a valid safetensors file: {e}", path.display()))?;
    Ok(Shard {
        path: path.to_path_buf(),
        map,
        data_start: 8 + n,
        meta,
    })
}

impl Weights {
    /// Open the weights of the checkpoint directory `dir` and validate them against `cfg`.
    pub fn open(dir: &Path, cfg: &LlamaConfig) -> Result<Self> {
        let single = dir.join(SINGLE);
        let index = dir.join(INDEX);
        let mut shards = Vec::new();
        let mut names = BTreeMap::new();
        let sha256;
        if single.is_file() {
            let s = open_shard(&single)?;
            for (name, _) in s.meta.tensors() {
                names.insert(name, 0);
            }
            sha256 = crate::util::sha256_file(&single)?;
            shards.push(s);
        } else if index.is_file() {
            let idx = crate::model::checkpoint::ShardIndex::read(&index)?;
            let (map, files) = (&idx.weight_map, idx.files());
            let mut listing = String::new();
            for (k, file) in files.iter().enumerate() {
                let path = dir.join(file);
                let s = open_shard(&path)?;
                listing.push_str(&format!("{}  {file}\n", crate::util::sha256_file(&path)?));
                for (name, _) in s.meta.tensors() {
                    if let Some(prev) = names.insert(name.clone(), k) {
                        anyhow::bail!(
                            "tensor `{name}` appears in both {} and {}",
                            files[prev],
                            file
                        );
                    }
                }
                shards.push(s);
            }
            for (name, file) in map {
                match names.get(name) {
                    Some(&k) if files[k] == *file => {}
                    Some(&k) => anyhow::bail!(
                        "{}: tensor `{name}` is listed in {file} but stored in {}",
                        index.display(),
                        files[k]
                    ),
                    None => anyhow::bail!(
                        "{}: tensor `{name}` is listed in {file} but not stored there",
                        index.display()
                    ),
                }
            }
            sha256 = crate::util::sha256_hex(listing.as_bytes());
        } else {
            anyhow::bail!("{}: neither {SINGLE} nor {INDEX} found", dir.display());
        }
        let w = Weights {
            shards,
            names,
            sha256,
        };
        w.validate(cfg)?;
        Ok(w)
    }

    fn info(&self, name: &str) -> Option<(&Shard, &TensorInfo)> {
        let s = &self.shards[*self.names.get(name)?];
        Some((s, s.meta.info(name)?))
    }

    /// Names, shapes and dtypes against the config; unknown tensors are refused too (a
    /// checkpoint with extra layers or biases would otherwise be half-loaded).
    fn validate(&self, cfg: &LlamaConfig) -> Result<()> {
        let expected = expected_tensors(cfg);
        for (name, shape) in &expected {
            let (shard, info) = self.info(name).with_context(|| {
                format!(
                    "missing tensor `{name}` (config: {} layers)",
                    cfg.num_layers
                )
            })?;
            if &info.shape != shape {
                anyhow::bail!(
                    "tensor `{name}` in {}: shape {:?}, config.json implies {:?}",
                    shard.path.display(),
                    info.shape,
                    shape
                );
            }
            if !matches!(info.dtype, Dtype::BF16 | Dtype::F16 | Dtype::F32) {
                anyhow::bail!(
                    "tensor `{name}` in {}: dtype {:?}, expected BF16, F16 or F32",
                    shard.path.display(),
                    info.dtype
                );
            }
        }
        let known: std::collections::HashSet<&str> =
            expected.iter().map(|(n, _)| n.as_str()).collect();
        for (name, &k) in &self.names {
            let benign = name.ends_with("rotary_emb.inv_freq")
                || (cfg.tie_word_embeddings && name == "lm_head.weight");
            if !known.contains(name.as_str()) && !benign {
                anyhow::bail!(
                    "unexpected tensor `{name}` in {} (not part of a {}-layer Llama of this config)",
                    self.shards[k].path.display(),
                    cfg.num_layers
                );
            }
        }
        Ok(())
    }

    /// The tensor's stored bytes, its header entry and its file.
    fn raw(&self, name: &str) -> Result<(&[u8], &TensorInfo, &Path)> {
        let (s, info) = self
            .info(name)
            .with_context(|| format!("missing tensor `{name}`"))?;
        let (a, b) = info.data_offsets;
        Ok((&s.map[s.data_start + a..s.data_start + b], info, &s.path))
    }

    /// The tensor's values widened to f32, with its shape. A NaN or infinite value is an
    /// error naming the tensor, the file and the element (such weights would only produce
    /// non-finite logits).
    pub fn f32(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>)> {
        let (bytes, info, path) = self.raw(name)?;
        let Some(v) = widen(bytes, info.dtype) else {
            anyhow::bail!("tensor `{name}`: unsupported dtype {:?}", info.dtype);
        };
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(non_finite(name, path, &info.shape, i, v[i]));
        }
        Ok((v, info.shape.clone()))
    }

    /// The tensor as little-endian bf16 bytes (borrowed when stored as bf16, converted from
    /// f16/f32 otherwise), with its shape: what the GPU engine uploads. A value that is (or
    /// rounds to) NaN/inf in bf16 is an error naming the tensor, as in [`Self::f32`].
    pub fn bf16(&self, name: &str) -> Result<(std::borrow::Cow<'_, [u8]>, Vec<usize>)> {
        let (bytes, info, path) = self.raw(name)?;
        let out = match info.dtype {
            Dtype::BF16 => std::borrow::Cow::Borrowed(bytes),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .flat_map(|c| {
                    half::bf16::from_f32(half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                        .to_le_bytes()
                })
                .collect(),
            Dtype::F32 => bytes
                .chunks_exact(4)
                .flat_map(|c| {
                    half::bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes()
                })
                .collect(),
            d => anyhow::bail!("tensor `{name}`: unsupported dtype {d:?}"),
        };
        // bf16 is NaN or ±inf exactly when its 8 exponent bits are all ones.
        if let Some(i) = out
            .chunks_exact(2)
            .position(|c| u16::from_le_bytes([c[0], c[1]]) & 0x7F80 == 0x7F80)
        {
            let x = half::bf16::from_le_bytes([out[2 * i], out[2 * i + 1]]).to_f32();
            return Err(non_finite(name, path, &info.shape, i, x));
        }
        Ok((out, info.shape.clone()))
    }

    /// The weight files, for the record.
    pub fn files(&self) -> Vec<&Path> {
        self.shards.iter().map(|s| s.path.as_path()).collect()
    }
}

/// The error for a NaN/inf weight: tensor, file, element (flat index and coordinates), value.
fn non_finite(name: &str, path: &Path, shape: &[usize], i: usize, x: f32) -> anyhow::Error {
    let mut at = Vec::with_capacity(shape.len());
    let mut rest = i;
    for &d in shape.iter().rev() {
        at.push(rest % d.max(1));
        rest /= d.max(1);
    }
    at.reverse();
    anyhow::anyhow!(
        "tensor `{name}` in {}: element {at:?} (flat {i}) is {x}: the checkpoint holds \
         non-finite weights",
        path.display()
    )
}

/// Little-endian F32 / BF16 / F16 tensor bytes widened to f32 (None for any other dtype).
pub fn widen(bytes: &[u8], dtype: Dtype) -> Option<Vec<f32>> {
    Some(match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => return None,
    })
}
