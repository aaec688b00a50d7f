//! Continuous batching on the device: a window of prompts runs through `slots` rows, each row
//! stops as soon as it is finished (early exit at EOS, exact: src/sampling/early_exit.rs) and
//! its slot takes the next prompt of the window, so the batch stays full until the window's
//! queue runs out; then the rows left are compacted into a smaller batch.
//!
//! Rows sit at different blocks (the per-row state of `GenState`, kernels/common.cuh). Without
//! a KV cache every row moves on by itself (`free_rows`) and a slot is refilled at the step
//! after its row finished. With a cache the rows stay in lockstep — every live row at the same
//! step of its own block, so a step is a full pass or a cache window for all of them — and
//! slots are refilled at block boundaries only (the boundary's full pass rewrites the whole
//! cache, so a new row needs nothing from it). Prefix windows span from the block to the end
//! of the sequence, which differs per block: under `--cache prefix` a batch is refilled only
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

use super::sampling::GenParams;
use super::{CacheMode, Engine, Pass, RowState, MAX_SLOTS};
use crate::gpu::driver::Graph;
use crate::sampling::early_exit::{finished_at, RowOut};

/// A prompt in a slot.
#[derive(Debug, Clone, Copy)]
struct Slot {
    prompt: usize,
    steps: usize,
}

/// The captured step graphs of one batch shape.
struct Graphs {
    b: usize,
    s: usize,
    lp: usize,
    full: Graph,
    dual: Option<Graph>,
    prefix: Vec<Option<Graph>>,
}

/// The rows now on the device.
struct Batch {
    slots: Vec<Option<Slot>>,
    rows: Vec<RowState>,
    phase: [i32; 4],
    lp: usize,
}

impl Batch {
    fn b(&self) -> usize {
        self.slots.len()
    }
    fn s(&self, gen: usize) -> usize {
        self.lp + gen
    }
    fn live(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
}

impl Engine {
    /// Generate `prompts` (unpadded; `keys` their RNG keys) through at most `slots` rows, each
    /// row stopping when finished by `p.stop_ids` (none: every block) and its slot refilled
    /// with the next prompt while `fits(rows, longest prompt)` allows. Returns each prompt's
    /// [`RowOut`] in order and the batch steps (forward passes) run.
    pub fn generate_rows(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &GenParams,
        slots: usize,
        fits: &dyn Fn(usize, usize) -> bool,
    ) -> Result<(Vec<RowOut>, usize)> {
        self.generate_rows_inner(prompts, keys, p, slots, fits, None)
    }

    /// Timing only (`dlm-gpu bench-rows`): [`Self::generate_rows`], where prompt `i`'s row
    /// also finishes once its first `forced[i] + 1` positions are committed — as if it had
    /// committed an EOS at `forced[i]` (a random-weight teacher never does). Reads the tokens
    /// back every step.
    pub fn generate_rows_forced(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &GenParams,
        slots: usize,
        forced: &[usize],
    ) -> Result<(Vec<RowOut>, usize)> {
        self.generate_rows_inner(prompts, keys, p, slots, &|_, _| true, Some(forced))
    }

