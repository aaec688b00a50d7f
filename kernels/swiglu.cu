// SwiGLU: act = silu(gate) * up, reading the fused [gate; up] GEMM output row by row.
extern "C" __global__ void swiglu(const bf16* __restrict__ gu, bf16* __restrict__ act, int I) {
    u64 t = blockIdx.x;
    const bf16* g = gu + t * 2 * I;
    const bf16* u = g + I;
    bf16* o = act + t * I;
    for (int i = threadIdx.x; i < I; i += blockDim.x) {
        float a = bf2f(g[i]);
        o[i] = f2bf(a / (1.f + __expf(-a)) * bf2f(u[i]));
    }
}
