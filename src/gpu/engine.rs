//! The GPU forward pass and LLaDA's block-wise sampler, end to end on the device.
//!
//! Per step (one CUDA graph, replayed `steps` times with no host synchronisation; per-step
//! values — global step, step within block, block index — live in a device-side state the
//! kernels read and the last kernel advances):
//!   embed → 42 × [RMSNorm → QKV GEMM → RoPE/split → flash attention → o_proj GEMM (+residual)
//!   → RMSNorm → gate/up GEMM → SwiGLU → down GEMM (+residual)] → final RMSNorm of the current
//!   block's rows only → LM head GEMM (block rows only, fp32 logits) → fused sampler pass →
//!   per-row top-k commit → advance.
//!
//! Approximate modes (opt-in, never the default): `CacheMode::Prefix`/`Dual` (Fast-dLLM): the
//! first step of every block runs the full pass above and stores every layer's K/V; the
//! block's other steps run a window (prefix: block start → end; dual: the block only) that
//! attends to the cached K/V and overwrites the window's own entries. `threshold`
//! (confidence-threshold parallel decoding): each step commits the most confident masked
//! position and every other one at or above the threshold; a block ends when no row has a
//! mask left in it (device-side, read back once per step).
//!
//! Numerics: bf16 weights and activations at GEMM inputs, fp32 accumulation everywhere, fp32
//! residual stream (the GEMM epilogue adds into it), fp32 logits. Semantics are the CPU path's:
//! left padding, position ids = index among real tokens, padded keys masked.

use anyhow::{bail, Context, Result};

use super::blas::{Blas, OutType};
use super::driver::{DevBuf, Gpu, Kernel};
use super::weights::{Checkpoint, LlamaConfig};
use crate::kargs;

struct LayerW {
    ln1: DevBuf,
    qkv: DevBuf,
    o: DevBuf,
    ln2: DevBuf,
    gu: DevBuf,
    down: DevBuf,
}

struct Kernels {
    embed: Kernel,
    embed_window: Kernel,
    rmsnorm: Kernel,
    rmsnorm_block: Kernel,
    rmsnorm_rows: Kernel,
    qkv_rope: Kernel,
    swiglu: Kernel,
    attn: Kernel,
    /// The 8-warp variant (128 queries per CTA).
    attn8: Kernel,
    sample: Kernel,
    commit: Kernel,
    advance: Kernel,
    letter: Kernel,
}

/// Activation buffers for up to `b` rows × `s` positions and `out_rows` LM-head rows.
struct Workspace {
    b: usize,
    s: usize,
    out_rows: usize,
    x: DevBuf,
    pad: DevBuf,
    keys: DevBuf,
    resid: DevBuf,
    hn: DevBuf,
    qkv: DevBuf,
    q: DevBuf,
    k: DevBuf,
    v: DevBuf,
    attn: DevBuf,
    gu: DevBuf,
    act: DevBuf,
    hb: DevBuf,
    logits: DevBuf,
    x0: DevBuf,
    conf: DevBuf,
    rows: DevBuf,
    state: DevBuf,
    ntrans: DevBuf,
    letters: DevBuf,
    nletters: DevBuf,
    lp: DevBuf,
    lprob: DevBuf,
    ban: DevBuf,
    /// Per layer K and V of every position ([B, KVH, S, HD] each, K first): cache modes only.
    kv: Vec<DevBuf>,
}

/// Approximate KV caching across the steps of a block (Fast-dLLM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    /// Exact: every step is a full pass.
    None,
    /// Steps after a block's first run from the block's start to the end of the sequence.
    Prefix,
    /// Steps after a block's first run over the block only.
    Dual,
}

impl CacheMode {
    pub fn as_str(&self) -> &'static str {
        match self {
            CacheMode::None => "none",
            CacheMode::Prefix => "prefix",
            CacheMode::Dual => "dual",
        }
    }
}

/// What one body pass covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Every position; K/V into the per-layer cache when `cache`.
    Full { cache: bool },
    /// `w` positions from the current block's start, against the cached K/V.
    Window { w: usize },
}

/// Most excluded token ids the sampler kernel takes (mask included).
const MAX_BAN: usize = 32;

/// Sampler settings (LLaDA's `generate` arguments).
#[derive(Debug, Clone)]
pub struct GenParams {
    pub gen_length: usize,
    pub block_length: usize,
    pub steps: usize,
    pub temperature: f64,
    pub remask_random: bool,
    pub seed: u64,
    pub mask_id: u32,
    pub pad_id: u32,
    pub logits_shift: usize,
    /// Never candidates, besides the mask token (EOS under `logits_eos_inf`).
    pub ban_choice: Vec<u32>,
    /// Candidates whose confidence is 0 (EOS/EoT under `confidence_eos_eot_inf`).
    pub ban_conf: Vec<u32>,
    /// Confidence-threshold parallel decoding (approximate), in (0, 1].
    pub threshold: Option<f64>,
    pub cache: CacheMode,
}

