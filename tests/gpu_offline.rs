//! The GPU teacher's checks that need no GPU (run by `make gpu-check` in CI):
//! - every kernel in kernels/*.cu compiles with NVRTC 13.0 (the PyPI wheel, LD_LIBRARY_PATH set
//!   by the make target) into an sm_90 cubin holding every entry point the engine loads, and
//!   the on-disk kernel cache round-trips;
//! - the schedule, the checkpoint validation and the CPU reference model the device parity
//!   run compares against (bidirectional, left-padding invariant).
#![cfg(feature = "cuda")]

use dlm_data::gpu::engine::DeviceRun;
use dlm_data::gpu::engine::KvCache;
use dlm_data::gpu::nvrtc;
use dlm_data::gpu::reference::{self, CpuModel};
use dlm_data::gpu::weights::{self, Weights};

#[test]
fn kernels_compile_for_sm90_with_every_entry_point() {
    let (maj, min) =
        nvrtc::nvrtc_version().expect("libnvrtc 13 must be loadable (run `make gpu-check`)");
    assert_eq!(
        maj, 13,
        "NVRTC {maj}.{min}: pin 13.0, the device driver rejects newer code"
    );
    // sm_90a too: the arch-specific target that wgmma / setmaxnreg kernels will need.
    for arch in ["sm_90", "sm_90a"] {
        let cubin = nvrtc::compile(arch).unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF", "a cubin is an ELF image");
        let hay = String::from_utf8_lossy(&cubin);
        for e in nvrtc::ENTRY_POINTS {
            assert!(
                hay.contains(e),
                "entry point {e} missing from the {arch} cubin"
            );
        }
    }
}

#[test]
fn kernel_cache_is_keyed_by_source_and_arch() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("DLM_KERNEL_CACHE", dir.path());
    assert_ne!(nvrtc::source_hash("sm_90"), nvrtc::source_hash("sm_80"));
    let a = nvrtc::cubin_cached("sm_90").unwrap();
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.ends_with("-sm_90.cubin"), "{name}");
    assert!(name.starts_with(&nvrtc::source_hash("sm_90")[..16]));
    // A second call is served from the cache (same bytes, even if the file is the only source).
    let b = nvrtc::cubin_cached("sm_90").unwrap();
    assert_eq!(a, b);
}

fn params(gen: usize, blk: usize, steps: usize) -> DeviceRun {
    let sp = dlm_data::sampling::GenParams {
        gen_length: gen,
        block_length: blk,
        steps,
        temperature: 0.0,
        remasking: dlm_data::sampling::Remasking::LowConfidence,
        seed: 0,
        mask_id: 999,
        logits_eos_inf: false,
        confidence_eos_eot_inf: false,
        eos_ids: vec![],
        eot_ids: vec![],
        threshold: None,
        cache: KvCache::None,
        cache_refresh: None,
    };
    DeviceRun::new(sp, 0, 0)
}

#[test]
fn linear_schedule_gives_the_remainder_to_the_earliest_steps() {
    assert_eq!(params(256, 32, 64).num_transfer(), vec![4; 8]);
    assert_eq!(params(256, 32, 256).num_transfer(), vec![1; 32]);
    assert_eq!(params(20, 10, 8).num_transfer(), vec![3, 3, 2, 2]);
    // More steps than tokens: some steps commit nothing.
    assert_eq!(params(4, 2, 8).num_transfer(), vec![1, 1, 0, 0]);
    assert!(params(256, 30, 256).validate().is_err());
    assert!(params(256, 32, 100).validate().is_err());
    let mut p = params(64, 32, 64);
    p.pad_id = p.gen.mask_id;
    assert!(p.validate().unwrap_err().to_string().contains("pad id"));
}

fn tiny(dir: &std::path::Path) {
    reference::write_random_teacher(dir, &reference::tiny_config(), 1).unwrap();
}

