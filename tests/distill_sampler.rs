//! The block-only sampler against a plain, literal transcription of LLaDA's `generate` loop
//! (notes/sampler.md §1.2: full-sequence logits, candidates and confidences at every position,
//! `x0_p[:, block_end:] = -inf`, per-row top-k) on the same logits: same commits, same order,
//! same final tokens (the mask token's logit is −∞ in both) — for greedy and Gumbel sampling, both remasking modes, logit shift 0/1,
//! the EOS/EoT flags, several blocks and steps that transfer nothing.

mod teacher_support;

use std::ops::Range;

use dlm_data::distill::rng;
use dlm_data::distill::sampler::{generate, GenParams};
use dlm_data::distill::Remasking;
use dlm_data::teacher::{Teacher, TeacherBackend, TeacherOptions};
use teacher_support::llada_ref::llada_reference;

const MASK: u32 = 31;
const PAD: u32 = 30;
const V: usize = 32;

/// Logits that depend on the row's whole current sequence (real tokens only, positions
/// relative to the first real token), so every commit changes later steps.
struct Mock;

impl TeacherBackend for Mock {
    fn vocab_size(&self) -> usize {
        V
    }
    fn logits(
        &mut self,
        tokens: &[u32],
        keep: &[bool],
        b: usize,
        l: usize,
        rows: Range<usize>,
    ) -> anyhow::Result<Vec<f32>> {
        let mut out = Vec::new();
        for r in 0..b {
            let row = &tokens[r * l..(r + 1) * l];
            let first = keep[r * l..(r + 1) * l].iter().position(|&k| k).unwrap();
            let mut h = 0x1234u64;
            for &t in &row[first..] {
                h = rng::mix64(h ^ t as u64);
            }
            for p in rows.clone() {
                for v in 0..V {
                    let rel = p.wrapping_sub(first) as u64;
                    let u = rng::mix64(h ^ rng::mix64(rel << 8 | v as u64));
                    out.push(((u >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0);
                }
            }
        }
        Ok(out)
    }
}

fn params(gen: usize, block: usize, steps: usize) -> GenParams {
    GenParams {
        gen_length: gen,
        block_length: block,
        steps,
        temperature: 0.0,
        remasking: Remasking::LowConfidence,
        seed: 5,
        mask_id: MASK,
        logits_eos_inf: false,
        confidence_eos_eot_inf: false,
        eos_ids: vec![0],
        eot_ids: vec![1],
        threshold: None,
        cache: dlm_data::distill::Cache::None,
    }
}

fn compare(
    be: &mut dyn TeacherBackend,
    p: &GenParams,
    prompts: &[&[u32]],
    pad: u32,
    shift: u8,
) -> Vec<Vec<u32>> {
    let keys: Vec<u64> = (0..prompts.len())
        .map(|i| rng::prompt_key(&format!("p{i}")))
        .collect();
    let mut trace = vec![];
    let got = generate(be, p, prompts, &keys, pad, shift, Some(&mut trace)).unwrap();
    let (want, want_trace) = llada_reference(be, p, prompts, &keys, pad, shift as usize);
    assert_eq!(trace.len(), want_trace.len(), "{p:?}");
    for (a, b) in trace.iter().zip(&want_trace) {
        assert_eq!(a, b, "first differing commit ({p:?}, shift {shift})");
    }
    assert_eq!(got, want);
    assert_eq!(
        trace.len(),
        prompts.len() * p.gen_length,
        "every position committed once"
    );
    assert!(got.iter().flatten().all(|&t| t != p.mask_id));
    got
}

#[test]
fn matches_llada_loop_on_mock_logits() {
    let prompts: [&[u32]; 3] = [&[3, 4, 5], &[7], &[8, 9, 10, 11, 12]];
    let mut n = 0;
    for (gen, block, steps) in [(8, 8, 8), (12, 4, 6), (8, 4, 12), (6, 3, 2)] {
        for temperature in [0.0, 0.9] {
            for remasking in [Remasking::LowConfidence, Remasking::Random] {
                for shift in [0u8, 1] {
                    for (eos, conf) in [(false, false), (true, false), (false, true)] {
                        let mut p = params(gen, block, steps);
                        p.temperature = temperature;
                        p.remasking = remasking;
                        p.logits_eos_inf = eos;
                        p.confidence_eos_eot_inf = conf;
                        let out = compare(&mut Mock, &p, &prompts, PAD, shift);
                        if eos {
                            assert!(out.iter().flatten().all(|&t| t != 0), "EOS sampled");
                        }
                        n += 1;
                    }
                }
            }
        }
    }
    assert_eq!(n, 96);
}

#[test]
fn seeds_and_temperature_change_samples() {
    let prompts: [&[u32]; 2] = [&[3, 4, 5], &[7]];
    let keys = [1u64, 2];
    let run = |t: f64, seed: u64| {
        let mut p = params(8, 4, 8);
        p.temperature = t;
        p.seed = seed;
        generate(&mut Mock, &p, &prompts, &keys, PAD, 0, None).unwrap()
    };
    assert_eq!(run(0.0, 1), run(0.0, 2), "greedy ignores the seed");
    assert_eq!(run(1.0, 1), run(1.0, 1), "seeded sampling is deterministic");
    assert_ne!(run(1.0, 1), run(1.0, 2));
}

#[test]
fn row_result_independent_of_batch_peers() {
    let p = params(8, 4, 8);
    let a: &[u32] = &[3, 4, 5];
    let alone = generate(&mut Mock, &p, &[a], &[42], PAD, 0, None).unwrap();
    let batched = generate(
        &mut Mock,
        &p,
        &[&[9, 9, 9, 9, 9, 9], a],
        &[7, 42],
        PAD,
        0,
        None,
    )
    .unwrap();
    assert_eq!(alone[0], batched[1]);
}

#[test]
fn matches_llada_loop_on_tiny_teacher() {
    let t = Teacher::open(teacher_support::teacher_dir(), &TeacherOptions::default()).unwrap();
    let mut be = t.cpu().unwrap();
    let ids = |s: &str| t.tokenizer.encode(s).unwrap();
    let (a, b) = (ids("The energy of the atom"), ids("Water is"));
    for (temperature, shift) in [(0.0, 0u8), (0.8, 1)] {
        let mut p = params(8, 4, 4);
        p.mask_id = t.mask_id;
        p.eos_ids = t.eos_ids.clone();
        p.eot_ids = vec![];
        p.temperature = temperature;
        let out = compare(&mut be, &p, &[&a, &b], t.pad_id, shift);
        // The same prompt alone: the same tokens (padding and peers are invisible).
        let keys = [rng::prompt_key("p1")];
        let alone = generate(&mut be, &p, &[&b], &keys, t.pad_id, shift, None).unwrap();
        assert_eq!(alone[0], out[1]);
    }
}
