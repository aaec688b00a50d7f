//! `dlm-gpu`: the GPU engine's parity and speed harness for the device machine (built with
//! `--features cuda`; staged by bench/gpu/stage.sh, run by bench/gpu/run.sh).
//!
//! - `tiny --out DIR`: writes the tiny random teacher (HF layout).
//! - `parity-tiny --teacher DIR`: GPU logits vs the CPU reference (relative error) and
//!   temperature-0 (and temperature-1) generations token for token; exits 1 on a mismatch.
//! - `logits --teacher DIR --prompts F --out F.npy`: fp32 logits of the last block of
//!   prompt + all-masked generation (for the PyTorch comparison).
//! - `generate --teacher DIR --prompts F --out F.json`: sampler output for given prompts.
//! - `bench --teacher DIR --batches 1,16,64 [--cache dual] [--threshold 0.9]`: generated
//!   tokens/s, model TFLOP/s, memory.
//! - `approx --teacher DIR --batch 16`: the approximate modes (threshold, prefix/dual cache)
//!   against the exact sampler on the same prompts: speed-up, steps, token agreement.
//! - `profile --teacher DIR --batch 64`: device milliseconds per op kind of one step.
//! - `teacher-fixture --out DIR`: the project's tiny teacher (tokenizer, chat template) in a
//!   GPU shape (head_dim 64), for `dlm-data distill --device cpu` vs `--device cuda`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use dlm_data::distill::host_loop;
use dlm_data::gpu::backend::GpuBackend;
use dlm_data::gpu::engine::{DeviceRun, Engine, KvCache, Residual};
use dlm_data::gpu::reference::{self, CpuModel};
use dlm_data::sampling::rng;
use dlm_data::sampling::GenParams as SP;
use dlm_data::sampling::Remasking;
use dlm_data::teacher::TeacherBackend;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct Gen {
    #[arg(long, default_value_t = 256)]
    gen_length: usize,
    #[arg(long, default_value_t = 32)]
    block_length: usize,
    #[arg(long, default_value_t = 256)]
    steps: usize,
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, default_value_t = 0)]
    logits_shift: u8,
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Approximate: confidence-threshold parallel decoding.
    #[arg(long)]
    threshold: Option<f64>,
    /// Approximate: none, prefix or dual.
    #[arg(long, default_value = "none")]
    cache: String,
    /// Approximate: with a cache, every K-th step of a block is a full pass (distill's flag).
    #[arg(long)]
    cache_refresh: Option<usize>,
}

/// The engine, with the residual precision from `DLM_RESID` (bf16 by default, or f32).
/// `max_pos` = longest prompt + gen length; the rows are left-padded to a multiple of
/// `pad_multiple()`, so the RoPE tables get that much room more.
fn engine(teacher: &Path, device: usize, max_pos: usize) -> Result<Engine> {
    let room = dlm_data::gpu::engine::pad_multiple();
    let mut e = Engine::load(teacher, device, max_pos + room)?;
    if let Ok(r) = std::env::var("DLM_RESID") {
        e.set_residual(Residual::parse(&r)?)?;
    }
    Ok(e)
}

fn cache_mode(s: &str) -> Result<KvCache> {
    Ok(match s {
        "none" => KvCache::None,
        "prefix" => KvCache::Prefix,
        "dual" => KvCache::Dual,
        o => bail!("--cache {o}: none, prefix or dual"),
    })
}