impl GenParams {
    pub fn validate(&self) -> Result<()> {
        if self.block_length == 0 || self.gen_length % self.block_length != 0 {
            bail!(
                "--gen-length {} must be a multiple of --block-length {}",
                self.gen_length,
                self.block_length
            );
        }
        let nb = self.gen_length / self.block_length;
        if self.steps == 0 || self.steps % nb != 0 {
            bail!(
                "--steps {} must be a multiple of the number of blocks {nb}",
                self.steps
            );
        }
        if self.block_length > 1024 {
            bail!(
                "--block-length {} > 1024 is not supported on the GPU",
                self.block_length
            );
        }
        if self.pad_id == self.mask_id {
            bail!("pad id {} equals the mask id", self.pad_id);
        }
        if 1 + self.ban_choice.len() + self.ban_conf.len() > MAX_BAN {
            bail!("more than {} excluded token ids (EOS/EoT)", MAX_BAN - 1);
        }
        if let Some(t) = self.threshold {
            if !(t > 0.0 && t <= 1.0) {
                bail!("--threshold {t} must be in (0, 1]");
            }
            if self.remask_random {
                bail!("--threshold needs low-confidence remasking");
            }
        }
        if self.cache != CacheMode::None && self.logits_shift != 0 {
            bail!("--cache {} needs logits shift 0", self.cache.as_str());
        }
        Ok(())
    }
    pub fn steps_per_block(&self) -> usize {
        self.steps / (self.gen_length / self.block_length)
    }
    /// LLaDA's `get_num_transfer_tokens` for a fully masked block: equal shares, the
    /// remainder to the earliest steps.
    pub fn num_transfer(&self) -> Vec<i32> {
        let spb = self.steps_per_block();
        let (base, rem) = (self.block_length / spb, self.block_length % spb);
        (0..spb)
            .map(|i| (base + usize::from(i < rem)) as i32)
            .collect()
    }
}

pub struct Engine {
    ws: Option<Workspace>,
    layers: Vec<LayerW>,
    embed: DevBuf,
    norm: DevBuf,
    lm_head: Option<DevBuf>,
    cos: DevBuf,
    sin: DevBuf,
    max_pos: usize,
    k: Kernels,
    blas: Blas,
    pub cfg: LlamaConfig,
    pub weight_bytes: usize,
    pub gpu: Gpu,
    /// Attention CTA size: 4 or 8 warps, 0 = by grid size.
    attn_warps: usize,
    sms: usize,
    /// When set, every op of a pass records an event after it, labelled ([`Self::profile`]).
    marks: std::cell::RefCell<Option<Vec<(&'static str, cudarc::driver::sys::CUevent)>>>,
}

const BF: usize = 2;

/// Dynamic shared memory of the attention kernel: two stages of a 64-key K and V tile, rows
/// padded by 8 elements (kernels/attention.cu).
fn attn_smem_bytes(hd: usize) -> usize {
    4 * 64 * (hd + 8) * BF
}

impl Engine {
    /// Open the GPU, validate and upload the checkpoint in `dir`.
    pub fn load(dir: &std::path::Path, ordinal: usize, max_pos: usize) -> Result<Self> {
        let cfg = LlamaConfig::load(dir)?;
        let ck = Checkpoint::open(dir)?;
        ck.validate(&cfg)?;
        let gpu = Gpu::open(ordinal)?;
        let blas = Blas::new(&gpu)?;
        let kn = |n: &str| gpu.kernel(n);
        let k = Kernels {
            embed: kn("embed_gather")?,
            embed_window: kn("embed_window")?,
            rmsnorm: kn("rmsnorm")?,
            rmsnorm_block: kn("rmsnorm_block")?,
            rmsnorm_rows: kn("rmsnorm_rows")?,
            qkv_rope: kn("qkv_rope")?,
            swiglu: kn("swiglu")?,
            attn: kn(&format!("attn_fwd_hd{}", cfg.head_dim()))?,
            attn8: kn(&format!("attn_fwd_w8_hd{}", cfg.head_dim()))?,
            sample: kn("sample_block")?,
            commit: kn("commit_topk")?,
            advance: kn("advance")?,
            letter: kn("letter_head")?,
        };
        gpu.set_max_dynamic_smem(k.attn, attn_smem_bytes(cfg.head_dim()))?;
        gpu.set_max_dynamic_smem(k.attn8, attn_smem_bytes(cfg.head_dim()))?;
        let attn_warps = match std::env::var("DLM_ATTN_WARPS").ok().as_deref() {
            None | Some("") | Some("auto") => 0,
            Some("4") => 4,
            Some("8") => 8,
            Some(o) => bail!("DLM_ATTN_WARPS={o}: expected 4, 8 or auto"),
        };
        let (h, i, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
        let hd = cfg.head_dim();
        let (qd, kd) = (cfg.num_attention_heads * hd, cfg.kv_heads() * hd);
        let mut bytes = 0usize;
        let mut up = |names: &[(&str, Vec<usize>)]| -> Result<DevBuf> {
            let total: usize = names
                .iter()
                .map(|(_, s)| s.iter().product::<usize>() * BF)
                .sum();
            let buf = gpu.alloc(total)?;
            let mut off = 0;
            for (n, s) in names {
                let data = ck.bf16(n, s)?;
                gpu.write(&buf, off, &data)?;
                off += data.len();
            }
            bytes += total;
            Ok(buf)
        };
        let embed = up(&[("model.embed_tokens.weight", vec![v, h])])?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let n = |s: &str| format!("{p}.{s}.weight");
            layers.push(LayerW {
                ln1: up(&[(&n("input_layernorm"), vec![h])])?,
                qkv: up(&[
                    (&n("self_attn.q_proj"), vec![qd, h]),
                    (&n("self_attn.k_proj"), vec![kd, h]),
                    (&n("self_attn.v_proj"), vec![kd, h]),
                ])?,
                o: up(&[(&n("self_attn.o_proj"), vec![h, qd])])?,
                ln2: up(&[(&n("post_attention_layernorm"), vec![h])])?,
                gu: up(&[
                    (&n("mlp.gate_proj"), vec![i, h]),
                    (&n("mlp.up_proj"), vec![i, h]),
                ])?,
                down: up(&[(&n("mlp.down_proj"), vec![h, i])])?,
            });
        }
        let norm = up(&[("model.norm.weight", vec![h])])?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(up(&[("lm_head.weight", vec![v, h])])?)
        };
        // RoPE tables in float64 → fp32: angle = pos · theta^(-2i/hd).
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
        let cos = gpu.upload(&cos)?;
        let sin = gpu.upload(&sin)?;
        Ok(Self {
            ws: None,
            layers,
            embed,
            norm,
            lm_head,
            cos,
            sin,
            max_pos,
            k,
            blas,
            cfg,
            weight_bytes: bytes,
            attn_warps,
            sms: gpu.sm_count,
            gpu,
            marks: std::cell::RefCell::new(None),
        })
    }

