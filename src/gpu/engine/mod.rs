//! The GPU forward pass and LLaDA's block-wise sampler, end to end on the device.
//!
//! Per step (one CUDA graph, replayed `steps` times with no host synchronisation; per-step
//! values — global step, step within block, block index — live in a device-side state the
//! kernels read and the last kernel advances):
//!   embed → `num_hidden_layers` × [RMSNorm → QKV GEMM → RoPE/split → flash attention → o_proj GEMM (+residual)
//!   → RMSNorm → gate/up GEMM → SwiGLU → down GEMM (+residual)] → final RMSNorm of the current
//!   block's rows only → LM head GEMM (block rows only, fp32 logits) → fused sampler pass →
//!   per-row top-k commit → advance.
//!
//! Approximate modes (opt-in, never the default): `KvCache::Prefix`/`Dual` (Fast-dLLM): the
//! first step of every block runs the full pass above and stores every layer's K/V; the
//! block's other steps run a window (prefix: block start → end; dual: the block only) that
//! attends to the cached K/V and overwrites the window's own entries. `threshold`
//! (confidence-threshold parallel decoding): each step commits the most confident masked
//! position and every other one at or above the threshold; a block ends when no row has a
//! mask left in it (device-side, read back once per step).
//!
//! The last layer runs on the block's rows only wherever only the block's logits are read
//! (every sampler step): K/V come from every row, but its attention queries, o_proj, MLP and
//! residual cover `b × block` rows (`Tail`), ≈ 1/layers of the step's work saved.
//!
//! `DLM_FOLD_NORM=1` (experimental): the RMSNorm weights are folded into the [q;k;v] and
//! [gate;up] weights at load, the norm becomes a read-only 1/rms pass (`row_rms`), and RoPE /
//! SwiGLU scale each row by it — the GEMMs read the bf16 residual directly.
//!
//! Numerics: bf16 weights and activations at GEMM inputs, fp32 accumulation everywhere, a bf16
//! residual stream like HF/PyTorch's (the GEMM epilogue adds into it in fp32 and rounds once;
//! `Residual::F32` keeps it in fp32: closer to the CPU path, more bytes per step), fp32
//! logits. Semantics are the CPU path's: left padding, position ids = index among real
//! tokens, padded keys masked.

use anyhow::{bail, Context, Result};

use super::blas::{Blas, OutType};
use super::driver::{DevBuf, Gpu, Kernel};
use super::weights::LlamaConfig;

mod attn;
mod body;
mod continuous;
mod device_loop;
mod diag;
mod readout;
mod trace;
mod upload;

use attn::AttnKernel;
pub use attn::AttnVariant;
use device_loop::MAX_BAN;
pub use device_loop::{pad_multiple, DeviceRun, KvCache};

struct LayerW {
    ln1: DevBuf,
    qkv: DevBuf,
    o: DevBuf,
    ln2: DevBuf,
    gu: DevBuf,
    down: DevBuf,
}

/// The residual stream's element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residual {
    Bf16,
    F32,
}

impl Residual {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "bf16" => Ok(Residual::Bf16),
            "f32" | "fp32" => Ok(Residual::F32),
            o => bail!("residual {o:?}: expected bf16 or f32"),
        }
    }
    pub fn as_str(&self) -> &'static str {
        match self {
            Residual::Bf16 => "bf16",
            Residual::F32 => "f32",
        }
    }
    fn bytes(&self) -> usize {
        match self {
            Residual::Bf16 => BF,
            Residual::F32 => 4,
        }
    }
    fn out(&self) -> OutType {
        match self {
            Residual::Bf16 => OutType::Bf16,
            Residual::F32 => OutType::F32,
        }
    }
    /// Kernel-name suffix of the entry points that touch the residual.
    fn suffix(&self) -> &'static str {
        match self {
            Residual::Bf16 => "",
            Residual::F32 => "_f32",
        }
    }
}

/// The entry points that read or write the residual stream, for one residual type.
struct ResidKernels {
    embed: Kernel,
    embed_window: Kernel,
    rmsnorm: Kernel,
    rmsnorm_block: Kernel,
    rmsnorm_rows: Kernel,
    gather_block: Kernel,
}

impl ResidKernels {
    fn load(gpu: &Gpu, r: Residual) -> Result<Self> {
        let kn = |n: &str| gpu.kernel(&format!("{n}{}", r.suffix()));
        Ok(Self {
            embed: kn("embed_gather")?,
            embed_window: kn("embed_window")?,
            rmsnorm: kn("rmsnorm")?,
            rmsnorm_block: kn("rmsnorm_block")?,
            rmsnorm_rows: kn("rmsnorm_rows")?,
            gather_block: kn("gather_block")?,
        })
    }
}

