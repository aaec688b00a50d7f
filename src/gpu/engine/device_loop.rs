//! The sampler's device loop (the host loop is [`crate::distill::host_loop`], their shared
//! contract [`crate::sampling`]): a run's device settings ([`DeviceRun`]), one step as a graph,
//! the generate loop (fixed schedule or confidence threshold; exact or with a KV cache).

use anyhow::{bail, Context, Result};

use super::{Engine, Pass, Tail, Workspace};
use crate::kargs;
use crate::sampling::finite::NonFiniteLogit;

/// The KV-cache modes are the sampler's own.
pub use crate::sampling::KvCache;

/// Most excluded token ids the sampler kernel takes (mask included).
pub(super) const MAX_BAN: usize = 32;

/// One run of the device sampler: the sampler's one resolved settings value (`gen`, the
/// [`crate::sampling::GenParams`] that `distill::settings` validated, read as a plain field)
/// and what the device needs beside it (pad id, logit alignment, stop ids, row movement,
/// padding). The excluded-token lists the kernels take are derived from the settings
/// ([`Self::ban_choice`], [`Self::ban_conf`]), never set by hand.
#[derive(Debug, Clone)]
pub struct DeviceRun {
    pub gen: crate::sampling::GenParams,
    pub pad_id: u32,
    pub logits_shift: u8,
    /// EOS/EoT ids that finish a row as soon as everything before one is committed (empty: a
    /// row decodes every block).
    pub stop_ids: Vec<u32>,
    /// Rows move through their blocks independently (continuous batching without a cache);
    /// false: in lockstep, every live row at the same step of its block.
    pub free_rows: bool,
    /// A batch's prompt length is rounded up to a multiple of this (fixed batches and
    /// continuous batching alike, so one row alone gives the same numbers in both; see
    /// [`crate::sampling::schedule::RunParams::pad_multiple`]).
    pub pad_multiple: usize,
    /// `--trajectory`/`--top-k` (continuous batching only): Some(K), K = 0 for commit steps
    /// alone; each step then also runs `record_topk`.
    pub trace: Option<usize>,
}

/// Default of [`DeviceRun::pad_multiple`]; `DLM_PAD_MULTIPLE` overrides it (benchmarks).
pub const PAD_MULTIPLE: usize = 16;

/// [`PAD_MULTIPLE`], or `DLM_PAD_MULTIPLE` when set to a positive number.
pub fn pad_multiple() -> usize {
    crate::gpu::tuning::pad_multiple().unwrap_or(PAD_MULTIPLE)
}

fn dedup(it: impl Iterator<Item = u32>) -> Vec<u32> {
    let mut v: Vec<u32> = vec![];
    for t in it {
        if !v.contains(&t) {
            v.push(t);
        }
    }
    v
}

impl DeviceRun {
    /// The device run of `gen` (lockstep rows, no early exit: LLaDA's loop as written).
    pub fn new(gen: crate::sampling::GenParams, pad_id: u32, logits_shift: u8) -> Self {
        DeviceRun {
            gen,
            pad_id,
            logits_shift,
            stop_ids: vec![],
            free_rows: false,
            pad_multiple: pad_multiple(),
            trace: None,
        }
    }

    /// Never candidates, besides the mask token: EOS under `logits_eos_inf`.
    pub fn ban_choice(&self) -> Vec<u32> {
        let g = &self.gen;
        if g.logits_eos_inf {
            dedup(g.eos_ids.iter().copied().filter(|&t| t != g.mask_id))
        } else {
            vec![]
        }
    }

    /// Candidates whose confidence is 0: EOS/EoT under `confidence_eos_eot_inf` (those not
    /// already never chosen).
    pub fn ban_conf(&self) -> Vec<u32> {
        let g = &self.gen;
        if !g.confidence_eos_eot_inf {
            return vec![];
        }
        let choice = self.ban_choice();
        dedup(
            g.eos_ids
                .iter()
                .chain(&g.eot_ids)
                .copied()
                .filter(|t| *t != g.mask_id && !choice.contains(t)),
        )
    }

    pub fn remask_random(&self) -> bool {
        self.gen.remasking == crate::sampling::Remasking::Random
    }

