//! The forward pass as enqueued work: embed, the layers, the LM head (full pass or cache window).

use anyhow::{bail, Context, Result};

use super::attn::AttnKernel;
use super::{AttnVariant, Engine, LayerW, Pass, Tail, Workspace, BF};
use crate::gpu::blas::OutType;
use crate::kargs;

impl Engine {
    /// Enqueue the body: embed + all layers over `b × s` tokens (a full pass) or over the
    /// window's `b × w` rows (a cache step) into the residual stream. With `tail`, the last
    /// layer's queries, o_proj and MLP cover only the block's `b × blk` rows (at `tail`), whose
    /// residual ends in `ws.tail`; its K/V still come from every row.
    pub(super) fn enqueue_body(
        &self,
        b: usize,
        s: usize,
        gen_start: usize,
        blk: usize,
        pass: Pass,
        tail: Option<Tail>,
    ) -> Result<()> {
        let ws = self.ws.as_ref().context("no workspace")?;
        let c = &self.cfg;
        let w = match pass {
            Pass::Full { .. } => s,
            Pass::Window { w } => w,
        };
        let cached = pass != Pass::Full { cache: false };
        if cached && ws.kv.len() != c.num_layers {
            bail!("cache pass without a KV cache");
        }
        let t = b * w;
        let (h, hd) = (c.hidden_size as i32, c.head_dim as i32);
        let (nh, kv) = (c.num_heads as i32, c.num_kv_heads as i32);
        let (si, wi, gs, blki) = (s as i32, w as i32, gen_start as i32, blk as i32);
        let d = BodyArgs {
            b,
            w,
            t,
            tt: t as u32,
            blk,
            h,
            hd,
            nh,
            kv,
            qkvn: ((nh + 2 * kv) * hd) as usize,
            si,
            wi,
            blki,
            win_base: match pass {
                Pass::Full { .. } => -1,
                Pass::Window { .. } => gs,
            },
            scale_log2: (1.0 / (hd as f64).sqrt() * std::f64::consts::LOG2_E) as f32,
            kv_half: (b * s * kv as usize * hd as usize * BF) as u64,
            // Folded RMSNorm: RoPE and SwiGLU scale each row by its 1/rms (null: no scaling).
            rr: if self.fold_norm { ws.rr.ptr } else { 0 },
            // RoPE on K and V only (q null): attention rotates Q as it loads it from qkv.
            no_q: 0u64,
            rope_threads: ((2 * kv * hd / 8) as u32).div_ceil(32).clamp(1, 32) * 32,
            cached,
        };
        self.enqueue_embed(ws, &d, pass, gs)?;
        let n_layers = self.layers.len();
        for (l, lw) in self.layers.iter().enumerate() {
            // The last layer with a tail: queries and everything after attention on the
            // block's rows only.
            let last = tail.filter(|_| l + 1 == n_layers);
            self.enqueue_layer(ws, &d, l, lw, last)?;
        }
        Ok(())
    }

