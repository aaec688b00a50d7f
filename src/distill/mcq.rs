//! The MCQ answer slot: after the generated reasoning, the fixed template
//! [`ANSWER_TEMPLATE`] and one masked position; one forward gives that position's logits, which
//! restricted to the item's letter tokens (A.. up to its option count, at most J) give the
//! answer. Recorded: the letter probabilities renormalised over those letters, and each
//! letter's raw log-probability under the full-vocabulary softmax.
//!
//! The context is: rendered prompt ids, the response ids (the generated span up to its first
//! EOS/EoT), `encode(ANSWER_TEMPLATE)`, the mask. The slot's letter token is the one that
//! follows "Answer:" in the tokenizer (" A" when it is one token, else "A";
//! [`TeacherTokenizer::letter_ids`](crate::teacher::TeacherTokenizer::letter_ids)).

use anyhow::Result;

use super::host_loop::layout;
use crate::teacher::tokenizer::LETTERS;
use crate::teacher::TeacherBackend;

/// Appended after the reasoning; the masked letter slot follows it.
pub const ANSWER_TEMPLATE: &str = "\nAnswer:";

/// One item's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub letter: String,
    /// (letter, probability renormalised over the item's letters)
    pub probs: Vec<(String, f64)>,
    /// (letter, log-probability under the full softmax)
    pub logprobs: Vec<(String, f64)>,
}

/// The answer distribution from one position's logits over the first `n` letters.
pub fn letter_distribution(logits: &[f32], letter_ids: &[u32], n: usize) -> Answer {
    let m = logits
        .iter()
        .fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
    let lse = m + logits
        .iter()
        .map(|&l| (l as f64 - m).exp())
        .sum::<f64>()
        .ln();
    let ls: Vec<f64> = letter_ids[..n]
        .iter()
        .map(|&i| logits[i as usize] as f64)
        .collect();
    let lm = ls.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = ls.iter().map(|l| (l - lm).exp()).sum();
    let mut best = 0;
    for (i, l) in ls.iter().enumerate() {
        if *l > ls[best] {
            best = i;
        }
    }
    Answer {
        letter: LETTERS[best].to_string(),
        probs: ls
            .iter()
            .enumerate()
            .map(|(i, l)| (LETTERS[i].to_string(), (l - lm).exp() / z))
            .collect(),
        logprobs: ls
            .iter()
            .enumerate()
            .map(|(i, l)| (LETTERS[i].to_string(), l - lse))
            .collect(),
    }
}

/// Answer a batch: `contexts[r]` ends just before the slot (template included); `n_options[r]`
/// letters are allowed for row r. One forward for the whole batch.
pub fn answer_batch(
    backend: &mut dyn TeacherBackend,
    contexts: &[Vec<u32>],
    n_options: &[usize],
    letter_ids: &[u32],
    mask_id: u32,
    pad_id: u32,
    logits_shift: u8,
) -> Result<Vec<Answer>> {
    if contexts.is_empty() {
        return Ok(vec![]);
    }
    let refs: Vec<&[u32]> = contexts.iter().map(Vec::as_slice).collect();
    // Left-padded contexts followed by one mask: the slot is the last position of every row.
    let lay = layout(&refs, 1, mask_id, pad_id, 1);
    let at = lay.l - 1 - logits_shift as usize;
    let logits = backend.logits(&lay.batch(), at..at + 1)?;
    let v = backend.vocab_size();
    crate::sampling::finite::check_logits(&logits, 1, v, None, 0)?;
    Ok((0..lay.b)
        .map(|r| letter_distribution(&logits[r * v..(r + 1) * v], letter_ids, n_options[r]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renormalised_probs_and_raw_logprobs() {
        // vocab 6; letters A,B,C at ids 3,4,5; an item with 2 options ignores C.
        let logits = [0.0f32, 1.0, 0.5, 2.0, 2.0f32.ln() + 2.0, 9.0];
        let a = letter_distribution(&logits, &[3, 4, 5], 2);
        assert_eq!(a.letter, "B");
        assert_eq!(a.probs.len(), 2);
        assert!((a.probs[0].1 - 1.0 / 3.0).abs() < 1e-6);
        assert!((a.probs[1].1 - 2.0 / 3.0).abs() < 1e-6);
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        assert!((a.logprobs[0].1 - (2.0 - z.ln())).abs() < 1e-6);
        assert!(a.logprobs.iter().all(|(_, l)| *l < 0.0));
    }
}
