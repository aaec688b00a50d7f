//! `dlm-gpu`: the GPU engine's parity and speed harness for the device machine (built with
//! `--features cuda`; staged by bench/gpu/stage.sh, run by bench/gpu/run.sh).
//!
//! - `tiny --out DIR`: writes the tiny random teacher (HF layout).
//! - `parity-tiny --teacher DIR`: GPU logits vs the CPU reference (relative error) and
//!   temperature-0 (and temperature-1) generations token for token; exits 1 on a mismatch.
//! - `logits --teacher DIR --prompts F --out F.npy`: fp32 logits of the last block of
//!   prompt + all-masked generation (for the PyTorch comparison).
//! - `generate --teacher DIR --prompts F --out F.json`: sampler output for given prompts.
//! - `bench --teacher DIR --batches 1,16,64`: generated tokens/s, model TFLOP/s, memory.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use dlm_data::distill::rng;
use dlm_data::gpu::engine::{Engine, GenParams};
use dlm_data::gpu::reference::{self, CpuModel};

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
    logits_shift: usize,
    #[arg(long, default_value_t = 0)]
    device: usize,
}

#[derive(Subcommand)]
enum Cmd {
    Tiny {
        #[arg(long)]
        out: PathBuf,
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
}

fn mask_id(e: &Engine) -> u32 {
    e.cfg.mask_token_id.unwrap_or(e.cfg.vocab_size as u32 - 1)
}

fn params(e: &Engine, g: &Gen) -> GenParams {
    let mask = mask_id(e);
    GenParams {
        gen_length: g.gen_length,
        block_length: g.block_length,
        steps: g.steps,
        temperature: g.temperature,
        remask_random: false,
        seed: g.seed,
        mask_id: mask,
        pad_id: if mask == 0 { 1 } else { 0 },
        logits_shift: g.logits_shift,
    }
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
        Cmd::Tiny { out } => reference::write_random_teacher(&out, &reference::tiny_config(), 1),
        Cmd::ParityTiny { teacher, out } => parity_tiny(&teacher, out.as_deref()),
        Cmd::Logits {
            teacher,
            prompts,
            out,
            g,
        } => {
            let ps = read_prompts(&prompts)?;
            let lp = ps.iter().map(|p| p.len()).max().unwrap_or(0);
            let s = lp + g.gen_length;
            let mut e = Engine::load(&teacher, g.device, s)?;
            let p = params(&e, &g);
            let (mut seqs, mut pads) = (vec![], vec![]);
            for q in &ps {
                let mut row = vec![p.pad_id; lp - q.len()];
                row.extend_from_slice(q);
                row.resize(s, p.mask_id);
                pads.push(lp - q.len());
                seqs.push(row);
            }
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
            let mut e = Engine::load(&teacher, g.device, lp + g.gen_length)?;
            let p = params(&e, &g);
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
    }
}

fn parity_tiny(teacher: &Path, out: Option<&Path>) -> Result<()> {
    let cpu = CpuModel::load(teacher)?;
    let mut gpu = Engine::load(teacher, 0, 512)?;
    let v = gpu.cfg.vocab_size as u32;
    let mask = mask_id(&gpu);
    let mut report = serde_json::Map::new();
    report.insert("gpu".into(), gpu.gpu.name.clone().into());
    // 1. Logits at every position of a left-padded batch with masked tails.
    let ps = prompts(5, 70, v, mask, 3, true);
    let gen = 64;
    let lp = ps.iter().map(|p| p.len()).max().unwrap();
    let s = lp + gen;
    let (mut seqs, mut pads) = (vec![], vec![]);
    for q in &ps {
        let mut row = vec![0u32; lp - q.len()];
        row.extend_from_slice(q);
        row.resize(s, mask);
        pads.push(lp - q.len());
        seqs.push(row);
    }
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
    // 2. Letter head vs the CPU logits.
    let letters: Vec<Vec<u32>> = at.iter().map(|_| vec![10, 11, 12, 13]).collect();
    let lh = gpu.letters_at(&seqs, &pads, &at[..4], &letters[..4])?;
    for (k, (lp_raw, pr)) in lh.iter().enumerate() {
        let row = &cl[k * v as usize..(k + 1) * v as usize];
        let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f32>().ln();
        let ll: Vec<f32> = letters[k].iter().map(|&t| row[t as usize]).collect();
        let lm = ll.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let z: f32 = ll.iter().map(|x| (x - lm).exp()).sum();
        for i in 0..4 {
            let (want_lp, want_p) = (ll[i] - lse, (ll[i] - lm).exp() / z);
            if (lp_raw[i] - want_lp).abs() > 2e-2 || (pr[i] - want_p).abs() > 1e-2 {
                bail!(
                    "letter head row {k} letter {i}: GPU ({}, {}) vs CPU ({want_lp}, {want_p})",
                    lp_raw[i],
                    pr[i]
                );
            }
        }
    }
    println!("tiny letter head: log-probs and renormalised probabilities match the CPU");
    // 3. Generations, token for token.
    let mut sampler_ok = true;
    let keys: Vec<u64> = (0..ps.len())
        .map(|i| rng::prompt_key(&format!("tiny-{i}")))
        .collect();
    for temperature in [0.0, 1.0] {
        let p = GenParams {
            gen_length: 64,
            block_length: 16,
            steps: 32,
            temperature,
            remask_random: false,
            seed: 5,
            mask_id: mask,
            pad_id: 0,
            logits_shift: 0,
        };
        let g = gpu.generate(&ps, &keys, &p)?;
        // The on-device sampler vs the host sampler fed the GPU's own logits (same kernels and
        // GEMM shapes, so the same logits): isolates the sampler kernels exactly.
        let h = host_sampled(&mut gpu, &ps, &keys, &p)?;
        let hs: usize = h
            .iter()
            .zip(&g)
            .map(|(a, b)| a.iter().zip(b).filter(|(x, y)| x == y).count())
            .sum();
        let hrows = h.iter().zip(&g).filter(|(a, b)| a == b).count();
        println!("tiny generate T={temperature}: device sampler vs host sampler on GPU logits: {hs}/{} tokens, {hrows}/{} rows identical", ps.len() * p.gen_length, ps.len());
        report.insert(
            format!("gen_t{temperature}_sampler_vs_host_rows_identical"),
            format!("{hrows}/{}", ps.len()).into(),
        );
        sampler_ok &= hrows == ps.len();
        let mut same = 0usize;
        let mut total = 0usize;
        let mut rows_equal = 0usize;
        for (i, q) in ps.iter().enumerate() {
            let c = cpu.generate(q, lp, keys[i], &p);
            same += c.iter().zip(&g[i]).filter(|(a, b)| a == b).count();
            total += c.len();
            rows_equal += usize::from(c == g[i]);
        }
        println!(
            "tiny generate T={temperature}: {same}/{total} tokens equal, {rows_equal}/{} rows identical",
            ps.len()
        );
        report.insert(
            format!("gen_t{temperature}_token_agreement"),
            (same as f64 / total as f64).into(),
        );
        report.insert(
            format!("gen_t{temperature}_rows_identical"),
            format!("{rows_equal}/{}", ps.len()).into(),
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
    Ok(())
}

/// LLaDA's loop on the host, with the GPU engine as the forward (block rows only).
fn host_sampled(
    gpu: &mut Engine,
    ps: &[Vec<u32>],
    keys: &[u64],
    p: &GenParams,
) -> Result<Vec<Vec<u32>>> {
    let lp = ps.iter().map(|q| q.len()).max().unwrap_or(0);
    let s = lp + p.gen_length;
    let (mut seqs, mut pads) = (vec![], vec![]);
    for q in ps {
        let mut row = vec![p.pad_id; lp - q.len()];
        row.extend_from_slice(q);
        row.resize(s, p.mask_id);
        pads.push(lp - q.len());
        seqs.push(row);
    }
    let (blk, spb, v) = (p.block_length, p.steps_per_block(), gpu.cfg.vocab_size);
    let nt = p.num_transfer();
    for b in 0..p.gen_length / blk {
        let s0 = lp + b * blk;
        for i in 0..spb {
            let at: Vec<(usize, usize)> = (0..ps.len())
                .flat_map(|r| (0..blk).map(move |j| (r, s0 + j - p.logits_shift)))
                .collect();
            let l = gpu.logits_at(&seqs, &pads, &at)?;
            for (r, row) in seqs.iter_mut().enumerate() {
                reference::select_step(
                    p,
                    &l[r * blk * v..(r + 1) * blk * v],
                    v,
                    &mut row[s0..s0 + blk],
                    nt[i] as usize,
                    keys[r],
                    (b * spb + i) as u64,
                    b * blk,
                );
            }
        }
    }
    Ok(seqs.iter().map(|r| r[lp..].to_vec()).collect())
}

fn bench(
    teacher: &Path,
    batches: &str,
    prompt_len: usize,
    out: Option<&Path>,
    g: &Gen,
) -> Result<()> {
    let t0 = Instant::now();
    let mut e = Engine::load(teacher, g.device, prompt_len + g.gen_length)?;
    eprintln!(
        "loaded {} on {} in {:.1}s",
        teacher.display(),
        e.gpu.name,
        t0.elapsed().as_secs_f64()
    );
    let c = e.cfg.clone();
    let (h, l, v) = (
        c.hidden_size as f64,
        c.num_hidden_layers as f64,
        c.vocab_size as f64,
    );
    let hd = c.head_dim() as f64;
    let per_layer = h * (c.num_attention_heads as f64 * hd) * 2.0
        + h * (c.kv_heads() as f64 * hd) * 2.0
        + 3.0 * h * c.intermediate_size as f64;
    let body_params = per_layer * l;
    let mut runs = vec![];
    for b in batches
        .split(',')
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<Vec<_>, _>>()?
    {
        let p = params(&e, g);
        let ps = prompts(b, prompt_len, c.vocab_size as u32, p.mask_id, 11, false);
        let keys: Vec<u64> = (0..b)
            .map(|i| rng::prompt_key(&format!("bench-{i}")))
            .collect();
        // Warm-up: one block (kernel cache, cuBLAS heuristics, graph capture path).
        let mut w = p.clone();
        w.gen_length = p.block_length;
        w.steps = p.steps_per_block();
        e.generate(&ps, &keys, &w)?;
        let t = Instant::now();
        let toks = e.generate(&ps, &keys, &p)?;
        let secs = t.elapsed().as_secs_f64();
        let (free, total) = e.gpu.mem_info()?;
        let left = toks.iter().flatten().filter(|&&t| t == p.mask_id).count();
        let s = (prompt_len + p.gen_length) as f64;
        let bf = b as f64;
        let flops = p.steps as f64
            * (2.0 * body_params * bf * s
                + 4.0 * bf * s * s * h * l
                + 2.0 * h * v * bf * p.block_length as f64);
        let r = serde_json::json!({
            "mode": "dlm-gpu", "batch": b, "seconds": secs,
            "gen_tok_per_s": (b * p.gen_length) as f64 / secs,
            "tflops": flops / secs / 1e12, "masks_left": left,
            "peak_mem_gib": (total - free) as f64 / (1u64 << 30) as f64,
        });
        println!("{r}");
        runs.push(r);
    }
    if let Some(o) = out {
        let j = serde_json::json!({"gpu": e.gpu.name, "runs": runs});
        dlm_data::util::atomic_write(o, serde_json::to_string_pretty(&j)?.as_bytes())?;
    }
    Ok(())
}