    fn generate_rows_inner(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &GenParams,
        slots: usize,
        fits: &dyn Fn(usize, usize) -> bool,
        forced: Option<&[usize]>,
    ) -> Result<(Vec<RowOut>, usize)> {
        p.validate()?;
        let n = prompts.len();
        if keys.len() != n {
            bail!("one RNG key per prompt");
        }
        if n == 0 {
            return Ok((vec![], 0));
        }
        let slots = slots.clamp(1, MAX_SLOTS);
        let (blk, gen) = (p.block_length, p.gen_length);
        let cached = p.cache != CacheMode::None;
        let v = self.cfg.vocab_size as u32;
        for (i, q) in prompts.iter().enumerate() {
            if q.is_empty() && p.logits_shift > 0 {
                bail!("prompt {i}: --logits-shift 1 needs a non-empty prompt");
            }
            if let Some(t) = q.iter().find(|&&t| t >= v) {
                bail!("prompt {i}: token id {t} is outside the vocabulary ({v})");
            }
        }
        let lp_max = prompts.iter().map(Vec::len).max().unwrap_or(0);
        self.ensure_workspace(slots.min(n), lp_max + gen, slots.min(n) * blk)?;
        if cached {
            self.ensure_kv_cache()?;
        }
        self.write_settings(p)?;
        let mut out: Vec<Option<RowOut>> = vec![None; n];
        let mut next = 0usize;
        let mut batch = Batch {
            slots: vec![],
            rows: vec![],
            phase: [0; 4],
            lp: 0,
        };
        let mut graphs: Option<Graphs> = None;
        let mut forwards = 0usize;
        let limit = (n + slots) * (gen + 1) * p.steps_per_block().max(1);
        loop {
            // Finished rows leave; their records are final.
            let mut retired = false;
            for r in 0..batch.b() {
                if batch.rows[r].live != 0 {
                    continue;
                }
                let Some(sl) = batch.slots[r].take() else {
                    continue;
                };
                let ids = self.read_gen(r, &batch, gen)?;
                out[sl.prompt] = Some(row_out(ids, sl.steps, batch.rows[r].block, p));
                retired = true;
            }
            let live = batch.live();
            let boundary = p.free_rows || batch.phase[1] == 0;
            let mut admit = vec![];
            if next < n && boundary && !(p.cache == CacheMode::Prefix && live > 0) {
                let mut longest = batch
                    .slots
                    .iter()
                    .flatten()
                    .map(|s| prompts[s.prompt].len())
                    .max()
                    .unwrap_or(0);
                while next < n && live + admit.len() < slots {
                    let l = prompts[next].len().max(longest);
                    let rows = live + admit.len() + 1;
                    if rows > 1 && !fits(rows, l) {
                        break;
                    }
                    longest = l;
                    admit.push(next);
                    next += 1;
                }
            }
            if live == 0 && admit.is_empty() {
                if next >= n {
                    break;
                }
                bail!("prompt {next} fits no batch");
            }
            // Once the queue is empty, a batch at most half full is compacted.
            let compact =
                next >= n && boundary && (retired || live < batch.b()) && live * 2 <= batch.b();
            if !admit.is_empty() || compact {
                batch = self.relayout(batch, &admit, prompts, keys, p, compact)?;
            }
            let stale = graphs
                .as_ref()
                .is_none_or(|g| (g.b, g.s, g.lp) != (batch.b(), batch.s(gen), batch.lp));
            if stale {
                drop(graphs.take()); // free the old executables first
                graphs = Some(self.capture_graphs(&batch, p)?);
            }
            let g = graphs.as_mut().context("graphs")?;
            let sib = batch.phase[1] as usize;
            if p.full_pass_at(sib) {
                self.gpu.replay(&g.full)?;
            } else if let Some(d) = &g.dual {
                self.gpu.replay(d)?;
            } else {
                // Prefix: every live row is at the same block (no refill while rows are live).
                let block = batch
                    .slots
                    .iter()
                    .zip(&batch.rows)
                    .find(|(s, _)| s.is_some())
                    .map_or(0, |(_, r)| r.block as usize);
                if g.prefix[block].is_none() {
                    let (b, s, lp) = (g.b, g.s, g.lp);
                    let w = s - (lp + block * blk);
                    g.prefix[block] =
                        Some(self.capture(|| self.enqueue_step(b, s, lp, p, Pass::Window { w }))?);
                }
                self.gpu.replay(g.prefix[block].as_ref().unwrap())?;
            }
            forwards += 1;
            for s in batch.slots.iter_mut().flatten() {
                s.steps += 1;
            }
            let (phase, rows) = self.read_rows(batch.b())?;
            batch.phase = phase;
            batch.rows = rows;
            self.check_finite_rows(blk, &batch)?;
            if let Some(f) = forced {
                self.force_finish(&mut batch, f, p)?;
            }
            if forwards > limit {
                bail!("continuous batching did not finish in {limit} steps");
            }
        }
        Ok((
            out.into_iter()
                .map(|r| r.expect("every prompt ran"))
                .collect(),
            forwards,
        ))
    }

