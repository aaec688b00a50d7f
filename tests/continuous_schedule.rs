//! The continuous-batching scheduler (src/sampling/schedule.rs) — the same code the GPU engine
//! runs — driven by a CPU model of the CUDA kernels' per-row rules (sample/commit on each live
//! row's own block, then `advance`: stop check, per-row or lockstep block moves, random-stream
//! steps), on the tiny teacher. Every prompt's generated span must equal the host sampler's
//! (`generate_row`, the row alone) through slot refills, left-padding growth, compaction,
//! lockstep and free rows, temperature 0 and 1, exact and `--threshold`; a forced stop (the
//! timing bench's) ends rows where told; each prompt's trajectory and top-k (the per-slot
//! records a device keeps for `--trajectory`/`--top-k`, moved with the row through refills and
//! compaction) equal the host sampler's. Catches bookkeeping bugs without a GPU.

mod teacher_support;

use anyhow::Result;
use dlm_data::distill::host_loop::{generate_row, num_transfer_tokens, step_row, RowCtx};
use dlm_data::sampling::early_exit::finished_at;
use dlm_data::sampling::schedule::{self, Layout, RowDevice, RowState, RunParams, StepKind};
use dlm_data::sampling::trajectory::RowTrace;
use dlm_data::sampling::{rng, GenParams, KvCache, Remasking};
use dlm_data::teacher::{Batch, Teacher, TeacherBackend, TeacherOptions};

/// The kernels' per-row rules on the CPU (kernels/sampler.cu: sample_block, commit_topk,
/// advance).
struct KernelModel<'a> {
    be: &'a mut dyn TeacherBackend,
    p: RunParams<'a>,
    l: Layout,
    loads: usize,
    max_b: usize,
    /// Every prompt length a batch was laid out at.
    lps: Vec<usize>,
    /// Per slot, what `record_topk` keeps (K = `top_k`).
    traces: Vec<RowTrace>,
    top_k: usize,
}

impl<'a> KernelModel<'a> {
    /// An empty device.
    fn new(be: &'a mut dyn TeacherBackend, p: RunParams<'a>) -> Self {
        KernelModel {
            be,
            p,
            l: Layout {
                b: 0,
                lp: 0,
                x: vec![],
                pads: vec![],
                keys: vec![],
                phase: [0; 4],
                rows: vec![],
                prev: vec![],
            },
            loads: 0,
            max_b: 0,
            lps: vec![],
            traces: vec![],
            top_k: 3,
        }
    }

    fn s(&self) -> usize {
        self.l.lp + self.p.gen.gen_length
    }
}

