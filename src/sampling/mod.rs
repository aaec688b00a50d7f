//! The sampler's contract, shared by the host loop ([`crate::distill::host_loop`]) and the
//! backends that can run it themselves ([`crate::teacher::TeacherBackend::generate`], the CUDA
//! engine): its settings ([`GenParams`], [`Remasking`], [`KvCache`], the GPU's limits), its randomness ([`rng`])
//! and the non-finite-logit check every backend applies ([`finite`]). Kept apart from both so
//! that `distill`, `teacher` and `gpu` depend on it and never on each other in a circle.

pub mod early_exit;
pub mod finite;
pub mod rng;
pub mod schedule;
pub mod trajectory;

use anyhow::Result;

/// Which masked positions a step commits (`--remasking`, LLaDA's `remasking`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remasking {
    LowConfidence,
    Random,
}

impl Remasking {
    /// The flag spelling, as recorded in distilled.json's `gen.remasking`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Remasking::LowConfidence => "low-confidence",
            Remasking::Random => "random",
        }
    }
}

/// Approximate KV caching across a block's steps (Fast-dLLM; `--device cuda` only).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvCache {
    /// Exact: every step is a full forward.
    None,
    /// A block's later steps recompute the block and everything after it.
    Prefix,
    /// A block's later steps recompute the block only.
    Dual,
}

impl KvCache {
    pub fn as_str(&self) -> &'static str {
        match self {
            KvCache::None => "none",
            KvCache::Prefix => "prefix",
            KvCache::Dual => "dual",
        }
    }
}

/// Rows the GPU sampler's device-side state holds (`MAX_SLOTS` in kernels/common.cuh): the
/// largest `--batch-size` with `--device cuda`, refused at start beyond it
/// ([`crate::distill::settings`]).
pub const GPU_MAX_ROWS: usize = 1024;

/// Longest block the GPU sampler's kernels take (`--block-length` with `--device cuda`).
pub const GPU_MAX_BLOCK_LENGTH: usize = 1024;

/// The sampler's settings (one generation run).
#[derive(Debug, Clone, PartialEq)]
pub struct GenParams {
    pub gen_length: usize,
    pub block_length: usize,
    /// Total steps over all blocks (LLaDA's `steps`).
    pub steps: usize,
    pub temperature: f64,
    pub remasking: Remasking,
    pub seed: u64,
    pub mask_id: u32,
    pub logits_eos_inf: bool,
    pub confidence_eos_eot_inf: bool,
    pub eos_ids: Vec<u32>,
    pub eot_ids: Vec<u32>,
    /// Approximate: confidence-threshold parallel decoding.
    pub threshold: Option<f64>,
    /// Approximate: KV cache across a block's steps (backends that run the loop only).
    pub cache: KvCache,
    /// With a cache: every K-th step of a block is a full pass that refreshes it (None: only
    /// the block's first).
    pub cache_refresh: Option<usize>,
}

impl GenParams {
    /// LLaDA's asserts, as usage errors.
    pub fn validate(&self) -> Result<()> {
        let u = |m: String| Err(crate::error::usage(m));
        if self.gen_length == 0 || self.block_length == 0 || self.steps == 0 {
            return u("--gen-length, --block-length and --steps must be > 0".into());
        }
        if self.gen_length % self.block_length != 0 {
            return u(format!(
                "--gen-length {} is not a multiple of --block-length {}",
                self.gen_length, self.block_length
            ));
        }
        let blocks = self.num_blocks();
        if self.steps % blocks != 0 {
            return u(format!(
                "--steps {} is not a multiple of the number of blocks {blocks}",
                self.steps
            ));
        }
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return u(format!("--temperature {} must be ≥ 0", self.temperature));
        }
        if let Some(t) = self.threshold {
            if !(t > 0.0 && t <= 1.0) {
                return u(format!("--threshold {t} must be in (0, 1]"));
            }
            if self.remasking == Remasking::Random {
                return u("--threshold needs --remasking low-confidence".into());
            }
        }
        match (self.cache_refresh, self.cache) {
            (Some(0), _) => return u("--cache-refresh must be ≥ 1".into()),
            (Some(_), KvCache::None) => {
                return u("--cache-refresh needs --kv-cache prefix or --kv-cache dual".into())
            }
            _ => {}
        }
        Ok(())
    }

    /// True when the output is not LLaDA's exact sampler (threshold or KV cache).
    pub fn approximate(&self) -> bool {
        self.threshold.is_some() || self.cache != KvCache::None
    }

    pub fn num_blocks(&self) -> usize {
        self.gen_length / self.block_length
    }

    pub fn steps_per_block(&self) -> usize {
        self.steps / self.num_blocks()
    }

    /// LLaDA's `get_num_transfer_tokens` for a fully masked block: equal shares, the
    /// remainder to the earliest steps.
    pub fn block_transfer_counts(&self) -> Vec<usize> {
        num_transfer_tokens(self.block_length, self.steps_per_block())
    }

    /// Forward passes a fixed-schedule row runs when it stops at the end of the block holding
    /// its first EOS/EoT at generated position `eos` (steps that commit nothing are skipped).
    pub fn block_rule_steps(&self, eos: usize) -> usize {
        let per_block = self
            .block_transfer_counts()
            .iter()
            .filter(|&&k| k > 0)
            .count();
        (eos / self.block_length + 1) * per_block
    }

    /// Whether the step `step_in_block` of a block is a full pass (always without a cache;
    /// with one, a block's first step and, under `cache_refresh` K, every K-th after it, each
    /// refreshing the cache) rather than a window over the cache.
    pub fn full_pass_at(&self, step_in_block: usize) -> bool {
        self.cache == KvCache::None || step_in_block % self.cache_refresh.unwrap_or(usize::MAX) == 0
    }
}

/// The left-padded prompt length of a batch whose longest prompt has `longest` tokens, rounded
/// up to a multiple of `multiple` (0 or 1: `longest` itself). Every batch layout — the host
/// loop's, the GPU's fixed batches and its continuous scheduler — pads with this rule.
pub fn padded_len(lengths: impl IntoIterator<Item = usize>, multiple: usize) -> usize {
    let m = multiple.max(1);
    lengths.into_iter().max().unwrap_or(0).div_ceil(m) * m
}

/// LLaDA's `get_num_transfer_tokens` for one row: `mask_count` spread over `steps`.
pub fn num_transfer_tokens(mask_count: usize, steps: usize) -> Vec<usize> {
    let (base, rem) = (mask_count / steps, mask_count % steps);
    (0..steps).map(|i| base + usize::from(i < rem)).collect()
}

#[cfg(test)]
mod kernel_bounds {
    /// `MAX_SLOTS` in kernels/common.cuh, read from the text the GPU build compiles.
    fn kernel_define(name: &str) -> usize {
        let src = include_str!("../../kernels/common.cuh");
        let prefix = format!("#define {name} ");
        let line = src
            .lines()
            .find_map(|l| l.trim().strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("kernels/common.cuh defines no {name}"));
        line.trim().parse().expect("a number")
    }

    #[test]
    fn the_kernels_state_holds_gpu_max_rows_slots() {
        assert_eq!(kernel_define("MAX_SLOTS"), super::GPU_MAX_ROWS);
    }
}