struct Kernels {
    r: ResidKernels,
    qkv_rope: Kernel,
    swiglu: Kernel,
    row_rms: Kernel,
    /// The loaded attention variants ([`AttnVariant`]; looked up by variant): the three
    /// mma.sync shapes, plus one wgmma shape where loaded (`Wgs2` on Hopper with head_dim 128,
    /// or the one `DLM_ATTN` forces).
    attn: Vec<AttnKernel>,
    sample: Kernel,
    commit: Kernel,
    advance: Kernel,
    letter: Kernel,
    /// `--trajectory` / `--top-k`: commit steps and top-k of the positions a step committed.
    record: Kernel,
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
    /// The block rows' residual through the last layer (`b × block` rows).
    tail: DevBuf,
    hn: DevBuf,
    /// Per-row 1/rms of the folded RMSNorm.
    rr: DevBuf,
    /// The fused [q;k;v] GEMM output; attention reads (and rotates) Q from it.
    qkv: DevBuf,
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
    /// The sampler's first non-finite logit: (step << 32 | row), u64::MAX when none.
    nf_key: DevBuf,
    /// Per block row: gen position << 34 | class << 32 | token of its first non-finite logit.
    nf_info: DevBuf,
    ntrans: DevBuf,
    letters: DevBuf,
    nletters: DevBuf,
    lp: DevBuf,
    lprob: DevBuf,
    ban: DevBuf,
    /// EOS/EoT ids that finish a row (early exit).
    stop: DevBuf,
    /// Per layer K and V of every position ([B, KVH, S, HD] each, K first): cache modes only.
    kv: Vec<DevBuf>,
}

/// What one body pass covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Every position; K/V into the per-layer cache when `cache`.
    Full { cache: bool },
    /// `w` positions from the current block's start, against the cached K/V.
    Window { w: usize },
}

/// Where the block's rows sit among a pass's rows: row `base + block·stride + j` of each batch
/// row (block = the device-side block index), the logits shift already in `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tail {
    base: i32,
    stride: i32,
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
    /// Attention variant forced by `DLM_ATTN` (none: by grid size).
    attn_force: Option<AttnVariant>,
    /// The variant for large grids: the wgmma one where loaded, else `M2`.
    attn_large: AttnVariant,
    sms: usize,
    resid: Residual,
    /// RMSNorm weights folded into the qkv / gate-up weights (`DLM_FOLD_NORM=1`).
    fold_norm: bool,
    /// Run the last layer on the block's rows only in sampler steps (`DLM_TAIL_ROWS=0`: every
    /// row, for A/B checks).
    tail_rows: bool,
    /// When set, every op of a pass records an event after it, labelled ([`Self::profile`]).
    marks: std::cell::RefCell<Option<Vec<(&'static str, crate::gpu::driver::Event)>>>,
    /// Per-slot trajectory / top-k buffers of a `--trajectory`/`--top-k` run ([`trace`]).
    trace: Option<trace::TraceBufs>,
}

const BF: usize = 2;

/// Rows (slots) the device-side generation state holds (`MAX_SLOTS` in kernels/common.cuh).
pub const MAX_SLOTS: usize = crate::sampling::GPU_MAX_ROWS;
/// Bytes of `GenState` (kernels/common.cuh): 4 ints, then 4 per-row arrays.
const STATE_BYTES: usize = 16 + 4 * 4 * MAX_SLOTS;

/// One row's device-side generation state (a slot of `GenState`'s per-row arrays).
pub(super) use crate::sampling::schedule::RowState;

impl Engine {
    /// Open the GPU, validate and upload the checkpoint in `dir`.
    pub fn load(dir: &std::path::Path, ordinal: usize, max_pos: usize) -> Result<Self> {
        let (cfg, ck) = super::weights::open(dir)?;
        Self::from_checkpoint(cfg, &ck, ordinal, max_pos)
    }