    /// Bytes of activation workspace for `b` rows × `s` positions and `out_rows` LM-head rows.
    pub fn workspace_bytes(cfg: &LlamaConfig, b: usize, s: usize, out_rows: usize) -> usize {
        let t = b * s;
        let (h, i, v, hd) = (
            cfg.hidden_size,
            cfg.intermediate_size,
            cfg.vocab_size,
            cfg.head_dim(),
        );
        let (nh, kv) = (cfg.num_attention_heads, cfg.kv_heads());
        let per_tok = 4 * h            // resid fp32
            + BF * h                   // hn
            + BF * (nh + 2 * kv) * hd  // qkv
            + BF * (nh + 2 * kv) * hd  // q, k, v
            + BF * nh * hd             // attn
            + BF * 2 * i               // gate/up
            + BF * i                   // act
            + 4; // x
        t * per_tok + out_rows * (BF * h + 4 * v + 20 + 80) + b * 16 + (64 << 20)
    }

    fn ensure_workspace(&mut self, b: usize, s: usize, out_rows: usize) -> Result<()> {
        if let Some(ws) = &self.ws {
            if ws.b >= b && ws.s >= s && ws.out_rows >= out_rows {
                return Ok(());
            }
        }
        if s > self.max_pos {
            bail!(
                "sequence length {s} exceeds the engine's position table ({})",
                self.max_pos
            );
        }
        self.ws = None; // free the old one first
        let need = Self::workspace_bytes(&self.cfg, b, s, out_rows);
        let (free, _) = self.gpu.mem_info()?;
        if need as f64 > free as f64 * 0.95 {
            let per_row = Self::workspace_bytes(&self.cfg, 1, s, out_rows / b.max(1)) as f64;
            let fit = ((free as f64 * 0.95) / per_row).floor() as usize;
            return Err(crate::error::usage(format!(
                "batch size {b} at sequence length {s} needs about {:.1} GiB of GPU workspace, \
                 {:.1} GiB are free on {} (weights: {:.1} GiB); the largest batch that fits is about {fit}",
                need as f64 / (1u64 << 30) as f64,
                free as f64 / (1u64 << 30) as f64,
                self.gpu.name,
                self.weight_bytes as f64 / (1u64 << 30) as f64
            )));
        }
        let c = &self.cfg;
        let t = b * s;
        let (h, i, v, hd) = (
            c.hidden_size,
            c.intermediate_size,
            c.vocab_size,
            c.head_dim(),
        );
        let (nh, kv) = (c.num_attention_heads, c.kv_heads());
        let g = &self.gpu;
        self.ws = Some(Workspace {
            b,
            s,
            out_rows,
            x: g.alloc(t * 4)?,
            pad: g.alloc(b * 4)?,
            keys: g.alloc(b * 8)?,
            resid: g.alloc(t * h * 4)?,
            hn: g.alloc(t * h * BF)?,
            qkv: g.alloc(t * (nh + 2 * kv) * hd * BF)?,
            q: g.alloc(t * nh * hd * BF)?,
            k: g.alloc(t * kv * hd * BF)?,
            v: g.alloc(t * kv * hd * BF)?,
            attn: g.alloc(t * nh * hd * BF)?,
            gu: g.alloc(t * 2 * i * BF)?,
            act: g.alloc(t * i * BF)?,
            hb: g.alloc(out_rows * h * BF)?,
            logits: g.alloc(out_rows * v * 4)?,
            x0: g.alloc(out_rows * 4)?,
            conf: g.alloc(out_rows * 8)?,
            rows: g.alloc(out_rows * 4)?,
            state: g.alloc(16)?,
            ntrans: g.alloc(4 * 1024)?,
            letters: g.alloc(out_rows * 40)?,
            nletters: g.alloc(out_rows * 4)?,
            lp: g.alloc(out_rows * 40)?,
            lprob: g.alloc(out_rows * 40)?,
            ban: g.alloc(MAX_BAN * 4)?,
            kv: vec![],
        });
        Ok(())
    }

