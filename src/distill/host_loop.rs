//! The sampler's host loop: LLaDA's block-wise masked-diffusion `generate` run on the host over
//! any backend's logits (the CPU teacher; the GPU's trace check), exactly, with the LM head and
//! softmax over the current block only. (The contract it shares with the device loop is
//! [`crate::sampling`]; the device's own loop is `gpu::engine::device_loop`.)
//!
//! Per block: `get_num_transfer_tokens` spreads the block's masks over `steps / num_blocks`
//! steps (equal shares, the remainder to the earliest steps). Per step: one forward; for every
//! masked position of the block a candidate `x0` (argmax at temperature 0, else Gumbel-max in
//! float64 from [`rng`](super::rng)); its confidence is `p(x0)` under the un-noised,
//! un-tempered softmax (`low-confidence`) or a uniform draw from `STREAM_REMASK` (`random`);
//! the `k` most confident masked positions of the row are committed, highest first (ties: the
//! lower position). Nothing beyond the current block is ever committed and a committed token is
//! never remasked, so logits outside the block are never needed.
//!
//! One deliberate difference from the reference: the mask token is excluded from the
//! candidates and from the confidence softmax (its logit is treated as −∞, MDLM's zero-masking
//! parametrisation), so a committed position always holds a real token.
//!
//! EOS/EoT flags, as LLaDA intends them (not as its `a = b = -inf` line does):
//! `logits_eos_inf` gives EOS logits −∞ before the choice (EOS is never sampled);
//! `confidence_eos_eot_inf` computes confidence with EOS and EoT excluded from the softmax, so
//! a position whose candidate is EOS/EoT has confidence 0 and is committed only when nothing
//! else is left — identically at every temperature.
//!
//! Approximate, opt-in: `threshold` (Fast-dLLM's confidence-threshold parallel decoding)
//! commits, each step, the most confident masked position of the row's block and every other
//! one with confidence ≥ threshold; a block ends when no row has a mask left in it and the
//! global step (the RNG's counter) counts the steps actually run. `cache` (prefix/dual KV
//! cache) changes the forward, so only a backend that runs the whole loop (the GPU) takes it.
//!
//! [`step_row`] is the whole per-step math of one row over its block logits; the CUDA backend
//! reimplements it as kernels and is checked against it.

use anyhow::Result;

use super::rng;
use super::Remasking;
use crate::sampling::early_exit::{finished_at, RowOut};
use crate::sampling::trajectory::RowTrace;
use crate::sampling::GenParams;
use crate::teacher::{Batch, GenJob, TeacherBackend};

pub use crate::sampling::num_transfer_tokens;

/// One committed token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Commit {
    /// Global step (over all blocks).
    pub step: usize,
    /// Row in the batch.
    pub row: usize,
    /// Position in the generated span.
    pub pos: usize,
    pub token: u32,
}

/// Identifies a row's random stream and where its block sits.
#[derive(Debug, Clone, Copy)]
pub struct RowCtx {
    pub prompt_key: u64,
    pub global_step: u64,
    /// Position of the block's first token within the generated span.
    pub block_start: usize,
}

/// Candidate token for one position: argmax (temperature 0; first maximum) or Gumbel-max in
/// float64. The mask token itself is never a candidate (MDLM's "zero masking probability";
/// committing it would leave the position masked), EOS neither when `logits_eos_inf`.
pub fn choose_token(p: &GenParams, logits: &[f32], ctx: &RowCtx, pos: usize) -> u32 {
    let banned =
        |v: usize| v as u32 == p.mask_id || (p.logits_eos_inf && p.eos_ids.contains(&(v as u32)));
    let mut best = f64::NEG_INFINITY;
    let mut arg = 0usize;
    let mut found = false;
    for (v, &l) in logits.iter().enumerate() {
        if banned(v) {
            continue;
        }
        let s = if p.temperature == 0.0 {
            l as f64
        } else {
            rng::gumbel_score(
                l as f64,
                p.temperature,
                p.seed,
                ctx.prompt_key,
                ctx.global_step,
                pos as u64,
                v as u64,
            )
        };
        if !found || s > best {
            best = s;
            arg = v;
            found = true;
        }
    }
    arg as u32
}

