//! Why distill stops on a NaN/inf logit: a teacher whose forward produces non-finite logits
//! (NaN weights the loader did not see, a finite LM head that overflows f32, a broken kernel)
//! would otherwise commit arbitrary tokens and write records that look fine. The first
//! non-finite logit of a forward is reported by batch row, step and position; `run` turns the
//! row into the prompt's id and line.

use std::fmt;

/// The first non-finite logit of one forward.
#[derive(Debug, Clone, PartialEq)]
pub struct NonFiniteLogit {
    /// Row in the forward's batch.
    pub row: usize,
    /// Global sampler step; `None` for the MCQ answer slot's forward.
    pub step: Option<usize>,
    /// Position in the generated span (the answer slot: 0).
    pub position: usize,
    /// Vocabulary id whose logit is non-finite.
    pub token: usize,
    pub value: f32,
}

impl fmt::Display for NonFiniteLogit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.step {
            Some(s) => write!(
                f,
                "non-finite logit {} at step {s}, generated position {}, token id {}",
                self.value, self.position, self.token
            )?,
            None => write!(
                f,
                "non-finite logit {} at the MCQ answer slot, token id {}",
                self.value, self.token
            )?,
        }
        write!(
            f,
            ": the teacher's forward overflows or its weights are not finite; nothing was \
             written for this batch"
        )
    }
}

impl std::error::Error for NonFiniteLogit {}

/// Check `[rows, width, vocab]` logits; the first non-finite one is an error carrying a
/// [`NonFiniteLogit`] (row, `step`, position `pos0 + j` for the j-th of the `width` rows).
pub fn check_logits(
    logits: &[f32],
    width: usize,
    vocab: usize,
    step: Option<usize>,
    pos0: usize,
) -> anyhow::Result<()> {
    match logits.iter().position(|x| !x.is_finite()) {
        None => Ok(()),
        Some(i) => {
            let per_row = width.max(1) * vocab.max(1);
            Err(anyhow::Error::new(NonFiniteLogit {
                row: i / per_row,
                step,
                position: pos0 + (i % per_row) / vocab.max(1),
                token: i % vocab.max(1),
                value: logits[i],
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_row_position_and_token() {
        let (width, vocab) = (3, 5);
        let mut l = vec![0.5f32; 2 * width * vocab];
        check_logits(&l, width, vocab, Some(4), 8).unwrap();
        l[width * vocab + 2 * vocab + 1] = f32::NAN;
        l[width * vocab + 2 * vocab + 3] = f32::INFINITY;
        let e = check_logits(&l, width, vocab, Some(4), 8).unwrap_err();
        let nf = e.downcast_ref::<NonFiniteLogit>().unwrap();
        assert_eq!(
            (nf.row, nf.step, nf.position, nf.token),
            (1, Some(4), 10, 1)
        );
        assert!(nf.value.is_nan());
        assert!(e
            .to_string()
            .contains("at step 4, generated position 10, token id 1"));
        let mut l = vec![0.0f32; 4];
        l[2] = f32::NEG_INFINITY;
        let e = check_logits(&l, 1, 2, None, 0).unwrap_err();
        assert!(
            e.to_string()
                .contains("-inf at the MCQ answer slot, token id 0"),
            "{e}"
        );
    }
}