    /// Bytes of the per-layer K/V cache for `b × s`.
    pub fn kv_cache_bytes(cfg: &LlamaConfig, b: usize, s: usize) -> usize {
        cfg.num_hidden_layers * 2 * b * s * cfg.kv_heads() * cfg.head_dim() * BF
    }

    /// Allocate the per-layer K/V cache for the workspace's `b × s` (cache modes).
    fn ensure_kv_cache(&mut self) -> Result<()> {
        let ws = self.ws.as_mut().context("no workspace")?;
        if !ws.kv.is_empty() {
            return Ok(());
        }
        let need = Self::kv_cache_bytes(&self.cfg, ws.b, ws.s);
        let (free, _) = self.gpu.mem_info()?;
        if need as f64 > free as f64 * 0.95 {
            return Err(crate::error::usage(format!(
                "the KV cache for batch {} × {} positions needs {:.1} GiB, {:.1} GiB are free on {}: \
                 lower --batch-size",
                ws.b,
                ws.s,
                need as f64 / (1u64 << 30) as f64,
                free as f64 / (1u64 << 30) as f64,
                self.gpu.name
            )));
        }
        let per = need / self.cfg.num_hidden_layers;
        for _ in 0..self.cfg.num_hidden_layers {
            ws.kv.push(self.gpu.alloc(per)?);
        }
        Ok(())
    }

    /// Enqueue the body: embed + all layers over `b × s` tokens (a full pass) or over the
    /// window's `b × w` rows (a cache step) into the residual stream.
    fn enqueue_body(
        &self,
        b: usize,
        s: usize,
        gen_start: usize,
        blk: usize,
        pass: Pass,
    ) -> Result<()> {
        let ws = self.ws.as_ref().context("no workspace")?;
        let c = &self.cfg;
        let g = &self.gpu;
        let w = match pass {
            Pass::Full { .. } => s,
            Pass::Window { w } => w,
        };
        let cached = pass != Pass::Full { cache: false };
        if cached && ws.kv.len() != c.num_hidden_layers {
            bail!("cache pass without a KV cache");
        }
        let t = b * w;
        let (h, i, hd) = (
            c.hidden_size as i32,
            c.intermediate_size as i32,
            c.head_dim() as i32,
        );
        let (nh, kv) = (c.num_attention_heads as i32, c.kv_heads() as i32);
        let eps = c.rms_norm_eps as f32;
        let qkvn = ((nh + 2 * kv) * hd) as usize;
        let tt = t as u32;
        let (si, wi, gs, blki) = (s as i32, w as i32, gen_start as i32, blk as i32);
        let win_base: i32 = match pass {
            Pass::Full { .. } => -1,
            Pass::Window { .. } => gs,
        };
        match pass {
            Pass::Full { .. } => g.launch(
                self.k.embed,
                (tt, 1, 1),
                (128, 1, 1),
                0,
                &mut kargs![&ws.x.ptr, &self.embed.ptr, &ws.resid.ptr, &h],
            )?,
            Pass::Window { .. } => g.launch(
                self.k.embed_window,
                (tt, 1, 1),
                (128, 1, 1),
                0,
                &mut kargs![
                    &ws.x.ptr,
                    &self.embed.ptr,
                    &ws.resid.ptr,
                    &h,
                    &si,
                    &wi,
                    &ws.state.ptr,
                    &gs,
                    &blki
                ],
            )?,
        }
        self.mark("embed")?;
        let scale_log2 = (1.0 / (hd as f64).sqrt() * std::f64::consts::LOG2_E) as f32;
        let kv_half = (b * s * kv as usize * hd as usize * BF) as u64;
        // 8 warps share each K/V tile over 128 queries, unless that leaves SMs idle.
        let attn_nw = match self.attn_warps {
            // (a window shorter than 128 rows would idle most of the 8 warps)
            0 if w >= 128 && b * nh as usize * w.div_ceil(128) >= 2 * self.sms => 8,
            0 => 4,
            n => n,
        };
        let attn_k = if attn_nw == 8 {
            self.k.attn8
        } else {
            self.k.attn
        };
        let rope_threads = (((nh + 2 * kv) * hd / 8) as u32).div_ceil(32).clamp(1, 32) * 32;
        for (l, lw) in self.layers.iter().enumerate() {
            let (k_out, v_out) = if cached {
                (ws.kv[l].ptr, ws.kv[l].ptr + kv_half)
            } else {
                (ws.k.ptr, ws.v.ptr)
            };
            g.launch(
                self.k.rmsnorm,
                (tt, 1, 1),
                (256, 1, 1),
                0,
                &mut kargs![&ws.resid.ptr, &lw.ln1.ptr, &ws.hn.ptr, &h, &eps],
            )?;
            self.mark("rmsnorm")?;
            self.blas.gemm(
                ws.hn.ptr,
                h as usize,
                lw.qkv.ptr,
                ws.qkv.ptr,
                qkvn,
                OutType::Bf16,
                t,
                qkvn,
                h as usize,
                false,
            )?;
            self.mark("gemm_qkv")?;
            g.launch(
                self.k.qkv_rope,
                (tt, 1, 1),
                (rope_threads, 1, 1),
                0,
                &mut kargs![
                    &ws.qkv.ptr,
                    &self.cos.ptr,
                    &self.sin.ptr,
                    &ws.pad.ptr,
                    &ws.q.ptr,
                    &k_out,
                    &v_out,
                    &si,
                    &wi,
                    &nh,
                    &kv,
                    &hd,
                    &ws.state.ptr,
                    &win_base,
                    &blki
                ],
            )?;
            self.mark("rope")?;
            g.launch(
                attn_k,
                ((w.div_ceil(16 * attn_nw)) as u32, nh as u32, b as u32),
                (32 * attn_nw as u32, 1, 1),
                attn_smem_bytes(hd as usize) as u32,
                &mut kargs![
                    &ws.q.ptr,
                    &k_out,
                    &v_out,
                    &ws.attn.ptr,
                    &ws.pad.ptr,
                    &wi,
                    &si,
                    &nh,
                    &kv,
                    &scale_log2
                ],
            )?;
            self.mark("attention")?;
            let qd = (nh * hd) as usize;
            self.blas.gemm(
                ws.attn.ptr,
                qd,
                lw.o.ptr,
                ws.resid.ptr,
                h as usize,
                OutType::F32,
                t,
                h as usize,
                qd,
                true,
            )?;
            self.mark("gemm_o")?;
            g.launch(
                self.k.rmsnorm,
                (tt, 1, 1),
                (256, 1, 1),
                0,
                &mut kargs![&ws.resid.ptr, &lw.ln2.ptr, &ws.hn.ptr, &h, &eps],
            )?;
            self.mark("rmsnorm")?;
            let i2 = 2 * i as usize;
            self.blas.gemm(
                ws.hn.ptr,
                h as usize,
                lw.gu.ptr,
                ws.gu.ptr,
                i2,
                OutType::Bf16,
                t,
                i2,
                h as usize,
                false,
            )?;
            self.mark("gemm_gate_up")?;
            g.launch(
                self.k.swiglu,
                (tt, 1, 1),
                (128, 1, 1),
                0,
                &mut kargs![&ws.gu.ptr, &ws.act.ptr, &i],
            )?;
            self.mark("swiglu")?;
            self.blas.gemm(
                ws.act.ptr,
                i as usize,
                lw.down.ptr,
                ws.resid.ptr,
                h as usize,
                OutType::F32,
                t,
                h as usize,
                i as usize,
                true,
            )?;
            self.mark("gemm_down")?;
        }
        Ok(())
    }

