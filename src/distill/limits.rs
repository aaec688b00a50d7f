//! Why prompts are measured before any compute: one prompt longer than the teacher's context
//! (`max_position_embeddings`) or whose forward would need terabytes (a 64k-token prompt's
//! attention scores on the CPU) must be refused by id — or skipped and counted with
//! `--skip-too-long` — instead of reaching the allocator and aborting. The same estimate keeps
//! absurd `--gen-length`/`--steps`/`--batch-size` values from allocating, and lets the batch
//! plan close a batch early when one more prompt would exceed the memory budget.
//!
//! The estimate ([`forward_bytes`]) is the peak working set of one forward of `b` rows of
//! `l` tokens, weights excluded, all in checked `u64` arithmetic (overflow = "too large"):
//! per layer the f32 activations (hidden states, fused QKV, gate/up, attention output, RoPE
//! tables: `b·l·(4·hidden + qkv + 4·intermediate + 2·heads·head_dim + 2·head_dim)`), on the
//! CPU also the attention scores materialised three times (`3·b·heads·l²`), the block's
//! logits (`b·block·vocab`) and the sampler's per-row step schedule (`b·steps_per_block`
//! words). It is deliberately simple and conservative; `--max-batch-memory` sets the budget.

use crate::teacher::LlamaConfig;

/// Default of `--max-batch-memory` on the CPU (GiB of working memory one forward may need).
pub const DEFAULT_BATCH_MEMORY_GIB: u64 = 16;

/// Default of `--max-batch-memory` with `--device cuda` (the estimate counts f32 where the
/// GPU engine keeps bf16, so this is about half an H200's memory).
pub const DEFAULT_GPU_BATCH_MEMORY_GIB: u64 = 64;

/// What one forward's size depends on besides `b` and `l`.
#[derive(Debug, Clone, Copy)]
pub struct ForwardShape<'a> {
    pub cfg: &'a LlamaConfig,
    /// CPU (materialised attention scores) or GPU (fused attention).
    pub cpu: bool,
    pub block_length: usize,
    pub steps_per_block: usize,
}

/// Bytes one forward of `b` rows × `l` tokens needs (see the module doc); `None` when the
/// number does not fit in 64 bits.
pub fn forward_bytes(s: &ForwardShape, b: usize, l: usize) -> Option<u64> {
    let c = s.cfg;
    let u = |x: usize| x as u64;
    let (b, l) = (u(b), u(l));
    let qkv = u(c.num_heads + 2 * c.num_kv_heads).checked_mul(u(c.head_dim))?;
    let per_token = u(c.hidden_size)
        .checked_mul(4)?
        .checked_add(qkv)?
        .checked_add(u(c.intermediate_size).checked_mul(4)?)?
        .checked_add(u(c.num_heads).checked_mul(u(c.head_dim))?.checked_mul(2)?)?
        .checked_add(u(c.head_dim).checked_mul(2)?)?;
    let bl = b.checked_mul(l)?;
    let mut floats = bl.checked_mul(per_token)?;
    if s.cpu {
        let scores = b
            .checked_mul(u(c.num_heads))?
            .checked_mul(l)?
            .checked_mul(l)?
            .checked_mul(3)?;
        floats = floats.checked_add(scores)?;
    }
    let logits = b
        .checked_mul(u(s.block_length.max(1)))?
        .checked_mul(u(c.vocab_size))?;
    floats = floats.checked_add(logits)?;
    let schedule = b.checked_mul(u(s.steps_per_block))?.checked_mul(2)?;
    floats.checked_add(schedule)?.checked_mul(4)
}

/// `forward_bytes` fits `budget` (overflow never fits).
pub fn fits(s: &ForwardShape, b: usize, l: usize, budget: u64) -> bool {
    forward_bytes(s, b, l).is_some_and(|x| x <= budget)
}

/// Human-readable size for the messages.
pub fn gib(bytes: Option<u64>) -> String {
    match bytes {
        Some(x) => format!("{:.2} GiB", x as f64 / (1u64 << 30) as f64),
        None => "more than 2^64 bytes".to_string(),
    }
}

/// Why a prompt cannot run, if it cannot: `need` tokens (prompt + generation, + the MCQ
/// answer slot) against the context and, alone in a batch, against the budget.
pub fn too_long(s: &ForwardShape, need: Option<usize>, budget: u64) -> Option<String> {
    let Some(need) = need else {
        return Some("its length overflows".to_string());
    };
    if let Some(m) = s.cfg.max_position_embeddings {
        if need > m {
            return Some(format!(
                "needs {need} positions (its tokens + --gen-length, + the answer slot for an \
                 MCQ item), more than the teacher's max_position_embeddings {m}"
            ));
        }
    }
    if !fits(s, 1, need, budget) {
        return Some(format!(
            "needs {need} positions; one forward would need {}, more than --max-batch-memory {}",
            gib(forward_bytes(s, 1, need)),
            gib(Some(budget))
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(max_pos: Option<usize>) -> LlamaConfig {
        LlamaConfig {
            vocab_size: 1000,
            hidden_size: 64,
            intermediate_size: 96,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 16,
            rope_theta: 1e4,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: false,
            max_position_embeddings: max_pos,
            is_causal: false,
            mask_token_id: None,
            pad_token_id: None,
            eos_token_ids: vec![],
            logits_shift: None,
        }
    }

    #[test]
    fn estimate_grows_quadratically_on_cpu_and_overflow_never_fits() {
        let c = cfg(None);
        let s = ForwardShape {
            cfg: &c,
            cpu: true,
            block_length: 4,
            steps_per_block: 4,
        };
        let a = forward_bytes(&s, 1, 1000).unwrap();
        let b = forward_bytes(&s, 1, 2000).unwrap();
        assert!(b > 3 * a, "{a} {b}");
        // Exact for a small case: 1 row of 10 tokens.
        let per_token = 4 * 64 + 8 * 16 + 4 * 96 + 2 * 4 * 16 + 2 * 16;
        let want = 4 * (10 * per_token + 3 * 4 * 100 + 4 * 1000 + 2 * 4);
        assert_eq!(forward_bytes(&s, 1, 10), Some(want as u64));
        let g = ForwardShape { cpu: false, ..s };
        assert!(forward_bytes(&g, 1, 2000).unwrap() < b);
        assert_eq!(forward_bytes(&s, 1 << 60, 1 << 40), None);
        assert!(!fits(&s, usize::MAX, usize::MAX, u64::MAX));
        assert!(fits(&s, 8, 100, 1 << 30));
    }

    #[test]
    fn too_long_names_the_limit() {
        let c = cfg(Some(2048));
        let s = ForwardShape {
            cfg: &c,
            cpu: true,
            block_length: 4,
            steps_per_block: 4,
        };
        assert_eq!(too_long(&s, Some(2048), 1 << 30), None);
        let r = too_long(&s, Some(2049), 1 << 30).unwrap();
        assert!(r.contains("max_position_embeddings 2048"), "{r}");
        let r = too_long(&s, Some(2000), 1 << 20).unwrap();
        assert!(r.contains("--max-batch-memory 0.00 GiB"), "{r}");
        assert!(too_long(&s, None, 1 << 30).unwrap().contains("overflows"));
    }
}