/// Confidence of candidate `x0` at `pos` (see the module doc).
pub fn confidence(p: &GenParams, logits: &[f32], x0: u32, ctx: &RowCtx, pos: usize) -> f64 {
    match p.remasking {
        Remasking::Random => rng::uniform(
            p.seed,
            rng::STREAM_REMASK,
            ctx.prompt_key,
            ctx.global_step,
            pos as u64,
            0,
        ),
        Remasking::LowConfidence => {
            let excluded = |v: usize| {
                let v = v as u32;
                v == p.mask_id
                    || (p.logits_eos_inf && p.eos_ids.contains(&v))
                    || (p.confidence_eos_eot_inf
                        && (p.eos_ids.contains(&v) || p.eot_ids.contains(&v)))
            };
            if excluded(x0 as usize) {
                return 0.0;
            }
            let mut m = f64::NEG_INFINITY;
            for (v, &l) in logits.iter().enumerate() {
                if !excluded(v) {
                    m = m.max(l as f64);
                }
            }
            let mut z = 0.0;
            for (v, &l) in logits.iter().enumerate() {
                if !excluded(v) {
                    z += (l as f64 - m).exp();
                }
            }
            (logits[x0 as usize] as f64 - m).exp() / z
        }
    }
}

/// One step of one row: `block` holds the row's current block (mask id where still masked),
/// `logits` its `[block.len(), vocab]` logits. Commits the `k` most confident masked positions
/// into `block` and returns their (block offset, token), in commit order.
pub fn step_row(
    p: &GenParams,
    logits: &[f32],
    vocab: usize,
    block: &mut [u32],
    k: usize,
    ctx: &RowCtx,
) -> Vec<(usize, u32)> {
    if k == 0 {
        return vec![];
    }
    let mut cand: Vec<(f64, usize, u32)> = Vec::new();
    for (j, &t) in block.iter().enumerate() {
        if t != p.mask_id {
            continue;
        }
        let row = &logits[j * vocab..(j + 1) * vocab];
        let pos = ctx.block_start + j;
        let x0 = choose_token(p, row, ctx, pos);
        cand.push((confidence(p, row, x0, ctx, pos), j, x0));
    }
    // Highest confidence first; ties to the lower position (a total, stable order).
    cand.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    match p.threshold {
        None => cand.truncate(k),
        Some(t) => {
            let keep = 1 + cand.iter().skip(1).filter(|c| c.0 >= t).count();
            cand.truncate(keep);
        }
    }
    for &(_, j, t) in &cand {
        block[j] = t;
    }
    cand.into_iter().map(|(_, j, t)| (j, t)).collect()
}

/// A left-padded batch: `[b, lp + gen_length]` tokens and key mask.
pub struct Layout {
    pub b: usize,
    pub lp: usize,
    pub l: usize,
    pub tokens: Vec<u32>,
    pub keep: Vec<bool>,
}

impl Layout {
    /// The batch as a backend reads it.
    pub fn batch(&self) -> Batch<'_> {
        Batch::new(&self.tokens, &self.keep, self.b, self.l)
    }
}

/// Left-pad `prompts` to a common length and append `gen_length` masks.
pub fn layout(
    prompts: &[&[u32]],
    gen_length: usize,
    mask_id: u32,
    pad_id: u32,
    pad_multiple: usize,
) -> Layout {
    let b = prompts.len();
    let lp = crate::sampling::padded_len(prompts.iter().map(|p| p.len()), pad_multiple);
    let l = lp + gen_length;
    let mut tokens = Vec::with_capacity(b * l);
    let mut keep = Vec::with_capacity(b * l);
    for p in prompts {
        let pad = lp - p.len();
        tokens.extend(std::iter::repeat_n(pad_id, pad));
        keep.extend(std::iter::repeat_n(false, pad));
        tokens.extend_from_slice(p);
        tokens.extend(std::iter::repeat_n(mask_id, gen_length));
        keep.extend(std::iter::repeat_n(true, p.len() + gen_length));
    }
    Layout {
        b,
        lp,
        l,
        tokens,
        keep,
    }
}

/// Generate for a batch of prompts (token ids; `keys` their [`rng::prompt_key`]s). Returns the
/// generated span of each row; `trace`, when given, receives every commit in order.
/// `logits_shift` 1 reads position i's prediction from the logits at i − 1.
#[allow(clippy::too_many_arguments)]
pub fn generate(
    backend: &mut dyn TeacherBackend,
    p: &GenParams,
    prompts: &[&[u32]],
    keys: &[u64],
    pad_id: u32,
    logits_shift: u8,
    trace: Option<&mut Vec<Commit>>,
) -> Result<Vec<Vec<u32>>> {
    generate_traced(backend, p, prompts, keys, pad_id, logits_shift, trace, None)
}