    /// Open the GPU and upload an already opened and validated checkpoint whose shape passed
    /// [`super::weights::check_gpu_shape`] (the distill teacher's: its files are not parsed or
    /// hashed a second time).
    pub fn from_checkpoint(
        cfg: LlamaConfig,
        ck: &super::weights::Weights,
        ordinal: usize,
        max_pos: usize,
    ) -> Result<Self> {
        let gpu = Gpu::open(ordinal)?;
        let blas = Blas::new(&gpu)?;
        let kernels = upload::kernels(&gpu, &cfg)?;
        // DLM_FOLD_NORM=1 (experimental, not yet checked on a GPU): each layer's RMSNorm
        // weight is folded into the columns of the GEMM it feeds ([q;k;v] and [gate;up]), the
        // norm becomes a read-only 1/rms pass, and RoPE/SwiGLU apply the per-row scale.
        let fold_norm = crate::gpu::tuning::fold_norm();
        let t = upload::tensors(&gpu, ck, &cfg, fold_norm)?;
        let (cos, sin) = upload::rope_tables(&gpu, &cfg, max_pos)?;
        Ok(Self {
            ws: None,
            layers: t.layers,
            embed: t.embed,
            norm: t.norm,
            lm_head: t.lm_head,
            cos,
            sin,
            max_pos,
            k: kernels.k,
            blas,
            cfg,
            weight_bytes: t.bytes,
            attn_force: kernels.attn_force,
            attn_large: kernels.wgmma.unwrap_or(AttnVariant::M2),
            sms: gpu.sm_count,
            resid: Residual::Bf16,
            fold_norm,
            tail_rows: crate::gpu::tuning::tail_rows(),
            gpu,
            marks: std::cell::RefCell::new(None),
            trace: None,
        })
    }

    /// Capture what `f` enqueues as a graph; when that left GEMM shapes untuned
    /// (`DLM_GEMM_TUNE=1`), tune them now and capture again.
    fn capture(&self, f: impl Fn() -> Result<()>) -> Result<super::driver::Graph> {
        let g = self.gpu.capture(&f)?;
        if self.blas.tune_pending()? {
            drop(g);
            return self.gpu.capture(&f);
        }
        Ok(g)
    }

    /// Tuned cuBLASLt GEMMs (the fastest of the heuristic candidates per shape, timed on first
    /// use); `plans`: where the choices are loaded from and saved to ([`super::blas`]).
    pub fn set_gemm_tuning(&mut self, plans: Option<&std::path::Path>) -> Result<()> {
        self.blas.enable_tuning(&self.gpu.name, plans)
    }

    /// Switch the residual stream's precision (drops the workspace; bf16 after `load`).
    pub fn set_residual(&mut self, r: Residual) -> Result<()> {
        if r == Residual::F32 && self.fold_norm {
            bail!("DLM_FOLD_NORM=1 needs the bf16 residual (the GEMMs read it directly)");
        }
        if r != self.resid {
            self.k.r = ResidKernels::load(&self.gpu, r)?;
            self.resid = r;
            self.ws = None;
        }
        Ok(())
    }

    /// The attention variants this engine loaded (each can be forced by [`Self::set_attention`]).
    pub fn attention_variants(&self) -> Vec<AttnVariant> {
        self.k.attn.iter().map(|a| a.v).collect()
    }

    /// Force one attention variant (None: by grid size, the default); a variant this engine
    /// did not load ([`Self::attention_variants`]) leaves the choice as it was.
    pub fn set_attention(&mut self, v: Option<AttnVariant>) {
        if v.is_none_or(|v| self.k.attn.iter().any(|a| a.v == v)) {
            self.attn_force = v;
        }
    }

    pub fn residual(&self) -> Residual {
        self.resid
    }

    /// Bytes of activation workspace for `b` rows × `s` positions and `out_rows` LM-head rows.
    pub fn workspace_bytes(&self, b: usize, s: usize, out_rows: usize) -> usize {
        let (cfg, rb) = (&self.cfg, self.resid.bytes());
        let t = b * s;
        let (h, i, v, hd) = (
            cfg.hidden_size,
            cfg.intermediate_size,
            cfg.vocab_size,
            cfg.head_dim,
        );
        let (nh, kv) = (cfg.num_heads, cfg.num_kv_heads);
        let per_tok = rb * h           // resid
            + BF * h + 4               // hn, rr
            + BF * (nh + 2 * kv) * hd  // qkv
            + BF * 2 * kv * hd         // k, v
            + BF * nh * hd             // attn
            + BF * 2 * i               // gate/up
            + BF * i                   // act
            + 4; // x
        t * per_tok + out_rows * ((BF + rb) * h + 4 * v + 20 + 80) + b * 16 + (64 << 20)
    }

