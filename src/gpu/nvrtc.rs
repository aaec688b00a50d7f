//! Kernel sources (`kernels/*.cu`) compiled by NVRTC at first use into a cubin for the GPU's
//! exact architecture, cached on disk by source hash + architecture so later runs load in
//! milliseconds. Compiling to SASS (not PTX) keeps the driver's PTX JIT — and its "PTX newer
//! than the driver" failure mode — out of the picture.
//!
//! Cache: `$DLM_KERNEL_CACHE`, else `$XDG_CACHE_HOME/dlm-data/kernels`, else
//! `~/.cache/dlm-data/kernels`; file `<sha256[..16]>-sm_XY.cubin`, written atomically.

use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use cudarc::nvrtc::{result as nr, sys as ns};

use crate::util;

const COMMON: &str = include_str!("../../kernels/common.cuh");

/// Every kernel file, compiled together into one module (one NVRTC invocation).
pub const SOURCES: &[(&str, &str)] = &[
    ("embed.cu", include_str!("../../kernels/embed.cu")),
    ("norm.cu", include_str!("../../kernels/norm.cu")),
    ("rope.cu", include_str!("../../kernels/rope.cu")),
    ("swiglu.cu", include_str!("../../kernels/swiglu.cu")),
    ("attention.cu", include_str!("../../kernels/attention.cu")),
    (
        "attention_wgmma.cu",
        include_str!("../../kernels/attention_wgmma.cu"),
    ),
    ("sampler.cu", include_str!("../../kernels/sampler.cu")),
];

/// Every `extern "C"` entry point the engine loads; the compile check asserts each exists.
pub const ENTRY_POINTS: &[&str] = &[
    "embed_gather",
    "embed_window",
    "rmsnorm",
    "rmsnorm_block",
    "rmsnorm_rows",
    "gather_block",
    "row_rms",
    "embed_gather_f32",
    "embed_window_f32",
    "rmsnorm_f32",
    "rmsnorm_block_f32",
    "rmsnorm_rows_f32",
    "gather_block_f32",
    "qkv_rope",
    "swiglu",
    "attn_fwd_hd32",
    "attn_fwd_hd64",
    "attn_fwd_hd128",
    "attn_fwd_w8_hd32",
    "attn_fwd_w8_hd64",
    "attn_fwd_w8_hd128",
    "attn_fwd_m2_hd32",
    "attn_fwd_m2_hd64",
    "attn_fwd_m2_hd128",
    "attn_fwd_wg_hd128",
    "attn_fwd_wgs_hd128",
    "attn_fwd_wgs2_hd128",
    "attn_fwd_wgh_hd128",
    "sample_block",
    "commit_topk",
    "advance",
    "letter_head",
    "record_topk",
];

/// The translation unit: the common header, then each file under a `#line` marker so
/// compiler messages name the real file and line.
pub fn translation_unit() -> String {
    let mut s = String::new();
    s.push_str("#line 1 \"common.cuh\"\n");
    s.push_str(COMMON);
    for (name, src) in SOURCES {
        s.push_str(&format!("\n#line 1 \"{name}\"\n"));
        s.push_str(src);
    }
    s
}

fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "--fmad=true".into(),
        "-default-device".into(),
    ]
}

/// The kernels' identity (sha256 of the translation unit, 16 hex digits): recorded in the
/// cuda resume fingerprint, so a run is never resumed by a binary with other kernels.
pub fn kernels_id() -> String {
    util::sha256_hex(translation_unit().as_bytes())[..16].to_string()
}

/// Cache key: sha256 over the NVRTC options and the translation unit.
pub fn source_hash(arch: &str) -> String {
    let mut key = options(arch).join(" ");
    key.push('\n');
    key.push_str(&translation_unit());
    util::sha256_hex(key.as_bytes())
}

pub fn cache_dir() -> PathBuf {
    if let Some(d) = crate::gpu::tuning::kernel_cache() {
        return d;
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("dlm-data").join("kernels")
}

/// NVRTC's version, e.g. (13, 0); fails with a clear message when libnvrtc cannot be loaded.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    let r = std::panic::catch_unwind(|| {
        let (mut maj, mut min) = (0, 0);
        let st = unsafe { ns::nvrtcVersion(&mut maj, &mut min) };
        (st, maj, min)
    })
    .map_err(|_| anyhow!("cannot load libnvrtc (CUDA 13): put its directory on LD_LIBRARY_PATH"))?;
    r.0.result().map_err(|e| anyhow!("nvrtcVersion: {e:?}"))?;
    Ok((r.1, r.2))
}

