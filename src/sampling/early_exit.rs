//! Per-row early exit at EOS, exact: when a row is finished, what a row's generation returns,
//! and the counts the summary reports — shared by the host loop and the GPU engine.
//!
//! Why stopping is exact: blocks are decoded left to right, a committed token never changes,
//! nothing beyond the current block is committed, and the record keeps the response only up to
//! its first EOS/EoT (the MCQ letter is read from `prompt + response + "\nAnswer:" + [MASK]`).
//! So once an EOS/EoT is committed at position `p` and every position before `p` is committed,
//! no later step can change the row's record: the row is finished ([`finished_at`]). That rule
//! is finer than "the block holding the first EOS is done": the row stops at the step that
//! commits its last position before `p`.

/// What generating one row gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowOut {
    /// The generated span (`gen_length` ids); positions never decoded hold the mask id.
    pub gen: Vec<u32>,
    /// Forward passes this row took part in (sampler steps; the MCQ letter pass not counted).
    pub steps: usize,
    /// Blocks the row entered (1..=num_blocks).
    pub blocks: usize,
    /// Stopped before its last block was done (by [`finished_at`]).
    pub early: bool,
    /// Steps it would have run had it stopped only at the end of the block holding its first
    /// EOS/EoT (fixed schedule; `None` under `--threshold`, where a block's steps vary).
    pub block_rule_steps: Option<usize>,
}

/// Position of the first EOS/EoT in `gen` when every position before it is committed (the row
/// is finished), else `None`.
pub fn finished_at(gen: &[u32], mask_id: u32, stop_ids: &[u32]) -> Option<usize> {
    for (i, &t) in gen.iter().enumerate() {
        if t == mask_id {
            return None;
        }
        if stop_ids.contains(&t) {
            return Some(i);
        }
    }
    None
}

/// Totals over the rows of a run (the log line, `--json`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ExitStats {
    pub rows: usize,
    /// Rows that stopped before their last block.
    pub finished_early: usize,
    /// Σ blocks entered.
    pub blocks: usize,
    /// Σ row forward passes run (sampler steps).
    pub row_steps: usize,
    /// Σ row forward passes a full decode runs (`rows × steps`, fixed schedule).
    pub row_steps_full: usize,
    /// Σ row forward passes under the coarser block rule (fixed schedule only).
    pub row_steps_block_rule: usize,
    /// Batch forward passes the sampler ran (GPU: one per step of the whole batch).
    pub batch_forwards: usize,
}

impl ExitStats {
    pub fn add(&mut self, r: &RowOut, full_steps: usize) {
        self.rows += 1;
        self.finished_early += usize::from(r.early);
        self.blocks += r.blocks;
        self.row_steps += r.steps;
        self.row_steps_full += full_steps;
        self.row_steps_block_rule += r.block_rule_steps.unwrap_or(r.steps);
    }
    pub fn merge(&mut self, o: &ExitStats) {
        self.rows += o.rows;
        self.finished_early += o.finished_early;
        self.blocks += o.blocks;
        self.row_steps += o.row_steps;
        self.row_steps_full += o.row_steps_full;
        self.row_steps_block_rule += o.row_steps_block_rule;
        self.batch_forwards += o.batch_forwards;
    }
    pub fn mean_blocks(&self) -> f64 {
        self.blocks as f64 / self.rows.max(1) as f64
    }
    /// Row forward passes saved against a full decode.
    pub fn saved(&self) -> usize {
        self.row_steps_full.saturating_sub(self.row_steps)
    }
}

/// How a backend that runs the loop itself schedules rows ([`crate::teacher::TeacherBackend::generate_rows`]).
pub struct RowSchedule<'a> {
    /// Most rows in flight.
    pub slots: std::num::NonZeroUsize,
    /// Whether `rows` rows whose longest prompt is `longest` tokens fit the memory budget.
    pub fits: &'a dyn Fn(usize, usize) -> bool,
    /// EOS/EoT ids that finish a row; `None`: never finish early (`--no-early-exit`,
    /// `--logits-eos-inf`).
    pub stop_ids: Option<&'a [u32]>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_only_when_everything_before_the_stop_is_committed() {
        let (m, stop) = (9, [1u32, 2]);
        assert_eq!(finished_at(&[5, 6, 1, 9, 9], m, &stop), Some(2));
        assert_eq!(finished_at(&[5, 9, 1, 7, 9], m, &stop), None);
        assert_eq!(finished_at(&[2, 9, 9], m, &stop), Some(0));
        assert_eq!(finished_at(&[5, 6, 7], m, &stop), None);
        assert_eq!(finished_at(&[5, 6, 7, 2, 1], m, &stop), Some(3));
    }
}