    /// Profiling: record an event labelled with the op just enqueued (no-op otherwise).
    fn mark(&self, label: &'static str) -> Result<()> {
        if let Some(m) = self.marks.borrow_mut().as_mut() {
            m.push((label, self.gpu.record()?));
        }
        Ok(())
    }

    /// Device milliseconds per op kind for one sampler step over `b` prompts of `prompt_len`
    /// tokens (events between ops, no graph): what a step spends where. `window`: a dual-cache
    /// window step of `p.block_length` rows instead of a full pass.
    pub fn profile(
        &mut self,
        b: usize,
        prompt_len: usize,
        p: &GenParams,
        window: bool,
    ) -> Result<Vec<(String, f64)>> {
        let prompts: Vec<Vec<u32>> = (0..b)
            .map(|r| {
                (0..prompt_len)
                    .map(|i| ((r * 31 + i * 7) % 1000) as u32 + 1)
                    .collect()
            })
            .collect();
        let s = prompt_len + p.gen_length;
        let (seqs, pads): (Vec<Vec<u32>>, Vec<usize>) = prompts
            .iter()
            .map(|q| {
                let mut row = q.clone();
                row.resize(s, p.mask_id);
                (row, 0)
            })
            .unzip();
        let keys = vec![1u64; b];
        self.upload_batch(&seqs, &pads, &keys, b * p.block_length)?;
        if window {
            self.ensure_kv_cache()?;
        }
        {
            let ws = self.ws.as_ref().unwrap();
            self.gpu.write(&ws.ntrans, 0, &p.num_transfer())?;
            self.gpu.write(&ws.state, 0, &[0i32; 4])?;
            self.gpu.write(&ws.ban, 0, &[p.mask_id])?;
        }
        let pass = if window {
            Pass::Window { w: p.block_length }
        } else {
            Pass::Full { cache: false }
        };
        // Warm-up (cuBLAS heuristics, module load), then the measured step.
        self.enqueue_step(b, s, prompt_len, p, pass)?;
        self.gpu.sync()?;
        self.gpu
            .write(&self.ws.as_ref().unwrap().state, 0, &[0i32; 4])?;
        *self.marks.borrow_mut() = Some(vec![("start", self.gpu.record()?)]);
        let r = self.enqueue_step(b, s, prompt_len, p, pass);
        let marks = self.marks.borrow_mut().take().unwrap_or_default();
        r?;
        self.gpu.sync()?;
        let mut acc: Vec<(String, f64)> = vec![];
        for w in marks.windows(2) {
            let ms = self.gpu.elapsed_ms(w[0].1, w[1].1)? as f64;
            match acc.iter_mut().find(|(n, _)| n == w[1].0) {
                Some(e) => e.1 += ms,
                None => acc.push((w[1].0.to_string(), ms)),
            }
        }
        for (_, e) in marks {
            self.gpu.destroy_event(e);
        }
        Ok(acc)
    }