#[derive(Subcommand)]
enum Cmd {
    Tiny {
        #[arg(long)]
        out: PathBuf,
        /// Scale of the embedding and LM head (> 1: peaked distributions).
        #[arg(long, default_value_t = 1.0)]
        head_scale: f64,
        /// Head dimension (128: the teacher's, which the wgmma attention kernels need).
        #[arg(long, default_value_t = 64)]
        head_dim: usize,
    },
    ParityTiny {
        #[arg(long)]
        teacher: PathBuf,
        #[arg(long)]
        out: Option<PathBuf>,
    },
    Logits {
        #[arg(long)]
        teacher: PathBuf,
        #[arg(long)]
        prompts: PathBuf,
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        g: Gen,
    },
    Generate {
        #[arg(long)]
        teacher: PathBuf,
        #[arg(long)]
        prompts: PathBuf,
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        g: Gen,
    },
    Bench {
        #[arg(long)]
        teacher: PathBuf,
        #[arg(long, default_value = "1,16,64")]
        batches: String,
        #[arg(long, default_value_t = 256)]
        prompt: usize,
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        g: Gen,
    },
    Approx {
        #[arg(long)]
        teacher: PathBuf,
        #[arg(long, default_value_t = 16)]
        batch: usize,
        #[arg(long, default_value_t = 256)]
        prompt: usize,
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        g: Gen,
    },
    Profile {
        #[arg(long)]
        teacher: PathBuf,
        #[arg(long, default_value_t = 64)]
        batch: usize,
        #[arg(long, default_value_t = 256)]
        prompt: usize,
        /// Run steps back to back this many seconds before the measured one (power-capped
        /// clock instead of boost).
        #[arg(long, default_value_t = 0.0)]
        hot: f64,
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        g: Gen,
    },
    TeacherFixture {
        #[arg(long)]
        out: PathBuf,
    },
    /// Timing only (issue #26): `n` synthetic prompts in fixed batches (every block decoded)
    /// against continuous batching with early exit, where prompt i's row ends after the
    /// response length a trained teacher's exact run gave (--stop-lengths: a JSON array of
    /// lengths, cycled; random weights never emit EOS).
    BenchRows {
        #[arg(long)]
        teacher: PathBuf,
        #[arg(long, default_value_t = 64)]
        batch: usize,
        #[arg(long, default_value_t = 128)]
        n: usize,
        /// Longest prompt (lengths vary down to half of it).
        #[arg(long, default_value_t = 192)]
        prompt: usize,
        #[arg(long)]
        stop_lengths: PathBuf,
        /// Prompts of the full stage-3 run, for the projected hours.
        #[arg(long, default_value_t = 111_500)]
        project: usize,
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        g: Gen,
    },
}

fn mask_id(e: &Engine) -> u32 {
    e.cfg.mask_token_id.unwrap_or(e.cfg.vocab_size as u32 - 1)
}

fn params(e: &Engine, g: &Gen) -> Result<DeviceRun> {
    let mask = mask_id(e);
    let sp = SP {
        gen_length: g.gen_length,
        block_length: g.block_length,
        steps: g.steps,
        temperature: g.temperature,
        remasking: Remasking::LowConfidence,
        seed: g.seed,
        mask_id: mask,
        logits_eos_inf: false,
        confidence_eos_eot_inf: false,
        eos_ids: vec![],
        eot_ids: vec![],
        threshold: g.threshold,
        cache: cache_mode(&g.cache)?,
        cache_refresh: g.cache_refresh,
    };
    let p = DeviceRun::new(sp, if mask == 0 { 1 } else { 0 }, g.logits_shift);
    p.validate()?;
    Ok(p)
}

fn read_prompts(p: &Path) -> Result<Vec<Vec<u32>>> {
    let t = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_str(&t)
        .with_context(|| format!("{}: expected a JSON list of token-id lists", p.display()))
}

fn write_npy(path: &Path, shape: &[usize], data: &[f32]) -> Result<()> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}{}), }}",
        dims.join(", "),
        if shape.len() == 1 { "," } else { "" }
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for v in data {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    dlm_data::util::atomic_write(path, &bytes)
}

fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| ((*x - *y) as f64).powi(2))
        .sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// Deterministic prompts of varied lengths (exercises left padding).
