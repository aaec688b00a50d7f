//! The block-only sampler against a plain, literal transcription of LLaDA's `generate` loop
//! (notes/sampler.md §1.2: full-sequence logits, candidates and confidences at every position,
//! `x0_p[:, block_end:] = -inf`, per-row top-k) on the same logits: same commits, same order,
//! same final tokens (the mask token's logit is −∞ in both) — for greedy and Gumbel sampling, both remasking modes, logit shift 0/1,
//! the EOS/EoT flags, several blocks and steps that transfer nothing.

mod teacher_support;

use std::ops::Range;

use dlm_data::distill::host_loop::generate;
use dlm_data::sampling::rng;
use dlm_data::sampling::GenParams;
use dlm_data::sampling::Remasking;
use dlm_data::teacher::{Batch, Teacher, TeacherBackend, TeacherOptions};
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
    fn logits(&mut self, batch: &Batch, rows: Range<usize>) -> anyhow::Result<Vec<f32>> {
        let mut out = Vec::new();
        for r in 0..batch.b {
            let (row, keep) = batch.row(r);
            let first = keep.iter().position(|&k| k).unwrap();
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
        cache: dlm_data::sampling::KvCache::None,
        cache_refresh: None,
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

/// [`Mock`] asking for batches padded to a multiple of 8 (as the GPU pads to 16), and
/// checking the host loop hands it exactly that layout.
struct PaddedMock(usize);

impl TeacherBackend for PaddedMock {
    fn vocab_size(&self) -> usize {
        V
    }
    fn pad_multiple(&self) -> usize {
        self.0
    }
    fn logits(&mut self, batch: &Batch, rows: Range<usize>) -> anyhow::Result<Vec<f32>> {
        let gen = 8;
        let lp = batch.l - gen;
        assert_eq!(lp % self.0, 0, "prompt length {lp} not padded");
        Mock.logits(batch, rows)
    }
}

#[test]
fn host_loop_pads_as_the_backend_asks_and_keeps_the_records() {
    let p = params(8, 4, 8);
    let ps: [&[u32]; 3] = [&[3, 4, 5], &[9, 9, 9, 9, 9, 9, 1, 2, 3, 4, 5], &[7]];
    let keys = [1, 2, 3];
    let plain = generate(&mut Mock, &p, &ps, &keys, PAD, 0, None).unwrap();
    for m in [8, 5, 1] {
        let padded = generate(&mut PaddedMock(m), &p, &ps, &keys, PAD, 0, None).unwrap();
        assert_eq!(padded, plain, "pad multiple {m}");
    }
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

/// Counts forwards (one per sampler step).
struct Counting<'a>(&'a mut dyn TeacherBackend, usize);

impl TeacherBackend for Counting<'_> {
    fn vocab_size(&self) -> usize {
        self.0.vocab_size()
    }
    fn logits(&mut self, batch: &Batch, rows: Range<usize>) -> anyhow::Result<Vec<f32>> {
        self.1 += 1;
        self.0.logits(batch, rows)
    }
}

/// Fast-dLLM's threshold rule written out literally (greedy, low confidence): per block, until
/// no row has a mask in it: top-k over the masked positions' confidences with k = masks left,
/// keep the first and every later one with confidence >= threshold. Returns (spans, forwards).
fn threshold_reference(
    prompts: &[&[u32]],
    gen: usize,
    blk: usize,
    t: f64,
) -> (Vec<Vec<u32>>, usize) {
    let lp = prompts.iter().map(|p| p.len()).max().unwrap();
    let l = lp + gen;
    let mut x: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            let mut r = vec![PAD; lp - p.len()];
            r.extend_from_slice(p);
            r.resize(l, MASK);
            r
        })
        .collect();
    let mut forwards = 0;
    for nb in 0..gen / blk {
        let s0 = lp + nb * blk;
        while x.iter().any(|r| r[s0..s0 + blk].contains(&MASK)) {
            forwards += 1;
            let tokens: Vec<u32> = x.concat();
            let keep: Vec<bool> = x
                .iter()
                .zip(prompts)
                .flat_map(|(r, p)| (0..r.len()).map(move |i| i >= lp - p.len()))
                .collect();
            let logits = Mock
                .logits(&Batch::new(&tokens, &keep, x.len(), l), s0..s0 + blk)
                .unwrap();
            for (r, row) in x.iter_mut().enumerate() {
                let mut conf = vec![f64::NEG_INFINITY; blk];
                let mut x0 = vec![0u32; blk];
                for j in 0..blk {
                    if row[s0 + j] != MASK {
                        continue;
                    }
                    let lg = &logits[(r * blk + j) * V..(r * blk + j + 1) * V];
                    let allowed = |v: usize| v as u32 != MASK;
                    let arg =
                        (0..V)
                            .filter(|&v| allowed(v))
                            .fold(None, |best: Option<usize>, v| match best {
                                Some(b) if lg[b] >= lg[v] => Some(b),
                                _ => Some(v),
                            });
                    let arg = arg.unwrap();
                    let m = (0..V)
                        .filter(|&v| allowed(v))
                        .map(|v| lg[v] as f64)
                        .fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = (0..V)
                        .filter(|&v| allowed(v))
                        .map(|v| (lg[v] as f64 - m).exp())
                        .sum();
                    x0[j] = arg as u32;
                    conf[j] = (lg[arg] as f64 - m).exp() / z;
                }
                let masked = (0..blk).filter(|&j| row[s0 + j] == MASK).count();
                let mut order: Vec<usize> = (0..blk).collect();
                order.sort_by(|&a, &b| conf[b].total_cmp(&conf[a]).then(a.cmp(&b)));
                for (rank, &j) in order.iter().take(masked).enumerate() {
                    if rank == 0 || conf[j] >= t {
                        row[s0 + j] = x0[j];
                    }
                }
            }
        }
    }
    (x.iter().map(|r| r[lp..].to_vec()).collect(), forwards)
}

