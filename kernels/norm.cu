// RMSNorm of the fp32 residual stream into bf16 GEMM input. The residual add itself is fused
// into the preceding GEMM (cuBLAS epilogue beta = 1 on the fp32 residual), so this kernel is
// the only pass between two GEMMs. Three row mappings: every row, the current block's rows
// (from the device-side generation state, with the logits shift), or an explicit row list.
__device__ __forceinline__ void rmsnorm_row(const float* __restrict__ x, const bf16* __restrict__ g,
                                            bf16* __restrict__ y, int H, float eps) {
    __shared__ float red[32];
    float ss = 0.f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) { float v = x[i]; ss += v * v; }
    ss = block_sum(ss, red);
    float r = rsqrtf(ss / (float)H + eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) y[i] = f2bf(x[i] * r * bf2f(g[i]));
}

extern "C" __global__ void rmsnorm(const float* __restrict__ x, const bf16* __restrict__ g,
                                   bf16* __restrict__ y, int H, float eps) {
    u64 row = blockIdx.x;
    rmsnorm_row(x + row * H, g, y + row * H, H, eps);
}

// Rows of the current block: out row r = (b, j) reads sequence position
// gen_start + block*blk + j - shift of batch row b.
extern "C" __global__ void rmsnorm_block(const float* __restrict__ x, const bf16* __restrict__ g,
                                         bf16* __restrict__ y, int H, float eps,
                                         const GenState* __restrict__ st, int S, int blk,
                                         int gen_start, int shift) {
    int r = blockIdx.x, b = r / blk, j = r % blk;
    int pos = gen_start + st->block * blk + j - shift;
    if (pos < 0) pos = 0;
    rmsnorm_row(x + ((u64)b * S + pos) * H, g, y + (u64)r * H, H, eps);
}

extern "C" __global__ void rmsnorm_rows(const float* __restrict__ x, const bf16* __restrict__ g,
                                        bf16* __restrict__ y, int H, float eps,
                                        const int* __restrict__ rows) {
    int r = blockIdx.x;
    rmsnorm_row(x + (u64)rows[r] * H, g, y + (u64)r * H, H, eps);
}