#[test]
fn checkpoint_errors_name_the_tensor() {
    // The engine loads through the teacher's parser and checks (gpu::weights::open), plus the
    // GPU kernels' own limits.
    let d = tempfile::tempdir().unwrap();
    tiny(d.path());
    let (cfg, _) = weights::open(d.path()).unwrap();
    let mut wrong = cfg.clone();
    wrong.intermediate_size = 256;
    let e = format!("{:#}", Weights::open(d.path(), &wrong).err().unwrap());
    assert!(
        e.contains("model.layers.0.mlp.gate_proj.weight") && e.contains("[512, 256]"),
        "{e}"
    );
    let mut deeper = cfg.clone();
    deeper.num_layers = 3;
    let e = format!("{:#}", Weights::open(d.path(), &deeper).err().unwrap());
    assert!(
        e.contains("model.layers.2.input_layernorm.weight") && e.contains("missing"),
        "{e}"
    );
    let mut c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("config.json")).unwrap())
            .unwrap();
    c["head_dim"] = 48.into();
    std::fs::write(d.path().join("config.json"), c.to_string()).unwrap();
    let e = format!("{:#}", weights::open(d.path()).err().unwrap());
    assert!(
        e.contains("head_dim 48") && e.contains("config.json"),
        "{e}"
    );
}

#[test]
fn reference_model_is_bidirectional_and_left_padding_invariant() {
    let d = tempfile::tempdir().unwrap();
    tiny(d.path());
    let m = CpuModel::load(d.path()).unwrap();
    let seq: Vec<u32> = (0..12).map(|i| 3 + i * 17).collect();
    let base = m.logits(&seq, 0, &[0, 11]);
    // A later token changes the first position's logits (no causal mask).
    let mut s2 = seq.clone();
    s2[11] = 5;
    let changed = m.logits(&s2, 0, &[0]);
    assert!(base[0]
        .iter()
        .zip(&changed[0])
        .any(|(a, b)| (a - b).abs() > 1e-4));
    // Left padding (masked keys, positions counted among real tokens) changes nothing.
    let mut padded = vec![7u32; 5];
    padded.extend_from_slice(&seq);
    let p = m.logits(&padded, 5, &[5, 16]);
    for (a, b) in base.iter().zip(&p) {
        let err = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(err < 1e-4, "padding changed logits by {err}");
    }
}

#[test]
fn reference_backend_drives_the_distill_sampler() {
    use dlm_data::distill::host_loop;
    use dlm_data::sampling::GenParams as SP;
    let d = tempfile::tempdir().unwrap();
    tiny(d.path());
    let mut m = CpuModel::load(d.path()).unwrap();
    let p = SP {
        gen_length: 8,
        block_length: 4,
        steps: 4,
        temperature: 0.0,
        remasking: dlm_data::sampling::Remasking::LowConfidence,
        seed: 0,
        mask_id: 999,
        logits_eos_inf: false,
        confidence_eos_eot_inf: false,
        eos_ids: vec![2],
        eot_ids: vec![],
        threshold: None,
        cache: dlm_data::sampling::KvCache::None,
        cache_refresh: None,
    };
    let prompts: [&[u32]; 2] = [&[10, 20, 30], &[7]];
    let out = host_loop::generate(&mut m, &p, &prompts, &[1, 2], 0, 0, None).unwrap();
    assert_eq!(out.len(), 2);
    for row in &out {
        assert_eq!(row.len(), 8);
        assert!(!row.contains(&999), "{row:?}");
    }
    assert_eq!(
        out,
        host_loop::generate(&mut m, &p, &prompts, &[1, 2], 0, 0, None).unwrap()
    );
}

