// Attention on Hopper's warpgroup MMA (wgmma, sm_90a): the same attention as attention.cu
// (same QSrc, same RoPE-on-load, same online softmax and masking) with both matrix products
// on wgmma instead of mma.sync. The engine's default for large grids on an H100/H200 with
// head_dim 128 is attn_fwd_wgs2 (batch-64 teacher step: attention 33.5 -> 23.5 ms hot, tiny
// teacher hd128 vs CPU 5.85e-3 like every other variant: bench/results/raw/gpu-run20, gpu-run21).
// One warpgroup = 64 queries of one (batch row, head); keys in tiles of 64.
//  - wg:   2 warpgroups, Q in registers as wgmma's A operand (the m64nNk16 A fragment of each
//          warp is the mma.sync m16n8k16 A fragment of its 16 rows, so the Q load and RoPE code
//          are attention.cu's); 156 registers: one CTA per SM.
//  - wgs:  Q (after RoPE) in shared memory, both operands of S = Q K^T from descriptors;
//          128 registers: two CTAs per SM.
//  - wgs2: wgs with P V as one m64n128 instruction per 16 keys (the default).
//  - wgh:  wgs2 with two heads of one KV group per CTA (4 warpgroups share each K/V tile;
//          measured slower: 26.0 vs 23.5 ms).
// S = Q K^T with K from shared memory (K-major B); P (bf16, registers) x V with V from shared
// memory (N-major B, transposed by the instruction). The accumulator layout of wgmma (per warp:
// rows g / g+8, columns 8j + 2tq) is mma.sync's, so the softmax is attention.cu's too.
// Shared memory: 2 stages x (K, V) tiles of 64 x 128 bf16, each stored as two 64 x 64 halves
// (head dims 0-63, 64-127) of 128-byte rows with the 128-byte swizzle (16-byte chunk c of row r
// at chunk c ^ (r & 7)); tiles 1024-byte aligned; Q tiles (wgs*) the same way. Descriptors (PTX
// ISA "matrix descriptor"): bits 0-13 address >> 4, 16-29 leading byte offset >> 4, 32-45
// stride byte offset >> 4, 62-63 swizzle (1 = 128 B). K and Q (K-major): LBO unused (1), SBO =
// 1024 (8 rows of 128 B), a 16-wide k step inside a half = +32 bytes. V (N-major): SBO = 1024
// (the next 8 keys), LBO = 8 KB (the next 64-dim swizzle atom, used by m64n128), a 16-key step
// = +2048 bytes. Shared memory written by cp.async or st.shared is made visible to wgmma (the
// async proxy) with fence.proxy.async before the barrier.
// The kernel parameters (attention.cu's QSrc fields plus the K/V/O tensors), shared by the
// body and the entry points.
#define WG_PARAMS \
    const bf16* __restrict__ QKV, const bf16* __restrict__ K, const bf16* __restrict__ V, \
    bf16* __restrict__ O, const int* __restrict__ pad, int Sq, int S, int NH, int KVH, \
    float scale_log2, const float* __restrict__ cos_t, const float* __restrict__ sin_t, \
    const GenState* __restrict__ st, int W, int win_base, int blk, int q_tail, int q_base, \
    int q_stride, const float* __restrict__ rr
#define WG_BK 64
#define WG_HALF_BYTES (WG_BK * 128)            // one 64-key x 64-dim half: 8 KB
#define WG_TILE_BYTES (2 * WG_HALF_BYTES)      // a K or V tile: 16 KB
#define WG_STAGE_BYTES (2 * WG_TILE_BYTES)     // K + V

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ u64 wg_desc(u32 saddr, u32 lbo, u32 sbo) {
    return (u64)((saddr & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) |
           (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

// Accumulator operand lists: rows o..o+7 of a [n][4] fp32 fragment (32 registers).
#define WG_D1(d, o) "+f"(d[o][0]), "+f"(d[o][1]), "+f"(d[o][2]), "+f"(d[o][3])
#define WG_D8(d, o) WG_D1(d, o), WG_D1(d, o + 1), WG_D1(d, o + 2), WG_D1(d, o + 3), \
    WG_D1(d, o + 4), WG_D1(d, o + 5), WG_D1(d, o + 6), WG_D1(d, o + 7)
#define WG_R32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define WG_R64 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"

// d[64 x 64] (+)= a[64 x 16] (registers) x B (64 keys x 16 dims, K-major, from the descriptor).
__device__ __forceinline__ void wg_qk(float (&d)[8][4], const u32 (&a)[4], u64 desc, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %36, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_R32 ", "
        "{%32,%33,%34,%35}, %37, p, 1, 1, 0;\n}\n"
        : WG_D8(d, 0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(acc), "l"(desc));
}

// The same with A (64 queries x 16 dims, K-major) from shared memory too.
__device__ __forceinline__ void wg_qk_ss(float (&d)[8][4], u64 da, u64 db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_R32 ", "
        "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : WG_D8(d, 0)
        : "l"(da), "l"(db), "r"(acc));
}

// o[64 x 64 head dims OFF/8*8 ..] += p[64 x 16 keys] (registers) x V (16 keys x 64 dims,
// N-major: transposed by the instruction; 64 dims = one swizzle atom, so no LBO).
template <int OFF>
__device__ __forceinline__ void wg_pv64(float (&d)[16][4], const u32 (&a)[4], u64 desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_R32 ", "
        "{%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
        : WG_D8(d, OFF)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));
}