/// [`generate`], also recording each row's [`RowTrace`] (`--trajectory`, `--top-k`) into
/// `rows` (one per prompt) when given: commit steps are the rows' random-stream steps.
#[allow(clippy::too_many_arguments)]
pub fn generate_traced(
    backend: &mut dyn TeacherBackend,
    p: &GenParams,
    prompts: &[&[u32]],
    keys: &[u64],
    pad_id: u32,
    logits_shift: u8,
    mut trace: Option<&mut Vec<Commit>>,
    mut rows: Option<&mut [RowTrace]>,
) -> Result<Vec<Vec<u32>>> {
    let shift = logits_shift as usize;
    anyhow::ensure!(
        shift == 0 || prompts.iter().all(|p| !p.is_empty()),
        "--logits-shift 1 needs a non-empty prompt"
    );
    anyhow::ensure!(
        rows.as_ref().is_none_or(|r| r.len() == prompts.len()),
        "one row trace per prompt"
    );
    if trace.is_none() && rows.is_none() {
        let job = GenJob {
            p,
            prompts,
            keys,
            pad_id,
            logits_shift,
        };
        if let Some(out) = backend.generate(&job) {
            return out;
        }
    }
    host_loop_can_run(p)?;
    let mut lay = layout(
        prompts,
        p.gen_length,
        p.mask_id,
        pad_id,
        backend.pad_multiple(),
    );
    let (b, lp, l) = (lay.b, lay.lp, lay.l);
    let bl = p.block_length;
    let spb = p.steps_per_block();
    let mut global_step = 0usize;
    let mut row_steps = vec![0usize; b];
    for nb in 0..p.num_blocks() {
        let s0 = lp + nb * bl;
        let masks_in_block = |t: &[u32], r: usize| {
            t[r * l + s0..r * l + s0 + bl]
                .iter()
                .filter(|&&x| x == p.mask_id)
                .count()
        };
        if p.threshold.is_some() {
            // Adaptive: until no row has a mask left in this block (≥ 1 commit per step). A
            // row's random stream counts its own steps (those with a mask left in its block),
            // so its tokens are those it gets alone, whatever its batch peers.
            loop {
                let live: Vec<bool> = (0..b).map(|r| masks_in_block(&lay.tokens, r) > 0).collect();
                if !live.iter().any(|&x| x) {
                    break;
                }
                let steps_now = row_steps.clone();
                step_batch(
                    backend,
                    p,
                    &mut lay,
                    keys,
                    nb,
                    global_step,
                    |r| steps_now[r],
                    shift,
                    |_| bl,
                    trace.as_deref_mut(),
                    rows.as_deref_mut(),
                )?;
                for (r, l) in live.iter().enumerate() {
                    row_steps[r] += usize::from(*l);
                }
                global_step += 1;
            }
            continue;
        }
        let schedule: Vec<Vec<usize>> = (0..b)
            .map(|r| num_transfer_tokens(masks_in_block(&lay.tokens, r), spb))
            .collect();
        for i in 0..spb {
            global_step = nb * spb + i;
            // A step that commits nothing anywhere changes nothing: skip its forward.
            if schedule.iter().all(|s| s[i] == 0) {
                continue;
            }
            step_batch(
                backend,
                p,
                &mut lay,
                keys,
                nb,
                global_step,
                |_| global_step,
                shift,
                |r| schedule[r][i],
                trace.as_deref_mut(),
                rows.as_deref_mut(),
            )?;
        }
    }
    Ok((0..b)
        .map(|r| lay.tokens[r * l + lp..(r + 1) * l].to_vec())
        .collect())
}

/// The host loop is exact: a KV cache (`--kv-cache prefix|dual`) runs only where a backend runs
/// the whole loop (the GPU). A usage error otherwise.
pub fn host_loop_can_run(p: &GenParams) -> Result<()> {
    if p.cache != super::KvCache::None {
        return Err(crate::error::usage(format!(
            "--kv-cache {} runs on the GPU only (--device cuda); the CPU sampler is exact",
            p.cache.as_str()
        )));
    }
    Ok(())
}

