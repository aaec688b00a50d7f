//! Loading an engine: the kernels (with the attention variants this GPU and head size allow),
//! the checkpoint's tensors uploaded as bf16 (each layer's RMSNorm weights folded into the
//! GEMM they feed under `DLM_FOLD_NORM=1`), and the RoPE tables.

use anyhow::{bail, Result};

use super::attn::AttnKernel;
use super::{AttnVariant, Kernels, LayerW, LlamaConfig, ResidKernels, Residual, BF};
use crate::gpu::driver::{DevBuf, Gpu};
use crate::gpu::weights::Weights;

/// The engine's kernels, with the attention variant `DLM_ATTN` forces and the wgmma variant
/// for large grids (if any).
pub(super) struct LoadedKernels {
    pub k: Kernels,
    pub attn_force: Option<AttnVariant>,
    pub wgmma: Option<AttnVariant>,
}

/// Compile (or load from the cache) every kernel the engine launches.
pub(super) fn kernels(gpu: &Gpu, cfg: &LlamaConfig) -> Result<LoadedKernels> {
    let kn = |n: &str| gpu.kernel(n);
    let attn_kernel = |v: AttnVariant| -> Result<AttnKernel> {
        Ok(AttnKernel {
            k: gpu.kernel(&v.entry(cfg.head_dim))?,
            v,
        })
    };
    let mut k = Kernels {
        r: ResidKernels::load(gpu, Residual::Bf16)?,
        qkv_rope: kn("qkv_rope")?,
        swiglu: kn("swiglu")?,
        row_rms: kn("row_rms")?,
        attn: vec![
            attn_kernel(AttnVariant::W4)?,
            attn_kernel(AttnVariant::W8)?,
            attn_kernel(AttnVariant::M2)?,
        ],
        sample: kn("sample_block")?,
        commit: kn("commit_topk")?,
        advance: kn("advance")?,
        letter: kn("letter_head")?,
        record: kn("record_topk")?,
    };
    let attn_force = AttnVariant::parse(&crate::gpu::tuning::attn())?;
    // The wgmma attention (head_dim 128, sm_90a module): `Wgs2` for large grids by default;
    // the other wgmma shapes only when `DLM_ATTN` forces them.
    let wgmma_default = cfg.head_dim == 128 && gpu.arch == "sm_90a";
    let wgmma = attn_force
        .filter(|v| v.is_wgmma())
        .or(wgmma_default.then_some(AttnVariant::Wgs2));
    if let Some(wv) = wgmma {
        let group = cfg.num_heads / cfg.num_kv_heads;
        if cfg.head_dim != 128 || gpu.arch != "sm_90a" || group % wv.heads() != 0 {
            bail!(
                "DLM_ATTN={wv:?} (wgmma attention) needs head_dim 128 on an H100/H200 \
                 (sm_90a) and heads per KV head divisible by {}; this is head_dim {} on {}",
                wv.heads(),
                cfg.head_dim,
                gpu.arch
            );
        }
        k.attn.push(attn_kernel(wv)?);
    }
    for a in &k.attn {
        gpu.set_max_dynamic_smem(a.k, a.v.smem_bytes(cfg.head_dim))?;
    }
    Ok(LoadedKernels {
        k,
        attn_force,
        wgmma,
    })
}

/// The checkpoint's tensors on the device, and their bytes.
pub(super) struct Tensors {
    pub embed: DevBuf,
    pub layers: Vec<LayerW>,
    pub norm: DevBuf,
    pub lm_head: Option<DevBuf>,
    pub bytes: usize,
}

/// Upload every tensor the forward reads, in checkpoint order: embedding, each layer, the
/// final norm, the LM head (unless tied). With `fold_norm`, each layer's RMSNorm weight is
/// folded into the columns of the GEMM it feeds ([q;k;v] and [gate;up]).
pub(super) fn tensors(
    gpu: &Gpu,
    ck: &Weights,
    cfg: &LlamaConfig,
    fold_norm: bool,
) -> Result<Tensors> {
    let (h, v) = (cfg.hidden_size, cfg.vocab_size);
    let mut u = Uploader { gpu, ck, bytes: 0 };
    let embed = u.up(&[("model.embed_tokens.weight", vec![v, h])], None)?;
    let mut layers = Vec::with_capacity(cfg.num_layers);
    for l in 0..cfg.num_layers {
        layers.push(u.layer(cfg, l, fold_norm)?);
    }
    let norm = u.up(&[("model.norm.weight", vec![h])], None)?;
    let lm_head = if cfg.tie_word_embeddings {
        None
    } else {
        Some(u.up(&[("lm_head.weight", vec![v, h])], None)?)
    };
    Ok(Tensors {
        embed,
        layers,
        norm,
        lm_head,
        bytes: u.bytes,
    })
}