// All 128 head dims in one instruction: the two 64-dim swizzle atoms of V sit WG_HALF_BYTES
// apart (the N-major layout's leading byte offset).
__device__ __forceinline__ void wg_pv128(float (&d)[16][4], const u32 (&a)[4], u64 desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_R64 ", "
        "{%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
        : WG_D8(d, 0), WG_D8(d, 8)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));
}

// One 64-key tile of K or V (128 head dims) into its two swizzled halves.
__device__ __forceinline__ void wg_load_tile(u32 dst, const bf16* __restrict__ src, int row0, int S) {
    for (int i = threadIdx.x; i < WG_BK * 16; i += blockDim.x) {
        const int r = i >> 4, c = i & 15, half = c >> 3, cc = c & 7;
        const bool ok = row0 + r < S;
        cp_async16(dst + half * WG_HALF_BYTES + r * 128 + ((cc ^ (r & 7)) << 4),
                   src + (u64)(ok ? row0 + r : 0) * 128 + c * 8, ok);
    }
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// QS: Q (after RoPE) goes to shared memory and both wgmma operands of S = Q K^T come from
// there (32 fewer registers: two CTAs per SM); else Q stays in registers. PV128: P V as one
// m64n128 instruction per 16 keys; else two m64n64 (one per 64-dim half). HPC: heads per CTA
// (2: four warpgroups, two heads of one KV group share every K/V tile: half the loads).
template <bool QS, bool PV128, int HPC>
__device__ __forceinline__ void attn_wg_body(WG_PARAMS) {
    constexpr int HD = 128;
    extern __shared__ __align__(16) unsigned char wg_smem_raw[];
    // Tiles on 1024-byte boundaries (the swizzle pattern repeats every 8 rows of 128 bytes).
    // QS: the Q tiles of the 2 * HPC warpgroups (16 KB each, two 64-dim halves) before the stages.
    const u32 qsm = (smem_addr(wg_smem_raw) + 1023u) & ~1023u;
    const u32 sbase = QS ? qsm + 2 * HPC * WG_TILE_BYTES : qsm;
    const QSrc qs{QKV, cos_t, sin_t, st, rr, W, win_base, blk, q_tail, q_base, q_stride};
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // Warpgroup wgi: head blockIdx.y * HPC + wgi / 2, queries qt * 128 + (wgi & 1) * 64 ...
    const int wgi = warp >> 2;
    const int qt = blockIdx.x, h = blockIdx.y * HPC + (wgi >> 1), b = blockIdx.z;
    const int kvh = h / (NH / KVH);
    const int g = lane >> 2, tq = lane & 3;
    const int qld = (NH + 2 * KVH) * HD;
    const int row0 = qs.q_tail ? qs.q_base + qs.st->rblock[b] * qs.q_stride : 0;
    const int sbase_pos = qs.win_base < 0 ? 0 : qs.win_base + qs.st->rblock[b] * qs.blk;
    const u64 trow0 = (u64)b * qs.W + row0;
    const bf16* Qb = qs.qkv + trow0 * qld + h * HD;
    const bf16* Kb = K + ((u64)b * KVH + kvh) * S * HD;
    const bf16* Vb = V + ((u64)b * KVH + kvh) * S * HD;
    // Warp w % 4 of its warpgroup owns rows 16 * (w % 4) .. of the warpgroup's 64 queries.
    const int q0 = qt * 128 + (wgi & 1) * 64 + (warp & 3) * 16;
    const int kstart = pad[b];
    const int t0 = kstart / WG_BK, nt = (S + WG_BK - 1) / WG_BK;

    if (t0 < nt) {
        wg_load_tile(sbase, Kb, t0 * WG_BK, S);
        wg_load_tile(sbase + WG_TILE_BYTES, Vb, t0 * WG_BK, S);
    }
    cp_async_commit();
    // Q fragments + RoPE: attention.cu's code for one m-tile.
    u32 qf[HD / 16][4];
    {
        const int qa = q0 + g, qb = qa + 8;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            const int c = kk * 16 + tq * 2;
            qf[kk][0] = qa < Sq ? *(const u32*)(Qb + (u64)qa * qld + c) : 0u;
            qf[kk][1] = qb < Sq ? *(const u32*)(Qb + (u64)qb * qld + c) : 0u;
            qf[kk][2] = qa < Sq ? *(const u32*)(Qb + (u64)qa * qld + c + 8) : 0u;
            qf[kk][3] = qb < Sq ? *(const u32*)(Qb + (u64)qb * qld + c + 8) : 0u;
        }
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int q = (r & 1) ? qb : qa;
            if (q >= Sq) continue;
            int pos = sbase_pos + row0 + q - pad[b];
            if (pos < 0) pos = 0;
            const float sc = qs.rr ? qs.rr[trow0 + q] : 1.f;
            const float* cp = qs.cos_t + (u64)pos * (HD / 2);
            const float* sp = qs.sin_t + (u64)pos * (HD / 2);
#pragma unroll
            for (int kk = 0; kk < HD / 32; kk++) {
                const int j = kk * 16 + tq * 2 + (r >= 2 ? 8 : 0);
                const float2 cc = *(const float2*)(cp + j), ss = *(const float2*)(sp + j);
                u32 a = qf[kk][r], bq = qf[kk + HD / 32][r];
                float x1a = __uint_as_float(a << 16) * sc, x1b = __uint_as_float(a & 0xffff0000u) * sc;
                float x2a = __uint_as_float(bq << 16) * sc, x2b = __uint_as_float(bq & 0xffff0000u) * sc;
                float y1a, y2a, y1b, y2b;
                rope_pair(x1a, x2a, cc.x, ss.x, y1a, y2a);
                rope_pair(x1b, x2b, cc.y, ss.y, y1b, y2b);
                qf[kk][r] = pack_bf2(y1a, y1b);
                qf[kk + HD / 32][r] = pack_bf2(y2a, y2b);
            }
        }
    }
    // QS: the warp's 16 rows of its warpgroup's swizzled Q tile (made visible to wgmma by the
    // fence + barrier at the top of the first key tile).
    const u32 qwg = qsm + wgi * WG_TILE_BYTES;
    if (QS) {
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int row = (warp & 3) * 16 + g + (r & 1) * 8;
                const int col = kk * 16 + tq * 2 + (r >= 2 ? 8 : 0);
                const int cc = col & 63;
                const u32 a = qwg + (col >> 6) * WG_HALF_BYTES + row * 128 +
                              ((((cc >> 3) ^ (row & 7))) << 4) + (cc & 7) * 2;
                asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(qf[kk][r]) : "memory");
            }
    }
    float o[16][4];  // head dims 8n + 2tq (n < 8: dims 0-63, else 64-127)