fn prompts(
    n: usize,
    max_len: usize,
    vocab: u32,
    avoid: u32,
    seed: u64,
    vary: bool,
) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| {
            let len = if vary {
                max_len - (i * 7) % (max_len / 2).max(1)
            } else {
                max_len
            };
            (0..len)
                .map(|j| {
                    let u = rng::uniform(seed, 7, i as u64, 0, j as u64, 0);
                    let t = (u * (vocab - 1) as f64) as u32;
                    if t == avoid {
                        t + 1
                    } else {
                        t
                    }
                })
                .collect()
        })
        .collect()
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Tiny {
            out,
            head_scale,
            head_dim,
        } => {
            let mut cfg = reference::tiny_config();
            cfg["head_dim"] = head_dim.into();
            reference::write_random_teacher_scaled(&out, &cfg, 1, head_scale)
        }
        Cmd::ParityTiny { teacher, out } => parity_tiny(&teacher, out.as_deref()),
        Cmd::Logits {
            teacher,
            prompts,
            out,
            g,
        } => {
            let ps = read_prompts(&prompts)?;
            let lp = ps.iter().map(|p| p.len()).max().unwrap_or(0);
            let mut e = engine(&teacher, g.device, lp + g.gen_length)?;
            let p = params(&e, &g)?;
            let (seqs, pads, _) = Engine::left_pad(&ps, &p);
            // Rows are left-padded to a multiple of the pad size: the last block ends at the
            // padded length, not at the longest prompt + gen length.
            let s = seqs[0].len();
            let at: Vec<(usize, usize)> = (0..ps.len())
                .flat_map(|r| (s - g.block_length..s).map(move |q| (r, q)))
                .collect();
            let l = e.logits_at(&seqs, &pads, &at)?;
            write_npy(&out, &[ps.len(), g.block_length, e.cfg.vocab_size], &l)
        }
        Cmd::Generate {
            teacher,
            prompts,
            out,
            g,
        } => {
            let ps = read_prompts(&prompts)?;
            let lp = ps.iter().map(|p| p.len()).max().unwrap_or(0);
            let mut e = engine(&teacher, g.device, lp + g.gen_length)?;
            let p = params(&e, &g)?;
            let keys: Vec<u64> = (0..ps.len())
                .map(|i| rng::prompt_key(&format!("p{i}")))
                .collect();
            let t = Instant::now();
            let toks = e.generate(&ps, &keys, &p)?;
            let secs = t.elapsed().as_secs_f64();
            let j = serde_json::json!({"tokens": toks, "seconds": secs});
            dlm_data::util::atomic_write(&out, serde_json::to_string(&j)?.as_bytes())
        }
        Cmd::Bench {
            teacher,
            batches,
            prompt,
            out,
            g,
        } => bench(&teacher, &batches, prompt, out.as_deref(), &g),
        Cmd::Approx {
            teacher,
            batch,
            prompt,
            out,
            g,
        } => approx(&teacher, batch, prompt, out.as_deref(), &g),
        Cmd::Profile {
            teacher,
            batch,
            prompt,
            hot,
            out,
            g,
        } => profile(&teacher, batch, prompt, hot, out.as_deref(), &g),
        Cmd::BenchRows {
            teacher,
            batch,
            n,
            prompt,
            stop_lengths,
            project,
            out,
            g,
        } => bench_rows(
            &teacher,
            batch,
            n,
            prompt,
            &stop_lengths,
            project,
            out.as_deref(),
            &g,
        ),
        Cmd::TeacherFixture { out } => {
            let t = dlm_data::fixtures::teacher::TinyTeacher {
                size: dlm_data::fixtures::teacher::TinySize {
                    hidden: 256,
                    layers: 2,
                    heads: 4,
                    kv_heads: 2,
                    head_dim: 64,
                    intermediate: 512,
                    min_vocab: 0,
                },
                ..Default::default()
            };
            dlm_data::fixtures::teacher::write_teacher(&out, &t)?;
            dlm_data::fixtures::teacher::write_demo_prompts(&out.join("prompts.jsonl"))
        }
    }
}