impl RowDevice for KernelModel<'_> {
    fn load(&mut self, l: &Layout) -> Result<()> {
        assert_eq!(l.x.len(), l.b * (l.lp + self.p.gen.gen_length));
        assert_eq!((l.pads.len(), l.keys.len(), l.rows.len()), (l.b, l.b, l.b));
        assert_eq!(l.prev.len(), l.b);
        let fresh = RowTrace::new(self.p.gen.gen_length, self.top_k);
        self.traces = l
            .prev
            .iter()
            .map(|q| q.map_or_else(|| fresh.clone(), |q| self.traces[q].clone()))
            .collect();
        self.l = l.clone();
        self.loads += 1;
        self.max_b = self.max_b.max(l.b);
        self.lps.push(l.lp);
        Ok(())
    }

    fn tokens(&mut self) -> Result<Vec<u32>> {
        Ok(self.l.x.clone())
    }

    fn step(&mut self, kind: StepKind) -> Result<()> {
        assert_eq!(kind, StepKind::Full, "no KV cache on the CPU");
        let g = self.p.gen;
        let (s, lp, bl, spb) = (self.s(), self.l.lp, g.block_length, g.steps_per_block());
        let ntrans = num_transfer_tokens(bl, spb);
        let vocab = self.be.vocab_size();
        let adaptive = g.threshold.is_some();
        // sample_block + commit_topk, row by row (each row alone: the CPU backend's logits do
        // not depend on peers).
        for r in 0..self.l.b {
            let st = self.l.rows[r];
            if st.live == 0 {
                continue;
            }
            let pad = self.l.pads[r];
            let row = self.l.x[r * s + pad..(r + 1) * s].to_vec();
            let s0 = lp - pad + st.block as usize * bl;
            let keep = vec![true; row.len()];
            let logits = self
                .be
                .logits(&Batch::new(&row, &keep, 1, row.len()), s0..s0 + bl)?;
            let ctx = RowCtx {
                prompt_key: self.l.keys[r],
                global_step: st.step as u64,
                block_start: st.block as usize * bl,
            };
            let at = r * s + lp + st.block as usize * bl;
            let block = &mut self.l.x[at..at + bl];
            let had_mask = block.contains(&g.mask_id);
            let k = if adaptive {
                bl
            } else {
                ntrans[st.sib as usize]
            };
            for (j, _) in step_row(g, &logits, vocab, block, k, &ctx) {
                let lj = &logits[j * vocab..(j + 1) * vocab];
                self.traces[r].commit(g, st.block as usize * bl + j, st.step as usize, lj);
            }
            if adaptive && had_mask {
                self.l.rows[r].step += 1;
            }
        }
        // advance
        let aligned = !self.p.free_rows;
        let block_masked = |x: &[u32], r: usize, st: &RowState| {
            let at = r * s + lp + st.block as usize * bl;
            x[at..at + bl].contains(&g.mask_id)
        };
        let left = adaptive
            && aligned
            && (0..self.l.b)
                .any(|r| self.l.rows[r].live != 0 && block_masked(&self.l.x, r, &self.l.rows[r]));
        let sib0 = self.l.phase[1];
        let phase_done = if adaptive {
            !left
        } else {
            sib0 + 1 == spb as i32
        };
        self.l.phase[0] += 1;
        self.l.phase[1] = if phase_done { 0 } else { sib0 + 1 };
        if phase_done {
            self.l.phase[2] += 1;
        }
        let nblocks = g.num_blocks() as i32;
        for r in 0..self.l.b {
            let st = self.l.rows[r];
            if st.live == 0 {
                continue;
            }
            let span = &self.l.x[r * s + lp..(r + 1) * s];
            if !self.p.stop_ids.is_empty()
                && finished_at(span, g.mask_id, self.p.stop_ids).is_some()
            {
                self.l.rows[r].live = 0;
                continue;
            }
            let done = if aligned {
                phase_done
            } else if adaptive {
                !block_masked(&self.l.x, r, &st)
            } else {
                st.sib + 1 == spb as i32
            };
            let mut sib = if done { 0 } else { st.sib + 1 };
            let mut nb = st.block + i32::from(done);
            let mut live = 1;
            if nb >= nblocks {
                live = 0;
                nb = nblocks - 1;
                sib = 0;
            }
            let step = if adaptive {
                st.step
            } else {
                nb * spb as i32 + sib
            };
            self.l.rows[r] = RowState {
                block: nb,
                sib,
                step,
                live,
            };
        }
        Ok(())
    }

    fn state(&mut self) -> Result<([i32; 4], Vec<RowState>)> {
        Ok((self.l.phase, self.l.rows.clone()))
    }

    fn retire(&mut self, r: usize) -> Result<()> {
        self.l.rows[r].live = 0;
        Ok(())
    }

    fn trace(&mut self, r: usize) -> Result<Option<RowTrace>> {
        Ok(Some(self.traces[r].clone()))
    }
}

fn gen_params(t: &Teacher) -> GenParams {
    GenParams {
        gen_length: 16,
        block_length: 4,
        steps: 16,
        temperature: 0.0,
        remasking: Remasking::LowConfidence,
        seed: 7,
        mask_id: t.mask_id,
        logits_eos_inf: false,
        confidence_eos_eot_inf: false,
        eos_ids: t.eos_ids.clone(),
        eot_ids: vec![],
        threshold: None,
        cache: KvCache::None,
        cache_refresh: None,
    }
}

/// 11 prompts of 3..=16 tokens, in no length order (the window sorts them in distill; the
/// scheduler must cope with growth and shrinkage of the left padding either way).
fn prompts(t: &Teacher) -> (Vec<Vec<u32>>, Vec<u64>) {
    let words = [
        "energy",
        "the cell",
        "water",
        "a prime",
        "light",
        "atoms",
        "the planet",
    ];
    let ps: Vec<Vec<u32>> = (0..11)
        .map(|i| {
            let text = format!(
                "Question {i}: {} and {}{}",
                words[i % 7],
                words[(i * 3) % 7],
                " again".repeat(i % 5)
            );
            t.tokenizer.encode(&text).unwrap()
        })
        .collect();
    let keys = (0..11).map(|i| rng::prompt_key(&format!("p{i}"))).collect();
    (ps, keys)
}