    /// [`Self::generate_rows_forced`]'s stop: retire live rows whose first `forced + 1`
    /// positions are committed.
    fn force_finish(&self, batch: &mut Batch, forced: &[usize], p: &GenParams) -> Result<()> {
        let gen = p.gen_length;
        let (b, s) = (batch.b(), batch.s(gen));
        let ws = self.ws.as_ref().context("no workspace")?;
        let mut x = vec![0u32; b * s];
        self.gpu.read(&ws.x, 0, &mut x)?;
        for r in 0..b {
            let Some(sl) = batch.slots[r] else { continue };
            if batch.rows[r].live == 0 {
                continue;
            }
            let l = forced[sl.prompt].min(gen - 1) + 1;
            let at = r * s + batch.lp;
            if x[at..at + l].iter().all(|&t| t != p.mask_id) {
                batch.rows[r].live = 0;
                self.gpu
                    .write(&ws.state, (4 + 3 * MAX_SLOTS + r) * 4, &[0i32])?;
            }
        }
        Ok(())
    }

    /// The generated span of row `r`.
    fn read_gen(&self, r: usize, batch: &Batch, gen: usize) -> Result<Vec<u32>> {
        let ws = self.ws.as_ref().context("no workspace")?;
        let mut ids = vec![0u32; gen];
        let s = batch.s(gen);
        self.gpu.read(&ws.x, (r * s + batch.lp) * 4, &mut ids)?;
        Ok(ids)
    }

    /// A new batch: the live rows (kept in their slots, or moved to the front when
    /// `compact`), then `admit` in free slots; left padding to the longest prompt among them.
    /// Uploads tokens, padding, keys and state.
    fn relayout(
        &mut self,
        old: Batch,
        admit: &[usize],
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &GenParams,
        compact: bool,
    ) -> Result<Batch> {
        let gen = p.gen_length;
        let (ob, os) = (old.b(), old.s(gen));
        let mut xold = vec![0u32; ob * os];
        if ob > 0 {
            let ws = self.ws.as_ref().context("no workspace")?;
            self.gpu.read(&ws.x, 0, &mut xold)?;
        }
        // (slot content, previous row) for the new batch.
        let mut placed: Vec<Option<(Slot, Option<usize>)>> = if compact {
            old.slots
                .iter()
                .enumerate()
                .filter_map(|(r, s)| s.map(|s| Some((s, Some(r)))))
                .collect()
        } else {
            old.slots
                .iter()
                .enumerate()
                .map(|(r, s)| s.map(|s| (s, Some(r))))
                .collect()
        };
        let mut free = (0..placed.len()).filter(|&r| placed[r].is_none());
        let mut extra = vec![];
        for &i in admit {
            let s = Slot {
                prompt: i,
                steps: 0,
            };
            match free.next() {
                Some(r) => extra.push((r, s)),
                None => extra.push((usize::MAX, s)),
            }
        }
        for (r, s) in extra {
            if r == usize::MAX {
                placed.push(Some((s, None)));
            } else {
                placed[r] = Some((s, None));
            }
        }
        while placed.last().is_some_and(|x| x.is_none()) {
            placed.pop();
        }
        let b = placed.len();
        let lp = placed
            .iter()
            .flatten()
            .map(|(s, _)| prompts[s.prompt].len())
            .max()
            .unwrap_or(0);
        let s = lp + gen;
        let mut x = Vec::with_capacity(b * s);
        let mut pads = Vec::with_capacity(b);
        let mut kk = Vec::with_capacity(b);
        let mut rows = Vec::with_capacity(b);
        for slot in &placed {
            match slot {
                Some((sl, prev)) => {
                    let q = &prompts[sl.prompt];
                    pads.push(lp - q.len());
                    x.extend(std::iter::repeat_n(p.pad_id, lp - q.len()));
                    x.extend_from_slice(q);
                    match prev {
                        Some(r) => {
                            let row = &xold[r * os + old.lp..(r + 1) * os];
                            x.extend_from_slice(row);
                            rows.push(old.rows[*r]);
                        }
                        None => {
                            x.extend(std::iter::repeat_n(p.mask_id, gen));
                            rows.push(RowState {
                                sib: if p.free_rows { 0 } else { old.phase[1] },
                                ..RowState::FRESH
                            });
                        }
                    }
                    kk.push(keys[sl.prompt]);
                }
                None => {
                    // An idle slot: padding then masks; computed, never committed.
                    pads.push(lp);
                    x.extend(std::iter::repeat_n(p.pad_id, lp));
                    x.extend(std::iter::repeat_n(p.mask_id, gen));
                    kk.push(0);
                    rows.push(RowState::default());
                }
            }
        }
        let ws = self.ws.as_ref().context("no workspace")?;
        if b > ws.b || s > ws.s {
            bail!(
                "batch {b} x {s} exceeds the workspace ({} x {})",
                ws.b,
                ws.s
            );
        }
        self.gpu.write(&ws.x, 0, &x)?;
        let pi: Vec<i32> = pads.iter().map(|&p| p as i32).collect();
        self.gpu.write(&ws.pad, 0, &pi)?;
        self.gpu.write(&ws.keys, 0, &kk)?;
        self.write_state(old.phase, &rows)?;
        Ok(Batch {
            slots: placed.into_iter().map(|x| x.map(|(s, _)| s)).collect(),
            rows,
            phase: old.phase,
            lp,
        })
    }

