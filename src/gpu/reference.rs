//! A plainly written CPU model and LLaDA sampler that the GPU engine is checked against: the
//! same math in fp32, rounding to bf16 exactly where the GPU stores bf16 (GEMM inputs and
//! outputs, q/k/v, attention output), so the two agree to accumulation order; it plugs into
//! the distill sampler as a [`crate::teacher::TeacherBackend`]. Also writes the tiny random teacher used for
//! that parity run (HF layout: config.json + model.safetensors, bf16).

use std::path::Path;

use anyhow::Result;
use half::bf16;
use rayon::prelude::*;

use super::weights::LlamaConfig;
use crate::sampling::rng;

fn r(x: f32) -> f32 {
    bf16::from_f32(x).to_f32()
}

fn to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}

struct Layer {
    ln1: Vec<f32>,
    qkv: Vec<f32>,
    o: Vec<f32>,
    ln2: Vec<f32>,
    gu: Vec<f32>,
    down: Vec<f32>,
}

pub struct CpuModel {
    pub cfg: LlamaConfig,
    emb: Vec<f32>,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    head: Option<Vec<f32>>,
}

/// y[n] = Σ_k x[k] · w[n, k]  (w row-major [N, K]).
fn matvec(x: &[f32], w: &[f32], n: usize) -> Vec<f32> {
    let k = x.len();
    (0..n)
        .map(|j| {
            w[j * k..(j + 1) * k]
                .iter()
                .zip(x)
                .map(|(a, b)| a * b)
                .sum()
        })
        .collect()
}

fn rmsnorm(x: &[f32], g: &[f32], eps: f32) -> Vec<f32> {
    let ss: f32 = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let rr = 1.0 / (ss + eps).sqrt();
    x.iter().zip(g).map(|(v, w)| r(v * rr * w)).collect()
}

impl CpuModel {
    pub fn load(dir: &Path) -> Result<Self> {
        let (cfg, ck) = super::weights::open(dir)?;
        let (h, i, v, hd) = (
            cfg.hidden_size,
            cfg.intermediate_size,
            cfg.vocab_size,
            cfg.head_dim,
        );
        let (qd, kd) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
        let get = |n: &str, s: Vec<usize>| -> Result<Vec<f32>> {
            let (data, shape) = ck.bf16(n)?;
            anyhow::ensure!(shape == s, "tensor {n}: shape {shape:?}, expected {s:?}");
            Ok(to_f32(&data))
        };
        let mut layers = Vec::new();
        for l in 0..cfg.num_layers {
            let p = format!("model.layers.{l}");
            let mut qkv = get(&format!("{p}.self_attn.q_proj.weight"), vec![qd, h])?;
            qkv.extend(get(&format!("{p}.self_attn.k_proj.weight"), vec![kd, h])?);
            qkv.extend(get(&format!("{p}.self_attn.v_proj.weight"), vec![kd, h])?);
            let mut gu = get(&format!("{p}.mlp.gate_proj.weight"), vec![i, h])?;
            gu.extend(get(&format!("{p}.mlp.up_proj.weight"), vec![i, h])?);
            layers.push(Layer {
                ln1: get(&format!("{p}.input_layernorm.weight"), vec![h])?,
                qkv,
                o: get(&format!("{p}.self_attn.o_proj.weight"), vec![h, qd])?,
                ln2: get(&format!("{p}.post_attention_layernorm.weight"), vec![h])?,
                gu,
                down: get(&format!("{p}.mlp.down_proj.weight"), vec![h, i])?,
            });
        }
        let head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(get("lm_head.weight", vec![v, h])?)
        };
        Ok(Self {
            emb: get("model.embed_tokens.weight", vec![v, h])?,
            norm: get("model.norm.weight", vec![h])?,
            layers,
            head,
            cfg,
        })
    }

    /// Logits (fp32, full vocabulary) at `positions` of one left-padded sequence.
    pub fn logits(&self, seq: &[u32], pad: usize, positions: &[usize]) -> Vec<Vec<f32>> {
        let c = &self.cfg;
        let (h, i, hd) = (c.hidden_size, c.intermediate_size, c.head_dim);
        let (nh, kv) = (c.num_heads, c.num_kv_heads);
        let eps = c.rms_norm_eps as f32;
        let s = seq.len();
        let half = hd / 2;
        let mut x: Vec<Vec<f32>> = seq
            .iter()
            .map(|&t| self.emb[t as usize * h..(t as usize + 1) * h].to_vec())
            .collect();
        for l in &self.layers {
            // q/k/v per position after RoPE, bf16-rounded.
            let qkv: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = (0..s)
                .into_par_iter()
                .map(|p| {
                    let hn = rmsnorm(&x[p], &l.ln1, eps);
                    let y: Vec<f32> = matvec(&hn, &l.qkv, (nh + 2 * kv) * hd)
                        .into_iter()
                        .map(r)
                        .collect();
                    let pos = p.saturating_sub(pad) as f64;
                    let rot = |v: &[f32]| -> Vec<f32> {
                        let mut o = vec![0f32; v.len()];
                        for hh in 0..v.len() / hd {
                            for j in 0..half {
                                let inv = 1.0 / c.rope_theta.powf((2 * j) as f64 / hd as f64);
                                let (sn, cs) = (pos * inv).sin_cos();
                                let (cs, sn) = (cs as f32, sn as f32);
                                let (x1, x2) = (v[hh * hd + j], v[hh * hd + j + half]);
                                o[hh * hd + j] = r(x1 * cs - x2 * sn);
                                o[hh * hd + j + half] = r(x2 * cs + x1 * sn);
                            }
                        }
                        o
                    };
                    (
                        rot(&y[..nh * hd]),
                        rot(&y[nh * hd..(nh + kv) * hd]),
                        y[(nh + kv) * hd..].to_vec(),
                    )
                })
                .collect();
            let scale = 1.0 / (hd as f32).sqrt();
            let att: Vec<Vec<f32>> = (0..s)
                .into_par_iter()
                .map(|p| {
                    let mut out = vec![0f32; nh * hd];
                    for head in 0..nh {
                        let g = head / (nh / kv);
                        let q = &qkv[p].0[head * hd..(head + 1) * hd];
                        let sc: Vec<f32> = (pad..s)
                            .map(|j| {
                                q.iter()
                                    .zip(&qkv[j].1[g * hd..(g + 1) * hd])
                                    .map(|(a, b)| a * b)
                                    .sum::<f32>()
                                    * scale
                            })
                            .collect();
                        let m = sc.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                        let e: Vec<f32> = sc.iter().map(|v| (v - m).exp()).collect();
                        let z: f32 = e.iter().sum();
                        for (jj, j) in (pad..s).enumerate() {
                            let w = e[jj] / z;
                            for d in 0..hd {
                                out[head * hd + d] += w * qkv[j].2[g * hd + d];
                            }
                        }
                    }
                    out.into_iter().map(r).collect()
                })
                .collect();
            x = x
                .into_par_iter()
                .zip(att)
                .map(|(mut xp, a)| {
                    for (xv, d) in xp.iter_mut().zip(matvec(&a, &l.o, h)) {
                        *xv += d;
                    }
                    let hn = rmsnorm(&xp, &l.ln2, eps);
                    let gu: Vec<f32> = matvec(&hn, &l.gu, 2 * i).into_iter().map(r).collect();
                    let act: Vec<f32> = (0..i)
                        .map(|k| r(gu[k] / (1.0 + (-gu[k]).exp()) * gu[i + k]))
                        .collect();
                    for (xv, d) in xp.iter_mut().zip(matvec(&act, &l.down, h)) {
                        *xv += d;
                    }
                    xp
                })
                .collect();
        }
        let head = self.head.as_ref().unwrap_or(&self.emb);
        positions
            .par_iter()
            .map(|&p| matvec(&rmsnorm(&x[p], &self.norm, eps), head, c.vocab_size))
            .collect()
    }
}