/// One row alone, LLaDA's loop with per-row early exit: the prompt unpadded, the row's random
/// stream keyed by `key`; `stop_ids` (EOS/EoT) finish the row by
/// [`finished_at`](crate::sampling::early_exit::finished_at) — `None` decodes every block.
/// `trace` (`--trajectory`, `--top-k`) receives each commit's step and top-k.
/// Token for token what [`generate`] gives the row in any batch (the host backends compute a
/// row's logits independently of its peers), up to the point where the row is finished.
pub fn generate_row(
    backend: &mut dyn TeacherBackend,
    p: &GenParams,
    prompt: &[u32],
    key: u64,
    logits_shift: u8,
    stop_ids: Option<&[u32]>,
    mut trace: Option<&mut RowTrace>,
) -> Result<RowOut> {
    let shift = logits_shift as usize;
    anyhow::ensure!(
        shift == 0 || !prompt.is_empty(),
        "--logits-shift 1 needs a non-empty prompt"
    );
    host_loop_can_run(p)?;
    let (lp, bl, spb) = (prompt.len(), p.block_length, p.steps_per_block());
    let l = lp + p.gen_length;
    let mut tokens: Vec<u32> = prompt.to_vec();
    tokens.resize(l, p.mask_id);
    let keep = vec![true; l];
    let vocab = backend.vocab_size();
    let (mut steps, mut own_step) = (0usize, 0usize);
    let fixed = p.threshold.is_none();
    let done = |t: &[u32]| stop_ids.and_then(|s| finished_at(&t[lp..], p.mask_id, s));
    for nb in 0..p.num_blocks() {
        let s0 = lp + nb * bl;
        let masks = |t: &[u32]| t[s0..s0 + bl].iter().filter(|&&x| x == p.mask_id).count();
        let schedule = num_transfer_tokens(masks(&tokens), spb);
        let mut i = 0usize;
        loop {
            let (k, global_step) = if fixed {
                if i == spb {
                    break;
                }
                (schedule[i], nb * spb + i)
            } else {
                if masks(&tokens) == 0 {
                    break;
                }
                (bl, own_step)
            };
            i += 1;
            if k == 0 {
                continue;
            }
            let logits = backend.logits(
                &Batch::new(&tokens, &keep, 1, l),
                s0 - shift..s0 + bl - shift,
            )?;
            crate::sampling::finite::check_logits(&logits, bl, vocab, Some(global_step), nb * bl)?;
            let ctx = RowCtx {
                prompt_key: key,
                global_step: global_step as u64,
                block_start: nb * bl,
            };
            let commits = step_row(p, &logits, vocab, &mut tokens[s0..s0 + bl], k, &ctx);
            if let Some(t) = trace.as_deref_mut() {
                for (j, _) in commits {
                    t.commit(
                        p,
                        nb * bl + j,
                        global_step,
                        &logits[j * vocab..(j + 1) * vocab],
                    );
                }
            }
            steps += 1;
            own_step += 1;
            if let Some(e) = done(&tokens) {
                return Ok(RowOut {
                    early: tokens[lp..].contains(&p.mask_id),
                    gen: tokens[lp..].to_vec(),
                    steps,
                    blocks: nb + 1,
                    block_rule_steps: fixed.then(|| p.block_rule_steps(e)),
                });
            }
        }
    }
    Ok(RowOut {
        gen: tokens[lp..].to_vec(),
        steps,
        blocks: p.num_blocks(),
        early: false,
        block_rule_steps: fixed.then_some(steps),
    })
}