#[test]
fn scheduler_on_the_kernel_model_equals_each_row_alone() {
    let t = Teacher::open(teacher_support::teacher_dir(), &TeacherOptions::default()).unwrap();
    let mut be = t.cpu().unwrap();
    let (ps, keys) = prompts(&t);
    // A stop id that this random teacher emits: its most frequent token at temperature 0.
    let base = gen_params(&t);
    let mut freq = std::collections::HashMap::<u32, usize>::new();
    for (q, k) in ps.iter().zip(&keys) {
        for tok in generate_row(&mut be, &base, q, *k, 0, None, None)
            .unwrap()
            .gen
        {
            *freq.entry(tok).or_default() += 1;
        }
    }
    let stop = *freq
        .iter()
        .max_by_key(|(t, n)| (**n, u32::MAX - **t))
        .unwrap()
        .0;
    let stops = [stop];
    let mut early_rows = 0;
    // steps 32: 8 steps per block of 4, half of them commit nothing (the host loop skips them).
    for (temperature, threshold, steps) in [
        (0.0, None, 16),
        (1.0, None, 16),
        (0.0, Some(0.3), 16),
        (1.0, Some(0.3), 16),
        (0.0, None, 32),
    ] {
        let mut g = base.clone();
        g.steps = steps;
        g.temperature = temperature;
        g.threshold = threshold;
        g.eot_ids = stops.to_vec();
        let mut want_traces = vec![RowTrace::new(g.gen_length, 3); ps.len()];
        let want: Vec<_> = ps
            .iter()
            .zip(&keys)
            .zip(&mut want_traces)
            .map(|((q, k), t)| generate_row(&mut be, &g, q, *k, 0, Some(&stops), Some(t)).unwrap())
            .collect();
        early_rows += want.iter().filter(|r| r.early).count();
        for free_rows in [true, false] {
            // pad_multiple: the batch's prompt length rounded up (the GPU's default is 16).
            for (slots, budget, pad_multiple) in [
                (3usize, usize::MAX, 1usize),
                (4, 40, 8),
                (16, usize::MAX, 5),
            ] {
                let p = RunParams {
                    gen: &g,
                    pad_id: t.pad_id,
                    free_rows,
                    stop_ids: &stops,
                    pad_multiple,
                };
                let mut dev = KernelModel::new(&mut be, p);
                // budget: rows × longest prompt (a memory limit that closes admission early).
                let fits = |rows: usize, longest: usize| rows * longest <= budget;
                let (got, forwards, traces) =
                    schedule::run_traced(&mut dev, &ps, &keys, &p, nz(slots), &fits, None, true)
                        .unwrap();
                let what =
                    format!("T={temperature} thr={threshold:?} steps={steps} free={free_rows} slots={slots}");
                assert!(dev.max_b <= slots, "{what}: {} rows in flight", dev.max_b);
                assert!(
                    dev.lps.iter().all(|lp| lp % pad_multiple == 0),
                    "{what}: {:?}",
                    dev.lps
                );
                assert!(dev.loads > 1, "{what}: slots were never refilled");
                for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                    assert_eq!(a.gen, b.gen, "{what}: prompt {i}");
                    assert_eq!(a.early, b.early, "{what}: prompt {i}");
                    let tr = traces[i].as_ref().expect("a trace per prompt");
                    assert_eq!(
                        tr.commit_step, want_traces[i].commit_step,
                        "{what}: prompt {i}"
                    );
                    assert_eq!(tr.top_k, want_traces[i].top_k, "{what}: prompt {i}");
                }
                let row_steps: usize = got.iter().map(|r| r.steps).sum();
                assert!(forwards * slots >= row_steps, "{what}");
                if free_rows && budget == usize::MAX && threshold.is_none() && steps == 16 {
                    // Free rows at fixed schedule: a row runs exactly its own steps (with more
                    // steps than block positions the host loop skips the passes that commit
                    // nothing; a device runs them, and counts them).
                    for (a, b) in want.iter().zip(&got) {
                        assert_eq!(a.steps, b.steps, "{what}");
                        assert_eq!(a.block_rule_steps, b.block_rule_steps, "{what}");
                    }
                }
            }
        }
    }
    assert!(early_rows > 0, "the stop id {stop} never ended a row early");
}

#[test]
fn forced_stop_ends_rows_at_the_given_length() {
    let t = Teacher::open(teacher_support::teacher_dir(), &TeacherOptions::default()).unwrap();
    let mut be = t.cpu().unwrap();
    let (ps, keys) = prompts(&t);
    let g = gen_params(&t);
    let forced: Vec<usize> = (0..ps.len()).map(|i| (i * 5) % 16).collect();
    let p = RunParams {
        gen: &g,
        pad_id: t.pad_id,
        free_rows: true,
        stop_ids: &[],
        pad_multiple: 1,
    };
    let mut dev = KernelModel::new(&mut be, p);
    let (got, _) =
        schedule::run(&mut dev, &ps, &keys, &p, nz(4), &|_, _| true, Some(&forced)).unwrap();
    for (i, r) in got.iter().enumerate() {
        let f = forced[i];
        assert!(!r.gen[..=f].contains(&g.mask_id), "prompt {i}: {:?}", r.gen);
        // Stopped within the block that completed position f.
        assert_eq!(r.blocks, f / g.block_length + 1, "prompt {i}");
    }
}

fn nz(n: usize) -> std::num::NonZeroUsize {
    std::num::NonZeroUsize::new(n).expect("non-zero")
}