    fn head_ptr(&self) -> u64 {
        self.lm_head
            .as_ref()
            .map(|b| b.ptr)
            .unwrap_or(self.embed.ptr)
    }

    /// LM head over `rows` normalised rows in `hb` → fp32 logits.
    fn enqueue_head(&self, rows: usize) -> Result<()> {
        let ws = self.ws.as_ref().context("no workspace")?;
        let (h, v) = (self.cfg.hidden_size, self.cfg.vocab_size);
        self.blas.gemm(
            ws.hb.ptr,
            h,
            self.head_ptr(),
            ws.logits.ptr,
            v,
            OutType::F32,
            rows,
            v,
            h,
            false,
        )
    }

    /// Upload a left-padded batch; returns (b, s).
    fn upload_batch(
        &mut self,
        seqs: &[Vec<u32>],
        pads: &[usize],
        keys: &[u64],
        out_rows: usize,
    ) -> Result<(usize, usize)> {
        let b = seqs.len();
        if b == 0 {
            bail!("empty batch");
        }
        let s = seqs[0].len();
        if seqs.iter().any(|q| q.len() != s) || pads.len() != b {
            bail!("batch rows must be left-padded to one length");
        }
        let v = self.cfg.vocab_size as u32;
        for (r, q) in seqs.iter().enumerate() {
            if let Some(t) = q.iter().find(|&&t| t >= v) {
                bail!("batch row {r}: token id {t} is outside the vocabulary ({v})");
            }
        }
        self.ensure_workspace(b, s, out_rows)?;
        let ws = self.ws.as_ref().unwrap();
        let flat: Vec<u32> = seqs.iter().flatten().copied().collect();
        self.gpu.write(&ws.x, 0, &flat)?;
        let p: Vec<i32> = pads.iter().map(|&p| p as i32).collect();
        self.gpu.write(&ws.pad, 0, &p)?;
        let mut k = keys.to_vec();
        k.resize(b, 0);
        self.gpu.write(&ws.keys, 0, &k)?;
        Ok((b, s))
    }

    /// Full-vocabulary fp32 logits at the given (row, position) pairs of a left-padded batch.
    pub fn logits_at(
        &mut self,
        seqs: &[Vec<u32>],
        pads: &[usize],
        at: &[(usize, usize)],
    ) -> Result<Vec<f32>> {
        let (b, s) = self.upload_batch(seqs, pads, &[], at.len())?;
        let rows: Vec<i32> = at.iter().map(|&(r, p)| (r * s + p) as i32).collect();
        let ws = self.ws.as_ref().unwrap();
        self.gpu.write(&ws.rows, 0, &rows)?;
        self.enqueue_body(b, s, 0, 1, Pass::Full { cache: false })?;
        let (h, eps) = (self.cfg.hidden_size as i32, self.cfg.rms_norm_eps as f32);
        self.gpu.launch(
            self.k.rmsnorm_rows,
            (at.len() as u32, 1, 1),
            (256, 1, 1),
            0,
            &mut kargs![
                &ws.resid.ptr,
                &self.norm.ptr,
                &ws.hb.ptr,
                &h,
                &eps,
                &ws.rows.ptr
            ],
        )?;
        self.enqueue_head(at.len())?;
        let mut out = vec![0f32; at.len() * self.cfg.vocab_size];
        self.gpu.read(&ws.logits, 0, &mut out)?;
        Ok(out)
    }

    /// MCQ letter head at (row, position): raw log-probs (log-softmax over the vocabulary) and
    /// the distribution renormalised over each item's letter ids (≤ 10).
    pub fn letters_at(
        &mut self,
        seqs: &[Vec<u32>],
        pads: &[usize],
        at: &[(usize, usize)],
        letters: &[Vec<u32>],
    ) -> Result<Vec<(Vec<f32>, Vec<f32>)>> {
        if letters.len() != at.len() || letters.iter().any(|l| l.is_empty() || l.len() > 10) {
            bail!("each answer slot needs 1 to 10 letter ids");
        }
        self.logits_at(seqs, pads, at)?;
        let ws = self.ws.as_ref().unwrap();
        let mut ids = vec![0u32; at.len() * 10];
        for (r, l) in letters.iter().enumerate() {
            ids[r * 10..r * 10 + l.len()].copy_from_slice(l);
        }
        let n: Vec<i32> = letters.iter().map(|l| l.len() as i32).collect();
        self.gpu.write(&ws.letters, 0, &ids)?;
        self.gpu.write(&ws.nletters, 0, &n)?;
        let v = self.cfg.vocab_size as i32;
        self.gpu.launch(
            self.k.letter,
            (at.len() as u32, 1, 1),
            (512, 1, 1),
            0,
            &mut kargs![
                &ws.logits.ptr,
                &v,
                &ws.letters.ptr,
                &ws.nletters.ptr,
                &ws.lp.ptr,
                &ws.lprob.ptr
            ],
        )?;
        let mut lp = vec![0f32; at.len() * 10];
        let mut pr = vec![0f32; at.len() * 10];
        self.gpu.read(&ws.lp, 0, &mut lp)?;
        self.gpu.read(&ws.lprob, 0, &mut pr)?;
        Ok(letters
            .iter()
            .enumerate()
            .map(|(r, l)| {
                (
                    lp[r * 10..r * 10 + l.len()].to_vec(),
                    pr[r * 10..r * 10 + l.len()].to_vec(),
                )
            })
            .collect())
    }