#[test]
fn engine_params_carry_the_cpu_sampler_exclusions() {
    use dlm_data::gpu::backend::engine_params;
    use dlm_data::sampling::{GenParams as SP, KvCache, Remasking};
    let mut p = SP {
        gen_length: 64,
        block_length: 32,
        steps: 64,
        temperature: 0.0,
        remasking: Remasking::LowConfidence,
        seed: 3,
        mask_id: 999,
        logits_eos_inf: false,
        confidence_eos_eot_inf: false,
        eos_ids: vec![2, 5, 2],
        eot_ids: vec![7, 5, 999],
        threshold: None,
        cache: KvCache::None,
        cache_refresh: None,
    };
    let e = engine_params(&p, 0, 0);
    assert!(e.ban_choice().is_empty() && e.ban_conf().is_empty());
    assert_eq!(e.gen.cache, KvCache::None);
    p.logits_eos_inf = true;
    let e = engine_params(&p, 0, 0);
    assert_eq!(e.ban_choice(), vec![2, 5]);
    assert!(e.ban_conf().is_empty());
    p.confidence_eos_eot_inf = true;
    let e = engine_params(&p, 0, 0);
    assert_eq!((e.ban_choice(), e.ban_conf()), (vec![2, 5], vec![7]));
    p.logits_eos_inf = false;
    p.threshold = Some(0.9);
    p.cache = KvCache::Dual;
    let e = engine_params(&p, 1, 0);
    assert_eq!((e.ban_choice(), e.ban_conf()), (vec![], vec![2, 5, 7]));
    assert_eq!(
        (e.gen.threshold, e.gen.cache, e.pad_id),
        (Some(0.9), KvCache::Dual, 1)
    );
    e.validate().unwrap();
    // --cache-refresh K: full passes at a block's steps 0, K, 2K, ...; none between.
    assert_eq!(e.gen.cache_refresh, None);
    assert!(e.gen.full_pass_at(0) && !(1..300).any(|i| e.gen.full_pass_at(i)));
    p.cache_refresh = Some(4);
    let e = engine_params(&p, 1, 0);
    e.validate().unwrap();
    let full: Vec<usize> = (0..13).filter(|&i| e.gen.full_pass_at(i)).collect();
    assert_eq!(full, vec![0, 4, 8, 12]);
    p.cache_refresh = Some(0);
    assert!(engine_params(&p, 1, 0).validate().is_err());
    p.cache_refresh = None;
    p.cache = KvCache::None;
    assert!((0..9).all(|i| engine_params(&p, 1, 0).gen.full_pass_at(i)));
    p.cache = KvCache::Dual;
    // Cache modes need logits shift 0; threshold needs low-confidence remasking.
    assert!(engine_params(&p, 1, 1).validate().is_err());
    p.cache = KvCache::None;
    p.remasking = Remasking::Random;
    assert!(engine_params(&p, 1, 0).validate().is_err());
}

#[test]
fn head_scale_makes_the_parity_teacher_peaked() {
    let mean_top = |scale: f64| {
        let d = tempfile::tempdir().unwrap();
        reference::write_random_teacher_scaled(d.path(), &reference::tiny_config(), 1, scale)
            .unwrap();
        let m = CpuModel::load(d.path()).unwrap();
        let seq: Vec<u32> = (0..24).map(|i| 3 + i * 37 % 990).collect();
        let rows = m.logits(&seq, 0, &(0..24).collect::<Vec<_>>());
        let tops: Vec<f64> = rows
            .iter()
            .map(|r| {
                let mx = r.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
                let z: f64 = r.iter().map(|&x| (x as f64 - mx).exp()).sum();
                1.0 / z
            })
            .collect();
        tops.iter().sum::<f64>() / tops.len() as f64
    };
    let (flat, peaked) = (mean_top(1.0), mean_top(8.0));
    eprintln!("mean top-1 probability: scale 1 {flat:.4}, scale 8 {peaked:.4}");
    assert!(flat < 0.1, "default teacher top-1 probability {flat}");
    assert!(peaked > 0.5, "scaled teacher top-1 probability {peaked}");
}

