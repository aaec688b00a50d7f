//! The masked-diffusion teacher: an HF Llama checkpoint (config, safetensors, tokenizer)
//! validated as a whole before any compute, and run bidirectionally by a [`TeacherBackend`]
//! (candle on the CPU here; the CUDA backend of `gpu` plugs into the same trait).
//!
//! Id resolution: the mask id is `--mask-id`, else the config's `mask_token_id`, else the
//! tokenizer's `mask_token`; the pad id is the tokenizer's `pad_token`, else the config's
//! `pad_token_id`, else the first EOS id. Pad ≠ mask is enforced; both must fit the embedding.

pub mod config;
pub mod cpu;
pub mod tokenizer;
pub mod weights;

use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::sampling::early_exit::{RowOut, RowSchedule};
use crate::sampling::trajectory::RowTrace;
use crate::sampling::GenParams;

pub use config::LlamaConfig;
pub use tokenizer::TeacherTokenizer;
pub use weights::Weights;

/// A left-padded batch as a backend reads it: `tokens` and `keep` are `[b, l]` row-major;
/// `keep[i]` is false for padding (a key no query may attend to).
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub tokens: &'a [u32],
    pub keep: &'a [bool],
    pub b: usize,
    pub l: usize,
}

impl<'a> Batch<'a> {
    pub fn new(tokens: &'a [u32], keep: &'a [bool], b: usize, l: usize) -> Self {
        Batch { tokens, keep, b, l }
    }

    /// Row `r`'s tokens and key mask.
    pub fn row(&self, r: usize) -> (&'a [u32], &'a [bool]) {
        let at = r * self.l..(r + 1) * self.l;
        (&self.tokens[at.clone()], &self.keep[at])
    }
}

/// The one shape check every backend runs before a forward: `b × l` tokens and key flags, and
/// a non-empty window `rows` inside `0..l`.
pub fn check_batch_shape(batch: &Batch, rows: &Range<usize>) -> Result<()> {
    let (b, l) = (batch.b, batch.l);
    anyhow::ensure!(
        batch.tokens.len() == b * l
            && batch.keep.len() == b * l
            && rows.start < rows.end
            && rows.end <= l,
        "batch shape mismatch: expected {b}×{l} = {} tokens and key flags and a non-empty \
         window of rows inside 0..{l}; got {} tokens, {} key flags, rows {rows:?}",
        b * l,
        batch.tokens.len(),
        batch.keep.len()
    );
    Ok(())
}

/// One run of the whole sampler a backend may do itself: `prompts` unpadded, `keys` their RNG
/// keys (`distill::host_loop::generate`'s contract).
#[derive(Clone, Copy)]
pub struct GenJob<'a> {
    pub p: &'a GenParams,
    pub prompts: &'a [&'a [u32]],
    pub keys: &'a [u64],
    pub pad_id: u32,
    pub logits_shift: u8,
}

/// A forward pass over a left-padded [`Batch`], returning logits for a window of positions
/// only.
///
/// Position ids are each token's index among its row's kept tokens. Returns
/// `[b, rows.len(), vocab]` row-major f32 logits for positions `rows` (the current block, so
/// the LM head runs over a fraction of the sequence). Every implementation starts with
/// [`check_batch_shape`].
pub trait TeacherBackend {
    fn vocab_size(&self) -> usize;

    /// The prompt length this backend pads its own batches to a multiple of (the GPU's
    /// `DLM_PAD_MULTIPLE`); the host loop lays its batches out the same way, so its logits
    /// are those of the backend's own loop. 1: the longest prompt.
    fn pad_multiple(&self) -> usize {
        1
    }
    fn logits(&mut self, batch: &Batch, rows: Range<usize>) -> Result<Vec<f32>>;

    /// Run the whole sampler where the backend can do it better than the host loop over
    /// [`Self::logits`] (returns each row's generated span) — the GPU keeps every step on the
    /// device. `None`: use the host loop.
    fn generate(&mut self, _job: &GenJob) -> Option<Result<Vec<Vec<u32>>>> {
        None
    }

    /// Generate every prompt with rows scheduled continuously (a finished row's slot refilled
    /// with the next prompt; `sched` says how many rows, what fits and which ids finish a row),
    /// where the backend runs the loop itself. Returns each prompt's [`RowOut`] in order and
    /// the batch forward passes run. `None`: the host runs each row with
    /// `distill::host_loop::generate_row` (the CPU computes a row's logits independently of its
    /// peers, so no batch is needed for its records).
    fn generate_rows(&mut self, _job: &GenJob, _sched: &RowSchedule) -> GenRows {
        None
    }

    /// [`Self::generate_rows`], also recording each prompt's trajectory and top-`k` (0: commit
    /// steps only) where the backend runs the loop itself (`distill --trajectory`/`--top-k`).
    /// `None`: the host loop records them.
    fn generate_rows_traced(
        &mut self,
        _job: &GenJob,
        _sched: &RowSchedule,
        _k: usize,
    ) -> GenRowsTraced {
        None
    }
}