    /// A workspace for `b` rows of `s` tokens (left padding included) and `out_rows` output
    /// rows. `real` is the longest row without its left padding: positions count real tokens
    /// only (`pos = index - pad`), so `real`, not `s`, must fit the position table — checked
    /// on every call, since a workspace kept from a larger batch would not check it.
    fn ensure_workspace(&mut self, b: usize, s: usize, real: usize, out_rows: usize) -> Result<()> {
        if real > self.max_pos {
            bail!(
                "sequence length {real} exceeds the engine's position table ({})",
                self.max_pos
            );
        }
        if let Some(ws) = &self.ws {
            if ws.b >= b && ws.s >= s && ws.out_rows >= out_rows {
                return Ok(());
            }
        }
        self.ws = None; // free the old one first
        let need = self.workspace_bytes(b, s, out_rows);
        let (free, _) = self.gpu.mem_info()?;
        if need as f64 > free as f64 * 0.95 {
            let per_row = self.workspace_bytes(1, s, out_rows / b.max(1)) as f64;
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
        let (h, i, v, hd) = (c.hidden_size, c.intermediate_size, c.vocab_size, c.head_dim);
        let (nh, kv) = (c.num_heads, c.num_kv_heads);
        let g = &self.gpu;
        self.ws = Some(Workspace {
            b,
            s,
            out_rows,
            x: g.alloc(t * 4)?,
            pad: g.alloc(b * 4)?,
            keys: g.alloc(b * 8)?,
            resid: g.alloc(t * h * self.resid.bytes())?,
            tail: g.alloc(out_rows.max(1) * h * self.resid.bytes())?,
            hn: g.alloc(t * h * BF)?,
            rr: g.alloc(t * 4)?,
            qkv: g.alloc(t * (nh + 2 * kv) * hd * BF)?,
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
            state: g.alloc(STATE_BYTES)?,
            stop: g.alloc(MAX_BAN * 4)?,
            nf_key: g.alloc(8)?,
            nf_info: g.alloc(out_rows * 8)?,
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
        cfg.num_layers * 2 * b * s * cfg.num_kv_heads * cfg.head_dim * BF
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
        let per = need / self.cfg.num_layers;
        for _ in 0..self.cfg.num_layers {
            ws.kv.push(self.gpu.alloc(per)?);
        }
        Ok(())
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
        // The longest real row: the one with the least left padding.
        let real = s - pads.iter().copied().min().unwrap_or(0).min(s);
        self.ensure_workspace(b, s, real, out_rows)?;
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
}

impl Engine {
    /// Reset the device-side generation state: step 0 of block 0 for rows `0..b`, every other
    /// slot idle.
    pub(super) fn reset_state(&self, b: usize) -> Result<()> {
        let rows = vec![RowState::FRESH; b];
        self.write_state([0; 4], &rows)
    }

    /// Write the whole generation state: the batch phase `[step, step in block, block, 0]`
    /// and rows `0..rows.len()` (the other slots idle).
    pub(super) fn write_state(&self, phase: [i32; 4], rows: &[RowState]) -> Result<()> {
        if rows.len() > MAX_SLOTS {
            bail!(
                "{} rows in flight; the GPU sampler holds at most {MAX_SLOTS}",
                rows.len()
            );
        }
        let ws = self.ws.as_ref().context("no workspace")?;
        let mut st = vec![0i32; STATE_BYTES / 4];
        st[..4].copy_from_slice(&phase);
        for (r, x) in rows.iter().enumerate() {
            st[4 + r] = x.block;
            st[4 + MAX_SLOTS + r] = x.sib;
            st[4 + 2 * MAX_SLOTS + r] = x.step;
            st[4 + 3 * MAX_SLOTS + r] = x.live;
        }
        self.gpu.write(&ws.state, 0, &st)
    }

    /// Read the whole generation state: the batch phase and rows `0..b`.
    pub(super) fn read_rows(&self, b: usize) -> Result<([i32; 4], Vec<RowState>)> {
        let ws = self.ws.as_ref().context("no workspace")?;
        let mut st = vec![0i32; STATE_BYTES / 4];
        self.gpu.read(&ws.state, 0, &mut st)?;
        let rows = (0..b)
            .map(|r| RowState {
                block: st[4 + r],
                sib: st[4 + MAX_SLOTS + r],
                step: st[4 + 2 * MAX_SLOTS + r],
                live: st[4 + 3 * MAX_SLOTS + r],
            })
            .collect();
        Ok(([st[0], st[1], st[2], st[3]], rows))
    }
}
