//! The block-only sampler against a plain, literal transcription of LLaDA's `generate` loop
//! (notes/sampler.md §1.2: full-sequence logits, candidates and confidences at every position,
//! `x0_p[:, block_end:] = -inf`, per-row top-k) on the same logits: same commits, same order,
//! same final tokens (the mask token's logit is −∞ in both) — for greedy and Gumbel sampling, both remasking modes, logit shift 0/1,
//! the EOS/EoT flags, several blocks and steps that transfer nothing.

mod teacher_support;

use std::ops::Range;

use dlm_data::distill::rng;
use dlm_data::distill::sampler::{generate, Commit, GenParams};
use dlm_data::distill::Remasking;
use dlm_data::teacher::{Teacher, TeacherBackend, TeacherOptions};

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

/// LLaDA's loop, written out literally over full-sequence logits.
fn llada_reference(
    be: &mut dyn TeacherBackend,
    p: &GenParams,
    prompts: &[&[u32]],
    keys: &[u64],
    pad: u32,
    shift: usize,
) -> (Vec<Vec<u32>>, Vec<Commit>) {
    let v = be.vocab_size();
    let b = prompts.len();
    let lp = prompts.iter().map(|x| x.len()).max().unwrap();
    let l = lp + p.gen_length;
    let mut x = vec![p.mask_id; b * l];
    let mut keep = vec![true; b * l];
    for (r, pr) in prompts.iter().enumerate() {
        for j in 0..lp - pr.len() {
            x[r * l + j] = pad;
            keep[r * l + j] = false;
        }
        x[r * l + lp - pr.len()..r * l + lp].copy_from_slice(pr);
    }
    let nblocks = p.gen_length / p.block_length;
    let spb = p.steps / nblocks;
    let mut commits = vec![];
    for nb in 0..nblocks {
        let (s0, s1) = (lp + nb * p.block_length, lp + (nb + 1) * p.block_length);
        let num_transfer: Vec<Vec<usize>> = (0..b)
            .map(|r| {
                let m = x[r * l + s0..r * l + s1]
                    .iter()
                    .filter(|&&t| t == p.mask_id)
                    .count();
                let (base, rem) = (m / spb, m % spb);
                (0..spb)
                    .map(|i| base + if i < rem { 1 } else { 0 })
                    .collect()
            })
            .collect();
        for i in 0..spb {
            let step = (nb * spb + i) as u64;
            let mask_index: Vec<bool> = x.iter().map(|&t| t == p.mask_id).collect();
            let raw = be.logits(&x, &keep, b, l, 0..l).unwrap();
            let mut logits = vec![0f64; b * l * v];
            for r in 0..b {
                for q in 0..l {
                    let src = if shift == 1 && q > 0 { q - 1 } else { q };
                    for t in 0..v {
                        logits[(r * l + q) * v + t] = raw[(r * l + src) * v + t] as f64;
                    }
                }
            }
            for c in logits.chunks_mut(v) {
                c[p.mask_id as usize] = f64::NEG_INFINITY; // the mask is never a candidate
            }
            if p.logits_eos_inf {
                for c in logits.chunks_mut(v) {
                    for &e in &p.eos_ids {
                        c[e as usize] = f64::NEG_INFINITY;
                    }
                }
            }
            let mut x0 = vec![0u32; b * l];
            let mut x0_p = vec![0f64; b * l];
            for r in 0..b {
                for q in 0..l {
                    let c = &logits[(r * l + q) * v..(r * l + q + 1) * v];
                    let gpos = q.wrapping_sub(lp) as u64;
                    let noisy: Vec<f64> = (0..v)
                        .map(|t| {
                            if p.temperature == 0.0 {
                                c[t]
                            } else {
                                let u = rng::uniform(
                                    p.seed,
                                    rng::STREAM_GUMBEL,
                                    keys[r],
                                    step,
                                    gpos,
                                    t as u64,
                                );
                                c[t] - p.temperature * (-u.ln()).ln()
                            }
                        })
                        .collect();
                    let mut am = 0;
                    for t in 0..v {
                        if noisy[t] > noisy[am] {
                            am = t;
                        }
                    }
                    x0[r * l + q] = am as u32;
                    x0_p[r * l + q] = match p.remasking {
                        Remasking::Random => {
                            rng::uniform(p.seed, rng::STREAM_REMASK, keys[r], step, gpos, 0)
                        }
                        Remasking::LowConfidence => {
                            let mut c2 = c.to_vec();
                            if p.confidence_eos_eot_inf {
                                for &e in p.eos_ids.iter().chain(&p.eot_ids) {
                                    c2[e as usize] = f64::NEG_INFINITY;
                                }
                            }
                            let m = c2.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                            let z: f64 = c2.iter().map(|y| (y - m).exp()).sum();
                            (c2[am] - m).exp() / z
                        }
                    };
                }
                for q in s1..l {
                    x0_p[r * l + q] = f64::NEG_INFINITY;
                }
            }
            for r in 0..b {
                let mut conf: Vec<(f64, usize)> = (0..l)
                    .map(|q| {
                        let c = if mask_index[r * l + q] {
                            x0_p[r * l + q]
                        } else {
                            f64::NEG_INFINITY
                        };
                        (c, q)
                    })
                    .collect();
                conf.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                for &(_, q) in conf.iter().take(num_transfer[r][i]) {
                    let tok = if mask_index[r * l + q] {
                        x0[r * l + q]
                    } else {
                        x[r * l + q]
                    };
                    commits.push(Commit {
                        step: step as usize,
                        row: r,
                        pos: q - lp,
                        token: tok,
                    });
                    x[r * l + q] = tok;
                }
            }
        }
    }
    let out = (0..b)
        .map(|r| x[r * l + lp..(r + 1) * l].to_vec())
        .collect();
    (out, commits)
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
