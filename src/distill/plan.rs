//! The global batch plan: which prompts run together, fixed before any compute so a prompt's
//! batch — and therefore its bytes in distilled.json — is the same in a single run, a resumed
//! run and any `--shard I/N` split (worker I owns the batches k with k mod N = I).
//!
//! Length bucketing: prompts are taken in file order in windows of `batch_size × WINDOW_BATCHES`;
//! inside a window they are sorted by (token length, file order) and cut into batches of
//! `batch_size`, so left padding stays small while the plan stays local and deterministic.
//! With early exit (the default) a whole sorting window is one unit: see [`windows`].

use std::num::NonZeroUsize;

/// Batches per sorting window.
pub const WINDOW_BATCHES: usize = 16;

/// Batches of prompt indices (into the prompt list), in plan order.
pub fn plan(lengths: &[usize], batch_size: NonZeroUsize) -> Vec<Vec<usize>> {
    plan_within(lengths, batch_size, |_, _| true)
}

/// [`plan`], closing a batch early when `fits(rows, longest)` says one more prompt would not
/// fit (the memory budget); a batch always takes at least one prompt. Deterministic in
/// `lengths`, `batch_size` and `fits`.
pub fn plan_within(
    lengths: &[usize],
    batch_size: NonZeroUsize,
    fits: impl Fn(usize, usize) -> bool,
) -> Vec<Vec<usize>> {
    let bs = batch_size.get();
    let mut out = Vec::new();
    let idx: Vec<usize> = (0..lengths.len()).collect();
    for window in idx.chunks(bs.saturating_mul(WINDOW_BATCHES)) {
        let mut w = window.to_vec();
        w.sort_by_key(|&i| (lengths[i], i));
        let mut cur: Vec<usize> = Vec::new();
        for i in w {
            // Sorted ascending: the newcomer is the batch's longest prompt.
            if !cur.is_empty() && (cur.len() == bs || !fits(cur.len() + 1, lengths[i])) {
                out.push(std::mem::take(&mut cur));
            }
            cur.push(i);
        }
        if !cur.is_empty() {
            out.push(cur);
        }
    }
    out
}

/// Prompts per continuous-batching window at `batch_size` rows in flight (the default of
/// `--window-prompts`).
pub fn window_prompts(batch_size: NonZeroUsize) -> NonZeroUsize {
    batch_size.saturating_mul(NonZeroUsize::new(WINDOW_BATCHES).expect("non-zero"))
}

/// The continuous-batching plan: sorting windows as in [`plan`] (prompts in file order,
/// `window` at a time — by default [`window_prompts`] — each sorted by (token length, file
/// order)), each
/// scheduled whole — from an empty batch to an empty batch, finished rows refilled from the
/// window's queue in that order — and committed whole. A window is the unit of resume and of
/// `--shard` ownership, so a record depends only on its window, never on the worker count or
/// the resume point.
pub fn windows(lengths: &[usize], window: NonZeroUsize) -> Vec<Vec<usize>> {
    let idx: Vec<usize> = (0..lengths.len()).collect();
    idx.chunks(window.get())
        .map(|w| {
            let mut w = w.to_vec();
            w.sort_by_key(|&i| (lengths[i], i));
            w
        })
        .collect()
}

/// Padding tokens the plan adds (for the log): Σ over batches of (max len − len).
pub fn padding(lengths: &[usize], batches: &[Vec<usize>]) -> usize {
    batches
        .iter()
        .map(|b| {
            let m = b.iter().map(|&i| lengths[i]).max().unwrap_or(0);
            b.iter().map(|&i| m - lengths[i]).sum::<usize>()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nz(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    #[test]
    fn buckets_within_windows_and_covers_everything() {
        let lengths: Vec<usize> = (0..100).map(|i| (i * 37) % 23).collect();
        let p = plan(&lengths, nz(4));
        let mut all: Vec<usize> = p.concat();
        all.sort();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
        assert!(p.iter().all(|b| b.len() <= 4));
        // Inside the first window (64 prompts) batches are sorted by length.
        let first: Vec<usize> = p[..16].concat();
        assert!(first.iter().all(|&i| i < 64));
        assert!(first.windows(2).all(|w| lengths[w[0]] <= lengths[w[1]]));
        assert!(padding(&lengths, &p) < padding(&lengths, &plan_unsorted(&lengths, 4)));
    }

    #[test]
    fn memory_budget_closes_batches_early() {
        let lengths = [5, 1, 9, 2, 8, 3, 7];
        assert_eq!(
            plan_within(&lengths, nz(3), |_, _| true),
            plan(&lengths, nz(3))
        );
        // Rows × longest ≤ 16.
        let p = plan_within(&lengths, nz(3), |rows, longest| rows * longest <= 16);
        assert_eq!(p, vec![vec![1, 3, 5], vec![0, 6], vec![4], vec![2]]);
        // Nothing fits: one prompt per batch, never an empty batch.
        let p = plan_within(&lengths, nz(3), |_, _| false);
        assert_eq!(p.len(), lengths.len());
        // An absurd batch size does not overflow the window size.
        assert_eq!(
            plan_within(&lengths, NonZeroUsize::MAX, |_, _| true).len(),
            1
        );
    }

    fn plan_unsorted(lengths: &[usize], bs: usize) -> Vec<Vec<usize>> {
        (0..lengths.len())
            .collect::<Vec<_>>()
            .chunks(bs)
            .map(<[usize]>::to_vec)
            .collect()
    }
}