    /// The embedding of the pass's tokens into the residual stream (a window: its rows only).
    fn enqueue_embed(&self, ws: &Workspace, d: &BodyArgs, pass: Pass, gs: i32) -> Result<()> {
        let rk = &self.k.r;
        let (tt, h, si, wi, blki) = (d.tt, d.h, d.si, d.wi, d.blki);
        match pass {
            Pass::Full { .. } => self.gpu.launch(
                rk.embed,
                (tt, 1, 1),
                (128, 1, 1),
                0,
                &mut kargs![&ws.x.ptr, &self.embed.ptr, &ws.resid.ptr, &h],
            )?,
            Pass::Window { .. } => self.gpu.launch(
                rk.embed_window,
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
        self.mark("embed")
    }

    /// The attention kernel for `rows` query rows per sequence. Large grids: the wgmma kernel
    /// (Hopper, head_dim 128), else two m-tiles per warp (half the shared-memory traffic per
    /// FLOP); a grid that would leave SMs idle at 128 queries per CTA: 64 (4 warps × 16).
    fn attn_for(&self, b: usize, nh: i32, rows: usize) -> AttnKernel {
        let v = self.attn_force.unwrap_or(
            if rows >= 128 && b * nh as usize * rows.div_ceil(128) >= 2 * self.sms {
                self.attn_large
            } else {
                AttnVariant::W4
            },
        );
        // Every variant attn_force / attn_large can name was loaded (Engine::load).
        *self
            .k
            .attn
            .iter()
            .find(|a| a.v == v)
            .expect("attention variant loaded")
    }

    /// Layer `l`: norm → QKV GEMM → RoPE/split (K/V into the cache when `cached`) → attention
    /// → (tail: gather the block's residual rows) → o_proj GEMM (+residual) → norm → MLP.
    /// `last`: this is the last layer and a tail is asked for.
    fn enqueue_layer(
        &self,
        ws: &Workspace,
        d: &BodyArgs,
        l: usize,
        lw: &LayerW,
        last: Option<Tail>,
    ) -> Result<()> {
        let (b, blk, t, h) = (d.b, d.blk, d.t, d.h);
        let (k_out, v_out) = if d.cached {
            (ws.kv[l].ptr, ws.kv[l].ptr + d.kv_half)
        } else {
            (ws.k.ptr, ws.v.ptr)
        };
        let (tl_rows, rbuf) = if last.is_some() {
            (b * blk, ws.tail.ptr)
        } else {
            (t, ws.resid.ptr)
        };
        // The norm's output: normalised rows in hn, or (folded) the residual itself with
        // 1/rms per row in rr, applied by RoPE/SwiGLU.
        let x_in = self.enqueue_norm(ws.resid.ptr, lw.ln1.ptr, t)?;
        self.mark("rmsnorm")?;
        self.blas.gemm(
            x_in,
            h as usize,
            lw.qkv.ptr,
            ws.qkv.ptr,
            d.qkvn,
            OutType::Bf16,
            t,
            d.qkvn,
            h as usize,
            false,
        )?;
        self.mark("gemm_qkv")?;
        self.enqueue_rope(ws, d, k_out, v_out, last)?;
        self.enqueue_attention(ws, d, k_out, v_out, last)?;
        if let Some(tl) = last {
            let zero = 0i32;
            self.gpu.launch(
                self.k.r.gather_block,
                ((b * blk) as u32, 1, 1),
                (128, 1, 1),
                0,
                &mut kargs![
                    &ws.resid.ptr,
                    &ws.tail.ptr,
                    &h,
                    &ws.state.ptr,
                    &d.wi,
                    &d.blki,
                    &tl.base,
                    &zero,
                    &tl.stride
                ],
            )?;
            self.mark("gather")?;
        }
        let qd = (d.nh * d.hd) as usize;
        self.blas.gemm(
            ws.attn.ptr,
            qd,
            lw.o.ptr,
            rbuf,
            h as usize,
            self.resid.out(),
            tl_rows,
            h as usize,
            qd,
            true,
        )?;
        self.mark("gemm_o")?;
        let x_in = self.enqueue_norm(rbuf, lw.ln2.ptr, tl_rows)?;
        self.mark("rmsnorm")?;
        self.enqueue_mlp(lw, x_in, rbuf, tl_rows)
    }

    /// RoPE and the split of qkv: K and V rotated into `k_out` / `v_out` (Q is rotated by
    /// attention as it loads it; with `last`, only the block's query rows are kept).
    fn enqueue_rope(
        &self,
        ws: &Workspace,
        d: &BodyArgs,
        k_out: u64,
        v_out: u64,
        last: Option<Tail>,
    ) -> Result<()> {
        let (q_rows, q_base, q_stride) = match last {
            Some(tl) => (d.blk as i32, tl.base, tl.stride),
            None => (0, 0, 0),
        };
        self.gpu.launch(
            self.k.qkv_rope,
            (d.tt, 1, 1),
            (d.rope_threads, 1, 1),
            0,
            &mut kargs![
                &ws.qkv.ptr,
                &self.cos.ptr,
                &self.sin.ptr,
                &ws.pad.ptr,
                &d.no_q,
                &k_out,
                &v_out,
                &d.si,
                &d.wi,
                &d.nh,
                &d.kv,
                &d.hd,
                &ws.state.ptr,
                &d.win_base,
                &d.blki,
                &q_rows,
                &q_base,
                &q_stride,
                &d.rr
            ],
        )?;
        self.mark("rope")
    }

    /// Attention of the pass's query rows (with `last`: the block's only) over every row's
    /// K/V, into `ws.attn`.
    fn enqueue_attention(
        &self,
        ws: &Workspace,
        d: &BodyArgs,
        k_out: u64,
        v_out: u64,
        last: Option<Tail>,
    ) -> Result<()> {
        let (q_base, q_stride) = match last {
            Some(tl) => (tl.base, tl.stride),
            None => (0, 0),
        };
        let sq = if last.is_some() { d.blk } else { d.w };
        let q_tail = last.is_some() as i32;
        let ak = self.attn_for(d.b, d.nh, sq);
        let sqi = sq as i32;
        self.gpu.launch(
            ak.k,
            (
                (sq.div_ceil(ak.v.rows())) as u32,
                d.nh as u32 / ak.v.heads() as u32,
                d.b as u32,
            ),
            (32 * ak.v.warps() as u32, 1, 1),
            ak.v.smem_bytes(d.hd as usize) as u32,
            &mut kargs![
                &ws.qkv.ptr,
                &k_out,
                &v_out,
                &ws.attn.ptr,
                &ws.pad.ptr,
                &sqi,
                &d.si,
                &d.nh,
                &d.kv,
                &d.scale_log2,
                &self.cos.ptr,
                &self.sin.ptr,
                &ws.state.ptr,
                &d.wi,
                &d.win_base,
                &d.blki,
                &q_tail,
                &q_base,
                &q_stride,
                &d.rr
            ],
        )?;
        self.mark("attention")
    }

    /// The MLP of `rows` normalised rows at `x_in` (bf16, or the residual itself when folded),
    /// added into the residual at `rbuf`: [gate;up] GEMM → SwiGLU → down GEMM (β = 1). (Row
    /// chunks small enough for the gate/up output to stay in L2 measured no faster: 1024 rows
    /// +12 ms, 4096 rows −1 ms ± 3 per step at batch 64, gpu-run14.)
    fn enqueue_mlp(&self, lw: &super::LayerW, x_in: u64, rbuf: u64, rows: usize) -> Result<()> {
        let ws = self.ws.as_ref().context("no workspace")?;
        let (h, i) = (self.cfg.hidden_size, self.cfg.intermediate_size);
        let rr: u64 = if self.fold_norm { ws.rr.ptr } else { 0 };
        let ii = i as i32;
        self.blas.gemm(
            x_in,
            h,
            lw.gu.ptr,
            ws.gu.ptr,
            2 * i,
            OutType::Bf16,
            rows,
            2 * i,
            h,
            false,
        )?;
        self.mark("gemm_gate_up")?;
        self.gpu.launch(
            self.k.swiglu,
            (rows as u32, 1, 1),
            (128, 1, 1),
            0,
            &mut kargs![&ws.gu.ptr, &ws.act.ptr, &ii, &rr],
        )?;
        self.mark("swiglu")?;
        self.blas.gemm(
            ws.act.ptr,
            i,
            lw.down.ptr,
            rbuf,
            h,
            self.resid.out(),
            rows,
            h,
            i,
            true,
        )?;
        self.mark("gemm_down")?;
        Ok(())
    }

    /// The pre-GEMM norm of `rows` residual rows at `x`: returns what the GEMM reads. Plain:
    /// RMSNorm with `gamma` into `ws.hn`. Folded (`DLM_FOLD_NORM=1`): only 1/rms per row into
    /// `ws.rr`; the GEMM reads `x` itself (γ is in its weights).
    pub(super) fn enqueue_norm(&self, x: u64, gamma: u64, rows: usize) -> Result<u64> {
        let ws = self.ws.as_ref().context("no workspace")?;
        if !self.fold_norm {
            self.enqueue_rmsnorm(x, gamma, ws.hn.ptr, rows)?;
            return Ok(ws.hn.ptr);
        }
        let (h, eps) = (self.cfg.hidden_size as i32, self.cfg.rms_norm_eps as f32);
        self.gpu.launch(
            self.k.row_rms,
            (rows as u32, 1, 1),
            (256, 1, 1),
            0,
            &mut kargs![&x, &ws.rr.ptr, &h, &eps],
        )?;
        Ok(x)
    }

    /// RMSNorm of `rows` residual rows at `x` with weight `gamma` into bf16 `y`, a CTA per row
    /// (a warp per row measured slower: 9.8 vs 7.4 ms per step at batch 64).
    pub(super) fn enqueue_rmsnorm(&self, x: u64, gamma: u64, y: u64, rows: usize) -> Result<()> {
        let (h, eps) = (self.cfg.hidden_size as i32, self.cfg.rms_norm_eps as f32);
        self.gpu.launch(
            self.k.r.rmsnorm,
            (rows as u32, 1, 1),
            (256, 1, 1),
            0,
            &mut kargs![&x, &gamma, &y, &h, &eps],
        )
    }

    /// Profiling: record an event labelled with the op just enqueued (no-op otherwise).
    pub(super) fn mark(&self, label: &'static str) -> Result<()> {
        if let Some(m) = self.marks.borrow_mut().as_mut() {
            m.push((label, self.gpu.record()?));
        }
        Ok(())
    }

    pub(super) fn head_ptr(&self) -> u64 {
        self.lm_head
            .as_ref()
            .map(|b| b.ptr)
            .unwrap_or(self.embed.ptr)
    }

    /// LM head over `rows` normalised rows in `hb` → fp32 logits.
    pub(super) fn enqueue_head(&self, rows: usize) -> Result<()> {
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
}

/// The sizes and launch arguments every layer of one body pass shares (each typed as the
/// kernels take it).
struct BodyArgs {
    b: usize,
    /// Rows per sequence in this pass: `s` (full) or the window's `w`.
    w: usize,
    /// `b × w` token rows, and as a grid size.
    t: usize,
    tt: u32,
    blk: usize,
    h: i32,
    hd: i32,
    nh: i32,
    kv: i32,
    /// Columns of the fused [q;k;v] projection.
    qkvn: usize,
    si: i32,
    wi: i32,
    blki: i32,
    /// The window's first row (its generation start), -1 for a full pass.
    win_base: i32,
    scale_log2: f32,
    /// Bytes of K (then V) in one layer's KV cache.
    kv_half: u64,
    /// Folded RMSNorm's per-row 1/rms, or null.
    rr: u64,
    /// A null q pointer: RoPE on K and V only.
    no_q: u64,
    rope_threads: u32,
    /// K/V go to (and are read from) the KV cache.
    cached: bool,
}