    fn capture_graphs(&self, batch: &Batch, p: &GenParams) -> Result<Graphs> {
        let (b, s, lp) = (batch.b(), batch.s(p.gen_length), batch.lp);
        let cached = p.cache != CacheMode::None;
        let full = self.capture(|| self.enqueue_step(b, s, lp, p, Pass::Full { cache: cached }))?;
        let dual = if p.cache == CacheMode::Dual {
            let w = p.block_length;
            Some(self.capture(|| self.enqueue_step(b, s, lp, p, Pass::Window { w }))?)
        } else {
            None
        };
        Ok(Graphs {
            b,
            s,
            lp,
            full,
            dual,
            prefix: (0..p.gen_length / p.block_length).map(|_| None).collect(),
        })
    }

    /// The sampler kernel's non-finite record, naming the prompt (its index in `prompts`)
    /// rather than the slot.
    fn check_finite_rows(&self, blk: usize, batch: &Batch) -> Result<()> {
        let Err(e) = self.check_finite(blk) else {
            return Ok(());
        };
        let Some(nf) = e.downcast_ref::<crate::sampling::finite::NonFiniteLogit>() else {
            return Err(e);
        };
        let mut nf = nf.clone();
        match batch.slots.get(nf.row).copied().flatten() {
            Some(s) => nf.row = s.prompt,
            None => bail!("non-finite logit in idle slot {}", nf.row),
        }
        Err(anyhow::Error::new(nf))
    }
}

/// A finished (or fully decoded) row's [`RowOut`]: `steps` forward passes, last block `block`.
fn row_out(gen: Vec<u32>, steps: usize, block: i32, p: &GenParams) -> RowOut {
    let early = gen.contains(&p.mask_id);
    let spb = p.steps_per_block();
    let stop = finished_at(&gen, p.mask_id, &p.stop_ids);
    RowOut {
        early,
        blocks: block as usize + 1,
        steps,
        block_rule_steps: p.threshold.is_none().then(|| match stop {
            Some(e) => (e / p.block_length + 1) * spb,
            None => steps,
        }),
        gen,
    }
}