    /// One sampler step (body + head + sampler + commit + advance) for a batch of `b × s`.
    fn enqueue_step(
        &self,
        b: usize,
        s: usize,
        gen_start: usize,
        p: &GenParams,
        pass: Pass,
    ) -> Result<()> {
        let blk = p.block_length;
        self.enqueue_body(b, s, gen_start, blk, pass)?;
        let ws = self.ws.as_ref().unwrap();
        let g = &self.gpu;
        let rows = b * blk;
        let (h, eps) = (self.cfg.hidden_size as i32, self.cfg.rms_norm_eps as f32);
        let (si, blki, gs, sh) = (
            s as i32,
            blk as i32,
            gen_start as i32,
            p.logits_shift as i32,
        );
        // Where the block's rows sit in the residual stream: (rows apart, first, stride).
        let (ns, ngs, nstride) = match pass {
            Pass::Full { .. } => (si, gs, blki),
            Pass::Window { w } => (w as i32, 0, 0),
        };
        g.launch(
            self.k.rmsnorm_block,
            (rows as u32, 1, 1),
            (256, 1, 1),
            0,
            &mut kargs![
                &ws.resid.ptr,
                &self.norm.ptr,
                &ws.hb.ptr,
                &h,
                &eps,
                &ws.state.ptr,
                &ns,
                &blki,
                &ngs,
                &sh,
                &nstride
            ],
        )?;
        self.mark("final_norm")?;
        self.enqueue_head(rows)?;
        self.mark("lm_head")?;
        let v = self.cfg.vocab_size as i32;
        let rr = i32::from(p.remask_random);
        let nblocks = (p.gen_length / blk) as i32;
        let n_choice = (1 + p.ban_choice.len()) as i32;
        let n_all = n_choice + p.ban_conf.len() as i32;
        g.launch(
            self.k.sample,
            (rows as u32, 1, 1),
            (512, 1, 1),
            0,
            &mut kargs![
                &ws.logits.ptr,
                &v,
                &ws.x.ptr,
                &si,
                &blki,
                &ws.state.ptr,
                &gs,
                &p.mask_id,
                &p.temperature,
                &rr,
                &p.seed,
                &ws.keys.ptr,
                &ws.x0.ptr,
                &ws.conf.ptr,
                &ws.ban.ptr,
                &n_choice,
                &n_all,
                &nblocks
            ],
        )?;
        self.mark("sampler")?;
        let threads = blk.div_ceil(32) * 32;
        let threshold = p.threshold.unwrap_or(-1.0);
        g.launch(
            self.k.commit,
            (b as u32, 1, 1),
            (threads as u32, 1, 1),
            (blk * 8) as u32,
            &mut kargs![
                &ws.x.ptr,
                &si,
                &blki,
                &ws.state.ptr,
                &gs,
                &ws.ntrans.ptr,
                &p.mask_id,
                &ws.x0.ptr,
                &ws.conf.ptr,
                &threshold,
                &nblocks
            ],
        )?;
        self.mark("commit")?;
        let spb = p.steps_per_block() as i32;
        let bi = b as i32;
        let adaptive = i32::from(p.threshold.is_some());
        g.launch(
            self.k.advance,
            (1, 1, 1),
            (256, 1, 1),
            0,
            &mut kargs![
                &ws.state.ptr,
                &spb,
                &ws.x.ptr,
                &si,
                &bi,
                &blki,
                &gs,
                &p.mask_id,
                &adaptive,
                &nblocks
            ],
        )?;
        self.mark("advance")?;
        Ok(())
    }

    /// Left-pad `prompts` to one length and append `gen_length` masks: (rows, pads, prompt
    /// length). Position ids come from the pads (index among real tokens).
    pub fn left_pad(prompts: &[Vec<u32>], p: &GenParams) -> (Vec<Vec<u32>>, Vec<usize>, usize) {
        let lp = prompts.iter().map(|q| q.len()).max().unwrap_or(0);
        let s = lp + p.gen_length;
        let (rows, pads) = prompts
            .iter()
            .map(|q| {
                let mut row = vec![p.pad_id; lp - q.len()];
                row.extend_from_slice(q);
                row.resize(s, p.mask_id);
                (row, lp - q.len())
            })
            .unzip();
        (rows, pads, lp)
    }

    /// Validate, upload a generation batch and reset the device-side sampler state (schedule,
    /// step counter, excluded ids); with `cache`, allocate the KV cache. Returns (b, s, lp).
    fn prepare(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &GenParams,
        cache: bool,
    ) -> Result<(usize, usize, usize)> {
        p.validate()?;
        if keys.len() != prompts.len() {
            bail!("one RNG key per prompt");
        }
        let (seqs, pads, lp) = Self::left_pad(prompts, p);
        let (b, s) = self.upload_batch(&seqs, &pads, keys, prompts.len() * p.block_length)?;
        if cache {
            self.ensure_kv_cache()?;
        }
        let ws = self.ws.as_ref().unwrap();
        self.gpu.write(&ws.ntrans, 0, &p.num_transfer())?;
        self.gpu.write(&ws.state, 0, &[0i32; 4])?;
        let ban: Vec<u32> = std::iter::once(p.mask_id)
            .chain(p.ban_choice.iter().copied())
            .chain(p.ban_conf.iter().copied())
            .collect();
        self.gpu.write(&ws.ban, 0, &ban)?;
        Ok((b, s, lp))
    }

