//! A literal transcription of LLaDA's `generate` loop (notes/sampler.md §1.2) over
//! full-sequence logits — the reference the block-only sampler is checked against
//! (tests/distill_sampler.rs) and timed against (examples/distill_bench.rs).

use dlm_data::distill::host_loop::Commit;
use dlm_data::sampling::rng;
use dlm_data::sampling::GenParams;
use dlm_data::sampling::Remasking;
use dlm_data::teacher::{Batch, TeacherBackend};

/// LLaDA's loop, written out literally over full-sequence logits.
pub fn llada_reference(
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
            let raw = be.logits(&Batch::new(&x, &keep, b, l), 0..l).unwrap();
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