fn parity_tiny(teacher: &Path, out: Option<&Path>) -> Result<()> {
    let mut gpu = engine(teacher, 0, 512)?;
    let cpu = CpuModel::load(teacher)?;
    let v = gpu.cfg.vocab_size as u32;
    let mask = mask_id(&gpu);
    let mut report = serde_json::Map::new();
    report.insert("gpu".into(), gpu.gpu.name.clone().into());
    // The sampler settings of step 3; steps 1–2 use the same left-padded batch.
    let base = SP {
        gen_length: 64,
        block_length: 16,
        steps: 32,
        temperature: 0.0,
        remasking: Remasking::LowConfidence,
        seed: 5,
        mask_id: mask,
        logits_eos_inf: false,
        confidence_eos_eot_inf: false,
        eos_ids: vec![],
        eot_ids: vec![],
        threshold: None,
        cache: KvCache::None,
        cache_refresh: None,
    };
    // 1. Logits at every position of a left-padded batch with masked tails.
    let ps = prompts(5, 70, v, mask, 3, true);
    let (seqs, pads, lp) =
        Engine::left_pad(&ps, &dlm_data::gpu::backend::engine_params(&base, 0, 0));
    let s = lp + base.gen_length;
    let at: Vec<(usize, usize)> = (0..ps.len())
        .flat_map(|r| (pads[r]..s).map(move |q| (r, q)))
        .collect();
    let gl = gpu.logits_at(&seqs, &pads, &at)?;
    let mut cl = Vec::with_capacity(gl.len());
    for r in 0..ps.len() {
        let pos: Vec<usize> = (pads[r]..s).collect();
        for row in cpu.logits(&seqs[r], pads[r], &pos) {
            cl.extend(row);
        }
    }
    let err = rel_err(&gl, &cl);
    println!(
        "tiny logits: {} positions, relative error GPU vs CPU = {err:.3e}",
        at.len()
    );
    report.insert("logits_rel_err".into(), err.into());
    // The same logits through every attention variant the engine loaded (each forced; the
    // default picks by grid size, and this batch is small).
    for av in gpu.attention_variants() {
        gpu.set_attention(Some(av));
        let e = rel_err(&gpu.logits_at(&seqs, &pads, &at)?, &cl);
        println!("tiny logits, attention {av:?}: relative error GPU vs CPU = {e:.3e}");
        if e > 1e-2 {
            bail!("attention {av:?}: relative error {e:.3e} > 1e-2");
        }
        report.insert(format!("logits_rel_err_{av:?}"), e.into());
    }
    gpu.set_attention(None);
    // 2. The letter head kernel vs the same computation on the host over the GPU's own logits
    // (the forward's GPU-vs-CPU difference is the relative error above; a peaked teacher's
    // large logits would scale it into the letter log-probs).
    let letters: Vec<Vec<u32>> = at.iter().map(|_| vec![10, 11, 12, 13]).collect();
    let lh = gpu.letters_at(&seqs, &pads, &at[..4], &letters[..4])?;
    for (k, (lp_raw, pr)) in lh.iter().enumerate() {
        let row = &gl[k * v as usize..(k + 1) * v as usize];
        let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f32>().ln();
        let ll: Vec<f32> = letters[k].iter().map(|&t| row[t as usize]).collect();
        let lm = ll.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let z: f32 = ll.iter().map(|x| (x - lm).exp()).sum();
        for i in 0..4 {
            let (want_lp, want_p) = (ll[i] - lse, (ll[i] - lm).exp() / z);
            if (lp_raw[i] - want_lp).abs() > 1e-3 * want_lp.abs().max(1.0)
                || (pr[i] - want_p).abs() > 1e-4
            {
                bail!(
                    "letter head row {k} letter {i}: kernel ({}, {}) vs host on the same logits ({want_lp}, {want_p})",
                    lp_raw[i],
                    pr[i]
                );
            }
        }
    }
    println!(
        "tiny letter head: log-probs and renormalised probabilities match the host computation"
    );
    // 3. The device sampler (one CUDA graph per step) against the distill sampler's host loop
    //    fed the GPU's own logits (same forward): must agree token for token in every mode.
    let keys: Vec<u64> = (0..ps.len())
        .map(|i| rng::prompt_key(&format!("tiny-{i}")))
        .collect();
    let refs: Vec<&[u32]> = ps.iter().map(|q| q.as_slice()).collect();
    let mut be = GpuBackend::from_engine(gpu);
    // EOS/EoT: the tokens the exact T=0 run generates most, so the exclusions bite.
    let first = be.generate(&job(&base, &refs, &keys)).unwrap()?;
    let mut freq = std::collections::HashMap::new();
    for t in first.iter().flatten() {
        *freq.entry(*t).or_insert(0usize) += 1;
    }
    let mut top: Vec<(u32, usize)> = freq.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let (eos, eot) = (top[0].0, top.get(1).map_or(1, |t| t.0));
    let mut settings: Vec<(String, SP)> = vec![];
    for t in [0.0, 1.0] {
        settings.push((
            format!("T={t}"),
            SP {
                temperature: t,
                ..base.clone()
            },
        ));
    }
    settings.push((
        "T=0.7 random remasking".into(),
        SP {
            temperature: 0.7,
            remasking: Remasking::Random,
            ..base.clone()
        },
    ));
    settings.push((
        format!("T=0 logits_eos_inf + confidence_eos_eot_inf (eos {eos}, eot {eot})"),
        SP {
            logits_eos_inf: true,
            confidence_eos_eot_inf: true,
            eos_ids: vec![eos],
            eot_ids: vec![eot],
            ..base.clone()
        },
    ));
    settings.push((
        format!("T=1 confidence_eos_eot_inf (eos {eos}, eot {eot})"),
        SP {
            temperature: 1.0,
            confidence_eos_eot_inf: true,
            eos_ids: vec![eos],
            eot_ids: vec![eot],
            ..base.clone()
        },
    ));
    settings.push((
        "T=0 threshold 0.3".into(),
        SP {
            threshold: Some(0.3),
            ..base.clone()
        },
    ));
    settings.push((
        "T=1 threshold 0.9".into(),
        SP {
            temperature: 1.0,
            threshold: Some(0.9),
            ..base.clone()
        },
    ));
    let mut sampler_ok = true;
    let mut rows_report = serde_json::Map::new();
    for (name, p) in &settings {
        let dev = be.generate(&job(p, &refs, &keys)).unwrap()?;
        let mut trace = vec![];
        let host = host_loop::generate(&mut be, p, &refs, &keys, 0, 0, Some(&mut trace))?;
        let (same, total, rows) = agreement(&dev, &host);
        println!("device sampler vs host sampler on the GPU's logits, {name}: {same}/{total} tokens, {rows}/{} rows identical", ps.len());
        rows_report.insert(name.clone(), format!("{rows}/{}", ps.len()).into());
        sampler_ok &= rows == ps.len();
    }
    report.insert(
        "device_vs_host_sampler_rows_identical".into(),
        rows_report.into(),
    );
    // 4. End to end against the CPU reference forward through the same distill sampler.
    let mut cpu = cpu;
    for t in [0.0, 1.0] {
        let p = SP {
            temperature: t,
            ..base.clone()
        };
        let dev = be.generate(&job(&p, &refs, &keys)).unwrap()?;
        let host = host_loop::generate(&mut cpu, &p, &refs, &keys, 0, 0, None)?;
        let (same, total, rows) = agreement(&dev, &host);
        println!("GPU vs CPU reference forward (same sampler), T={t}: {same}/{total} tokens equal, {rows}/{} rows identical", ps.len());
        report.insert(
            format!("gen_t{t}_token_agreement"),
            (same as f64 / total as f64).into(),
        );
        report.insert(
            format!("gen_t{t}_rows_identical"),
            format!("{rows}/{}", ps.len()).into(),
        );
    }
    // 5. Cache windows: with nothing committed in between, a dual (block) and a prefix
    //    (block → end) window step reproduce the full pass's block logits.
    let engine = be.engine_mut();
    let ep = dlm_data::gpu::backend::engine_params(&base, 0, 0);
    let (dual_err, prefix_err) = engine.window_check(&ps, &keys, &ep)?;
    println!("cache windows vs full pass on unchanged tokens: dual rel err {dual_err:.3e}, prefix {prefix_err:.3e}");
    report.insert("window_dual_rel_err".into(), dual_err.into());
    report.insert("window_prefix_rel_err".into(), prefix_err.into());
    // 6. The approximate modes on the tiny teacher: agreement with the exact sampler.
    let exact = be.generate(&job(&base, &refs, &keys)).unwrap()?;
    for (name, p) in [
        (
            "dual",
            SP {
                cache: KvCache::Dual,
                ..base.clone()
            },
        ),
        (
            "prefix",
            SP {
                cache: KvCache::Prefix,
                ..base.clone()
            },
        ),
        (
            "threshold 0.9",
            SP {
                threshold: Some(0.9),
                ..base.clone()
            },
        ),
    ] {
        let a = be.generate(&job(&p, &refs, &keys)).unwrap()?;
        let (same, total, _) = agreement(&a, &exact);
        println!("approximate {name} vs exact (tiny, T=0): {same}/{total} tokens agree");
        report.insert(
            format!("approx_{name}_agreement"),
            (same as f64 / total as f64).into(),
        );
    }
    if let Some(o) = out {
        dlm_data::util::atomic_write(o, serde_json::to_string_pretty(&report)?.as_bytes())?;
    }
    if err > 1e-2 {
        bail!("relative error {err:.3e} exceeds 1e-2");
    }
    if !sampler_ok {
        bail!("the device sampler differs from the host sampler on the same logits");
    }
    if dual_err > 1e-2 || prefix_err > 1e-2 {
        bail!("a cache window differs from the full pass");
    }
    Ok(())
}

