//! Continuous batching, device-agnostic: which prompt of a window takes which slot at which
//! step, how the batch is laid out (left padding to the longest prompt in flight), when finished
//! rows leave and when the batch is compacted. A [`RowDevice`] executes it: the GPU engine
//! (`gpu/engine/continuous.rs`, the per-row state of kernels/common.cuh), and in the tests a CPU
//! model of the kernels' per-row rules (tests/continuous_schedule.rs), which checks this
//! bookkeeping against the host sampler without a GPU.
//!
//! The rules the device applies after each step (the `advance` kernel): a live row that is
//! finished ([`finished_at`] with the run's stop ids) leaves (`live` 0, its block kept);
//! otherwise it moves on — alone (`free_rows`: exact, no KV cache; fixed schedule: after
//! `steps_per_block` steps, threshold: once its block has no mask) or in lockstep (every live row
//! at the batch phase's step of its own block; the phase's block ends after `steps_per_block`
//! steps, or under a threshold once no live row has a mask in its block) — and leaves past its
//! last block. Its random-stream step is LLaDA's global step (fixed schedule) or the steps it
//! has run (threshold).
//!
//! Refill: at any step with `free_rows`; in lockstep only at a block boundary (phase step 0,
//! where the next pass is a full one that rewrites any KV cache); under `--kv-cache prefix` only
//! when no row is live (its windows span from the block to the end, which differs per block).

use std::num::NonZeroUsize;

use anyhow::{bail, Result};

use super::early_exit::{finished_at, RowOut};
use super::finite::NonFiniteLogit;
use super::trajectory::RowTrace;
use super::{GenParams, KvCache};

/// One slot's generation state (a row of the device's per-row arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RowState {
    /// Its block.
    pub block: i32,
    /// Its step within the block.
    pub sib: i32,
    /// Its random-stream step.
    pub step: i32,
    /// 1 while decoding.
    pub live: i32,
}

impl RowState {
    pub const FRESH: RowState = RowState {
        block: 0,
        sib: 0,
        step: 0,
        live: 1,
    };
}

/// The run's settings as the scheduler and the device read them.
#[derive(Debug, Clone, Copy)]
pub struct RunParams<'a> {
    pub gen: &'a GenParams,
    pub pad_id: u32,
    /// Rows move through their blocks independently (no KV cache); else lockstep.
    pub free_rows: bool,
    /// EOS/EoT ids that finish a row (empty: every block is decoded).
    pub stop_ids: &'a [u32],
    /// The batch's prompt length is rounded up to a multiple of this (1: the longest prompt
    /// in flight). On the GPU a new length means new step graphs (a capture costs several
    /// passes' time), and a length-sorted window admits ever longer prompts: rounding makes
    /// the batch change shape a few times per window instead of at nearly every refill.
    pub pad_multiple: usize,
}

impl RunParams<'_> {
    /// The left-padded prompt length of a batch whose longest prompt is `longest`.
    pub fn padded(&self, longest: usize) -> usize {
        super::padded_len([longest], self.pad_multiple)
    }
}

/// The pass the device runs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// Every position (a refresh of any KV cache).
    Full,
    /// The block only, against the cache (`--kv-cache dual`).
    Dual,
    /// From block `block` to the end, against the cache (`--kv-cache prefix`).
    Prefix { block: usize },
}

/// A batch laid out for the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Rows.
    pub b: usize,
    /// Left padding to this prompt length; each row is `lp + gen_length` tokens.
    pub lp: usize,
    /// `[b × (lp + gen_length)]` tokens.
    pub x: Vec<u32>,
    /// Padding of each row.
    pub pads: Vec<usize>,
    /// RNG key of each row (0 for an idle slot).
    pub keys: Vec<u64>,
    /// The batch phase `[step, step in block, block, 0]`.
    pub phase: [i32; 4],
    pub rows: Vec<RowState>,
    /// The slot each row held in the previous layout (None: a new prompt or an idle slot): a
    /// device that records trajectories (`--trajectory`, `--top-k`) moves the row's per-slot
    /// record with it and starts a new prompt's afresh.
    pub prev: Vec<Option<usize>>,
}

