//! The sampler's randomness as a pure function of (seed, prompt, step, position, token): a
//! counter-based hash, so the CPU path, the GPU kernels, any batch composition and any
//! resume point draw exactly the same numbers for the same prompt.
//!
//! Gumbel-max follows LLaDA's `add_gumbel_noise` in float64: LLaDA takes
//! `argmax(exp(l) / (-ln u)^τ)`, which equals `argmax(l - τ·ln(-ln u))`; we compute the latter
//! (same argmax, no overflow).

/// Stream tags keep the Gumbel noise and the random-remasking draws independent.
pub const STREAM_GUMBEL: u64 = 0x6775_6d62;
pub const STREAM_REMASK: u64 = 0x7265_6d61;

#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stable 64-bit key for a prompt id (FNV-1a over its bytes, then mixed).
pub fn prompt_key(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    mix64(h)
}

/// Uniform in the open interval (0, 1), float64, from the counter tuple.
/// `step` is the global step index, `pos` the position within the generated span.
#[inline]
pub fn uniform(seed: u64, stream: u64, prompt: u64, step: u64, pos: u64, token: u64) -> f64 {
    let mut h = mix64(seed ^ 0x9E37_79B9_7F4A_7C15);
    h = mix64(h ^ stream);
    h = mix64(h ^ prompt);
    h = mix64(h ^ step.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    h = mix64(h ^ pos.wrapping_mul(0xA076_1D64_78BD_642F));
    h = mix64(h ^ token.wrapping_mul(0xE703_7ED1_A0B4_28DB));
    ((h >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
}

/// Gumbel-perturbed score for token `token` with logit `logit` at temperature `t > 0`.
#[inline]
pub fn gumbel_score(
    logit: f64,
    t: f64,
    seed: u64,
    prompt: u64,
    step: u64,
    pos: u64,
    token: u64,
) -> f64 {
    let u = uniform(seed, STREAM_GUMBEL, prompt, step, pos, token);
    logit - t * (-u.ln()).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_in_open_interval_and_deterministic() {
        let mut sum = 0.0;
        for k in 0..10_000u64 {
            let u = uniform(1, STREAM_GUMBEL, 2, 3, k, 7);
            assert!(u > 0.0 && u < 1.0);
            sum += u;
            assert_eq!(u, uniform(1, STREAM_GUMBEL, 2, 3, k, 7));
        }
        assert!((sum / 10_000.0 - 0.5).abs() < 0.02);
        assert_ne!(
            uniform(1, STREAM_GUMBEL, 2, 3, 0, 7),
            uniform(2, STREAM_GUMBEL, 2, 3, 0, 7)
        );
    }

    #[test]
    fn gumbel_max_samples_softmax() {
        // argmax(l - t ln(-ln u)) ~ softmax(l / t): check empirical frequencies.
        let logits = [0.0f64, 1.0, 2.0];
        let t = 1.0;
        let mut counts = [0usize; 3];
        let n = 20_000u64;
        for s in 0..n {
            let best = (0..3)
                .max_by(|&a, &b| {
                    gumbel_score(logits[a], t, 9, 1, s, 0, a as u64)
                        .partial_cmp(&gumbel_score(logits[b], t, 9, 1, s, 0, b as u64))
                        .unwrap()
                })
                .unwrap();
            counts[best] += 1;
        }
        let z: f64 = logits.iter().map(|l| l.exp()).sum();
        for i in 0..3 {
            let p = logits[i].exp() / z;
            let f = counts[i] as f64 / n as f64;
            assert!((p - f).abs() < 0.02, "token {i}: p={p} f={f}");
        }
    }
}