/// The reference forward behind the distill sampler's backend trait, so parity runs compare
/// the GPU with exactly the CPU path's sampler (`distill::host_loop`), not a second copy of it.
impl crate::teacher::TeacherBackend for CpuModel {
    fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }

    fn logits(
        &mut self,
        batch: &crate::teacher::Batch,
        rows: std::ops::Range<usize>,
    ) -> Result<Vec<f32>> {
        crate::teacher::check_batch_shape(batch, &rows)?;
        let pos: Vec<usize> = rows.collect();
        let mut out = Vec::with_capacity(batch.b * pos.len() * self.cfg.vocab_size);
        for r in 0..batch.b {
            let (tokens, keep) = batch.row(r);
            let pad = keep.iter().take_while(|&&k| !k).count();
            for row in CpuModel::logits(self, tokens, pad, &pos) {
                out.extend(row);
            }
        }
        Ok(out)
    }
}

/// Shape of the tiny parity teacher.
pub fn tiny_config() -> serde_json::Value {
    serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": false,
        "is_causal": false,
        "mask_token_id": 999,
        "pad_token_id": 0,
        "torch_dtype": "bfloat16"
    })
}

/// Write a random bf16 teacher of `config` (HF layout) into `dir`; deterministic in `seed`.
pub fn write_random_teacher(dir: &Path, config: &serde_json::Value, seed: u64) -> Result<()> {
    write_random_teacher_scaled(dir, config, seed, 1.0)
}

/// [`write_random_teacher`] with the embedding and LM head scaled by `head_scale`: larger
/// values give peaked output distributions (well-separated confidences), where a bf16-level
/// difference in the forward no longer reorders commits.
pub fn write_random_teacher_scaled(
    dir: &Path,
    config: &serde_json::Value,
    seed: u64,
    head_scale: f64,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let cfg = LlamaConfig::from_json(&config.to_string())?;
    let mut ctr = 0u64;
    let mut normal = move || {
        ctr += 2;
        let u1 = rng::uniform(seed, 1, 0, 0, ctr, 0);
        let u2 = rng::uniform(seed, 1, 0, 0, ctr + 1, 0);
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    };
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, shape) in crate::teacher::weights::expected_tensors(&cfg) {
        let n: usize = shape.iter().product();
        let norm = name.ends_with("norm.weight");
        let outer = name == "lm_head.weight" || name == "model.embed_tokens.weight";
        let data: Vec<u8> = (0..n)
            .flat_map(|_| {
                let v = if norm {
                    1.0 + 0.1 * normal()
                } else if outer {
                    0.05 * head_scale * normal()
                } else {
                    0.05 * normal()
                };
                bf16::from_f64(v).to_le_bytes()
            })
            .collect();
        tensors.push((name, shape, data));
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, s, d)| {
            Ok((
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, s.clone(), d)?,
            ))
        })
        .collect::<Result<_>>()?;
    let bytes = safetensors::serialize(views, None)?;
    crate::util::atomic_write(&dir.join("model.safetensors"), &bytes)?;
    crate::util::atomic_write(
        &dir.join("config.json"),
        serde_json::to_string_pretty(config)?.as_bytes(),
    )?;
    Ok(())
}