/// (tokens equal, tokens, rows identical).
fn agreement(a: &[Vec<u32>], b: &[Vec<u32>]) -> (usize, usize, usize) {
    let same = a
        .iter()
        .zip(b)
        .map(|(x, y)| x.iter().zip(y).filter(|(p, q)| p == q).count())
        .sum();
    let total = a.iter().map(Vec::len).sum();
    let rows = a.iter().zip(b).filter(|(x, y)| x == y).count();
    (same, total, rows)
}

fn bench(
    teacher: &Path,
    batches: &str,
    prompt_len: usize,
    out: Option<&Path>,
    g: &Gen,
) -> Result<()> {
    let t0 = Instant::now();
    let mut e = engine(teacher, g.device, prompt_len + g.gen_length)?;
    eprintln!(
        "loaded {} on {} in {:.1}s",
        teacher.display(),
        e.gpu.name,
        t0.elapsed().as_secs_f64()
    );
    let c = e.cfg.clone();
    let (h, l, v) = (
        c.hidden_size as f64,
        c.num_layers as f64,
        c.vocab_size as f64,
    );
    let hd = c.head_dim as f64;
    let per_layer = h * (c.num_heads as f64 * hd) * 2.0
        + h * (c.num_kv_heads as f64 * hd) * 2.0
        + 3.0 * h * c.intermediate_size as f64;
    let body_params = per_layer * l;
    let mut runs = vec![];
    for b in batches
        .split(',')
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<Vec<_>, _>>()?
    {
        let p = params(&e, g)?;
        let ps = prompts(b, prompt_len, c.vocab_size as u32, p.gen.mask_id, 11, false);
        let keys: Vec<u64> = (0..b)
            .map(|i| rng::prompt_key(&format!("bench-{i}")))
            .collect();
        // Warm-up: one block (kernel cache, cuBLAS heuristics, graph capture path).
        warm_up(&mut e, &ps, &keys, &p)?;
        let t = Instant::now();
        let (toks, steps_run) = e.generate_counted(&ps, &keys, &p)?;
        let secs = t.elapsed().as_secs_f64();
        let (free, total) = e.gpu.mem_info()?;
        let left = toks
            .iter()
            .flatten()
            .filter(|&&t| t == p.gen.mask_id)
            .count();
        let s = (prompt_len + p.gen.gen_length) as f64;
        let bf = b as f64;
        let tokf = step_tokens(&p, prompt_len, steps_run);
        let flops = 2.0 * body_params * bf * tokf
            + 4.0 * bf * tokf * s * h * l
            + 2.0 * h * v * bf * (p.gen.block_length * steps_run) as f64;
        let r = serde_json::json!({
            "mode": mode_name(&p), "batch": b, "seconds": secs, "steps": steps_run,
            "gen_tok_per_s": (b * p.gen.gen_length) as f64 / secs,
            "tflops": flops / secs / 1e12, "masks_left": left,
            "peak_mem_gib": (total - free) as f64 / (1u64 << 30) as f64,
        });
        println!("{r}");
        runs.push(r);
    }
    write_runs(out, &e, runs)
}