#[test]
fn folded_norm_weights_scale_each_column_by_gamma() {
    // W is 2 x 3 (rows of the hidden size 3); γ scales column k.
    let w: Vec<f32> = vec![1.0, 2.0, -3.0, 0.5, 0.25, 8.0];
    let bytes: Vec<u8> = w
        .iter()
        .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
        .collect();
    let gamma = [2.0f32, 0.5, 1.5];
    let out: Vec<f32> = weights::fold_gamma(&bytes, &gamma)
        .chunks_exact(2)
        .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    assert_eq!(out, vec![2.0, 1.0, -4.5, 1.0, 0.125, 12.0]);
    // x·W'ᵀ / rms(x) equals RMSNorm(x)·Wᵀ (exact here: every value is a short binary fraction).
    let x = [1.0f32, -1.0, 2.0];
    let r = 1.0 / ((x.iter().map(|v| v * v).sum::<f32>() / 3.0).sqrt());
    for n in 0..2 {
        let folded: f32 = (0..3).map(|k| x[k] * out[n * 3 + k]).sum::<f32>() * r;
        let plain: f32 = (0..3).map(|k| x[k] * r * gamma[k] * w[n * 3 + k]).sum();
        assert!((folded - plain).abs() < 1e-5, "{folded} vs {plain}");
    }
}

/// `--gemm-tune`'s plans file: round trip, another GPU's file not reused, a bad file refused
/// with its name.
#[test]
fn gemm_plans_round_trip_and_refusals() {
    use dlm_data::gpu::gemm_plans::GemmPlans;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("gemm-plans.json");
    let mut p = GemmPlans::new("NVIDIA H200", 130100);
    p.plans.insert(
        "32768x12288x2048 ldx2048 ldy12288 Bf16".into(),
        [u64::MAX, 1, 2, 3, 4, 5, 6, 0x0001_fc34_0000_0001],
    );
    p.plans
        .insert("2048x2048x6144 ldx6144 ldy2048 Bf16 acc".into(), [7; 8]);
    p.save(&f).unwrap();
    // Full 64-bit words survive (JSON numbers would not: they are written as hex strings).
    assert_eq!(
        GemmPlans::load(&f, "NVIDIA H200", 130100).unwrap(),
        Some(p.clone())
    );
    assert_eq!(
        GemmPlans::load(&f, "NVIDIA H100 80GB HBM3", 130100).unwrap(),
        None
    );
    assert_eq!(GemmPlans::load(&f, "NVIDIA H200", 130200).unwrap(), None);
    let text = std::fs::read_to_string(&f).unwrap();
    std::fs::write(&f, text.replacen("\"0000000000000007\"", "\"xyz\"", 1)).unwrap();
    let e = format!(
        "{:#}",
        GemmPlans::load(&f, "NVIDIA H200", 130100).unwrap_err()
    );
    assert!(
        e.contains("gemm-plans.json") && e.contains("not 8 hexadecimal words"),
        "{e}"
    );
    std::fs::write(&f, "{\"plans\": {}}").unwrap();
    let e = format!(
        "{:#}",
        GemmPlans::load(&f, "NVIDIA H200", 130100).unwrap_err()
    );
    assert!(e.contains("expected"), "{e}");
}

/// The wgmma attention's occupancy design holds in the compiled code: the Q-in-shared-memory
/// kernels fit 128 registers (two 256-thread CTAs fill the register file) without spills, and
/// their shared memory lets two CTAs share an SM (228 KB, 1 KB reserved per CTA).
#[test]
fn wgmma_attention_fits_two_ctas_per_sm_without_spills() {
    use dlm_data::gpu::engine::AttnVariant;
    let usage = nvrtc::resource_usage("sm_90a").unwrap();
    for k in [
        "attn_fwd_wgs_hd128",
        "attn_fwd_wgs2_hd128",
        "attn_fwd_wgh_hd128",
    ] {
        let (regs, spill) = usage
            .get(k)
            .copied()
            .unwrap_or_else(|| panic!("{k} missing from the ptxas report"));
        assert!(regs <= 128, "{k}: {regs} registers > 128");
        assert_eq!(spill, 0, "{k}: {spill} bytes of spills");
    }
    let (_, spill) = usage["attn_fwd_wg_hd128"];
    assert_eq!(spill, 0, "attn_fwd_wg_hd128 spills");
    for v in [AttnVariant::Wgs, AttnVariant::Wgs2] {
        assert!(2 * (v.smem_bytes(128) + 1024) <= 228 * 1024, "{v:?}");
    }
    assert!(AttnVariant::Wgh.smem_bytes(128) <= 227 * 1024);
}
