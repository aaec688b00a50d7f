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

pub use config::LlamaConfig;
pub use tokenizer::TeacherTokenizer;
pub use weights::Weights;

/// A forward pass over a left-padded batch, returning logits for a window of positions only.
///
/// `tokens` and `keep` are `[b, l]` row-major; `keep[i]` is false for padding (a key no query
/// may attend to). Position ids are each token's index among its row's kept tokens. Returns
/// `[b, rows.len(), vocab]` row-major f32 logits for positions `rows` (the current block, so
/// the LM head runs over a fraction of the sequence).
pub trait TeacherBackend {
    fn vocab_size(&self) -> usize;

    /// The prompt length this backend pads its own batches to a multiple of (the GPU's
    /// `DLM_PAD_MULTIPLE`); the host loop lays its batches out the same way, so its logits
    /// are those of the backend's own loop. 1: the longest prompt.
    fn pad_multiple(&self) -> usize {
        1
    }
    fn logits(
        &mut self,
        tokens: &[u32],
        keep: &[bool],
        b: usize,
        l: usize,
        rows: Range<usize>,
    ) -> Result<Vec<f32>>;

    /// Run the whole sampler (`distill::host_loop::generate`'s contract: prompts unpadded,
    /// `keys` their RNG keys; returns each row's generated span) where the backend can do it
    /// better than the host loop over [`Self::logits`] — the GPU keeps every step on the
    /// device. `None`: use the host loop.
    fn generate(
        &mut self,
        _p: &crate::sampling::GenParams,
        _prompts: &[&[u32]],
        _keys: &[u64],
        _pad_id: u32,
        _logits_shift: u8,
    ) -> Option<Result<Vec<Vec<u32>>>> {
        None
    }

    /// Generate every prompt with rows scheduled continuously (a finished row's slot refilled
    /// with the next prompt; `sched` says how many rows, what fits and which ids finish a row),
    /// where the backend runs the loop itself. Returns each prompt's [`RowOut`] in order and
    /// the batch forward passes run. `None`: the host runs each row with
    /// `distill::host_loop::generate_row` (the CPU computes a row's logits independently of its
    /// peers, so no batch is needed for its records).
    ///
    /// [`RowOut`]: crate::sampling::early_exit::RowOut
    fn generate_rows(
        &mut self,
        _p: &crate::sampling::GenParams,
        _prompts: &[&[u32]],
        _keys: &[u64],
        _pad_id: u32,
        _logits_shift: u8,
        _sched: &crate::sampling::early_exit::RowSchedule,
    ) -> Option<Result<(Vec<crate::sampling::early_exit::RowOut>, usize)>> {
        None
    }
}

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