    /// The sampler's own checks, then what only the device limits.
    pub fn validate(&self) -> Result<()> {
        self.gen.validate()?;
        if self.gen.block_length > crate::sampling::GPU_MAX_BLOCK_LENGTH {
            bail!(
                "--block-length {} > 1024 is not supported on the GPU",
                self.gen.block_length
            );
        }
        if self.pad_id == self.gen.mask_id {
            bail!("pad id {} equals the mask id", self.pad_id);
        }
        if 1 + self.ban_choice().len() + self.ban_conf().len() > MAX_BAN {
            bail!("more than {} excluded token ids (EOS/EoT)", MAX_BAN - 1);
        }
        if self.stop_ids.len() > MAX_BAN {
            bail!("more than {MAX_BAN} EOS/EoT ids");
        }
        if self.free_rows && self.gen.cache != KvCache::None {
            bail!("rows move independently only without a KV cache");
        }
        if self.gen.cache != KvCache::None && self.logits_shift != 0 {
            bail!(
                "--kv-cache {} needs logits shift 0",
                self.gen.cache.as_str()
            );
        }
        Ok(())
    }

    /// LLaDA's `get_num_transfer_tokens` for a fully masked block: equal shares, the
    /// remainder to the earliest steps.
    pub fn num_transfer(&self) -> Vec<i32> {
        self.gen
            .block_transfer_counts()
            .into_iter()
            .map(|k| k as i32)
            .collect()
    }
}

impl Engine {
    /// One sampler step (body + head + sampler + commit + advance) for a batch of `b × s`.
    pub(super) fn enqueue_step(
        &self,
        b: usize,
        s: usize,
        gen_start: usize,
        p: &DeviceRun,
        pass: Pass,
    ) -> Result<()> {
        let blk = p.gen.block_length;
        let (si, blki, gs, sh) = (
            s as i32,
            blk as i32,
            gen_start as i32,
            p.logits_shift as i32,
        );
        // Only the block's rows are read after the body: the last layer covers just those
        // (unless the pass is no longer than the block, or a shift reaches before row 0).
        let tail = match pass {
            _ if !self.tail_rows => None,
            Pass::Full { .. } if gs >= sh && s > blk => Some(Tail {
                base: gs - sh,
                stride: blki,
            }),
            Pass::Window { w } if w > blk => Some(Tail { base: 0, stride: 0 }),
            _ => None,
        };
        self.enqueue_body(b, s, gen_start, blk, pass, tail)?;
        let ws = self.ws.as_ref().unwrap();
        let rows = b * blk;
        let at = StepAt { si, blki, gs };
        self.enqueue_final_norm(ws, &at, pass, tail.is_some(), rows, sh)?;
        self.mark("final_norm")?;
        self.enqueue_head(rows)?;
        self.mark("lm_head")?;
        self.enqueue_sample(ws, &at, p, rows)?;
        self.mark("sampler")?;
        self.enqueue_commit(ws, &at, p, b)?;
        self.mark("commit")?;
        if p.trace.is_some() {
            self.enqueue_record(ws, &at, p, rows)?;
            self.mark("record_topk")?;
        }
        self.enqueue_advance(ws, &at, p, b)?;
        self.mark("advance")?;
        Ok(())
    }

    /// The final RMSNorm of the block's rows only, into `ws.hb`: from the tail's residual,
    /// or picked out of the whole residual stream (`sh`: the logits shift).
    fn enqueue_final_norm(
        &self,
        ws: &Workspace,
        at: &StepAt,
        pass: Pass,
        tail: bool,
        rows: usize,
        sh: i32,
    ) -> Result<()> {
        if tail {
            return self.enqueue_rmsnorm(ws.tail.ptr, self.norm.ptr, ws.hb.ptr, rows);
        }
        let (si, blki, gs) = (at.si, at.blki, at.gs);
        let (h, eps) = (self.cfg.hidden_size as i32, self.cfg.rms_norm_eps as f32);
        // Where the block's rows sit in the residual stream: (rows apart, first, stride).
        let (ns, ngs, nstride) = match pass {
            Pass::Full { .. } => (si, gs, blki),
            Pass::Window { w } => (w as i32, 0, 0),
        };
        self.gpu.launch(
            self.k.r.rmsnorm_block,
            (rows as u32, 1, 1),
            (256, 1, 1),
            0,
            &mut kargs![
                &ws.resid.ptr,
                &self.norm.ptr,
                &ws.hb.ptr,
                &h,
                &eps,
                &ws.state.ptr,
                &ns,
                &blki,
                &ngs,
                &sh,
                &nstride
            ],
        )
    }

