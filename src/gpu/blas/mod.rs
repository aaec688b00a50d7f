//! bf16 GEMMs through cuBLAS (tensor cores, fp32 accumulation) for the row-major activations
//! and PyTorch-layout weights of the engine: `Y[T,N] (+)= X[T,K] · W[N,K]ᵀ`.
//!
//! The output may be bf16 or fp32; with `accumulate` the GEMM adds into `Y` (beta = 1, in fp32
//! before the one rounding to Y's type), which is how the residual add is fused into the
//! o_proj and down_proj GEMMs.
//! A fixed workspace is set on the handle so the GEMMs can be captured in a CUDA graph.
//!
//! Tuned (`distill --gemm-tune`, or `DLM_GEMM_TUNE=1` for the bench harness): each distinct
//! GEMM goes through cuBLASLt instead, with the fastest of cuBLASLt's heuristic candidates,
//! timed on the device the first time the shape is seen outside a graph capture (a shape first
//! seen while capturing gets the top heuristic and is tuned afterwards:
//! [`Blas::tune_pending`], then the caller captures again). Different kernels round
//! differently, so the choices can be saved to a plans file and reloaded: a resumed distill
//! runs the same kernels and writes the same bytes.

use std::cell::RefCell;
use std::ffi::c_void;

use anyhow::{anyhow, Result};
use cudarc::cublas::sys as bs;
use cudarc::driver::sys as ds;

use super::driver::{DevBuf, Gpu};

mod tune;
use tune::{Shape, Tuner};

pub struct Blas {
    handle: bs::cublasHandle_t,
    workspace: DevBuf,
    stream: ds::CUstream,
    /// cuBLASLt plans by shape (`DLM_GEMM_TUNE=1`), else None.
    tune: Option<RefCell<Tuner>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum OutType {
    Bf16,
    F32,
}

fn ok(st: bs::cublasStatus_t, what: &str) -> Result<()> {
    if st == bs::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(anyhow!("cuBLAS {what} failed: {st:?}"))
    }
}

impl Blas {
    pub fn new(gpu: &Gpu) -> Result<Self> {
        let mut handle = std::ptr::null_mut();
        let st = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
            bs::cublasCreate_v2(&mut handle)
        }))
        .map_err(|_| {
            anyhow!("cannot load libcublas (CUDA 13): put its directory on LD_LIBRARY_PATH")
        })?;
        ok(st, "create")?;
        unsafe {
            ok(
                bs::cublasSetStream_v2(handle, gpu.stream as _),
                "set stream",
            )?;
        }
        let ws = gpu.alloc(64 << 20)?;
        unsafe {
            ok(
                bs::cublasSetWorkspace_v2(handle, ws.ptr as *mut c_void, ws.bytes),
                "set workspace",
            )?;
        }
        let mut b = Self {
            handle,
            workspace: ws,
            stream: gpu.stream as _,
            tune: None,
        };
        if crate::gpu::tuning::gemm_tune() {
            b.enable_tuning(&gpu.name, None)?;
        }
        Ok(b)
    }

    /// `Y[T,N] = X[T,K] · W[N,K]ᵀ` (or `+=` with `accumulate`).
    /// Leading dimensions: X rows are `ldx` elements apart, Y rows `ldy`.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        x: u64,
        ldx: usize,
        w: u64,
        y: u64,
        ldy: usize,
        out: OutType,
        t: usize,
        n: usize,
        k: usize,
        accumulate: bool,
    ) -> Result<()> {
        if self.tune.is_some() {
            let sh = Shape {
                t,
                n,
                k,
                ldx,
                ldy,
                out,
                acc: accumulate,
            };
            return self.tuned_gemm(sh, x, w, y);
        }
        let alpha = 1.0f32;
        let beta = if accumulate { 1.0f32 } else { 0.0 };
        let ctype = match out {
            OutType::Bf16 => bs::cudaDataType::CUDA_R_16BF,
            OutType::F32 => bs::cudaDataType::CUDA_R_32F,
        };
        // Column-major view: Yᵀ[N,T] = W[K,N]ᵀ · Xᵀ[K,T].
        let st = unsafe {
            bs::cublasGemmEx(
                self.handle,
                bs::cublasOperation_t::CUBLAS_OP_T,
                bs::cublasOperation_t::CUBLAS_OP_N,
                n as i32,
                t as i32,
                k as i32,
                &alpha as *const f32 as *const c_void,
                w as *const c_void,
                bs::cudaDataType::CUDA_R_16BF,
                k as i32,
                x as *const c_void,
                bs::cudaDataType::CUDA_R_16BF,
                ldx as i32,
                &beta as *const f32 as *const c_void,
                y as *mut c_void,
                ctype,
                ldy as i32,
                bs::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bs::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        ok(st, "GemmEx")
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        self.tune = None; // the cuBLASLt handle and plans first
        unsafe {
            let _ = bs::cublasDestroy_v2(self.handle);
        }
    }
}