#pragma unroll
    for (int n = 0; n < 16; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float mrow0 = NEG_INF, mrow1 = NEG_INF, lrow0 = 0.f, lrow1 = 0.f;

    for (int t = t0; t < nt; t++) {
        const int stg = (t - t0) & 1;
        if (t + 1 < nt) {
            const u32 nxt = sbase + (stg ^ 1) * WG_STAGE_BYTES;
            wg_load_tile(nxt, Kb, (t + 1) * WG_BK, S);
            wg_load_tile(nxt + WG_TILE_BYTES, Vb, (t + 1) * WG_BK, S);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        const u32 kt = sbase + stg * WG_STAGE_BYTES, vt = kt + WG_TILE_BYTES;
        const int k0 = t * WG_BK;
        float s[8][4];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            const u32 koff = (kk >> 2) * WG_HALF_BYTES + (kk & 3) * 32;
            if (QS)
                wg_qk_ss(s, wg_desc(qwg + koff, 16, 1024), wg_desc(kt + koff, 16, 1024), kk > 0);
            else
                wg_qk(s, qf[kk], wg_desc(kt + koff, 16, 1024), kk > 0);
        }
        wg_commit();
        wg_wait0();
        const bool edge = k0 < kstart || k0 + WG_BK > S;
        float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            if (edge) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = k0 + n * 8 + tq * 2 + (e & 1);
                    if (key < kstart || key >= S) s[n][e] = NEG_INF;
                }
            }
            mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
            mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(mrow0, mx0), mn1 = fmaxf(mrow1, mx1);
        // O needs rescaling only where a row's max moved (else every factor is exactly 1).
        const bool moved = __any_sync(0xffffffffu, mn0 != mrow0 || mn1 != mrow1);
        const float base0 = mn0 == NEG_INF ? 0.f : mn0 * scale_log2;
        const float base1 = mn1 == NEG_INF ? 0.f : mn1 * scale_log2;
        const float a0 = fast_exp2(mrow0 * scale_log2 - base0);
        const float a1 = fast_exp2(mrow1 * scale_log2 - base1);
        mrow0 = mn0;
        mrow1 = mn1;
        float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            s[n][0] = fast_exp2(fmaf(s[n][0], scale_log2, -base0));
            s[n][1] = fast_exp2(fmaf(s[n][1], scale_log2, -base0));
            s[n][2] = fast_exp2(fmaf(s[n][2], scale_log2, -base1));
            s[n][3] = fast_exp2(fmaf(s[n][3], scale_log2, -base1));
            ps0 += s[n][0] + s[n][1];
            ps1 += s[n][2] + s[n][3];
        }
        lrow0 = lrow0 * a0 + ps0;
        lrow1 = lrow1 * a1 + ps1;
        if (moved) {
#pragma unroll
            for (int n = 0; n < 16; n++) {
                o[n][0] *= a0;
                o[n][1] *= a0;
                o[n][2] *= a1;
                o[n][3] *= a1;
            }
        }
        u32 pa[WG_BK / 16][4];