    /// The fused sampler pass over the block's logits: a candidate and its confidence per
    /// masked position (bans applied, non-finite logits reported).
    fn enqueue_sample(
        &self,
        ws: &Workspace,
        at: &StepAt,
        p: &DeviceRun,
        rows: usize,
    ) -> Result<()> {
        let (si, blki, gs) = (at.si, at.blki, at.gs);
        let v = self.cfg.vocab_size as i32;
        let rr = i32::from(p.remask_random());
        let nblocks = (p.gen.gen_length / p.gen.block_length) as i32;
        let n_choice = (1 + p.ban_choice().len()) as i32;
        let n_all = n_choice + p.ban_conf().len() as i32;
        self.gpu.launch(
            self.k.sample,
            (rows as u32, 1, 1),
            (512, 1, 1),
            0,
            &mut kargs![
                &ws.logits.ptr,
                &v,
                &ws.x.ptr,
                &si,
                &blki,
                &ws.state.ptr,
                &gs,
                &p.gen.mask_id,
                &p.gen.temperature,
                &rr,
                &p.gen.seed,
                &ws.keys.ptr,
                &ws.x0.ptr,
                &ws.conf.ptr,
                &ws.ban.ptr,
                &n_choice,
                &n_all,
                &nblocks,
                &ws.nf_key.ptr,
                &ws.nf_info.ptr
            ],
        )
    }

    /// Per row, commit this step's most confident masked positions (top-k, or by threshold).
    fn enqueue_commit(&self, ws: &Workspace, at: &StepAt, p: &DeviceRun, b: usize) -> Result<()> {
        let (si, blki, gs) = (at.si, at.blki, at.gs);
        let blk = p.gen.block_length;
        let nblocks = (p.gen.gen_length / blk) as i32;
        let threads = blk.div_ceil(32) * 32;
        let threshold = p.gen.threshold.unwrap_or(-1.0);
        self.gpu.launch(
            self.k.commit,
            (b as u32, 1, 1),
            (threads as u32, 1, 1),
            (blk * 8) as u32,
            &mut kargs![
                &ws.x.ptr,
                &si,
                &blki,
                &ws.state.ptr,
                &gs,
                &ws.ntrans.ptr,
                &p.gen.mask_id,
                &ws.x0.ptr,
                &ws.conf.ptr,
                &threshold,
                &nblocks
            ],
        )
    }

    /// `--trajectory`/`--top-k`: the commit step and top-k of every position this step
    /// committed, into the per-slot trace buffers (read by the host when the row leaves).
    fn enqueue_record(
        &self,
        ws: &Workspace,
        at: &StepAt,
        p: &DeviceRun,
        rows: usize,
    ) -> Result<()> {
        let t = self
            .trace
            .as_ref()
            .context("trace buffers for --trajectory")?;
        let (si, blki, gs) = (at.si, at.blki, at.gs);
        let v = self.cfg.vocab_size as i32;
        let gen_len = p.gen.gen_length as i32;
        let n_choice = (1 + p.ban_choice().len()) as i32;
        let adaptive = i32::from(p.gen.threshold.is_some());
        let k = p.trace.unwrap_or(0) as i32;
        self.gpu.launch(
            self.k.record,
            (rows as u32, 1, 1),
            (512, 1, 1),
            0,
            &mut kargs![
                &ws.logits.ptr,
                &v,
                &ws.x.ptr,
                &si,
                &blki,
                &ws.state.ptr,
                &gs,
                &gen_len,
                &p.gen.mask_id,
                &ws.conf.ptr,
                &ws.ban.ptr,
                &n_choice,
                &adaptive,
                &k,
                &t.step.ptr,
                &t.ids.ptr,
                &t.lp.ptr,
                &t.lse.ptr
            ],
        )
    }

