//! `make bench-distill`: the block-only sampler against the literal LLaDA loop (LM head,
//! softmax and candidates at every position of the sequence, as the reference computes them),
//! same CPU teacher, same prompts, same run. Prints generated tokens/s of both and the ratio,
//! and checks that both produced the same tokens.
//!
//! Usage: cargo run --example distill_bench [-- --out FILE.json]

#[path = "../tests/teacher_support/llada_ref.rs"]
mod llada_ref;

use std::time::Instant;

use anyhow::Result;
use dlm_data::distill::host_loop::generate;
use dlm_data::fixtures::teacher::{write_teacher, TinyDtype, TinySize, TinyTeacher};
use dlm_data::sampling::rng;
use dlm_data::sampling::GenParams;
use dlm_data::sampling::Remasking;
use dlm_data::teacher::{Teacher, TeacherOptions};

fn main() -> Result<()> {
    let out = std::env::args().skip_while(|a| a != "--out").nth(1);
    let d = tempfile::tempdir()?;
    let dir = d.path().join("teacher");
    let size = TinySize {
        hidden: 256,
        layers: 4,
        heads: 8,
        kv_heads: 2,
        head_dim: 32,
        intermediate: 688,
        min_vocab: 32768,
    };
    write_teacher(
        &dir,
        &TinyTeacher {
            dtype: TinyDtype::F32,
            size,
            ..Default::default()
        },
    )?;
    let t = Teacher::open(&dir, &TeacherOptions::default())?;
    let mut be = t.cpu()?;
    let (batch, prompt_len) = (4usize, 32usize);
    let mut g = dlm_data::util::SplitMix(1);
    let prompts: Vec<Vec<u32>> = (0..batch)
        .map(|_| (0..prompt_len).map(|_| 10 + g.below(900) as u32).collect())
        .collect();
    let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    let keys: Vec<u64> = (0..batch)
        .map(|i| rng::prompt_key(&format!("b{i}")))
        .collect();
    let p = GenParams {
        gen_length: 32,
        block_length: 8,
        steps: 32,
        temperature: 0.0,
        remasking: Remasking::LowConfidence,
        seed: 0,
        mask_id: t.mask_id,
        logits_eos_inf: false,
        confidence_eos_eot_inf: false,
        eos_ids: t.eos_ids.clone(),
        eot_ids: vec![],
        threshold: None,
        cache: dlm_data::sampling::KvCache::None,
        cache_refresh: None,
    };
    // Warm-up (allocator, rayon pool).
    generate(&mut be, &p, &refs[..1], &keys[..1], t.pad_id, 0, None)?;
    let t0 = Instant::now();
    let ours = generate(&mut be, &p, &refs, &keys, t.pad_id, 0, None)?;
    let s_ours = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let (reference, _) = llada_ref::llada_reference(&mut be, &p, &refs, &keys, t.pad_id, 0);
    let s_ref = t0.elapsed().as_secs_f64();
    anyhow::ensure!(ours == reference, "block-only and reference outputs differ");
    let toks = (batch * p.gen_length) as f64;
    let res = serde_json::json!({
        "bench": "distill-cpu: block-only sampler vs literal LLaDA loop (full-sequence logits)",
        "teacher": {"hidden": size.hidden, "layers": size.layers, "heads": size.heads,
            "kv_heads": size.kv_heads, "head_dim": size.head_dim, "intermediate": size.intermediate,
            "vocab": t.config.vocab_size, "dtype": "f32"},
        "batch": batch, "prompt_len": prompt_len, "gen_length": p.gen_length,
        "block_length": p.block_length, "steps": p.steps,
        "ours_seconds": s_ours, "reference_seconds": s_ref,
        "ours_tok_per_s": toks / s_ours, "reference_tok_per_s": toks / s_ref,
        "ratio": s_ref / s_ours,
        "identical_tokens": true,
        "threads": rayon::current_num_threads(),
        "command": "make bench-distill  (cargo run --example distill_bench -- --out bench/results/distill-cpu.json)",
        "machine_load_note": "shared 2-core build machine; compare the ratio, not absolute times",
    });
    println!("{}", serde_json::to_string_pretty(&res)?);
    if let Some(o) = out {
        dlm_data::util::atomic_write(
            std::path::Path::new(&o),
            serde_json::to_string_pretty(&res)?.as_bytes(),
        )?;
    }
    Ok(())
}