/// The bench row's label: dlm-gpu, plus the approximate settings.
fn mode_name(p: &DeviceRun) -> String {
    let mut m = "dlm-gpu".to_string();
    if p.gen.cache != KvCache::None {
        m += &format!(" {}", p.gen.cache.as_str());
    }
    if let Some(k) = p.gen.cache_refresh {
        m += &format!(" refresh {k}");
    }
    if let Some(t) = p.gen.threshold {
        m += &format!(" threshold {t}");
    }
    m
}

/// Positions run through the body over a generation of `steps_run` steps (per prompt): every
/// step a full pass when exact; with a cache, a full pass per block (and per refresh step under
/// `--cache-refresh`: the engine's own `full_pass_at`) and windows otherwise
/// (torch_sampler_ref.py's count for dual). Under `--threshold` the full passes are counted
/// over the scheduled steps (an estimate).
fn step_tokens(p: &DeviceRun, prompt_len: usize, steps_run: usize) -> f64 {
    let s = (prompt_len + p.gen.gen_length) as f64;
    let nb = p.gen.gen_length / p.gen.block_length;
    let per_block = (0..p.gen.steps_per_block())
        .filter(|&i| p.gen.full_pass_at(i))
        .count();
    let full = (nb * per_block).min(steps_run);
    let windows = steps_run.saturating_sub(full) as f64;
    match p.gen.cache {
        KvCache::None => steps_run as f64 * s,
        KvCache::Dual => full as f64 * s + windows * p.gen.block_length as f64,
        KvCache::Prefix => {
            let avg = p.gen.gen_length as f64 - (nb as f64 - 1.0) * p.gen.block_length as f64 / 2.0;
            full as f64 * s + windows * avg
        }
    }
}