/// What runs the scheduled steps.
pub trait RowDevice {
    /// Replace the batch on the device.
    fn load(&mut self, layout: &Layout) -> Result<()>;
    /// The batch's tokens now (`[b × (lp + gen_length)]`).
    fn tokens(&mut self) -> Result<Vec<u32>>;
    /// One sampler step of the loaded batch. A non-finite logit is a [`NonFiniteLogit`] error
    /// whose `row` is the slot.
    fn step(&mut self, kind: StepKind) -> Result<()>;
    /// The phase and the rows' states after the last step.
    fn state(&mut self) -> Result<([i32; 4], Vec<RowState>)>;
    /// Make slot `r` idle (the timing bench's forced stop).
    fn retire(&mut self, r: usize) -> Result<()>;
    /// What slot `r`'s row recorded so far (commit steps, top-k: [`run_traced`]); None from a
    /// device that records nothing.
    fn trace(&mut self, _r: usize) -> Result<Option<RowTrace>> {
        Ok(None)
    }
}

/// A prompt in a slot.
#[derive(Debug, Clone, Copy)]
struct Slot {
    prompt: usize,
    steps: usize,
}

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
    fn live(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
}

/// Generate every prompt (unpadded; `keys` their RNG keys) through at most `slots` rows on
/// `dev`, admitting a prompt while `fits(rows, longest prompt)`. `forced` (timing only): prompt
/// `i`'s row also ends once its first `forced[i] + 1` positions are committed. Returns each
/// prompt's [`RowOut`] in order and the batch steps run.
pub fn run(
    dev: &mut dyn RowDevice,
    prompts: &[Vec<u32>],
    keys: &[u64],
    p: &RunParams,
    slots: NonZeroUsize,
    fits: &dyn Fn(usize, usize) -> bool,
    forced: Option<&[usize]>,
) -> Result<(Vec<RowOut>, usize)> {
    let (rows, passes, _) = run_traced(dev, prompts, keys, p, slots, fits, forced, false)?;
    Ok((rows, passes))
}

/// [`run`], and with `trace` each prompt's [`RowTrace`] as the device recorded it
/// ([`RowDevice::trace`], read when its row leaves; None from a device that records none).
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub fn run_traced(
    dev: &mut dyn RowDevice,
    prompts: &[Vec<u32>],
    keys: &[u64],
    p: &RunParams,
    slots: NonZeroUsize,
    fits: &dyn Fn(usize, usize) -> bool,
    forced: Option<&[usize]>,
    trace: bool,
) -> Result<(Vec<RowOut>, usize, Vec<Option<RowTrace>>)> {
    let g = p.gen;
    let n = prompts.len();
    if keys.len() != n || forced.is_some_and(|f| f.len() != n) {
        bail!("one RNG key (and forced length) per prompt");
    }
    if p.free_rows && g.cache != KvCache::None {
        bail!("rows move independently only without a KV cache");
    }
    let slots = slots.get();
    let gen = g.gen_length;
    let mut out: Vec<Option<RowOut>> = vec![None; n];
    let mut traces: Vec<Option<RowTrace>> = vec![None; if trace { n } else { 0 }];
    let mut next = 0usize;
    let mut batch = Batch {
        slots: vec![],
        rows: vec![],
        phase: [0; 4],
        lp: 0,
    };
    let mut forwards = 0usize;
    let limit = (n + slots) * (gen + 1) * g.steps_per_block().max(1);
    loop {
        // Finished rows leave; their records are final.
        let (retired, mut x) = retire(dev, &mut batch, &mut out, &mut traces, p)?;
        let live = batch.live();
        if live == 0 {
            // Every row finished mid-block (early exit): an empty lockstep batch starts a new
            // phase, else no prompt could ever join it.
            batch.phase[1] = 0;
        }
        let boundary = p.free_rows || batch.phase[1] == 0;
        let mut admit = vec![];
        if next < n && boundary && !(g.cache == KvCache::Prefix && live > 0) {
            admit = admissions(&batch, prompts, &mut next, slots, p, fits);
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
            // The tokens read to retire rows this iteration are still current: no second read.
            let xold = match x.take() {
                Some(x) => x,
                None if batch.b() > 0 => dev.tokens()?,
                None => vec![],
            };
            let (nb, layout) = relayout(xold, batch, &admit, prompts, keys, p, compact);
            dev.load(&layout)?;
            batch = nb;
        }
        let kind = step_kind(g, &batch);
        dev.step(kind).map_err(|e| name_row(e, &batch))?;
        forwards += 1;
        for s in batch.slots.iter_mut().flatten() {
            s.steps += 1;
        }
        let (phase, rows) = dev.state()?;
        batch.phase = phase;
        batch.rows = rows;
        if let Some(f) = forced {
            force_finish(dev, &mut batch, f, gen, g.block_length, g.mask_id)?;
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
        traces,
    ))
}

