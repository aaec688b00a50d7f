//! `--device cuda[:N]` for `distill`: the GPU engine behind the teacher's [`TeacherBackend`]
//! trait (left-padded batch in, fp32 logits of the requested window out), so the distill
//! driver, its sampler, MCQ answer and output are the same code on both devices.
//!
//! `generate` runs the whole sampler on the device ([`Engine::generate`]: one CUDA graph per
//! step, no host round trip inside a block); `logits` serves the MCQ letter head and the
//! host loop (`distill::host_loop::generate` with a trace), which the device sampler is checked
//! against token for token (bench/gpu, `dlm-gpu parity-tiny`).

use std::ops::Range;

use anyhow::{bail, Context, Result};

use super::engine::{DeviceRun, Engine, KvCache, Residual};
use crate::sampling;
use crate::sampling::early_exit::RowSchedule;
use crate::teacher::{check_batch_shape, Batch, GenJob, GenRows, Teacher, TeacherBackend};

/// The job's prompts as the engine takes them (owned rows).
fn owned(job: &GenJob) -> Vec<Vec<u32>> {
    job.prompts.iter().map(|q| q.to_vec()).collect()
}

/// The engine's run of the distill sampler's settings (the same struct; the device adds the
/// padding id and the logits shift).
pub fn engine_params(p: &sampling::GenParams, pad_id: u32, logits_shift: u8) -> DeviceRun {
    DeviceRun::new(p.clone(), pad_id, logits_shift)
}

/// Longest sequence (prompt + generation) the position table covers.
const MAX_POSITIONS: usize = 32768;

pub struct GpuBackend {
    engine: Engine,
}

/// Open GPU `ordinal` (`--device cuda:N`, resolved by `distill::settings`) for `teacher`
/// (already validated by the teacher loader).
pub fn open(
    ordinal: usize,
    teacher: &Teacher,
    residual: Residual,
    gemm_plans: Option<&std::path::Path>,
) -> Result<Box<dyn TeacherBackend>> {
    super::weights::check_gpu_shape(&teacher.config)
        .with_context(|| format!("teacher {} on cuda:{ordinal}", teacher.dir.display()))?;
    let mut engine = Engine::from_checkpoint(
        teacher.config.clone(),
        &teacher.weights,
        ordinal,
        MAX_POSITIONS,
    )?;
    engine.set_residual(residual)?;
    if let Some(p) = gemm_plans {
        engine.set_gemm_tuning(Some(p))?;
    }
    tracing::info!(
        "GPU teacher on {} ({}), {:.2} GiB of weights, {} residual",
        engine.gpu.name,
        engine.gpu.arch,
        engine.weight_bytes as f64 / (1u64 << 30) as f64,
        residual.as_str()
    );
    Ok(Box::new(GpuBackend { engine }))
}

impl GpuBackend {
    /// A backend over an engine already loaded (the parity harness).
    pub fn from_engine(engine: Engine) -> Self {
        GpuBackend { engine }
    }

    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }
}

impl TeacherBackend for GpuBackend {
    fn vocab_size(&self) -> usize {
        self.engine.cfg.vocab_size
    }

    fn pad_multiple(&self) -> usize {
        super::engine::pad_multiple()
    }

    fn logits(&mut self, batch: &Batch, rows: Range<usize>) -> Result<Vec<f32>> {
        check_batch_shape(batch, &rows)?;
        let mut seqs = Vec::with_capacity(batch.b);
        let mut pads = Vec::with_capacity(batch.b);
        for r in 0..batch.b {
            let (t, k) = batch.row(r);
            let pad = k.iter().take_while(|&&x| !x).count();
            if k[pad..].iter().any(|&x| !x) {
                bail!("GPU backend: row {r} is not left-padded (a padded key after a real token)");
            }
            pads.push(pad);
            seqs.push(t.to_vec());
        }
        let at: Vec<(usize, usize)> = (0..batch.b)
            .flat_map(|r| rows.clone().map(move |p| (r, p)))
            .collect();
        self.engine.logits_at(&seqs, &pads, &at)
    }

    fn generate(&mut self, job: &GenJob) -> Option<Result<Vec<Vec<u32>>>> {
        let ep = engine_params(job.p, job.pad_id, job.logits_shift);
        Some(self.engine.generate(&owned(job), job.keys, &ep))
    }

    fn generate_rows(&mut self, job: &GenJob, sched: &RowSchedule) -> GenRows {
        let mut ep = engine_params(job.p, job.pad_id, job.logits_shift);
        ep.stop_ids = sched.stop_ids.map(<[u32]>::to_vec).unwrap_or_default();
        ep.free_rows = ep.gen.cache == KvCache::None;
        Some(
            self.engine
                .generate_rows(&owned(job), job.keys, &ep, sched.slots, sched.fits, None),
        )
    }

    fn generate_rows_traced(
        &mut self,
        job: &GenJob,
        sched: &RowSchedule,
        k: usize,
    ) -> crate::teacher::GenRowsTraced {
        let mut ep = engine_params(job.p, job.pad_id, job.logits_shift);
        ep.stop_ids = sched.stop_ids.map(<[u32]>::to_vec).unwrap_or_default();
        ep.free_rows = ep.gen.cache == KvCache::None;
        ep.trace = Some(k);
        let r = self.engine.generate_rows_traced(
            &owned(job),
            job.keys,
            &ep,
            sched.slots,
            sched.fits,
            None,
        );
        Some(r.and_then(|(rows, passes, traces)| {
            let traces = traces
                .into_iter()
                .map(|t| t.ok_or_else(|| anyhow::anyhow!("the engine recorded no trace")))
                .collect::<Result<Vec<_>>>()?;
            Ok((rows, passes, traces))
        }))
    }
}
