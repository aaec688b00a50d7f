//! The GPU teacher (feature `cuda`): cudarc with dynamic loading, kernels from `kernels/*.cu`
//! compiled by NVRTC at first use.
