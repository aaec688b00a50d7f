//! Logits and the MCQ letter head at given positions of a left-padded batch (the host-loop
//! backend and the answer slot).

use anyhow::{bail, Result};

use super::{Engine, Pass};
use crate::kargs;

impl Engine {
    /// Full-vocabulary fp32 logits at the given (row, position) pairs of a left-padded batch.
    pub fn logits_at(
        &mut self,
        seqs: &[Vec<u32>],
        pads: &[usize],
        at: &[(usize, usize)],
    ) -> Result<Vec<f32>> {
        let (b, s) = self.upload_batch(seqs, pads, &[], at.len())?;
        let rows: Vec<i32> = at.iter().map(|&(r, p)| (r * s + p) as i32).collect();
        let ws = self.ws.as_ref().unwrap();
        self.gpu.write(&ws.rows, 0, &rows)?;
        self.enqueue_body(b, s, 0, 1, Pass::Full { cache: false }, None)?;
        let (h, eps) = (self.cfg.hidden_size as i32, self.cfg.rms_norm_eps as f32);
        self.gpu.launch(
            self.k.r.rmsnorm_rows,
            (at.len() as u32, 1, 1),
            (256, 1, 1),
            0,
            &mut kargs![
                &ws.resid.ptr,
                &self.norm.ptr,
                &ws.hb.ptr,
                &h,
                &eps,
                &ws.rows.ptr
            ],
        )?;
        self.enqueue_head(at.len())?;
        let mut out = vec![0f32; at.len() * self.cfg.vocab_size];
        self.gpu.read(&ws.logits, 0, &mut out)?;
        Ok(out)
    }

    /// MCQ letter head at (row, position): raw log-probs (log-softmax over the vocabulary) and
    /// the distribution renormalised over each item's letter ids (≤ 10).
    pub fn letters_at(
        &mut self,
        seqs: &[Vec<u32>],
        pads: &[usize],
        at: &[(usize, usize)],
        letters: &[Vec<u32>],
    ) -> Result<Vec<(Vec<f32>, Vec<f32>)>> {
        if letters.len() != at.len() || letters.iter().any(|l| l.is_empty() || l.len() > 10) {
            bail!("each answer slot needs 1 to 10 letter ids");
        }
        self.logits_at(seqs, pads, at)?;
        let ws = self.ws.as_ref().unwrap();
        let mut ids = vec![0u32; at.len() * 10];
        for (r, l) in letters.iter().enumerate() {
            ids[r * 10..r * 10 + l.len()].copy_from_slice(l);
        }
        let n: Vec<i32> = letters.iter().map(|l| l.len() as i32).collect();
        self.gpu.write(&ws.letters, 0, &ids)?;
        self.gpu.write(&ws.nletters, 0, &n)?;
        let v = self.cfg.vocab_size as i32;
        self.gpu.launch(
            self.k.letter,
            (at.len() as u32, 1, 1),
            (512, 1, 1),
            0,
            &mut kargs![
                &ws.logits.ptr,
                &v,
                &ws.letters.ptr,
                &ws.nletters.ptr,
                &ws.lp.ptr,
                &ws.lprob.ptr
            ],
        )?;
        let mut lp = vec![0f32; at.len() * 10];
        let mut pr = vec![0f32; at.len() * 10];
        self.gpu.read(&ws.lp, 0, &mut lp)?;
        self.gpu.read(&ws.lprob, 0, &mut pr)?;
        Ok(letters
            .iter()
            .enumerate()
            .map(|(r, l)| {
                (
                    lp[r * 10..r * 10 + l.len()].to_vec(),
                    pr[r * 10..r * 10 + l.len()].to_vec(),
                )
            })
            .collect())
    }
}