/// One forward over block `nb` and one [`step_row`] per row (`k(row)` commits at most, row
/// `r`'s random stream at step `rng_step(r)`), recording the commits in `trace` and `rows`.
#[allow(clippy::too_many_arguments)]
fn step_batch(
    backend: &mut dyn TeacherBackend,
    p: &GenParams,
    lay: &mut Layout,
    keys: &[u64],
    nb: usize,
    global_step: usize,
    rng_step: impl Fn(usize) -> usize,
    shift: usize,
    k: impl Fn(usize) -> usize,
    mut trace: Option<&mut Vec<Commit>>,
    mut rows: Option<&mut [RowTrace]>,
) -> Result<()> {
    let (b, l, bl) = (lay.b, lay.l, p.block_length);
    let s0 = lay.lp + nb * bl;
    let vocab = backend.vocab_size();
    let logits = backend.logits(&lay.batch(), s0 - shift..s0 + bl - shift)?;
    crate::sampling::finite::check_logits(&logits, bl, vocab, Some(global_step), nb * bl)?;
    for r in 0..b {
        let ctx = RowCtx {
            prompt_key: keys[r],
            global_step: rng_step(r) as u64,
            block_start: nb * bl,
        };
        let block = &mut lay.tokens[r * l + s0..r * l + s0 + bl];
        let rl = &logits[r * bl * vocab..(r + 1) * bl * vocab];
        for (j, token) in step_row(p, rl, vocab, block, k(r), &ctx) {
            if let Some(rt) = rows.as_deref_mut() {
                let lj = &rl[j * vocab..(j + 1) * vocab];
                rt[r].commit(p, nb * bl + j, rng_step(r), lj);
            }
            if let Some(t) = trace.as_deref_mut() {
                t.push(Commit {
                    step: global_step,
                    row: r,
                    pos: nb * bl + j,
                    token,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_schedule_matches_llada() {
        assert_eq!(num_transfer_tokens(32, 8), vec![4; 8]);
        assert_eq!(num_transfer_tokens(10, 4), vec![3, 3, 2, 2]);
        assert_eq!(num_transfer_tokens(3, 5), vec![1, 1, 1, 0, 0]);
        assert_eq!(num_transfer_tokens(0, 2), vec![0, 0]);
    }

    fn params() -> GenParams {
        GenParams {
            gen_length: 4,
            block_length: 4,
            steps: 2,
            temperature: 0.0,
            remasking: Remasking::LowConfidence,
            seed: 0,
            mask_id: 9,
            logits_eos_inf: false,
            confidence_eos_eot_inf: false,
            eos_ids: vec![1],
            eot_ids: vec![2],
            threshold: None,
            cache: crate::sampling::KvCache::None,
            cache_refresh: None,
        }
    }

    #[test]
    fn step_commits_most_confident_first() {
        let p = params();
        let v = 4;
        // Position 0: peaked on 3; 1: flat; 2: already committed; 3: peaked on 0 (most).
        let logits = [
            0.0, 0.0, 0.0, 3.0, //
            0.0, 0.1, 0.0, 0.0, //
            9.0, 0.0, 0.0, 0.0, //
            5.0, 0.0, 0.0, 0.0,
        ];
        let mut block = [9, 9, 2, 9];
        let ctx = RowCtx {
            prompt_key: 1,
            global_step: 0,
            block_start: 0,
        };
        let c = step_row(&p, &logits, v, &mut block, 2, &ctx);
        assert_eq!(c, vec![(3, 0), (0, 3)]);
        assert_eq!(block, [3, 9, 2, 0]);
    }

    #[test]
    fn eos_flags_as_intended() {
        let mut p = params();
        let ctx = RowCtx {
            prompt_key: 1,
            global_step: 0,
            block_start: 0,
        };
        let row = [0.0f32, 5.0, 4.0, 1.0]; // EOS=1 best, EoT=2 second
        assert_eq!(choose_token(&p, &row, &ctx, 0), 1);
        p.logits_eos_inf = true;
        assert_eq!(choose_token(&p, &row, &ctx, 0), 2);
        p.logits_eos_inf = false;
        p.confidence_eos_eot_inf = true;
        assert_eq!(confidence(&p, &row, 1, &ctx, 0), 0.0);
        assert_eq!(confidence(&p, &row, 2, &ctx, 0), 0.0);
        // Others renormalised over the remaining tokens {0, 3}.
        let c3 = confidence(&p, &row, 3, &ctx, 0);
        assert!((c3 - 1f64.exp() / (1.0 + 1f64.exp())).abs() < 1e-12);
        // Same at temperature > 0 (the reference's bug would differ here).
        p.temperature = 1.0;
        assert_eq!(confidence(&p, &row, 1, &ctx, 0), 0.0);
    }

    #[test]
    fn validate_rejects_llada_assert_cases() {
        let mut p = params();
        p.gen_length = 6;
        assert!(p.validate().is_err());
        p.gen_length = 8;
        p.steps = 3; // 2 blocks
        assert!(p.validate().is_err());
        p.steps = 4;
        p.validate().unwrap();
        assert_eq!(p.steps_per_block(), 2);
    }
}