    /// The device-side state moved on: step, block, finished rows (stop ids), phase.
    fn enqueue_advance(&self, ws: &Workspace, at: &StepAt, p: &DeviceRun, b: usize) -> Result<()> {
        let (si, blki, gs) = (at.si, at.blki, at.gs);
        let nblocks = (p.gen.gen_length / p.gen.block_length) as i32;
        let spb = p.gen.steps_per_block() as i32;
        let bi = b as i32;
        let adaptive = i32::from(p.gen.threshold.is_some());
        let aligned = i32::from(!p.free_rows);
        let n_stop = p.stop_ids.len() as i32;
        let gen_len = p.gen.gen_length as i32;
        self.gpu.launch(
            self.k.advance,
            (1, 1, 1),
            (256, 1, 1),
            0,
            &mut kargs![
                &ws.state.ptr,
                &spb,
                &ws.x.ptr,
                &si,
                &bi,
                &blki,
                &gs,
                &p.gen.mask_id,
                &adaptive,
                &nblocks,
                &aligned,
                &ws.stop.ptr,
                &n_stop,
                &gen_len
            ],
        )
    }

    /// Left-pad `prompts` to one length and append `gen_length` masks: (rows, pads, prompt
    /// length). Position ids come from the pads (index among real tokens).
    pub fn left_pad(prompts: &[Vec<u32>], p: &DeviceRun) -> (Vec<Vec<u32>>, Vec<usize>, usize) {
        let lp = crate::sampling::padded_len(prompts.iter().map(Vec::len), p.pad_multiple);
        let s = lp + p.gen.gen_length;
        let (rows, pads) = prompts
            .iter()
            .map(|q| {
                let mut row = vec![p.pad_id; lp - q.len()];
                row.extend_from_slice(q);
                row.resize(s, p.gen.mask_id);
                (row, lp - q.len())
            })
            .unzip();
        (rows, pads, lp)
    }

    /// Validate, upload a generation batch and reset the device-side sampler state (schedule,
    /// step counter, excluded ids); with `cache`, allocate the KV cache. Returns (b, s, lp).
    pub(super) fn prepare(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &DeviceRun,
        cache: bool,
    ) -> Result<(usize, usize, usize)> {
        p.validate()?;
        if keys.len() != prompts.len() {
            bail!("one RNG key per prompt");
        }
        let (seqs, pads, lp) = Self::left_pad(prompts, p);
        let (b, s) = self.upload_batch(&seqs, &pads, keys, prompts.len() * p.gen.block_length)?;
        if cache {
            self.ensure_kv_cache()?;
        }
        self.reset_state(b)?;
        self.write_settings(p)?;
        Ok((b, s, lp))
    }

    /// The per-run device buffers of the sampler settings: the transfer schedule, the
    /// excluded ids, the EOS/EoT ids, and a cleared non-finite record.
    pub(super) fn write_settings(&self, p: &DeviceRun) -> Result<()> {
        let ws = self.ws.as_ref().context("no workspace")?;
        self.gpu.write(&ws.ntrans, 0, &p.num_transfer())?;
        self.gpu.write(&ws.nf_key, 0, &[u64::MAX])?;
        let ban: Vec<u32> = std::iter::once(p.gen.mask_id)
            .chain(p.ban_choice())
            .chain(p.ban_conf())
            .collect();
        self.gpu.write(&ws.ban, 0, &ban)?;
        if !p.stop_ids.is_empty() {
            self.gpu.write(&ws.stop, 0, &p.stop_ids)?;
        }
        Ok(())
    }

    /// The device-side generation state: (global step, step within block, block).
    fn read_state(&self) -> Result<(usize, usize, usize)> {
        let ws = self.ws.as_ref().context("no workspace")?;
        let mut st = [0i32; 4];
        self.gpu.read(&ws.state, 0, &mut st)?;
        Ok((st[0] as usize, st[1] as usize, st[2] as usize))
    }