/// The approximate modes against the exact sampler on the same prompts (one batch).
fn approx(teacher: &Path, b: usize, prompt_len: usize, out: Option<&Path>, g: &Gen) -> Result<()> {
    let mut e = engine(teacher, g.device, prompt_len + g.gen_length)?;
    let base = params(&e, g)?;
    let ps = prompts(
        b,
        prompt_len,
        e.cfg.vocab_size as u32,
        base.gen.mask_id,
        13,
        false,
    );
    let keys: Vec<u64> = (0..b)
        .map(|i| rng::prompt_key(&format!("approx-{i}")))
        .collect();
    warm_up(&mut e, &ps, &keys, &base)?;
    let mut rows = vec![];
    let mut exact: Option<(Vec<Vec<u32>>, f64)> = None;
    let modes: Vec<(Option<f64>, KvCache)> = vec![
        (None, KvCache::None),
        (None, KvCache::Prefix),
        (None, KvCache::Dual),
        (Some(0.9), KvCache::None),
        (Some(0.9), KvCache::Dual),
        (Some(0.7), KvCache::Dual),
    ];
    for (threshold, cache) in modes {
        let mut p = base.clone();
        p.gen.threshold = threshold;
        p.gen.cache = cache;
        // Warm-up for this mode's graphs (one block), then the measured run.
        warm_up(&mut e, &ps, &keys, &p)?;
        let t = Instant::now();
        let (toks, steps) = e.generate_counted(&ps, &keys, &p)?;
        let secs = t.elapsed().as_secs_f64();
        let (agree, speedup) = match &exact {
            None => {
                exact = Some((toks.clone(), secs));
                (1.0, 1.0)
            }
            Some((x, xs)) => {
                let (same, total, _) = agreement(&toks, x);
                (same as f64 / total as f64, xs / secs)
            }
        };
        let r = serde_json::json!({
            "mode": mode_name(&p), "batch": b, "seconds": secs, "steps": steps,
            "gen_tok_per_s": (b * p.gen.gen_length) as f64 / secs,
            "speedup_vs_exact": speedup, "token_agreement_vs_exact": agree,
        });
        println!("{r}");
        rows.push(r);
    }
    write_runs(out, &e, rows)
}

/// Device milliseconds per op kind of one full step and one dual-window step.
fn profile(
    teacher: &Path,
    b: usize,
    prompt_len: usize,
    hot: f64,
    out: Option<&Path>,
    g: &Gen,
) -> Result<()> {
    let mut e = engine(teacher, g.device, prompt_len + g.gen_length)?;
    let p = params(&e, g)?;
    let mut j = serde_json::Map::new();
    for (name, window) in [("full", false), ("dual_window", true)] {
        let ops = e.profile(b, prompt_len, &p, window, hot)?;
        let total: f64 = ops.iter().map(|o| o.1).sum();
        println!("profile {name} step, batch {b}: {total:.2} ms");
        for (op, ms) in &ops {
            println!("  {op:<14} {ms:8.3} ms  {:5.1} %", 100.0 * ms / total);
        }
        j.insert(
            name.into(),
            serde_json::json!({"total_ms": total, "ops": ops.iter().map(|(o, m)| serde_json::json!([o, m])).collect::<Vec<_>>()}),
        );
    }
    if let Some(o) = out {
        dlm_data::util::atomic_write(o, serde_json::to_string_pretty(&j)?.as_bytes())?;
    }
    Ok(())
}

