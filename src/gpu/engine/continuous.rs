//! Continuous batching on the device: the engine as the [`RowDevice`] that runs
//! [`crate::sampling::schedule`] — a window of prompts through `slots` rows, each row stopping
//! as soon as it is finished (early exit at EOS, exact: src/sampling/early_exit.rs) and its slot
//! taking the next prompt of the window, so the batch stays full until the window's queue runs
//! out; then the rows left are compacted into a smaller batch. This file owns only the device
//! side: uploads, the step graphs (recaptured when the batch shape changes), state read-back.
//!
//! Rows sit at different blocks (the per-row state of `GenState`, kernels/common.cuh). Without
//! a KV cache every row moves on by itself (`free_rows`) and a slot is refilled at the step
//! after its row finished. With a cache the rows stay in lockstep — every live row at the same
//! step of its own block, so a step is a full pass or a cache window for all of them — and
//! slots are refilled at block boundaries only (the boundary's full pass rewrites the whole
//! cache, so a new row needs nothing from it). Prefix windows span from the block to the end
//! of the sequence, which differs per block: under `--kv-cache prefix` a batch is refilled only
//! once all its rows are done.
//!
//! Determinism (why option (b) of issue #26, deterministic windows, and not batch-invariant
//! kernels): the schedule — which prompt takes which slot at which step, the batch shape and
//! its left padding — is a function of the window's prompts and the settings alone, and the
//! kernels are deterministic, so a window's records are the same bytes in a first run, a
//! resumed run and any `--shard I/N` split (a window is committed whole and owned whole). A
//! row's numbers do depend on its batch (cuBLASLt picks its GEMM algorithm by shape; the
//! attention tiles start at the row's left padding), as they did before continuous batching;
//! making them independent would pin one GEMM algorithm per weight for every row count and
//! pad every row to a tile boundary — a cost paid on every step of a compute-bound run, for
//! bytes that the window already makes reproducible.

use anyhow::{bail, Context, Result};

use super::device_loop::DeviceRun;
use std::num::NonZeroUsize;

use super::{Engine, KvCache, Pass, MAX_SLOTS};
use crate::gpu::driver::Graph;
use crate::sampling::early_exit::RowOut;
use crate::sampling::schedule::{self, Layout, RowDevice, RowState, RunParams, StepKind};
use crate::sampling::trajectory::RowTrace;

/// The captured step graphs of one batch shape.
struct Graphs {
    b: usize,
    s: usize,
    lp: usize,
    full: Graph,
    dual: Option<Graph>,
    prefix: Vec<Option<Graph>>,
}

/// The engine running one window for the scheduler.
struct Device<'e> {
    e: &'e mut Engine,
    p: &'e DeviceRun,
    /// Shape of the loaded batch.
    b: usize,
    lp: usize,
    graphs: Option<Graphs>,
    prof: Prof,
}

/// `DLM_DISTILL_PROFILE=1`: where a window's host time goes (printed on stderr per window).
#[derive(Default)]
struct Prof {
    on: bool,
    loads: usize,
    captures: usize,
    /// Seconds: uploads of a new layout, graph captures, replays (+ the finite check), state
    /// read-backs (these wait for the device), token read-backs.
    load: f64,
    capture: f64,
    step: f64,
    state: f64,
    tokens: f64,
}

impl Engine {
    /// Generate `prompts` (unpadded; `keys` their RNG keys) through at most `slots` rows, each
    /// row stopping when finished by `p.stop_ids` (none: every block) and its slot refilled
    /// with the next prompt while `fits(rows, longest prompt)` allows. Returns each prompt's
    /// [`RowOut`] in order and the batch steps (forward passes) run.
    ///
    /// `forced` is for timing only (`dlm-gpu bench-rows`): prompt `i`'s row also finishes once
    /// its first `forced[i] + 1` positions are committed — as if it had committed an EOS at
    /// `forced[i]` (a random-weight teacher never does); the tokens are read back every step.
    pub fn generate_rows(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &DeviceRun,
        slots: NonZeroUsize,
        fits: &dyn Fn(usize, usize) -> bool,
        forced: Option<&[usize]>,
    ) -> Result<(Vec<RowOut>, usize)> {
        let (rows, passes, _) = self.generate_rows_traced(prompts, keys, p, slots, fits, forced)?;
        Ok((rows, passes))
    }

