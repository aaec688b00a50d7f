//! Why: tuned GEMM kernels round differently from one another, so the choice made for each
//! shape (`distill --gemm-tune`) is saved and reloaded — a resumed run uses the same kernels
//! and writes the same bytes. This is the file format only (no GPU needed to test it).
//!
//! `{"gpu": NAME, "cublaslt_version": N, "plans": {SHAPE_KEY: [16-hex-digit word × 8]}}`: the
//! words are cuBLASLt's opaque `cublasLtMatmulAlgo_t`, valid only for that GPU and library
//! version, so a file from another pair is not reused.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// An opaque cuBLASLt algorithm (`cublasLtMatmulAlgo_t::data`).
pub type AlgoWords = [u64; 8];

#[derive(Debug, Clone, PartialEq, Default)]
pub struct GemmPlans {
    pub gpu: String,
    pub cublaslt_version: usize,
    pub plans: BTreeMap<String, AlgoWords>,
}

impl GemmPlans {
    pub fn new(gpu: &str, cublaslt_version: usize) -> Self {
        Self {
            gpu: gpu.to_string(),
            cublaslt_version,
            plans: BTreeMap::new(),
        }
    }

    /// The plans in `path` if it was written for this GPU and cuBLASLt version; None (with a
    /// warning) for another pair; an error naming the file when it is not a plans file.
    pub fn load(path: &Path, gpu: &str, cublaslt_version: usize) -> Result<Option<Self>> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading GEMM plans {}", path.display()))?;
        let j: Value = serde_json::from_str(&text)
            .with_context(|| format!("GEMM plans {}: not JSON", path.display()))?;
        let (Some(g), Some(v), Some(plans)) = (
            j["gpu"].as_str(),
            j["cublaslt_version"].as_u64(),
            j["plans"].as_object(),
        ) else {
            bail!(
                "GEMM plans {}: expected {{\"gpu\", \"cublaslt_version\", \"plans\"}}",
                path.display()
            );
        };
        if g != gpu || v as usize != cublaslt_version {
            tracing::warn!(
                "GEMM plans {} were tuned on {g} / cuBLASLt {v}; this is {gpu} / \
                 {cublaslt_version}: tuning afresh",
                path.display()
            );
            return Ok(None);
        }
        let mut out = Self::new(gpu, cublaslt_version);
        for (k, w) in plans {
            let words: Vec<u64> = w
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().and_then(|s| u64::from_str_radix(s, 16).ok()))
                .collect();
            let Ok(a) = <AlgoWords>::try_from(words) else {
                bail!(
                    "GEMM plans {}: entry {k:?} is not 8 hexadecimal words",
                    path.display()
                );
            };
            out.plans.insert(k.clone(), a);
        }
        Ok(Some(out))
    }

    /// Write to `path` atomically (temp + rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let plans: serde_json::Map<String, Value> = self
            .plans
            .iter()
            .map(|(k, a)| {
                let words: Vec<String> = a.iter().map(|w| format!("{w:016x}")).collect();
                (k.clone(), json!(words))
            })
            .collect();
        let j = json!({"gpu": self.gpu, "cublaslt_version": self.cublaslt_version, "plans": plans});
        crate::util::atomic_write(path, serde_json::to_string_pretty(&j)?.as_bytes())
    }
}
