// Bidirectional attention with GQA and a key-padding mask, flash-style: one CTA = 64 queries
// of one (batch row, head), 4 warps of 16 queries; keys/values stream through shared memory
// in tiles of 64 with an online softmax, so the S x S score matrix never exists. QK^T and PV
// run on the bf16 tensor cores (mma.sync m16n8k16, fp32 accumulation). Left padding: the
// first pad[b] keys of row b are masked (and whole padded key tiles are skipped).
#define BQ 64
#define BK 64
#define KPAD 8

__device__ __forceinline__ void mma_bf16_16816(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int HD>
__device__ __forceinline__ void load_tile(bf16* __restrict__ dst, const bf16* __restrict__ src,
                                          int row0, int S) {
    constexpr int LDS = HD + KPAD;
    constexpr int CH = HD / 8;  // 16-byte chunks per row
    for (int i = threadIdx.x; i < 64 * CH; i += blockDim.x) {
        int r = i / CH, c = (i % CH) * 8;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + r < S) val = *(const uint4*)(src + (u64)(row0 + r) * HD + c);
        *(uint4*)(dst + r * LDS + c) = val;
    }
}

template <int HD>
__device__ __forceinline__ void attn_impl(const bf16* __restrict__ Q, const bf16* __restrict__ K,
                                          const bf16* __restrict__ V, bf16* __restrict__ O,
                                          const int* __restrict__ pad, int S, int NH, int KVH,
                                          float scale_log2) {
    constexpr int LDS = HD + KPAD;
    __shared__ __align__(16) bf16 sK[BK * LDS];
    __shared__ __align__(16) bf16 sV[BK * LDS];
    const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int kvh = h / (NH / KVH);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, tq = lane & 3;
    const bf16* Qb = Q + ((u64)b * NH + h) * S * HD;
    const bf16* Kb = K + ((u64)b * KVH + kvh) * S * HD;
    const bf16* Vb = V + ((u64)b * KVH + kvh) * S * HD;
    const int q0 = qt * BQ;

    // Q tile -> registers (A fragments), staged through sK.
    load_tile<HD>(sK, Qb, q0, S);
    __syncthreads();
    u32 qf[HD / 16][4];
    const int r0 = warp * 16 + g;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        qf[kk][0] = *(const u32*)(sK + r0 * LDS + kk * 16 + tq * 2);
        qf[kk][1] = *(const u32*)(sK + (r0 + 8) * LDS + kk * 16 + tq * 2);
        qf[kk][2] = *(const u32*)(sK + r0 * LDS + kk * 16 + 8 + tq * 2);
        qf[kk][3] = *(const u32*)(sK + (r0 + 8) * LDS + kk * 16 + 8 + tq * 2);
    }
    __syncthreads();

    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;
    const int kstart = pad[b];

    for (int k0 = (kstart / BK) * BK; k0 < S; k0 += BK) {
        load_tile<HD>(sK, Kb, k0, S);
        load_tile<HD>(sV, Vb, k0, S);
        __syncthreads();

        float s[BK / 8][4];
#pragma unroll
        for (int n = 0; n < BK / 8; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
            const bf16* kr = sK + (n * 8 + g) * LDS + tq * 2;
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                u32 b0 = *(const u32*)(kr + kk * 16);
                u32 b1 = *(const u32*)(kr + kk * 16 + 8);
                mma_bf16_16816(s[n], qf[kk], b0, b1);
            }
        }
        // Scale into the log2 domain and mask padded / out-of-range keys.
        float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
        for (int n = 0; n < BK / 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = k0 + n * 8 + tq * 2 + (e & 1);
                float v = (key >= kstart && key < S) ? s[n][e] * scale_log2 : NEG_INF;
                s[n][e] = v;
            }
            mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
            mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        // A tile with every key masked for this row keeps the old state (guards -inf - -inf).
        float base0 = mn0 == NEG_INF ? 0.f : mn0, base1 = mn1 == NEG_INF ? 0.f : mn1;
        float a0 = exp2f(m0 - base0), a1 = exp2f(m1 - base1);
        m0 = mn0;
        m1 = mn1;
        float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
        for (int n = 0; n < BK / 8; n++) {
            s[n][0] = exp2f(s[n][0] - base0);
            s[n][1] = exp2f(s[n][1] - base0);
            s[n][2] = exp2f(s[n][2] - base1);
            s[n][3] = exp2f(s[n][3] - base1);
            ps0 += s[n][0] + s[n][1];
            ps1 += s[n][2] + s[n][3];
        }
        l0 = l0 * a0 + ps0;
        l1 = l1 * a1 + ps1;
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            o[n][0] *= a0;
            o[n][1] *= a0;
            o[n][2] *= a1;
            o[n][3] *= a1;
        }
        // O += P V: P's accumulator layout is the A-fragment layout of the next mma.
#pragma unroll
        for (int kc = 0; kc < BK / 16; kc++) {
            u32 pa[4];
            pa[0] = pack_bf2(s[2 * kc][0], s[2 * kc][1]);
            pa[1] = pack_bf2(s[2 * kc][2], s[2 * kc][3]);
            pa[2] = pack_bf2(s[2 * kc + 1][0], s[2 * kc + 1][1]);
            pa[3] = pack_bf2(s[2 * kc + 1][2], s[2 * kc + 1][3]);
            const bf16* vr = sV + (kc * 16 + tq * 2) * LDS + g;
#pragma unroll
            for (int n = 0; n < HD / 8; n++) {
                const bf16* vp = vr + n * 8;
                u32 b0 = (u32)vp[0] | ((u32)vp[LDS] << 16);
                u32 b1 = (u32)vp[8 * LDS] | ((u32)vp[9 * LDS] << 16);
                mma_bf16_16816(o[n], pa, b0, b1);
            }
        }
        __syncthreads();
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    const int qa = q0 + r0, qb = q0 + r0 + 8;
    const u64 ld = (u64)NH * HD;
#pragma unroll
    for (int n = 0; n < HD / 8; n++) {
        int col = h * HD + n * 8 + tq * 2;
        if (qa < S) *(u32*)(O + ((u64)b * S + qa) * ld + col) = pack_bf2(o[n][0] * inv0, o[n][1] * inv0);
        if (qb < S) *(u32*)(O + ((u64)b * S + qb) * ld + col) = pack_bf2(o[n][2] * inv1, o[n][3] * inv1);
    }
}

#define ATTN_ENTRY(HDV)                                                                          \
    extern "C" __global__ void __launch_bounds__(128) attn_fwd_hd##HDV(                          \
        const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V,      \
        bf16* __restrict__ O, const int* __restrict__ pad, int S, int NH, int KVH,               \
        float scale_log2) {                                                                      \
        attn_impl<HDV>(Q, K, V, O, pad, S, NH, KVH, scale_log2);                                 \
    }
ATTN_ENTRY(32)
ATTN_ENTRY(64)
ATTN_ENTRY(128)