/// Finished rows leave the batch (their slots freed), each prompt's record taken from the
/// device's tokens (and its trace, when `traces` has a place for it); whether any left, and
/// the tokens if they were read.
fn retire(
    dev: &mut dyn RowDevice,
    batch: &mut Batch,
    out: &mut [Option<RowOut>],
    traces: &mut [Option<RowTrace>],
    p: &RunParams,
) -> Result<(bool, Option<Vec<u32>>)> {
    let gen = p.gen.gen_length;
    let mut retired = false;
    let mut x: Option<Vec<u32>> = None;
    for r in 0..batch.b() {
        if batch.rows[r].live != 0 {
            continue;
        }
        let Some(sl) = batch.slots[r].take() else {
            continue;
        };
        if x.is_none() {
            x = Some(dev.tokens()?);
        }
        let s = batch.lp + gen;
        let span = &x.as_ref().expect("read")[r * s + batch.lp..(r + 1) * s];
        out[sl.prompt] = Some(row_out(span.to_vec(), sl.steps, batch.rows[r].block, p));
        if let Some(t) = traces.get_mut(sl.prompt) {
            *t = dev.trace(r)?;
        }
        retired = true;
    }
    Ok((retired, x))
}

/// The queued prompts (from `next` on, advancing it) that join the batch now: while a slot is
/// free and the batch, padded to its longest prompt, still `fits`.
fn admissions(
    batch: &Batch,
    prompts: &[Vec<u32>],
    next: &mut usize,
    slots: usize,
    p: &RunParams,
    fits: &dyn Fn(usize, usize) -> bool,
) -> Vec<usize> {
    let (n, live) = (prompts.len(), batch.live());
    let mut admit = vec![];
    let mut longest = batch
        .slots
        .iter()
        .flatten()
        .map(|s| prompts[s.prompt].len())
        .max()
        .unwrap_or(0);
    while *next < n && live + admit.len() < slots {
        let l = prompts[*next].len().max(longest);
        let rows = live + admit.len() + 1;
        if rows > 1 && !fits(rows, p.padded(l)) {
            break;
        }
        longest = l;
        admit.push(*next);
        *next += 1;
    }
    admit
}

/// The pass the batch's phase calls for: full, dual-cache window, or prefix window (every
/// live row is then at the same block: no refill while rows are live).
fn step_kind(g: &GenParams, batch: &Batch) -> StepKind {
    let sib = batch.phase[1] as usize;
    if g.full_pass_at(sib) {
        StepKind::Full
    } else if g.cache == KvCache::Dual {
        StepKind::Dual
    } else {
        let block = batch
            .slots
            .iter()
            .zip(&batch.rows)
            .find(|(s, _)| s.is_some())
            .map_or(0, |(_, r)| r.block as usize);
        StepKind::Prefix { block }
    }
}

