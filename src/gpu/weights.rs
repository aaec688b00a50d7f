//! The teacher checkpoint as the GPU engine takes it: the teacher's own parsed config and
//! validated safetensors (`crate::teacher::{config, weights}` — one parser, one set of checks
//! for the CPU and GPU paths), plus the limits of the GPU kernels, checked before any upload.

use std::path::Path;

use anyhow::{bail, Context, Result};

pub use crate::teacher::config::LlamaConfig;
pub use crate::teacher::weights::Weights;

/// What the kernels support beyond what the teacher loader already checks.
pub fn check_gpu_shape(cfg: &LlamaConfig) -> Result<()> {
    let hd = cfg.head_dim;
    if ![32, 64, 128].contains(&hd) {
        bail!("head_dim {hd}: the GPU attention kernel supports 32, 64 and 128");
    }
    if cfg.hidden_size % 8 != 0 || cfg.intermediate_size % 8 != 0 {
        bail!(
            "hidden_size {} and intermediate_size {} must be multiples of 8 on the GPU",
            cfg.hidden_size,
            cfg.intermediate_size
        );
    }
    Ok(())
}

/// `config.json` and the weights of the checkpoint in `dir`, validated (names, shapes, dtypes,
/// no unknown tensors) and within the GPU kernels' limits.
pub fn open(dir: &Path) -> Result<(LlamaConfig, Weights)> {
    let path = dir.join("config.json");
    let cfg = LlamaConfig::from_file(&path)?;
    check_gpu_shape(&cfg).with_context(|| format!("teacher config {}", path.display()))?;
    let w = Weights::open(dir, &cfg)?;
    Ok((cfg, w))
}

/// The folded RMSNorm's weights: `W'[n, k] = bf16(W[n, k] · γ[k])` for little-endian bf16 `W`
/// with rows of `gamma.len()` elements (RMSNorm(x) · Wᵀ = (1/rms(x)) · x · W'ᵀ).
pub fn fold_gamma(w: &[u8], gamma: &[f32]) -> Vec<u8> {
    w.chunks_exact(2)
        .enumerate()
        .flat_map(|(e, c)| {
            let v = half::bf16::from_le_bytes([c[0], c[1]]).to_f32();
            half::bf16::from_f32(v * gamma[e % gamma.len()]).to_le_bytes()
        })
        .collect()
}
