//! The forward pass as enqueued work: embed, the layers, the LM head (full pass or cache window).

use anyhow::{bail, Context, Result};

use super::{AttnVariant, Engine, Pass, Tail, BF};
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
        let g = &self.gpu;
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
        let qkvn = ((nh + 2 * kv) * hd) as usize;
        let tt = t as u32;
        let (si, wi, gs, blki) = (s as i32, w as i32, gen_start as i32, blk as i32);
        let win_base: i32 = match pass {
            Pass::Full { .. } => -1,
            Pass::Window { .. } => gs,
        };
        let rk = &self.k.r;
        let rout = self.resid.out();
        match pass {
            Pass::Full { .. } => g.launch(
                rk.embed,
                (tt, 1, 1),
                (128, 1, 1),
                0,
                &mut kargs![&ws.x.ptr, &self.embed.ptr, &ws.resid.ptr, &h],
            )?,
            Pass::Window { .. } => g.launch(
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
        self.mark("embed")?;
        let scale_log2 = (1.0 / (hd as f64).sqrt() * std::f64::consts::LOG2_E) as f32;
        let kv_half = (b * s * kv as usize * hd as usize * BF) as u64;
        // Large grids: the wgmma kernel (Hopper, head_dim 128), else two m-tiles per warp (half
        // the shared-memory traffic per FLOP); a grid that would leave SMs idle at 128 queries
        // per CTA: 64 (4 warps × 16).
        let attn_for = |rows: usize| {
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
        };
        let n_layers = self.layers.len();
        // Folded RMSNorm: RoPE and SwiGLU scale each row by its 1/rms (null: no scaling).
        let rr: u64 = if self.fold_norm { ws.rr.ptr } else { 0 };
        // RoPE on K and V only (q null): attention rotates Q as it loads it from qkv.
        let no_q = 0u64;
        let rope_threads = ((2 * kv * hd / 8) as u32).div_ceil(32).clamp(1, 32) * 32;
        for (l, lw) in self.layers.iter().enumerate() {
            let (k_out, v_out) = if cached {
                (ws.kv[l].ptr, ws.kv[l].ptr + kv_half)
            } else {
                (ws.k.ptr, ws.v.ptr)
            };
            // The last layer with a tail: queries and everything after attention on the
            // block's rows only.
            let last = tail.filter(|_| l + 1 == n_layers);
            let (q_rows, q_base, q_stride) = match last {
                Some(tl) => (blk as i32, tl.base, tl.stride),
                None => (0, 0, 0),
            };
            let sq = if last.is_some() { blk } else { w };
            let q_tail = last.is_some() as i32;
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
                    &no_q,
                    &k_out,
                    &v_out,
                    &si,
                    &wi,
                    &nh,
                    &kv,
                    &hd,
                    &ws.state.ptr,
                    &win_base,
                    &blki,
                    &q_rows,
                    &q_base,
                    &q_stride,
                    &rr
                ],
            )?;
            self.mark("rope")?;
            let ak = attn_for(sq);
            let sqi = sq as i32;
            g.launch(
                ak.k,
                (
                    (sq.div_ceil(ak.v.rows())) as u32,
                    nh as u32 / ak.v.heads() as u32,
                    b as u32,
                ),
                (32 * ak.v.warps() as u32, 1, 1),
                ak.v.smem_bytes(hd as usize) as u32,
                &mut kargs![
                    &ws.qkv.ptr,
                    &k_out,
                    &v_out,
                    &ws.attn.ptr,
                    &ws.pad.ptr,
                    &sqi,
                    &si,
                    &nh,
                    &kv,
                    &scale_log2,
                    &self.cos.ptr,
                    &self.sin.ptr,
                    &ws.state.ptr,
                    &wi,
                    &win_base,
                    &blki,
                    &q_tail,
                    &q_base,
                    &q_stride,
                    &rr
                ],
            )?;
            self.mark("attention")?;
            if let Some(tl) = last {
                let zero = 0i32;
                g.launch(
                    rk.gather_block,
                    ((b * blk) as u32, 1, 1),
                    (128, 1, 1),
                    0,
                    &mut kargs![
                        &ws.resid.ptr,
                        &ws.tail.ptr,
                        &h,
                        &ws.state.ptr,
                        &wi,
                        &blki,
                        &tl.base,
                        &zero,
                        &tl.stride
                    ],
                )?;
                self.mark("gather")?;
            }
            let qd = (nh * hd) as usize;
            self.blas.gemm(
                ws.attn.ptr,
                qd,
                lw.o.ptr,
                rbuf,
                h as usize,
                rout,
                tl_rows,
                h as usize,
                qd,
                true,
            )?;
            self.mark("gemm_o")?;
            let x_in = self.enqueue_norm(rbuf, lw.ln2.ptr, tl_rows)?;
            self.mark("rmsnorm")?;
            self.enqueue_mlp(lw, x_in, rbuf, tl_rows)?;
        }
        Ok(())
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
