//! Why this exists: one `--features cuda` binary serves CPU and GPU machines (issue 59), so
//! before any file is opened `distill` must know whether the GPU path can run here —
//! `--device cuda` fails at once naming what is missing (exit 2), `--device auto` falls back to
//! the CPU. cudarc panics when a library is missing; this asks without panicking: the driver
//! (libcuda), a device at the ordinal with compute capability 8.0+, cuBLAS and cuBLASLt, and
//! NVRTC unless the kernels for the device's architecture are already in the kernel cache.

use std::panic::{catch_unwind, AssertUnwindSafe};

use cudarc::driver::{result as dr, sys};

/// What the GPU path would use: the device's name and architecture (`sm_90a`).
#[derive(Debug, Clone)]
pub struct Ready {
    pub name: String,
    pub arch: String,
}

/// `Ok` when `--device cuda:ordinal` can open; otherwise one sentence naming what is missing.
pub fn check(ordinal: usize) -> Result<Ready, String> {
    // SAFETY: each only tries dlopen on the library's candidate names.
    if !unsafe { sys::is_culib_present() } {
        return Err(
            "the CUDA driver library libcuda.so.1 is not installed (no NVIDIA driver \
                    on this machine, or it is not on the loader path)"
                .into(),
        );
    }
    let (name, arch) = quiet(|| device(ordinal))
        .unwrap_or_else(|| Err("the CUDA driver library failed to load".into()))?;
    let mut missing = Vec::new();
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        missing.push("libcublas (CUDA 13)");
    }
    if !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
        missing.push("libcublasLt (CUDA 13)");
    }
    let cached = super::nvrtc::cache_dir()
        .join(format!(
            "{}-{arch}.cubin",
            &super::nvrtc::source_hash(&arch)[..16]
        ))
        .is_file();
    if !cached && !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        missing.push("libnvrtc (CUDA 13, compiles the kernels on first use)");
    }
    if !missing.is_empty() {
        return Err(format!(
            "{name} found, but {} cannot be loaded: put the CUDA 13 libraries' directory on \
             LD_LIBRARY_PATH (e.g. pip install nvidia-cublas nvidia-cuda-nvrtc)",
            missing.join(", ")
        ));
    }
    Ok(Ready { name, arch })
}

/// Run `f` with the panic hook silenced (cudarc panics on a missing symbol): None on a panic.
fn quiet<T>(f: impl FnOnce() -> T) -> Option<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = catch_unwind(AssertUnwindSafe(f)).ok();
    std::panic::set_hook(hook);
    r
}

/// The driver initialised, device `ordinal` present with compute capability 8.0+: its name
/// and kernel architecture.
fn device(ordinal: usize) -> Result<(String, String), String> {
    dr::init().map_err(|e| format!("the CUDA driver did not initialise ({e:?}): no usable GPU"))?;
    let n = dr::device::get_count().map_err(|e| format!("cannot count the GPUs ({e:?})"))?;
    if ordinal >= n.max(0) as usize {
        return Err(format!(
            "no GPU {ordinal}: the driver sees {n} (CUDA_VISIBLE_DEVICES={})",
            std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "unset".into())
        ));
    }
    let dev = dr::device::get(ordinal as i32).map_err(|e| format!("GPU {ordinal}: {e:?}"))?;
    let attr = |a| unsafe { dr::device::get_attribute(dev, a) };
    use sys::CUdevice_attribute as A;
    let maj = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .map_err(|e| format!("GPU {ordinal}: {e:?}"))?;
    let min = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        .map_err(|e| format!("GPU {ordinal}: {e:?}"))?;
    if maj < 8 {
        return Err(format!(
            "GPU {ordinal} has compute capability {maj}.{min}; the bf16 tensor-core kernels need 8.0 or newer"
        ));
    }
    let name = dr::device::get_name(dev).unwrap_or_else(|_| format!("GPU {ordinal}"));
    // As Gpu::open: Hopper gets the arch-specific sm_90a target.
    let arch = if (maj, min) == (9, 0) {
        "sm_90a".to_string()
    } else {
        format!("sm_{maj}{min}")
    };
    Ok((name, arch))
}
