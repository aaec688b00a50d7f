//! The teacher's forward pass on the CPU with candle-core: a Llama decoder run
//! bidirectionally over a left-padded batch, with a key-padding mask and position ids counted
//! among each row's real tokens. Rows run one at a time with their padding stripped, so a
//! prompt's logits are bit-identical whatever its batch peers (not only equal in exact
//! arithmetic): distill's records are byte-identical at every batch size.
//!
//! Follows transformers' `LlamaForCausalLM` step for step (RMSNorm → attention with RoPE and
//! GQA → add → RMSNorm → SwiGLU MLP → add), in f32 whatever the checkpoint dtype; only the
//! rows asked for go through the final norm and the LM head.

use std::ops::Range;

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor, D};

use super::config::LlamaConfig;
use super::weights::Weights;
use super::{check_batch_shape, Batch, TeacherBackend};

struct Layer {
    ln1: Tensor,
    /// [hidden, (heads + 2·kv_heads)·head_dim]: q, k, v projections fused, transposed.
    wqkv: Tensor,
    /// [heads·head_dim, hidden]
    wo: Tensor,
    ln2: Tensor,
    /// [hidden, 2·intermediate]: gate and up fused, transposed.
    wgu: Tensor,
    /// [intermediate, hidden]
    wdown: Tensor,
}

/// The candle CPU implementation of [`TeacherBackend`].
pub struct CpuTeacher {
    cfg: LlamaConfig,
    dev: Device,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    /// [hidden, vocab]
    head_t: Tensor,
    inv_freq: Vec<f64>,
}

fn tensor(w: &Weights, name: &str, dev: &Device) -> Result<Tensor> {
    let (v, shape) = w.f32(name)?;
    Tensor::from_vec(v, shape, dev).with_context(|| format!("tensor `{name}`"))
}

/// Transposed (`[in, out]`) and contiguous, ready for `x · W`.
fn linear_t(w: &Weights, name: &str, dev: &Device) -> Result<Tensor> {
    Ok(tensor(w, name, dev)?.t()?.contiguous()?)
}

