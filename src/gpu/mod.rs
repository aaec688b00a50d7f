//! The GPU teacher (feature `cuda`): the same forward pass and LLaDA sampler as the CPU path,
//! on an NVIDIA GPU, behind `dlm-data distill --device cuda[:N]`.
//!
//! Build choice (issue #6): cudarc with `dynamic-loading` — nothing CUDA is needed to build and
//! the binary starts without a driver — and our own kernels in `kernels/*.cu`, compiled by
//! NVRTC at first use into a cubin for the device's architecture and cached on disk
//! ([`nvrtc`]). GEMMs go through cuBLAS in bf16 with fp32 accumulation ([`blas`]). candle's
//! `cuda` feature was not used: it links libcuda at load time and needs nvcc to build.
//!
//! - [`driver`]: context, stream, buffers, launches, CUDA graphs.
//! - [`weights`]: the teacher loader's validated config + safetensors, the kernels' shape limits,
//!   the folded-RMSNorm weight transform.
//! - [`engine`]: workspaces and weights on the device; `engine::body` the forward pass,
//!   `engine::device_loop` the sampler step as one CUDA graph and the generate loop (exact,
//!   threshold, KV cache), `engine::readout` logits and the letter head, `engine::diag` the
//!   step profile and cache-window check.
//! - [`backend`]: `distill --device cuda` behind the teacher backend trait.
//! - [`probe`]: can the GPU path run here (driver, device, cuBLAS, NVRTC), asked without
//!   cudarc's panics, before `distill` opens anything (`--device cuda` / `auto`).
//! - [`reference`]: the bf16-faithful CPU model the parity runs compare against.
//! - [`tuning`]: the engine's `DLM_*` environment switches, read in that one file.

pub mod backend;
pub mod blas;
pub mod driver;
pub mod engine;
pub mod gemm_plans;
pub mod nvrtc;
pub mod probe;
pub mod reference;
pub mod tuning;
pub mod weights;
