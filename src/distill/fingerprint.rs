//! The resume fingerprint: everything that determines distill's output bytes, recorded in
//! every part header; a resume or a merge must match it exactly.

use serde_json::{json, Value};

use super::mcq::ANSWER_TEMPLATE;
use super::settings::DistillSettings;
use crate::sampling::GenParams;
use crate::teacher::Teacher;

/// Environment switches of the GPU engine (src/gpu/engine) that change its numerics.
const GPU_ENV_SWITCHES: &[&str] = &[
    "DLM_ATTN",
    "DLM_GEMM_TUNE",
    "DLM_TAIL_ROWS",
    "DLM_FOLD_NORM",
    "DLM_PAD_MULTIPLE",
];

/// The GPU-only fingerprint fields: the residual precision, the kernels' source identity,
/// `--gemm-tune` (when on), and the engine's debugging/experimental switches that change its
/// numerics (only those set, from `env`).
fn gpu_fields(
    fp: &mut Value,
    residual: &str,
    kernels: Option<String>,
    gemm_tune: bool,
    env: impl Fn(&str) -> Option<String>,
) {
    fp["gpu_residual"] = json!(residual);
    if let Some(id) = kernels {
        fp["gpu_kernels"] = json!(id);
    }
    if gemm_tune {
        fp["gemm_tune"] = json!(true);
    }
    let set: serde_json::Map<String, Value> = GPU_ENV_SWITCHES
        .iter()
        .filter_map(|k| env(k).map(|v| (k.to_string(), json!(v))))
        .collect();
    if !set.is_empty() {
        fp["gpu_env"] = Value::Object(set);
    }
}

/// The GPU kernels' source identity (none in a build without the `cuda` feature, which
/// refuses `--device cuda` before any fingerprint).
#[cfg(feature = "cuda")]
fn kernels_id() -> Option<String> {
    Some(crate::gpu::nvrtc::kernels_id())
}
#[cfg(not(feature = "cuda"))]
fn kernels_id() -> Option<String> {
    None
}

/// Everything that determines the output bytes; a resume must match it exactly.
pub fn fingerprint(
    st: &DistillSettings,
    teacher: &Teacher,
    prompts_sha256: &str,
    n_prompts: usize,
) -> Value {
    let params = &st.gen;
    let mut fp = json!({
        "tool": format!("dlm-data {}", env!("CARGO_PKG_VERSION")),
        "prompts_sha256": prompts_sha256,
        "limit": st.limit,
        "prompts": n_prompts,
        "teacher_weights_sha256": teacher.identity.weights_sha256,
        "teacher_config_sha256": teacher.identity.config_sha256,
        "tokenizer_sha256": crate::util::sha256_file(&teacher.dir.join("tokenizer.json")).ok(),
        "gen": gen_json(params),
        "batch_size": st.batch_size,
        "mask_id": params.mask_id,
        "pad_id": teacher.pad_id,
        "logits_shift": teacher.logits_shift,
        "chat_template": teacher.tokenizer.chat_template.is_some() && st.chat_template,
        "logits_eos_inf": params.logits_eos_inf,
        "confidence_eos_eot_inf": params.confidence_eos_eot_inf,
        "eos_ids": params.eos_ids,
        "eot_ids": params.eot_ids,
        "answer_template": ANSWER_TEMPLATE,
        // cpu and cuda round differently: one output is never resumed on the other.
        "backend": st.device.backend_name(),
    });
    // Fields that change which prompts run or how they batch; recorded only when set, so
    // runs without them keep their fingerprint (and stay resumable).
    if st.skip_too_long {
        fp["skip_too_long"] = json!(true);
    }
    if st.special_tokens_in_text != crate::added_text::SpecialTokensInText::Plain {
        fp["special_tokens_in_text"] = json!(st.special_tokens_in_text.as_str());
    }
    if let Some(g) = st.batch_memory_gib_given {
        fp["max_batch_memory_gib"] = json!(g);
    }
    // What the records and the sidecar carry (issue 55), only when asked for.
    if st.trajectory {
        fp["trajectory"] = json!(true);
    }
    if let Some(k) = st.top_k {
        fp["top_k"] = json!(k);
    }
    // Continuous batching changes which rows share a forward (and so, on the GPU, the
    // rounding): recorded unless --no-early-exit keeps the fixed batches of earlier runs.
    if st.early_exit {
        fp["schedule"] = json!({
            "continuous": true,
            "window_prompts": st.window_prompts,
        });
    }
    if !st.device.is_cpu() {
        gpu_fields(
            &mut fp,
            st.gpu_residual.as_str(),
            kernels_id(),
            st.gemm_tune,
            |k| std::env::var(k).ok(),
        );
    }
    fp
}

pub fn gen_json(p: &GenParams) -> Value {
    let mut g = json!({
        "gen_length": p.gen_length,
        "block_length": p.block_length,
        "steps": p.steps,
        "temperature": p.temperature,
        "remasking": p.remasking.as_str(),
        "seed": p.seed,
    });
    // Approximate modes are recorded where they apply (exact records keep their old shape).
    if p.approximate() {
        g["approximate"] = json!({
            "threshold": p.threshold,
            "cache": p.cache.as_str(),
        });
        if let Some(k) = p.cache_refresh {
            g["approximate"]["cache_refresh"] = json!(k);
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gpu_fingerprint_records_residual_and_only_the_switches_set() {
        let mut fp = json!({"backend": "cuda"});
        gpu_fields(&mut fp, "bf16", Some("0123abcd".into()), false, |_| None);
        assert_eq!(fp["gpu_residual"], "bf16");
        assert_eq!(fp["gpu_kernels"], "0123abcd");
        assert!(fp.get("gpu_env").is_none());
        assert!(fp.get("gemm_tune").is_none());
        let mut fp = json!({"backend": "cuda"});
        gpu_fields(&mut fp, "f32", None, true, |k| {
            (k == "DLM_ATTN").then(|| "m2".to_string())
        });
        assert_eq!(fp["gpu_residual"], "f32");
        assert_eq!(fp["gemm_tune"], true);
        assert_eq!(fp["gpu_env"], json!({"DLM_ATTN": "m2"}));
    }
}