impl CpuTeacher {
    pub fn load(cfg: &LlamaConfig, w: &Weights) -> Result<Self> {
        let dev = Device::Cpu;
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            let p = format!("model.layers.{l}");
            let q = linear_t(w, &format!("{p}.self_attn.q_proj.weight"), &dev)?;
            let k = linear_t(w, &format!("{p}.self_attn.k_proj.weight"), &dev)?;
            let v = linear_t(w, &format!("{p}.self_attn.v_proj.weight"), &dev)?;
            let g = linear_t(w, &format!("{p}.mlp.gate_proj.weight"), &dev)?;
            let u = linear_t(w, &format!("{p}.mlp.up_proj.weight"), &dev)?;
            layers.push(Layer {
                ln1: tensor(w, &format!("{p}.input_layernorm.weight"), &dev)?,
                wqkv: Tensor::cat(&[q, k, v], 1)?.contiguous()?,
                wo: linear_t(w, &format!("{p}.self_attn.o_proj.weight"), &dev)?,
                ln2: tensor(w, &format!("{p}.post_attention_layernorm.weight"), &dev)?,
                wgu: Tensor::cat(&[g, u], 1)?.contiguous()?,
                wdown: linear_t(w, &format!("{p}.mlp.down_proj.weight"), &dev)?,
            });
        }
        let embed = tensor(w, "model.embed_tokens.weight", &dev)?;
        let head_t = if cfg.tie_word_embeddings {
            embed.t()?.contiguous()?
        } else {
            linear_t(w, "lm_head.weight", &dev)?
        };
        let hd = cfg.head_dim;
        let inv_freq = (0..hd / 2)
            .map(|i| 1.0 / cfg.rope_theta.powf((2 * i) as f64 / hd as f64))
            .collect();
        Ok(CpuTeacher {
            cfg: cfg.clone(),
            embed,
            layers,
            norm: tensor(w, "model.norm.weight", &dev)?,
            head_t,
            inv_freq,
            dev,
        })
    }

    fn rms(&self, x: &Tensor, g: &Tensor) -> Result<Tensor> {
        let var = x.sqr()?.mean_keepdim(D::Minus1)?;
        let inv = (var + self.cfg.rms_norm_eps)?.sqrt()?.recip()?;
        Ok(x.broadcast_mul(&inv)?.broadcast_mul(g)?)
    }

    /// cos/sin tables `[b, 1, l, head_dim]` from per-token positions (HF layout:
    /// the half-dim frequencies repeated twice).
    fn rope_tables(&self, pos: &[u32], b: usize, l: usize) -> Result<(Tensor, Tensor)> {
        let hd = self.cfg.head_dim;
        let mut cos = Vec::with_capacity(b * l * hd);
        let mut sin = Vec::with_capacity(b * l * hd);
        for &p in pos {
            for _ in 0..2 {
                for f in &self.inv_freq {
                    // transformers computes inv_freq and the angle in f32.
                    let a = (p as f32) * (*f as f32);
                    cos.push(a.cos());
                    sin.push(a.sin());
                }
            }
        }
        Ok((
            Tensor::from_vec(cos, (b, 1, l, hd), &self.dev)?,
            Tensor::from_vec(sin, (b, 1, l, hd), &self.dev)?,
        ))
    }

    fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let hd = x.dim(D::Minus1)?;
        let x1 = x.narrow(D::Minus1, 0, hd / 2)?;
        let x2 = x.narrow(D::Minus1, hd / 2, hd / 2)?;
        let rot = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
        Ok((x.broadcast_mul(cos)? + rot.broadcast_mul(sin)?)?)
    }

    /// Final hidden states `[b, l, hidden]` before the last norm.
    fn hidden(&self, tokens: &[u32], keep: &[bool], b: usize, l: usize) -> Result<Tensor> {
        let c = &self.cfg;
        let (nh, kv, hd) = (c.num_heads, c.num_kv_heads, c.head_dim);
        let rep = nh / kv;
        // Position = index among the row's real tokens; padding gets 0 (never attended).
        let mut pos = vec![0u32; b * l];
        let mut mask = vec![0f32; b * l];
        for r in 0..b {
            let mut n = 0u32;
            for j in 0..l {
                if keep[r * l + j] {
                    pos[r * l + j] = n;
                    n += 1;
                } else {
                    mask[r * l + j] = f32::NEG_INFINITY;
                }
            }
        }
        let (cos, sin) = self.rope_tables(&pos, b, l)?;
        let mask = Tensor::from_vec(mask, (b, 1, 1, l), &self.dev)?;
        let ids = Tensor::from_slice(tokens, b * l, &self.dev)?;
        let mut x = self.embed.index_select(&ids, 0)?; // [b·l, hidden]
        let scale = 1.0 / (hd as f64).sqrt();
        for layer in &self.layers {
            let h = self.rms(&x, &layer.ln1)?;
            let qkv = h.matmul(&layer.wqkv)?;
            let split = |start: usize, heads: usize| -> Result<Tensor> {
                Ok(qkv
                    .narrow(1, start * hd, heads * hd)?
                    .reshape((b, l, heads, hd))?
                    .transpose(1, 2)?
                    .contiguous()?)
            };
            let q = Self::rope(&split(0, nh)?, &cos, &sin)?;
            let k = Self::rope(&split(nh, kv)?, &cos, &sin)?;
            let v = split(nh + kv, kv)?;
            // GQA without copying K/V: query heads of one group stacked along the rows.
            let q = q.reshape((b, kv, rep * l, hd))?;
            let scores = (q.matmul(&k.t()?.contiguous()?)? * scale)?;
            let scores = scores.broadcast_add(&mask)?;
            let max = scores.max_keepdim(D::Minus1)?;
            let e = scores.broadcast_sub(&max)?.exp()?;
            let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
            let att = p
                .matmul(&v)? // [b, kv, rep·l, hd]
                .reshape((b, nh, l, hd))?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((b * l, nh * hd))?;
            x = (x + att.matmul(&layer.wo)?)?;
            let h = self.rms(&x, &layer.ln2)?;
            let gu = h.matmul(&layer.wgu)?;
            let i = c.intermediate_size;
            let act = (gu.narrow(1, 0, i)?.silu()? * gu.narrow(1, i, i)?)?;
            x = (x + act.matmul(&layer.wdown)?)?;
        }
        Ok(x.reshape((b, l, c.hidden_size))?)
    }
}

impl TeacherBackend for CpuTeacher {
    fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }

    fn logits(&mut self, batch: &Batch, rows: Range<usize>) -> Result<Vec<f32>> {
        check_batch_shape(batch, &rows)?;
        // One row at a time, its left padding stripped: a row's logits are then bit-for-bit
        // those of the row alone, whatever its batch peers and their lengths (GEMM blocking
        // and softmax reductions depend on the padded shape; see docs/commands/distill.md).
        let n = rows.end - rows.start;
        let mut out = Vec::with_capacity(batch.b * n * self.cfg.vocab_size);
        for r in 0..batch.b {
            let (t, k) = batch.row(r);
            let pad = k.iter().take_while(|&&x| !x).count();
            let (t, k, at) = if rows.start >= pad && k[pad..].iter().all(|&x| x) {
                (&t[pad..], &k[pad..], rows.start - pad..rows.end - pad)
            } else {
                (t, k, rows.clone())
            };
            out.extend(self.row_logits(t, k, at)?);
        }
        Ok(out)
    }
}

impl CpuTeacher {
    /// Logits of positions `rows` of one row (`tokens`/`keep` of length l).
    fn row_logits(&self, tokens: &[u32], keep: &[bool], rows: Range<usize>) -> Result<Vec<f32>> {
        let l = tokens.len();
        let x = self.hidden(tokens, keep, 1, l)?;
        let n = rows.end - rows.start;
        let x = x
            .narrow(1, rows.start, n)?
            .contiguous()?
            .reshape((n, self.cfg.hidden_size))?;
        let x = self.rms(&x, &self.norm)?;
        let logits = x.matmul(&self.head_t)?;
        debug_assert_eq!(logits.dtype(), DType::F32);
        Ok(logits.flatten_all()?.to_vec1::<f32>()?)
    }
}