    /// [`Self::generate_rows`], and with `p.trace` each prompt's [`RowTrace`] (commit steps
    /// and top-k, recorded on the device: [`super::trace`]).
    #[allow(clippy::type_complexity)]
    pub fn generate_rows_traced(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &DeviceRun,
        slots: NonZeroUsize,
        fits: &dyn Fn(usize, usize) -> bool,
        forced: Option<&[usize]>,
    ) -> Result<(Vec<RowOut>, usize, Vec<Option<RowTrace>>)> {
        p.validate()?;
        let n = prompts.len();
        if n == 0 {
            return Ok((vec![], 0, vec![]));
        }
        // `distill` refuses a larger --batch-size at start (distill::settings); never clamped.
        if slots.get() > MAX_SLOTS {
            bail!("{slots} rows in flight; the GPU sampler holds at most {MAX_SLOTS}");
        }
        let v = self.cfg.vocab_size as u32;
        for (i, q) in prompts.iter().enumerate() {
            if q.is_empty() && p.logits_shift > 0 {
                bail!("prompt {i}: --logits-shift 1 needs a non-empty prompt");
            }
            if let Some(t) = q.iter().find(|&&t| t >= v) {
                bail!("prompt {i}: token id {t} is outside the vocabulary ({v})");
            }
        }
        let lp_max = crate::sampling::padded_len(prompts.iter().map(Vec::len), p.pad_multiple);
        let rows = slots.get().min(n);
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
        self.ensure_workspace(
            rows,
            lp_max + p.gen.gen_length,
            longest + p.gen.gen_length,
            rows * p.gen.block_length,
        )?;
        if p.gen.cache != KvCache::None {
            self.ensure_kv_cache()?;
        }
        match p.trace {
            Some(k) => self.ensure_trace(rows, p.gen.gen_length, k)?,
            None => self.drop_trace(),
        }
        self.write_settings(p)?;
        let run = RunParams {
            gen: &p.gen,
            pad_id: p.pad_id,
            free_rows: p.free_rows,
            stop_ids: &p.stop_ids,
            pad_multiple: p.pad_multiple,
        };
        let mut dev = Device {
            e: self,
            p,
            b: 0,
            lp: 0,
            graphs: None,
            prof: Prof {
                on: crate::gpu::tuning::distill_profile(),
                ..Prof::default()
            },
        };
        let traced = p.trace.is_some();
        let r = schedule::run_traced(&mut dev, prompts, keys, &run, slots, fits, forced, traced);
        let f = &dev.prof;
        if f.on {
            if let Ok((_, passes, _)) = &r {
                eprintln!(
                    "distill profile: {n} prompts, {passes} passes, {} layouts ({:.3} s), {} graph \
                     captures ({:.3} s), replay {:.3} s, state read-back {:.3} s, token \
                     read-back {:.3} s",
                    f.loads, f.load, f.captures, f.capture, f.step, f.state, f.tokens
                );
            }
        }
        r
    }
}

impl Device<'_> {
    fn s(&self) -> usize {
        self.lp + self.p.gen.gen_length
    }
}

impl RowDevice for Device<'_> {
    fn load(&mut self, l: &Layout) -> Result<()> {
        self.prof.loads += 1;
        self.timed(|p| &mut p.load, |d| d.load_layout(l))
    }

    fn tokens(&mut self) -> Result<Vec<u32>> {
        self.timed(|p| &mut p.tokens, |d| d.read_tokens())
    }

    fn step(&mut self, kind: StepKind) -> Result<()> {
        self.run_step(kind)
    }

    fn state(&mut self) -> Result<([i32; 4], Vec<RowState>)> {
        self.timed(|p| &mut p.state, |d| d.e.read_rows(d.b))
    }

    fn retire(&mut self, r: usize) -> Result<()> {
        let ws = self.e.ws.as_ref().context("no workspace")?;
        self.e
            .gpu
            .write(&ws.state, (4 + 3 * MAX_SLOTS + r) * 4, &[0i32])
    }

    fn trace(&mut self, r: usize) -> Result<Option<RowTrace>> {
        if self.p.trace.is_none() {
            return Ok(None);
        }
        self.e.read_trace(r).map(Some)
    }
}