/// The new batch after admitting `admit`: the live rows (kept in their slots, or moved to the
/// front when `compact`), the admitted prompts in free slots, left padding to the longest.
/// `xold`: the device's tokens of the old batch.
fn relayout(
    xold: Vec<u32>,
    old: Batch,
    admit: &[usize],
    prompts: &[Vec<u32>],
    keys: &[u64],
    p: &RunParams,
    compact: bool,
) -> (Batch, Layout) {
    let g = p.gen;
    let gen = g.gen_length;
    let os = old.lp + gen;
    // (slot content, previous row) in the new batch.
    let mut placed: Vec<Option<(Slot, Option<usize>)>> = old
        .slots
        .iter()
        .enumerate()
        .filter(|(_, s)| !compact || s.is_some())
        .map(|(r, s)| s.map(|s| (s, Some(r))))
        .collect();
    let mut free: Vec<usize> = (0..placed.len()).filter(|&r| placed[r].is_none()).collect();
    free.reverse();
    for &i in admit {
        let s = Some((
            Slot {
                prompt: i,
                steps: 0,
            },
            None,
        ));
        match free.pop() {
            Some(r) => placed[r] = s,
            None => placed.push(s),
        }
    }
    while placed.last().is_some_and(|x| x.is_none()) {
        placed.pop();
    }
    let b = placed.len();
    let lp = p.padded(
        placed
            .iter()
            .flatten()
            .map(|(s, _)| prompts[s.prompt].len())
            .max()
            .unwrap_or(0),
    );
    let mut l = Layout {
        b,
        lp,
        x: Vec::with_capacity(b * (lp + gen)),
        pads: Vec::with_capacity(b),
        keys: Vec::with_capacity(b),
        phase: old.phase,
        rows: Vec::with_capacity(b),
        prev: placed.iter().map(|x| (*x).and_then(|(_, r)| r)).collect(),
    };
    for slot in &placed {
        match slot {
            Some((sl, prev)) => {
                let q = &prompts[sl.prompt];
                l.pads.push(lp - q.len());
                l.x.extend(std::iter::repeat_n(p.pad_id, lp - q.len()));
                l.x.extend_from_slice(q);
                match prev {
                    Some(r) => {
                        l.x.extend_from_slice(&xold[r * os + old.lp..(r + 1) * os]);
                        l.rows.push(old.rows[*r]);
                    }
                    None => {
                        l.x.extend(std::iter::repeat_n(g.mask_id, gen));
                        l.rows.push(RowState {
                            sib: if p.free_rows { 0 } else { old.phase[1] },
                            ..RowState::FRESH
                        });
                    }
                }
                l.keys.push(keys[sl.prompt]);
            }
            None => {
                // An idle slot: padding then masks; computed, never committed.
                l.pads.push(lp);
                l.x.extend(std::iter::repeat_n(p.pad_id, lp));
                l.x.extend(std::iter::repeat_n(g.mask_id, gen));
                l.keys.push(0);
                l.rows.push(RowState::default());
            }
        }
    }
    let batch = Batch {
        slots: placed.into_iter().map(|x| x.map(|(s, _)| s)).collect(),
        rows: l.rows.clone(),
        phase: old.phase,
        lp,
    };
    (batch, l)
}

/// The forced stop of the timing bench: retire live rows whose first `forced + 1` positions
/// are committed.
fn force_finish(
    dev: &mut dyn RowDevice,
    batch: &mut Batch,
    forced: &[usize],
    gen: usize,
    block_length: usize,
    mask_id: u32,
) -> Result<()> {
    let x = dev.tokens()?;
    let s = batch.lp + gen;
    for r in 0..batch.b() {
        let Some(sl) = batch.slots[r] else { continue };
        if batch.rows[r].live == 0 {
            continue;
        }
        let l = forced[sl.prompt].min(gen - 1) + 1;
        let at = r * s + batch.lp;
        if x[at..at + l].iter().all(|&t| t != mask_id) {
            batch.rows[r].live = 0;
            // Its last block is the one holding the forced stop (the device may have moved on).
            batch.rows[r].block = ((l - 1) / block_length) as i32;
            dev.retire(r)?;
        }
    }
    Ok(())
}

/// A device's [`NonFiniteLogit`] names a slot: name the prompt (its index) instead.
fn name_row(e: anyhow::Error, batch: &Batch) -> anyhow::Error {
    let Some(nf) = e.downcast_ref::<NonFiniteLogit>() else {
        return e;
    };
    let mut nf = nf.clone();
    match batch.slots.get(nf.row).copied().flatten() {
        Some(s) => {
            nf.row = s.prompt;
            anyhow::Error::new(nf)
        }
        None => anyhow::anyhow!("non-finite logit in idle slot {}", nf.row),
    }
}

/// A finished (or fully decoded) row's [`RowOut`]: `steps` passes, last block `block`.
fn row_out(gen: Vec<u32>, steps: usize, block: i32, p: &RunParams) -> RowOut {
    let g = p.gen;
    let stop = finished_at(&gen, g.mask_id, p.stop_ids);
    RowOut {
        early: gen.contains(&g.mask_id),
        blocks: block as usize + 1,
        steps,
        block_rule_steps: g.threshold.is_none().then(|| match stop {
            // A device runs every step of a block, those committing nothing included.
            Some(e) => (e / g.block_length + 1) * g.steps_per_block(),
            None => steps,
        }),
        gen,
    }
}