/// Uploads tensors, counting the bytes.
struct Uploader<'a> {
    gpu: &'a Gpu,
    ck: &'a Weights,
    bytes: usize,
}

impl Uploader<'_> {
    /// The named tensors (each of the shape given) as one device buffer, in order; scaled by
    /// `gamma` per input column when given.
    fn up(&mut self, names: &[(&str, Vec<usize>)], gamma: Option<&[f32]>) -> Result<DevBuf> {
        let total: usize = names
            .iter()
            .map(|(_, s)| s.iter().product::<usize>() * BF)
            .sum();
        let buf = self.gpu.alloc(total)?;
        let mut off = 0;
        for (n, s) in names {
            let (data, shape) = self.ck.bf16(n)?;
            if &shape != s {
                bail!("tensor {n}: shape {shape:?}, expected {s:?}");
            }
            match gamma {
                None => self.gpu.write(&buf, off, &data)?,
                Some(g) => self
                    .gpu
                    .write(&buf, off, &crate::gpu::weights::fold_gamma(&data, g))?,
            }
            off += data.len();
        }
        self.bytes += total;
        Ok(buf)
    }

    /// Layer `l`'s weights: norms, fused [q;k;v], o_proj, fused [gate;up], down.
    fn layer(&mut self, cfg: &LlamaConfig, l: usize, fold_norm: bool) -> Result<LayerW> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        let hd = cfg.head_dim;
        let (qd, kd) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
        let p = format!("model.layers.{l}");
        let n = |s: &str| format!("{p}.{s}.weight");
        let (g1, g2) = if fold_norm {
            (
                Some(self.ck.f32(&n("input_layernorm"))?.0),
                Some(self.ck.f32(&n("post_attention_layernorm"))?.0),
            )
        } else {
            (None, None)
        };
        Ok(LayerW {
            ln1: self.up(&[(&n("input_layernorm"), vec![h])], None)?,
            qkv: self.up(
                &[
                    (&n("self_attn.q_proj"), vec![qd, h]),
                    (&n("self_attn.k_proj"), vec![kd, h]),
                    (&n("self_attn.v_proj"), vec![kd, h]),
                ],
                g1.as_deref(),
            )?,
            o: self.up(&[(&n("self_attn.o_proj"), vec![h, qd])], None)?,
            ln2: self.up(&[(&n("post_attention_layernorm"), vec![h])], None)?,
            gu: self.up(
                &[
                    (&n("mlp.gate_proj"), vec![i, h]),
                    (&n("mlp.up_proj"), vec![i, h]),
                ],
                g2.as_deref(),
            )?,
            down: self.up(&[(&n("mlp.down_proj"), vec![h, i])], None)?,
        })
    }
}

/// RoPE tables in float64 → fp32: angle = pos · theta^(-2i/hd), `max_pos` positions.
pub(super) fn rope_tables(
    gpu: &Gpu,
    cfg: &LlamaConfig,
    max_pos: usize,
) -> Result<(DevBuf, DevBuf)> {
    let hd = cfg.head_dim;
    let half = hd / 2;
    let mut cos = vec![0f32; max_pos * half];
    let mut sin = vec![0f32; max_pos * half];
    for p in 0..max_pos {
        for j in 0..half {
            let inv = 1.0 / cfg.rope_theta.powf((2 * j) as f64 / hd as f64);
            let a = p as f64 * inv;
            cos[p * half + j] = a.cos() as f32;
            sin[p * half + j] = a.sin() as f32;
        }
    }
    Ok((gpu.upload(&cos)?, gpu.upload(&sin)?))
}
