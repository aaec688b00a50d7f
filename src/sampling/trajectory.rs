//! Why distillation data can be exact: the decoding trajectory (the sampler step that committed
//! each generated position) and the top-k soft labels (the teacher's K most probable tokens at
//! that step) are recorded from the very logits and steps the sampler used, by one contract the
//! host loop and the GPU engine share (`distill --trajectory`, `--top-k K`; issue 55).
//!
//! Step numbering: a row's commit step is its sampler step, the RNG counter LLaDA's global step
//! is — `block × steps_per_block + step_in_block` with the fixed schedule, the row's own count of
//! forward passes under `--threshold`. A position never decoded (the row finished early at its
//! EOS/EoT, [`crate::sampling::early_exit`]) has [`NOT_DECODED`].
//!
//! Top-k: over the logits at the committing step, after the sampler's logit rules (the mask
//! token never a candidate, EOS too with `logits_eos_inf`: both as −∞), un-tempered; ids most
//! probable first (ties: the lower id), log-probabilities `logit − logsumexp` computed in f64
//! and stored as f32, with the f32 log-sum-exp they were normalised by.

use super::GenParams;

/// The commit step of a position that was never decoded.
pub const NOT_DECODED: i64 = -1;

/// Largest `--top-k`.
pub const MAX_TOP_K: usize = 64;

/// The teacher's top-k at one position.
#[derive(Debug, Clone, PartialEq)]
pub struct TopK {
    /// Most probable first.
    pub ids: Vec<u32>,
    /// `log p(id)` under the sampler's distribution, same order as `ids`.
    pub logprobs: Vec<f32>,
    /// The log-sum-exp of the allowed logits.
    pub logsumexp: f32,
}

/// Whether token `v` is excluded from the sampler's distribution (logit −∞).
pub fn banned(p: &GenParams, v: u32) -> bool {
    v == p.mask_id || (p.logits_eos_inf && p.eos_ids.contains(&v))
}

/// The top-`k` of one position's logits row (see the module doc). Fewer than `k` entries only
/// when the vocabulary, less the banned tokens, is smaller than `k`.
pub fn top_k(p: &GenParams, logits: &[f32], k: usize) -> TopK {
    let mut m = f64::NEG_INFINITY;
    for (v, &l) in logits.iter().enumerate() {
        if !banned(p, v as u32) {
            m = m.max(l as f64);
        }
    }
    let mut z = 0.0f64;
    // Best k so far, sorted by (logit desc, id asc).
    let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
    for (v, &l) in logits.iter().enumerate() {
        let v = v as u32;
        if banned(p, v) {
            continue;
        }
        z += (l as f64 - m).exp();
        if best.len() == k && best.last().is_some_and(|&(bl, _)| l <= bl) {
            continue;
        }
        let at = best.partition_point(|&(bl, bv)| bl > l || (bl == l && bv < v));
        best.insert(at, (l, v));
        best.truncate(k);
    }
    let lse = m + z.ln();
    TopK {
        ids: best.iter().map(|&(_, v)| v).collect(),
        logprobs: best.iter().map(|&(l, _)| (l as f64 - lse) as f32).collect(),
        logsumexp: lse as f32,
    }
}

/// What one row's generation recorded for `--trajectory` / `--top-k`: per generated position
/// (`gen_length`), the commit step and, with a K, its top-k.
#[derive(Debug, Clone, PartialEq)]
pub struct RowTrace {
    pub commit_step: Vec<i64>,
    /// `None` everywhere without `--top-k`, and at positions never decoded.
    pub top_k: Vec<Option<TopK>>,
    /// `--top-k`, 0 when off.
    pub k: usize,
}

impl RowTrace {
    pub fn new(gen_length: usize, k: usize) -> RowTrace {
        RowTrace {
            commit_step: vec![NOT_DECODED; gen_length],
            top_k: vec![None; gen_length],
            k,
        }
    }

    /// Position `pos` of the generated span was committed at `step` from `logits` (its row).
    pub fn commit(&mut self, p: &GenParams, pos: usize, step: usize, logits: &[f32]) {
        self.commit_step[pos] = step as i64;
        if self.k > 0 {
            self.top_k[pos] = Some(top_k(p, logits, self.k));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::{KvCache, Remasking};

    fn params() -> GenParams {
        GenParams {
            gen_length: 4,
            block_length: 4,
            steps: 4,
            temperature: 0.0,
            remasking: Remasking::LowConfidence,
            seed: 0,
            mask_id: 4,
            logits_eos_inf: false,
            confidence_eos_eot_inf: false,
            eos_ids: vec![1],
            eot_ids: vec![],
            threshold: None,
            cache: KvCache::None,
            cache_refresh: None,
        }
    }

    #[test]
    fn top_k_orders_by_logit_then_id_and_skips_banned_tokens() {
        let mut p = params();
        let logits = [1.0f32, 3.0, 2.0, 2.0, 9.0, -1.0];
        let t = top_k(&p, &logits, 3);
        assert_eq!(t.ids, vec![1, 2, 3]); // the mask (4) is never a candidate
        let lse = [1.0f64, 3.0, 2.0, 2.0, -1.0]
            .iter()
            .map(|x| x.exp())
            .sum::<f64>()
            .ln();
        assert_eq!(t.logsumexp, lse as f32);
        assert_eq!(t.logprobs[0], (3.0 - lse) as f32);
        assert!(t.logprobs.windows(2).all(|w| w[0] >= w[1]));
        p.logits_eos_inf = true; // EOS (1) banned too
        assert_eq!(top_k(&p, &logits, 2).ids, vec![2, 3]);
        // k beyond the allowed vocabulary: all of it.
        assert_eq!(top_k(&p, &logits, 64).ids, vec![2, 3, 0, 5]);
    }

    #[test]
    fn trace_records_steps_and_top_k() {
        let p = params();
        let mut t = RowTrace::new(3, 2);
        t.commit(&p, 1, 5, &[0.0, 1.0, 2.0, 3.0, 0.0, 0.0]);
        assert_eq!(t.commit_step, vec![NOT_DECODED, 5, NOT_DECODED]);
        assert_eq!(t.top_k[1].as_ref().unwrap().ids, vec![3, 2]);
        assert!(t.top_k[0].is_none());
    }
}
