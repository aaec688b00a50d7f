//! `--device cuda[:N]` for `distill`: the GPU engine behind the teacher's [`TeacherBackend`]
//! trait (left-padded batch in, fp32 logits of the requested window out), so the distill
//! driver, its sampler, MCQ answer and output are the same code on both devices.
//!
//! This path copies the block's logits to the host each step and samples there; the fully
//! on-device sampler (one CUDA graph per step, [`Engine::generate`]) is what `dlm-gpu bench`
//! measures and is checked token for token against the host sampler (bench/results/gpu-*.md).

use std::ops::Range;

use anyhow::{bail, Result};

use super::engine::Engine;
use crate::teacher::{Teacher, TeacherBackend};

/// Longest sequence (prompt + generation) the position table covers.
const MAX_POSITIONS: usize = 32768;

pub struct GpuBackend {
    engine: Engine,
}

/// Open `cuda` / `cuda:N` for `teacher` (already validated by the teacher loader).
pub fn open(device: &str, teacher: &Teacher) -> Result<Box<dyn TeacherBackend>> {
    let ordinal = super::parse_device(device)?.unwrap_or(0);
    let engine = Engine::load(&teacher.dir, ordinal, MAX_POSITIONS)?;
    tracing::info!(
        "GPU teacher on {} ({}), {:.2} GiB of weights",
        engine.gpu.name,
        engine.gpu.arch,
        engine.weight_bytes as f64 / (1u64 << 30) as f64
    );
    Ok(Box::new(GpuBackend { engine }))
}

impl TeacherBackend for GpuBackend {
    fn vocab_size(&self) -> usize {
        self.engine.cfg.vocab_size
    }

    fn logits(
        &mut self,
        tokens: &[u32],
        keep: &[bool],
        b: usize,
        l: usize,
        rows: Range<usize>,
    ) -> Result<Vec<f32>> {
        if tokens.len() != b * l || keep.len() != b * l || rows.end > l {
            bail!("GPU backend: batch shape mismatch ({b} x {l}, rows {rows:?})");
        }
        let mut seqs = Vec::with_capacity(b);
        let mut pads = Vec::with_capacity(b);
        for r in 0..b {
            let k = &keep[r * l..(r + 1) * l];
            let pad = k.iter().take_while(|&&x| !x).count();
            if k[pad..].iter().any(|&x| !x) {
                bail!("GPU backend: row {r} is not left-padded (a padded key after a real token)");
            }
            pads.push(pad);
            seqs.push(tokens[r * l..(r + 1) * l].to_vec());
        }
        let at: Vec<(usize, usize)> = (0..b)
            .flat_map(|r| rows.clone().map(move |p| (r, p)))
            .collect();
        self.engine.logits_at(&seqs, &pads, &at)
    }
}