    /// LLaDA's generate for a batch of prompts (token ids, no padding; `keys` = per-prompt RNG
    /// keys from `rng::prompt_key`). Returns the generated `gen_length` tokens of each prompt
    /// and the number of steps run.
    pub fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &DeviceRun,
    ) -> Result<Vec<Vec<u32>>> {
        Ok(self.generate_counted(prompts, keys, p)?.0)
    }

    /// [`Self::generate`], also returning how many steps (forward passes) it ran.
    pub fn generate_counted(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &DeviceRun,
    ) -> Result<(Vec<Vec<u32>>, usize)> {
        let cached = p.gen.cache != KvCache::None;
        let (b, s, lp) = self.prepare(prompts, keys, p, cached)?;
        let blk = p.gen.block_length;
        let full = self.capture(|| self.enqueue_step(b, s, lp, p, Pass::Full { cache: cached }))?;
        let dual = if p.gen.cache == KvCache::Dual {
            Some(self.capture(|| self.enqueue_step(b, s, lp, p, Pass::Window { w: blk }))?)
        } else {
            None
        };
        let nblocks = p.gen.gen_length / blk;
        let mut prefix: Vec<Option<crate::gpu::driver::Graph>> =
            (0..nblocks).map(|_| None).collect();
        let mut graph_for = |this: &Self, block: usize, step_in_block: usize| -> Result<()> {
            if p.gen.full_pass_at(step_in_block) {
                return this.gpu.replay(&full);
            }
            if let Some(d) = &dual {
                return this.gpu.replay(d);
            }
            if prefix[block].is_none() {
                let w = s - (lp + block * blk);
                prefix[block] =
                    Some(this.capture(|| this.enqueue_step(b, s, lp, p, Pass::Window { w }))?);
            }
            this.gpu.replay(prefix[block].as_ref().unwrap())
        };
        let mut steps_run = 0usize;
        if p.gen.threshold.is_none() {
            let spb = p.gen.steps_per_block();
            for block in 0..nblocks {
                for i in 0..spb {
                    graph_for(self, block, i)?;
                    steps_run += 1;
                }
            }
        } else {
            // Adaptive: a block ends when every row's block is committed (≥ 1 per step).
            loop {
                let (_, sib, block) = self.read_state()?;
                if block >= nblocks {
                    break;
                }
                if steps_run > p.gen.gen_length {
                    bail!(
                        "threshold decoding did not finish in {} steps",
                        p.gen.gen_length
                    );
                }
                graph_for(self, block, sib)?;
                steps_run += 1;
            }
        }
        self.check_finite(blk)?;
        let ws = self.ws.as_ref().unwrap();
        let mut out = vec![0u32; b * s];
        self.gpu.read(&ws.x, 0, &mut out)?;
        Ok((out.chunks(s).map(|r| r[lp..].to_vec()).collect(), steps_run))
    }

    /// The sampler kernel's record of the first non-finite logit (at a masked position) of the
    /// run, as the host sampler's error: batch row, step, generated position, token.
    pub(super) fn check_finite(&self, blk: usize) -> Result<()> {
        let ws = self.ws.as_ref().context("no workspace")?;
        let mut key = [0u64];
        self.gpu.read(&ws.nf_key, 0, &mut key)?;
        if key[0] == u64::MAX {
            return Ok(());
        }
        let (step, r) = ((key[0] >> 32) as usize, (key[0] & 0xffff_ffff) as usize);
        let mut info = [0u64];
        self.gpu.read(&ws.nf_info, r * 8, &mut info)?;
        Err(anyhow::Error::new(decode_non_finite(step, r, blk, info[0])))
    }
}

/// A [`NonFiniteLogit`] from the kernel's (step, block row, info word).
fn decode_non_finite(step: usize, r: usize, blk: usize, info: u64) -> NonFiniteLogit {
    NonFiniteLogit {
        row: r / blk.max(1),
        step: Some(step),
        position: (info >> 34) as usize,
        token: (info & 0xffff_ffff) as usize,
        value: match (info >> 32) & 3 {
            0 => f32::NAN,
            1 => f32::INFINITY,
            _ => f32::NEG_INFINITY,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_record_decodes_as_the_kernel_packs_it() {
        // Row 3 of a batch with block 32: batch row 0, block position 3; gen position 67.
        let info = (67u64 << 34) | (2 << 32) | 130_559;
        let nf = decode_non_finite(9, 3, 32, info);
        assert_eq!(
            (nf.row, nf.step, nf.position, nf.token),
            (0, Some(9), 67, 130_559)
        );
        assert_eq!(nf.value, f32::NEG_INFINITY);
        let nf = decode_non_finite(0, 70, 32, 1 << 34);
        assert_eq!((nf.row, nf.position, nf.token), (2, 1, 0));
        assert!(nf.value.is_nan());
    }
}

/// A step's batch geometry as the kernels take it: rows apart, block length, generation start.
struct StepAt {
    si: i32,
    blki: i32,
    gs: i32,
}