#pragma unroll
        for (int kc = 0; kc < WG_BK / 16; kc++) {
            pa[kc][0] = pack_bf2(s[2 * kc][0], s[2 * kc][1]);
            pa[kc][1] = pack_bf2(s[2 * kc][2], s[2 * kc][3]);
            pa[kc][2] = pack_bf2(s[2 * kc + 1][0], s[2 * kc + 1][1]);
            pa[kc][3] = pack_bf2(s[2 * kc + 1][2], s[2 * kc + 1][3]);
        }
        wg_fence();
#pragma unroll
        for (int kc = 0; kc < WG_BK / 16; kc++) {
            if (PV128) {
                wg_pv128(o, pa[kc], wg_desc(vt + kc * 16 * 128, WG_HALF_BYTES, 1024));
            } else {
                wg_pv64<0>(o, pa[kc], wg_desc(vt + kc * 16 * 128, 16, 1024));
                wg_pv64<8>(o, pa[kc], wg_desc(vt + WG_HALF_BYTES + kc * 16 * 128, 16, 1024));
            }
        }
        wg_commit();
        wg_wait0();
        __syncthreads();
    }
    const int qa = q0 + g, qb = qa + 8;
    if (qa >= Sq && qb >= Sq) return;
    float l0 = lrow0, l1 = lrow1;
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    const u64 ld = (u64)NH * HD;
#pragma unroll
    for (int n = 0; n < 16; n++) {
        const int col = h * HD + n * 8 + tq * 2;
        if (qa < Sq)
            *(u32*)(O + ((u64)b * Sq + qa) * ld + col) = pack_bf2(o[n][0] * inv0, o[n][1] * inv0);
        if (qb < Sq)
            *(u32*)(O + ((u64)b * Sq + qb) * ld + col) = pack_bf2(o[n][2] * inv1, o[n][3] * inv1);
    }
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ENTRY(name, hpc, minb, qs, pv128)                                             \
    extern "C" __global__ void __launch_bounds__(256 * hpc, minb) name(WG_PARAMS) {     \
        attn_wg_body<qs, pv128, hpc>(QKV, K, V, O, pad, Sq, S, NH, KVH, scale_log2, cos_t, \
                                     sin_t, st, W, win_base, blk, q_tail, q_base, q_stride, rr); \
    }
#else
#define WG_ENTRY(name, hpc, minb, qs, pv128)                                             \
    extern "C" __global__ void __launch_bounds__(256 * hpc, minb) name(WG_PARAMS) {     \
        __trap(); /* needs the sm_90a target (wgmma) */                                  \
    }
#endif
// Q in registers, one CTA per SM (156 registers); Q in shared memory, two CTAs per SM, P V as
// two m64n64 or one m64n128 instruction per 16 keys; two heads per CTA (512 threads).
WG_ENTRY(attn_fwd_wg_hd128, 1, 1, false, false)
WG_ENTRY(attn_fwd_wgs_hd128, 1, 2, true, false)
WG_ENTRY(attn_fwd_wgs2_hd128, 1, 2, true, true)
WG_ENTRY(attn_fwd_wgh_hd128, 2, 1, true, true)