/// What [`TeacherBackend::generate_rows_traced`] returns: each prompt's row, the passes run
/// and each prompt's trace.
pub type GenRowsTraced = Option<Result<(Vec<RowOut>, usize, Vec<RowTrace>)>>;

/// What [`TeacherBackend::generate_rows`] returns: each prompt's row and the passes run.
pub type GenRows = Option<Result<(Vec<RowOut>, usize)>>;

/// What identifies the teacher in every distilled record.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TeacherIdentity {
    pub path: String,
    pub weights_sha256: String,
    pub config_sha256: String,
}

/// Overrides from the command line.
#[derive(Debug, Clone, Default)]
pub struct TeacherOptions {
    pub mask_id: Option<u32>,
    pub logits_shift: Option<u8>,
    /// Run a config that says causal bidirectionally anyway.
    pub bidirectional: bool,
}

/// A validated teacher checkpoint.
pub struct Teacher {
    pub dir: PathBuf,
    pub config: LlamaConfig,
    pub weights: Weights,
    pub tokenizer: TeacherTokenizer,
    pub mask_id: u32,
    pub pad_id: u32,
    pub eos_ids: Vec<u32>,
    pub logits_shift: u8,
    pub identity: TeacherIdentity,
}

impl Teacher {
    /// Load and check config, tokenizer and weights (names, shapes, dtypes) of `dir`.
    pub fn open(dir: &Path, opts: &TeacherOptions) -> Result<Self> {
        let cfg_path = dir.join("config.json");
        let config = LlamaConfig::from_file(&cfg_path)?;
        if config.is_causal && !opts.bidirectional {
            return Err(crate::error::refused(format!(
                "{}: the config says causal attention (no `\"is_causal\": false`); a causal model \
                 would produce garbage as a masked-diffusion teacher. Pass --bidirectional to run \
                 it bidirectionally anyway",
                cfg_path.display()
            )));
        }
        let tokenizer = TeacherTokenizer::open(dir)?;
        let v = config.vocab_size;
        let tv = tokenizer.vocab_size();
        if tv > v {
            anyhow::bail!(
                "{}: tokenizer has {tv} tokens, which does not fit the embedding (config vocab_size {v})",
                dir.join("tokenizer.json").display()
            );
        }
        let mask_id = opts
            .mask_id
            .or(config.mask_token_id)
            .or(tokenizer.mask_id)
            .ok_or_else(|| {
                crate::error::usage(format!(
                    "{}: no mask id (no mask_token_id in config.json, no mask_token in \
                     tokenizer_config.json): pass --mask-id",
                    dir.display()
                ))
            })?;
        if mask_id as usize >= v {
            return Err(crate::error::usage(format!(
                "mask id {mask_id} is out of range for vocab_size {v}"
            )));
        }
        let mut eos_ids = config.eos_token_ids.clone();
        if let Some(e) = tokenizer.eos_id {
            if !eos_ids.contains(&e) {
                eos_ids.push(e);
            }
        }
        let pad_id = tokenizer
            .pad_id
            .or(config.pad_token_id)
            .or(eos_ids.first().copied())
            .ok_or_else(|| anyhow::anyhow!("{}: no pad, EOS or pad_token_id", dir.display()))?;
        if pad_id == mask_id {
            return Err(crate::error::usage(format!(
                "pad id {pad_id} equals the mask id: left padding would be read as masked positions"
            )));
        }
        if pad_id as usize >= v {
            anyhow::bail!("pad id {pad_id} is out of range for vocab_size {v}");
        }
        let logits_shift = match (opts.logits_shift, config.logits_shift) {
            (Some(s), _) if s > 1 => {
                return Err(crate::error::usage(format!(
                    "--logits-shift {s}: must be 0 or 1"
                )))
            }
            (Some(s), Some(c)) if s != c => {
                tracing::warn!("--logits-shift {s} overrides the config's {c}");
                s
            }
            (Some(s), _) => s,
            (None, Some(c)) => c,
            (None, None) => 0,
        };
        let weights = Weights::open(dir, &config)
            .with_context(|| format!("teacher weights in {}", dir.display()))?;
        let identity = TeacherIdentity {
            // Absolute and resolved: a run resumed from another directory, or with the path
            // spelled differently, records the same teacher.
            path: std::fs::canonicalize(dir)
                .unwrap_or_else(|_| dir.to_path_buf())
                .display()
                .to_string(),
            weights_sha256: weights.sha256.clone(),
            config_sha256: crate::util::sha256_file(&cfg_path)?,
        };
        Ok(Teacher {
            dir: dir.to_path_buf(),
            config,
            weights,
            tokenizer,
            mask_id,
            pad_id,
            eos_ids,
            logits_shift,
            identity,
        })
    }

    /// The candle CPU backend for this checkpoint.
    pub fn cpu(&self) -> Result<cpu::CpuTeacher> {
        cpu::CpuTeacher::load(&self.config, &self.weights)
    }
}