    /// Diagnostics for the cache windows: with nothing committed (k = 0 every step), run one
    /// full pass that fills the KV cache, then a dual window (the block) and a prefix window
    /// (block → end) step; each must reproduce the full pass's block logits. Returns their
    /// relative errors against it.
    pub fn window_check(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &GenParams,
    ) -> Result<(f64, f64)> {
        let (b, s, lp) = self.prepare(prompts, keys, p, true)?;
        let blk = p.block_length;
        // Nothing is committed: k = 0 at every step.
        self.gpu
            .write(&self.ws.as_ref().unwrap().ntrans, 0, &vec![0i32; 1024])?;
        let n = b * blk * self.cfg.vocab_size;
        let run = |pass: Pass| -> Result<Vec<f32>> {
            let ws = self.ws.as_ref().unwrap();
            self.gpu.write(&ws.state, 0, &[0i32; 4])?;
            self.enqueue_step(b, s, lp, p, pass)?;
            let mut out = vec![0f32; n];
            self.gpu.read(&ws.logits, 0, &mut out)?;
            Ok(out)
        };
        let full = run(Pass::Full { cache: true })?;
        let dual = run(Pass::Window { w: blk })?;
        let prefix = run(Pass::Window { w: s - lp })?;
        let rel = |a: &[f32]| {
            let num: f64 = a
                .iter()
                .zip(&full)
                .map(|(x, y)| ((x - y) as f64).powi(2))
                .sum();
            let den: f64 = full.iter().map(|y| (*y as f64).powi(2)).sum();
            (num / den).sqrt()
        };
        Ok((rel(&dual), rel(&prefix)))
    }

    /// The device-side generation state: (global step, step within block, block).
    fn read_state(&self) -> Result<(usize, usize, usize)> {
        let ws = self.ws.as_ref().context("no workspace")?;
        let mut st = [0i32; 4];
        self.gpu.read(&ws.state, 0, &mut st)?;
        Ok((st[0] as usize, st[1] as usize, st[2] as usize))
    }

    /// LLaDA's generate for a batch of prompts (token ids, no padding; `keys` = per-prompt RNG
    /// keys from `rng::prompt_key`). Returns the generated `gen_length` tokens of each prompt
    /// and the number of steps run.
    pub fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &GenParams,
    ) -> Result<Vec<Vec<u32>>> {
        Ok(self.generate_counted(prompts, keys, p)?.0)
    }

    /// [`Self::generate`], also returning how many steps (forward passes) it ran.
    pub fn generate_counted(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &GenParams,
    ) -> Result<(Vec<Vec<u32>>, usize)> {
        let (b, s, lp) = self.prepare(prompts, keys, p, p.cache != CacheMode::None)?;
        let blk = p.block_length;
        let cached = p.cache != CacheMode::None;
        let full = self
            .gpu
            .capture(|| self.enqueue_step(b, s, lp, p, Pass::Full { cache: cached }))?;
        let dual = if p.cache == CacheMode::Dual {
            Some(
                self.gpu
                    .capture(|| self.enqueue_step(b, s, lp, p, Pass::Window { w: blk }))?,
            )
        } else {
            None
        };
        let nblocks = p.gen_length / blk;
        let mut prefix: Vec<Option<super::driver::Graph>> = (0..nblocks).map(|_| None).collect();
        let mut graph_for = |this: &Self, block: usize, step_in_block: usize| -> Result<()> {
            if !cached || step_in_block == 0 {
                return this.gpu.replay(&full);
            }
            if let Some(d) = &dual {
                return this.gpu.replay(d);
            }
            if prefix[block].is_none() {
                let w = s - (lp + block * blk);
                prefix[block] = Some(
                    this.gpu
                        .capture(|| this.enqueue_step(b, s, lp, p, Pass::Window { w }))?,
                );
            }
            this.gpu.replay(prefix[block].as_ref().unwrap())
        };
        let mut steps_run = 0usize;
        if p.threshold.is_none() {
            let spb = p.steps_per_block();
            for block in 0..nblocks {
                for i in 0..spb {
                    graph_for(self, block, i)?;
                    steps_run += 1;
                }
            }
        } else {
            // Adaptive: a block ends when every row's block is committed (≥ 1 per step).
            loop {
                let (_, sib, block) = self.read_state()?;
                if block >= nblocks {
                    break;
                }
                if steps_run > p.gen_length {
                    bail!(
                        "threshold decoding did not finish in {} steps",
                        p.gen_length
                    );
                }
                graph_for(self, block, sib)?;
                steps_run += 1;
            }
        }
        let ws = self.ws.as_ref().unwrap();
        let mut out = vec![0u32; b * s];
        self.gpu.read(&ws.x, 0, &mut out)?;
        Ok((out.chunks(s).map(|r| r[lp..].to_vec()).collect(), steps_run))
    }
}
