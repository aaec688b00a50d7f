// RMSNorm of the fp32 residual stream into bf16 GEMM input. The residual add itself is fused
// into the preceding GEMM (cuBLAS epilogue beta = 1 on the fp32 residual), so this kernel is
// the only pass between two GEMMs. Three row mappings: every row, the current block's rows
// (from the device-side generation state, with the logits shift), or an explicit row list.
// H is a multiple of 8 and at most 8 * 1024 * 4: each thread keeps its values in registers
// between the sum of squares and the scaled write (one read of the row).
#define NORM_VEC 4
__device__ __forceinline__ void rmsnorm_row(const float* __restrict__ x, const bf16* __restrict__ g,
                                            bf16* __restrict__ y, int H, float eps) {
    __shared__ float red[32];
    float4 v[NORM_VEC];
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < NORM_VEC; k++) {
        int i = (threadIdx.x + k * blockDim.x) * 4;
        v[k] = i < H ? *(const float4*)(x + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
    for (int i = (threadIdx.x + NORM_VEC * blockDim.x) * 4; i < H; i += blockDim.x * 4) {
        float4 t = *(const float4*)(x + i);
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
        for (int e = 0; e < 4; e++) y[i + e] = f2bf(x[i + e] * r * bf2f(g[i + e]));
    }
}

extern "C" __global__ void rmsnorm(const float* __restrict__ x, const bf16* __restrict__ g,
                                   bf16* __restrict__ y, int H, float eps) {
    u64 row = blockIdx.x;
    rmsnorm_row(x + row * H, g, y + row * H, H, eps);
}

// Rows of the current block: out row r = (b, j) reads sequence position
// gen_start + block*stride + j - shift of batch row b (rows S apart). A window step passes
// S = W, gen_start = 0, stride = 0: the block is the window's first blk rows.
extern "C" __global__ void rmsnorm_block(const float* __restrict__ x, const bf16* __restrict__ g,
                                         bf16* __restrict__ y, int H, float eps,
                                         const GenState* __restrict__ st, int S, int blk,
                                         int gen_start, int shift, int stride) {
    int r = blockIdx.x, b = r / blk, j = r % blk;
    int pos = gen_start + st->block * stride + j - shift;
    if (pos < 0) pos = 0;
    if (pos >= S) pos = S - 1;
    rmsnorm_row(x + ((u64)b * S + pos) * H, g, y + (u64)r * H, H, eps);
}

extern "C" __global__ void rmsnorm_rows(const float* __restrict__ x, const bf16* __restrict__ g,
                                        bf16* __restrict__ y, int H, float eps,
                                        const int* __restrict__ rows) {
    int r = blockIdx.x;
    rmsnorm_row(x + (u64)rows[r] * H, g, y + (u64)r * H, H, eps);
}
