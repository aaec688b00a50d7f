//! Why trajectories stay on the device: `distill --trajectory`/`--top-k` need, per committed
//! position, its commit step and the K most probable ids of the logits that committed it —
//! recorded inside the step graph by `record_topk` (kernels/sampler.cu) from the sampler's own
//! state, into per-slot buffers (`[slot][gen position]`, K ids/log-probs each) that the host
//! reads only when the row leaves ([`crate::sampling::schedule::RowDevice::trace`]). A refill
//! starts a slot afresh; a compaction (window end) moves a row's record with it.

use anyhow::{Context, Result};

use super::Engine;
use crate::gpu::driver::DevBuf;
use crate::sampling::trajectory::{RowTrace, TopK};

/// The per-slot buffers: `step` i32 (−1: not committed), `ids` u32 / `lp` f32 (K per
/// position; id u32::MAX past the allowed vocabulary), `lse` f32.
pub(super) struct TraceBufs {
    pub rows: usize,
    pub gen: usize,
    pub k: usize,
    pub step: DevBuf,
    pub ids: DevBuf,
    pub lp: DevBuf,
    pub lse: DevBuf,
}

/// One slot's raw record.
struct Raw {
    step: Vec<i32>,
    ids: Vec<u32>,
    lp: Vec<f32>,
    lse: Vec<f32>,
}

impl Engine {
    /// Buffers for `rows` slots of `gen` positions and `k` ids (0: commit steps only).
    pub(super) fn ensure_trace(&mut self, rows: usize, gen: usize, k: usize) -> Result<()> {
        if matches!(&self.trace, Some(t) if t.rows >= rows && t.gen == gen && t.k == k) {
            return Ok(());
        }
        self.trace = None;
        let g = &self.gpu;
        let n = rows * gen;
        self.trace = Some(TraceBufs {
            rows,
            gen,
            k,
            step: g.alloc(n * 4)?,
            ids: g.alloc(n * k.max(1) * 4)?,
            lp: g.alloc(n * k.max(1) * 4)?,
            lse: g.alloc(n * 4)?,
        });
        Ok(())
    }

    /// No trace buffers (a run without `--trajectory`/`--top-k`: its graphs launch no
    /// `record_topk`).
    pub(super) fn drop_trace(&mut self) {
        self.trace = None;
    }

    fn read_raw(&self, r: usize) -> Result<Raw> {
        let t = self.trace.as_ref().context("no trace buffers")?;
        let (gen, k) = (t.gen, t.k.max(1));
        let mut raw = Raw {
            step: vec![0; gen],
            ids: vec![0; gen * k],
            lp: vec![0.0; gen * k],
            lse: vec![0.0; gen],
        };
        self.gpu.read(&t.step, r * gen * 4, &mut raw.step)?;
        if t.k > 0 {
            self.gpu.read(&t.ids, r * gen * k * 4, &mut raw.ids)?;
            self.gpu.read(&t.lp, r * gen * k * 4, &mut raw.lp)?;
            self.gpu.read(&t.lse, r * gen * 4, &mut raw.lse)?;
        }
        Ok(raw)
    }

    fn write_raw(&self, r: usize, raw: &Raw) -> Result<()> {
        let t = self.trace.as_ref().context("no trace buffers")?;
        let (gen, k) = (t.gen, t.k.max(1));
        self.gpu.write(&t.step, r * gen * 4, &raw.step)?;
        if t.k > 0 {
            self.gpu.write(&t.ids, r * gen * k * 4, &raw.ids)?;
            self.gpu.write(&t.lp, r * gen * k * 4, &raw.lp)?;
            self.gpu.write(&t.lse, r * gen * 4, &raw.lse)?;
        }
        Ok(())
    }

    /// The new layout's rows take their records along (`prev[r]`: the slot row `r` held;
    /// None: a new prompt or an idle slot, started afresh). Rows only move towards the front
    /// (compaction), so copying in slot order never reads a record already overwritten.
    pub(super) fn move_traces(&self, prev: &[Option<usize>]) -> Result<()> {
        let Some(t) = &self.trace else { return Ok(()) };
        for (r, q) in prev.iter().enumerate() {
            match *q {
                Some(q) if q == r => {}
                Some(q) => {
                    anyhow::ensure!(q > r, "a row moved back from slot {q} to {r}");
                    let raw = self.read_raw(q)?;
                    self.write_raw(r, &raw)?;
                }
                None => self
                    .gpu
                    .write(&t.step, r * t.gen * 4, &vec![-1i32; t.gen])?,
            }
        }
        Ok(())
    }

    /// Slot `r`'s record as the host's [`RowTrace`].
    pub(super) fn read_trace(&self, r: usize) -> Result<RowTrace> {
        let k = self.trace.as_ref().context("no trace buffers")?.k;
        let raw = self.read_raw(r)?;
        let mut out = RowTrace::new(raw.step.len(), k);
        for (i, &s) in raw.step.iter().enumerate() {
            if s < 0 {
                continue;
            }
            out.commit_step[i] = s as i64;
            if k > 0 {
                let n = raw.ids[i * k..(i + 1) * k]
                    .iter()
                    .take_while(|&&id| id != u32::MAX)
                    .count();
                out.top_k[i] = Some(TopK {
                    ids: raw.ids[i * k..i * k + n].to_vec(),
                    logprobs: raw.lp[i * k..i * k + n].to_vec(),
                    logsumexp: raw.lse[i],
                });
            }
        }
        Ok(out)
    }
}
