// RMSNorm of the residual stream (bf16 by default, fp32 with DLM_RESID=f32) into bf16 GEMM
// input. The residual add itself is fused into the preceding GEMM (cuBLAS epilogue beta = 1 on
// the residual), so this kernel is the only pass between two GEMMs. Three row mappings: every
// row, the current block's rows (from the device-side generation state, with the logits
// shift), or an explicit row list. `gather_block` copies the block's residual rows out
// unnormalised (the last layer runs on those rows only). H is a multiple of 8 and at most
// 8 * 1024 * 4: each thread keeps its values in registers between the sum of squares and the
// scaled write (one read of the row).
#define NORM_VEC 4
__device__ __forceinline__ float4 load4(const float* p) { return *(const float4*)p; }
__device__ __forceinline__ float4 load4(const bf16* p) {
    uint2 w = *(const uint2*)p;
    return make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u),
                       __uint_as_float(w.y << 16), __uint_as_float(w.y & 0xffff0000u));
}

template <typename R>
__device__ __forceinline__ void rmsnorm_row(const R* __restrict__ x, const bf16* __restrict__ g,
                                            bf16* __restrict__ y, int H, float eps) {
    __shared__ float red[32];
    float4 v[NORM_VEC];
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < NORM_VEC; k++) {
        int i = (threadIdx.x + k * blockDim.x) * 4;
        v[k] = i < H ? load4(x + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
    for (int i = (threadIdx.x + NORM_VEC * blockDim.x) * 4; i < H; i += blockDim.x * 4) {
        float4 t = load4(x + i);
        ss += t.x * t.x + t.y * t.y + t.z * t.z + t.w * t.w;
    }
    ss = block_sum(ss, red);
    float r = rsqrtf(ss / (float)H + eps);
#pragma unroll
    for (int k = 0; k < NORM_VEC; k++) {
        int i = (threadIdx.x + k * blockDim.x) * 4;
        if (i < H) {
            uint2 gw = *(const uint2*)(g + i);
            float g0 = __uint_as_float(gw.x << 16), g1 = __uint_as_float(gw.x & 0xffff0000u);
            float g2 = __uint_as_float(gw.y << 16), g3 = __uint_as_float(gw.y & 0xffff0000u);
            *(uint2*)(y + i) = make_uint2(pack_bf2(v[k].x * r * g0, v[k].y * r * g1),
                                          pack_bf2(v[k].z * r * g2, v[k].w * r * g3));
        }
    }
    for (int i = (threadIdx.x + NORM_VEC * blockDim.x) * 4; i < H; i += blockDim.x * 4) {
        float4 t = load4(x + i);
        float4 gg = load4(g + i);
        *(uint2*)(y + i) = make_uint2(pack_bf2(t.x * r * gg.x, t.y * r * gg.y),
                                      pack_bf2(t.z * r * gg.z, t.w * r * gg.w));
    }
}

// Folded RMSNorm (DLM_FOLD_NORM=1, experimental): gamma lives in the next GEMM's weights, so
// only the per-row 1/rms is needed (applied by the GEMM's consumer: RoPE/split or SwiGLU).
// A read-only pass over the bf16 residual; a CTA per row.
extern "C" __global__ void row_rms(const bf16* __restrict__ x, float* __restrict__ rr, int H,
                                   float eps) {
    __shared__ float red[32];
    const bf16* row = x + (u64)blockIdx.x * H;
    float ss = 0.f;
    for (int i = threadIdx.x * 4; i < H; i += blockDim.x * 4) {
        float4 v = load4(row + i);
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = block_sum(ss, red);
    if (threadIdx.x == 0) rr[blockIdx.x] = rsqrtf(ss / (float)H + eps);
}

// The residual row of block row r = (b, j): sequence position
// gen_start + rblock[b]*stride + j - shift of batch row b (rows S apart). A window step passes
// S = W, gen_start = 0, stride = 0: the block is the window's first blk rows.
__device__ __forceinline__ u64 block_row(const GenState* __restrict__ st, int r, int S, int blk,
                                         int gen_start, int shift, int stride) {
    int b = r / blk, j = r % blk;
    int pos = gen_start + st->rblock[b] * stride + j - shift;
    if (pos < 0) pos = 0;
    if (pos >= S) pos = S - 1;
    return (u64)b * S + pos;
}

#define NORM_ENTRIES(SUF, R)                                                                     \
    extern "C" __global__ void rmsnorm##SUF(const R* __restrict__ x, const bf16* __restrict__ g, \
                                            bf16* __restrict__ y, int H, float eps) {            \
        u64 row = blockIdx.x;                                                                    \
        rmsnorm_row<R>(x + row * H, g, y + row * H, H, eps);                                     \
    }                                                                                            \
    extern "C" __global__ void rmsnorm_block##SUF(                                              \
        const R* __restrict__ x, const bf16* __restrict__ g, bf16* __restrict__ y, int H,         \
        float eps, const GenState* __restrict__ st, int S, int blk, int gen_start, int shift,    \
        int stride) {                                                                            \
        u64 row = block_row(st, blockIdx.x, S, blk, gen_start, shift, stride);                   \
        rmsnorm_row<R>(x + row * H, g, y + (u64)blockIdx.x * H, H, eps);                         \
    }                                                                                            \
    extern "C" __global__ void rmsnorm_rows##SUF(const R* __restrict__ x,                       \
                                                 const bf16* __restrict__ g,                     \
                                                 bf16* __restrict__ y, int H, float eps,         \
                                                 const int* __restrict__ rows) {                 \
        int r = blockIdx.x;                                                                      \
        rmsnorm_row<R>(x + (u64)rows[r] * H, g, y + (u64)r * H, H, eps);                         \
    }                                                                                            \
    extern "C" __global__ void gather_block##SUF(                                               \
        const R* __restrict__ x, R* __restrict__ y, int H, const GenState* __restrict__ st,       \
        int S, int blk, int gen_start, int shift, int stride) {                                  \
        const R* src = x + block_row(st, blockIdx.x, S, blk, gen_start, shift, stride) * H;      \
        R* dst = y + (u64)blockIdx.x * H;                                                        \
        for (int i = threadIdx.x * (16 / sizeof(R)); i < H; i += blockDim.x * (16 / sizeof(R)))  \
            *(uint4*)(dst + i) = *(const uint4*)(src + i);                                       \
    }
NORM_ENTRIES(, bf16)
NORM_ENTRIES(_f32, float)