/// Compile the kernels for `arch` (e.g. "sm_90") and return the cubin bytes. No GPU needed.
pub fn compile(arch: &str) -> Result<Vec<u8>> {
    Ok(compile_with_log(arch, &[])?.0)
}

/// Per-kernel resource usage from ptxas (`--ptxas-options=-v`): entry point → (registers,
/// spill store bytes + spill load bytes). The wgmma attention relies on ≤ 128 registers (two
/// CTAs per SM); the offline tests check it without a GPU.
pub fn resource_usage(arch: &str) -> Result<std::collections::BTreeMap<String, (u32, u32)>> {
    let (_, log) = compile_with_log(arch, &["--ptxas-options=-v".to_string()])?;
    let mut out = std::collections::BTreeMap::new();
    let mut cur: Option<String> = None;
    let mut spill = 0u32;
    let num_before = |l: &str, key: &str| -> Option<u32> {
        let i = l.find(key)?;
        l[..i].split_whitespace().last()?.parse().ok()
    };
    for l in log.lines() {
        if let Some(i) = l.find("Compiling entry function '") {
            let rest = &l[i + "Compiling entry function '".len()..];
            cur = rest.split('\'').next().map(str::to_string);
            spill = 0;
        } else if l.contains("bytes spill stores") {
            spill = num_before(l, "bytes spill stores").unwrap_or(0)
                + num_before(l, "bytes spill loads").unwrap_or(0);
        } else if let (Some(name), Some(regs)) = (cur.as_ref(), num_before(l, "registers")) {
            out.insert(name.clone(), (regs, spill));
            cur = None;
        }
    }
    if out.is_empty() {
        bail!("no ptxas resource lines in the NVRTC log for {arch}:\n{log}");
    }
    Ok(out)
}

/// [`compile`] with extra NVRTC options; also returns the compiler log.
pub fn compile_with_log(arch: &str, extra: &[String]) -> Result<(Vec<u8>, String)> {
    nvrtc_version()?;
    let src = CString::new(translation_unit()).expect("kernel source has no NUL");
    let name = CString::new("dlm_kernels.cu").unwrap();
    let prog = nr::create_program(&src, Some(&name)).map_err(|e| anyhow!("nvrtc: {e:?}"))?;
    let mut opts = options(arch);
    opts.extend(extra.iter().cloned());
    let res = unsafe { nr::compile_program(prog, &opts) };
    let log = unsafe { nr::get_program_log(prog) }
        .map(|l| {
            unsafe { CStr::from_ptr(l.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    if let Err(e) = res {
        unsafe {
            let _ = nr::destroy_program(prog);
        }
        bail!("NVRTC failed to compile kernels/*.cu for {arch} ({e:?}):\n{log}");
    }
    let mut size = 0usize;
    let cubin = unsafe {
        ns::nvrtcGetCUBINSize(prog, &mut size)
            .result()
            .map_err(|e| anyhow!("nvrtcGetCUBINSize: {e:?}"))?;
        let mut buf = vec![0u8; size];
        ns::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char)
            .result()
            .map_err(|e| anyhow!("nvrtcGetCUBIN: {e:?}"))?;
        let _ = nr::destroy_program(prog);
        buf
    };
    if cubin.is_empty() {
        bail!("NVRTC produced an empty cubin for {arch}");
    }
    if !log.trim().is_empty() {
        tracing::debug!("nvrtc log:\n{log}");
    }
    Ok((cubin, log))
}

/// The cubin for `arch`, from the on-disk cache or compiled (and cached) now.
pub fn cubin_cached(arch: &str) -> Result<Vec<u8>> {
    let path = cache_dir().join(format!("{}-{arch}.cubin", &source_hash(arch)[..16]));
    if let Ok(bytes) = std::fs::read(&path) {
        if !bytes.is_empty() {
            return Ok(bytes);
        }
    }
    let t = std::time::Instant::now();
    let cubin = compile(arch)?;
    tracing::info!(
        "compiled GPU kernels for {arch} in {:.1}s (cached at {})",
        t.elapsed().as_secs_f64(),
        path.display()
    );
    if let Err(e) = util::atomic_write(&path, &cubin).context("caching the compiled kernels") {
        tracing::warn!("{e:#}");
    }
    Ok(cubin)
}