#[test]
fn threshold_decoding_matches_fast_dllm_rule() {
    let prompts: Vec<Vec<u32>> = vec![vec![3, 4, 5], vec![9], vec![7, 7, 2, 1, 6]];
    let refs: Vec<&[u32]> = prompts.iter().map(|p| p.as_slice()).collect();
    let keys = [1u64, 2, 3];
    let mut seen = vec![];
    for t in [0.05, 0.3, 1.0] {
        let mut p = params(16, 8, 16);
        p.threshold = Some(t);
        p.validate().unwrap();
        let mut mock = Mock;
        let mut be = Counting(&mut mock, 0);
        let out = generate(&mut be, &p, &refs, &keys, PAD, 0, None).unwrap();
        let (want, forwards) = threshold_reference(&refs, 16, 8, t);
        assert_eq!(out, want, "threshold {t}");
        assert_eq!(be.1, forwards, "threshold {t}: steps");
        assert!(out.iter().flatten().all(|&x| x != MASK));
        seen.push(forwards);
    }
    // A low threshold commits several per step; 1.0 commits one per step (8 per block).
    assert!(seen[0] < seen[2], "{seen:?}");
    assert_eq!(seen[2], 2 * 8);
    // Approximate settings are refused where they cannot apply.
    let mut p = params(16, 8, 16);
    p.threshold = Some(0.0);
    assert!(p.validate().is_err());
    p.threshold = Some(0.5);
    p.remasking = Remasking::Random;
    assert!(p.validate().is_err());
    let mut p = params(16, 8, 16);
    p.cache = dlm_data::sampling::KvCache::Dual;
    let e = generate(&mut Mock, &p, &refs, &keys, PAD, 0, None).unwrap_err();
    assert!(format!("{e:#}").contains("GPU only"), "{e:#}");
}