impl Device<'_> {
    /// Run `f`, adding its seconds to `stage` of the profile when it is on.
    fn timed<T>(&mut self, stage: fn(&mut Prof) -> &mut f64, f: impl FnOnce(&mut Self) -> T) -> T {
        let t = self.prof.on.then(std::time::Instant::now);
        let r = f(self);
        if let Some(t) = t {
            *stage(&mut self.prof) += t.elapsed().as_secs_f64();
        }
        r
    }

    fn load_layout(&mut self, l: &Layout) -> Result<()> {
        let s = l.lp + self.p.gen.gen_length;
        let ws = self.e.ws.as_ref().context("no workspace")?;
        if l.b > ws.b || s > ws.s {
            bail!(
                "batch {} x {s} exceeds the workspace ({} x {})",
                l.b,
                ws.b,
                ws.s
            );
        }
        let g = &self.e.gpu;
        g.write(&ws.x, 0, &l.x)?;
        let pads: Vec<i32> = l.pads.iter().map(|&p| p as i32).collect();
        g.write(&ws.pad, 0, &pads)?;
        g.write(&ws.keys, 0, &l.keys)?;
        self.e.write_state(l.phase, &l.rows)?;
        if self.p.trace.is_some() {
            self.e.move_traces(&l.prev)?;
        }
        self.b = l.b;
        self.lp = l.lp;
        Ok(())
    }

    fn read_tokens(&mut self) -> Result<Vec<u32>> {
        let ws = self.e.ws.as_ref().context("no workspace")?;
        let mut x = vec![0u32; self.b * self.s()];
        self.e.gpu.read(&ws.x, 0, &mut x)?;
        Ok(x)
    }

    fn run_step(&mut self, kind: StepKind) -> Result<()> {
        let (b, s, lp, p) = (self.b, self.s(), self.lp, self.p);
        let on = self.prof.on;
        let t0 = on.then(std::time::Instant::now);
        let e = &*self.e;
        let stale = self
            .graphs
            .as_ref()
            .is_none_or(|g| (g.b, g.s, g.lp) != (b, s, lp));
        if stale {
            drop(self.graphs.take()); // free the old executables first
            let cached = p.gen.cache != KvCache::None;
            let full = e.capture(|| e.enqueue_step(b, s, lp, p, Pass::Full { cache: cached }))?;
            let dual = if p.gen.cache == KvCache::Dual {
                let w = p.gen.block_length;
                Some(e.capture(|| e.enqueue_step(b, s, lp, p, Pass::Window { w }))?)
            } else {
                None
            };
            self.graphs = Some(Graphs {
                b,
                s,
                lp,
                full,
                dual,
                prefix: (0..p.gen.num_blocks()).map(|_| None).collect(),
            });
            self.prof.captures += 1;
        }
        let t1 = on.then(std::time::Instant::now);
        let g = self.graphs.as_mut().context("graphs")?;
        match kind {
            StepKind::Full => e.gpu.replay(&g.full)?,
            StepKind::Dual => e.gpu.replay(g.dual.as_ref().context("no dual graph")?)?,
            StepKind::Prefix { block } => {
                if g.prefix[block].is_none() {
                    let w = s - (lp + block * p.gen.block_length);
                    g.prefix[block] =
                        Some(e.capture(|| e.enqueue_step(b, s, lp, p, Pass::Window { w }))?);
                }
                e.gpu.replay(g.prefix[block].as_ref().expect("captured"))?;
            }
        }
        let r = e.check_finite(p.gen.block_length);
        if let (Some(t0), Some(t1)) = (t0, t1) {
            self.prof.capture += (t1 - t0).as_secs_f64();
            self.prof.step += t1.elapsed().as_secs_f64();
        }
        r
    }
}