/// `{"gpu": ..., "runs": [...]}` to `out`, atomically.
fn write_runs(out: Option<&Path>, e: &Engine, runs: Vec<serde_json::Value>) -> Result<()> {
    if let Some(o) = out {
        let j = serde_json::json!({"gpu": e.gpu.name, "runs": runs});
        dlm_data::util::atomic_write(o, serde_json::to_string_pretty(&j)?.as_bytes())?;
    }
    Ok(())
}

/// One block of `p` (kernel load, cuBLAS heuristics, graph capture path) before timing.
fn warm_up(e: &mut Engine, ps: &[Vec<u32>], keys: &[u64], p: &DeviceRun) -> Result<()> {
    let mut w = p.clone();
    w.gen.gen_length = p.gen.block_length;
    w.gen.steps = p.gen.steps_per_block();
    e.generate(ps, keys, &w).map(|_| ())
}

/// `dlm-gpu bench-rows`: fixed batches against continuous batching + early exit, same run.
#[allow(clippy::too_many_arguments)]
fn bench_rows(
    teacher: &Path,
    batch: usize,
    n: usize,
    prompt_len: usize,
    stop_lengths: &Path,
    project: usize,
    out: Option<&Path>,
    g: &Gen,
) -> Result<()> {
    let lens: Vec<usize> = serde_json::from_slice(&std::fs::read(stop_lengths)?)?;
    anyhow::ensure!(!lens.is_empty(), "{}: no lengths", stop_lengths.display());
    let mut e = engine(teacher, g.device, prompt_len + g.gen_length)?;
    let p = params(&e, g)?;
    let c = e.cfg.clone();
    let ps = prompts(n, prompt_len, c.vocab_size as u32, p.gen.mask_id, 11, true);
    let keys: Vec<u64> = (0..n)
        .map(|i| rng::prompt_key(&format!("bench-{i}")))
        .collect();
    let forced: Vec<usize> = (0..n).map(|i| lens[i % lens.len()]).collect();
    warm_up(&mut e, &ps[..batch.min(n)], &keys[..batch.min(n)], &p)?;
    let t = Instant::now();
    let mut fixed_steps = 0;
    for (q, k) in ps.chunks(batch).zip(keys.chunks(batch)) {
        fixed_steps += e.generate_counted(q, k, &p)?.1;
    }
    let fixed = t.elapsed().as_secs_f64();
    let mut pc = p.clone();
    pc.free_rows = p.gen.cache == KvCache::None;
    let t = Instant::now();
    let (rows, steps) = e.generate_rows(
        &ps,
        &keys,
        &pc,
        std::num::NonZeroUsize::new(batch).context("batch 0")?,
        &|_, _| true,
        Some(&forced),
    )?;
    let cont = t.elapsed().as_secs_f64();
    let row_steps: usize = rows.iter().map(|r| r.steps).sum();
    let mean_blocks = rows.iter().map(|r| r.blocks).sum::<usize>() as f64 / n as f64;
    let mut runs = vec![];
    for (name, secs, st) in [
        ("fixed batches", fixed, fixed_steps),
        ("continuous + early exit", cont, steps),
    ] {
        let pps = n as f64 / secs;
        let r = serde_json::json!({
            "mode": mode_name(&p), "schedule": name, "prompts": n, "batch": batch,
            "seconds": secs, "batch_steps": st, "prompts_per_s": pps,
            "gen_tok_per_s": pps * p.gen.gen_length as f64,
            "projected_hours": project as f64 / pps / 3600.0, "project_prompts": project,
        });
        println!("{r}");
        runs.push(r);
    }
    let r = serde_json::json!({
        "speedup": fixed / cont, "mean_forced_len": forced.iter().sum::<usize>() as f64 / n as f64,
        "row_steps": row_steps, "mean_blocks": mean_blocks,
    });
    println!("{r}");
    runs.push(r);
    write_runs(out, &e, runs)
}

/// A sampler job of `p` over `prompts` (pad id 0, no logits shift), as the benches run it.
fn job<'a>(
    p: &'a dlm_data::sampling::GenParams,
    prompts: &'a [&'a [u32]],
    keys: &'a [u64],
) -> dlm_data::teacher::GenJob<'a> {
    dlm_data::teacher::GenJob {
        p,
        prompts,
        keys,
        pad_id: 0,
        logits_shift: 0,
    }
}
