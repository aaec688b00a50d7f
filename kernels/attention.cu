// Bidirectional attention with GQA and a key-padding mask, flash-style (FlashAttention-2
// layout): one CTA = NW warps of MT x 16 queries of one (batch row, head); queries
// Q [B, NH, Sq, HD], keys and values K, V [B, KVH, Skv, HD] (Sq = Skv for a full pass; a cache
// step's window attends from its Sq rows to every cached key). Keys/values stream through
// shared memory in tiles of BK, double-buffered with cp.async (the next tile loads while this
// one computes), with an online softmax, so the S x S score matrix never exists. QK^T and PV
// run on the bf16 tensor cores (mma.sync m16n8k16, fp32 accumulation); K fragments come from
// ldmatrix, V fragments from ldmatrix.trans. Left padding: the first pad[b] keys of row b are
// masked (and whole padded key tiles are skipped). Dynamic shared memory: 4 * BK * (HD + 8) * 2
// bytes (AttnVariant::smem_bytes in src/gpu/engine/mod.rs).
// Variants (the engine picks by grid size): MT = 1, BK = 64 with 4 or 8 warps (small batches,
// windows); MT = 2, BK = 32, 4 warps (full passes of large batches: every K/V fragment read
// from shared memory feeds two m-tiles, halving shared-memory traffic per FLOP). What bounds
// these kernels on an H200 looks like instruction issue around the mmas (halving smem traffic
// gained 1-3 ms, cutting softmax/conversion instructions 10 ms; gpu-run7..9): hence
// the hardware bf16 conversion, ex2.approx, the scale folded into the exponent's FMA, masking
// only on edge tiles and the O rescale skipped while no row max moves.
#define KPAD 8

// Not volatile: a pure register op, so the compiler may interleave independent mmas.
__device__ __forceinline__ void mma_bf16_16816(float* c, const u32* a, u32 b0, u32 b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ldsm_x4(u32& r0, u32& r1, u32& r2, u32& r3, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(u32& r0, u32& r1, u32& r2, u32& r3, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

// 16 bytes global -> shared, asynchronously; zero-filled when !valid.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool valid) {
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

// One BK-row tile of K or V (rows row0.., HD columns) into shared memory (row stride HD+KPAD).
template <int HD, int BK>
__device__ __forceinline__ void load_tile_async(bf16* __restrict__ dst, const bf16* __restrict__ src,
                                                int row0, int S) {
    constexpr int LDS = HD + KPAD;
    constexpr int CH = HD / 8;  // 16-byte chunks per row
    for (int i = threadIdx.x; i < BK * CH; i += blockDim.x) {
        int r = i / CH, c = (i % CH) * 8;
        bool ok = row0 + r < S;
        cp_async16(smem_addr(dst + r * LDS + c), src + (u64)(ok ? row0 + r : 0) * HD + c, ok);
    }
}

// Where the queries come from: straight from the fused [q;k;v] GEMM output (rows of
// (NH + 2 KVH) * HD), rotated here as they are loaded into registers (RoPE on Q costs no pass
// of its own; qkv_rope does K and V). Query row qi of batch row b is qkv row
// b * W + row0 + qi, row0 = q_base + block * q_stride for the last layer's block-only queries
// (q_tail), else 0; its position is s - pad[b], s = row (full pass) or
// win_base + block * blk + row (a cache window). rr (folded RMSNorm): row scale, else null.
struct QSrc {
    const bf16* qkv;
    const float* cos_t;
    const float* sin_t;
    const GenState* st;
    const float* rr;
    int W, win_base, blk, q_tail, q_base, q_stride;
};

template <int HD, int NW, int MT, int BK>
__device__ __forceinline__ void attn_impl(const QSrc qs, const bf16* __restrict__ K,
                                          const bf16* __restrict__ V, bf16* __restrict__ O,
                                          const int* __restrict__ pad, int Sq, int S, int NH,
                                          int KVH, float scale_log2) {
    constexpr int LDS = HD + KPAD;
    constexpr int TILE = BK * LDS;
    extern __shared__ __align__(16) bf16 smem[];
    bf16* sK = smem;              // [2][BK][LDS]
    bf16* sV = smem + 2 * TILE;   // [2][BK][LDS]
    const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int kvh = h / (NH / KVH);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int qld = (NH + 2 * KVH) * HD;  // qkv row stride
    const int row0 = qs.q_tail ? qs.q_base + qs.st->rblock[b] * qs.q_stride : 0;
    const int sbase = qs.win_base < 0 ? 0 : qs.win_base + qs.st->rblock[b] * qs.blk;
    const u64 trow0 = (u64)b * qs.W + row0;  // qkv row of query 0
    const bf16* Qb = qs.qkv + trow0 * qld + h * HD;
    const bf16* Kb = K + ((u64)b * KVH + kvh) * S * HD;
    const bf16* Vb = V + ((u64)b * KVH + kvh) * S * HD;
    const int q0 = qt * 16 * MT * NW + warp * 16 * MT;  // this warp's first query
    const int kstart = pad[b];
    const int t0 = kstart / BK, nt = (S + BK - 1) / BK;

    // Start the first K/V tile, then Q fragments straight from global memory into registers.
    if (t0 < nt) {
        load_tile_async<HD, BK>(sK, Kb, t0 * BK, S);
        load_tile_async<HD, BK>(sV, Vb, t0 * BK, S);
    }
    cp_async_commit();
    const bool active = q0 < Sq;  // a warp whose rows are all past Sq idles
    u32 qf[MT][HD / 16][4];
#pragma unroll
    for (int m = 0; m < MT; m++) {
        const int qa = q0 + m * 16 + g, qb = qa + 8;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            const int c = kk * 16 + tq * 2;
            qf[m][kk][0] = qa < Sq ? *(const u32*)(Qb + (u64)qa * qld + c) : 0u;
            qf[m][kk][1] = qb < Sq ? *(const u32*)(Qb + (u64)qb * qld + c) : 0u;
            qf[m][kk][2] = qa < Sq ? *(const u32*)(Qb + (u64)qa * qld + c + 8) : 0u;
            qf[m][kk][3] = qb < Sq ? *(const u32*)(Qb + (u64)qb * qld + c + 8) : 0u;
        }
        // RoPE: column j pairs with j + HD/2, i.e. fragment kk with kk + HD/32 in this thread.
        // Register r of a fragment holds row (r & 1 ? qb : qa), columns c + (r >= 2 ? 8 : 0).
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int q = (r & 1) ? qb : qa;
            if (q >= Sq) continue;
            int pos = sbase + row0 + q - pad[b];
            if (pos < 0) pos = 0;
            const float sc = qs.rr ? qs.rr[trow0 + q] : 1.f;
            const float* cp = qs.cos_t + (u64)pos * (HD / 2);
            const float* sp = qs.sin_t + (u64)pos * (HD / 2);
#pragma unroll
            for (int kk = 0; kk < HD / 32; kk++) {
                const int j = kk * 16 + tq * 2 + (r >= 2 ? 8 : 0);
                const float2 cc = *(const float2*)(cp + j), ss = *(const float2*)(sp + j);
                u32 a = qf[m][kk][r], bq = qf[m][kk + HD / 32][r];
                float x1a = __uint_as_float(a << 16) * sc, x1b = __uint_as_float(a & 0xffff0000u) * sc;
                float x2a = __uint_as_float(bq << 16) * sc, x2b = __uint_as_float(bq & 0xffff0000u) * sc;
                float y1a, y2a, y1b, y2b;
                rope_pair(x1a, x2a, cc.x, ss.x, y1a, y2a);
                rope_pair(x1b, x2b, cc.y, ss.y, y1b, y2b);
                qf[m][kk][r] = pack_bf2(y1a, y1b);
                qf[m][kk + HD / 32][r] = pack_bf2(y2a, y2b);
            }
        }
    }

    float o[MT][HD / 8][4];
    float mrow[MT][2], lrow[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++) {
#pragma unroll
        for (int n = 0; n < HD / 8; n++) o[m][n][0] = o[m][n][1] = o[m][n][2] = o[m][n][3] = 0.f;
        mrow[m][0] = mrow[m][1] = NEG_INF;
        lrow[m][0] = lrow[m][1] = 0.f;
    }
    // ldmatrix row addresses: K (x4 over two 16-wide k chunks), V (x4.trans over two n blocks).
    const int mi = lane >> 3, ri = lane & 7;

    for (int t = t0; t < nt; t++) {
        const int st = (t - t0) & 1;
        if (t + 1 < nt) {
            load_tile_async<HD, BK>(sK + (st ^ 1) * TILE, Kb, (t + 1) * BK, S);
            load_tile_async<HD, BK>(sV + (st ^ 1) * TILE, Vb, (t + 1) * BK, S);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (active) {
            const bf16* cK = sK + st * TILE;
            const bf16* cV = sV + st * TILE;
            const int k0 = t * BK;
            float s[MT][BK / 8][4];
#pragma unroll
            for (int n = 0; n < BK / 8; n++)
#pragma unroll
                for (int m = 0; m < MT; m++) s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.f;
            // S = Q K^T, 16 head dims at a time: one ldmatrix.x4 gives two key blocks' fragments,
            // and the mmas of one step all write different accumulators (consecutive dependent
            // mmas would each wait out the previous one's latency).
            const u32 kaddr = smem_addr(cK + ((mi >> 1) * 8 + ri) * LDS + (mi & 1) * 8);
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                u32 kb[BK / 8][2];
#pragma unroll
                for (int nb = 0; nb < BK / 16; nb++)
                    ldsm_x4(kb[2 * nb][0], kb[2 * nb][1], kb[2 * nb + 1][0], kb[2 * nb + 1][1],
                            kaddr + (nb * 16 * LDS + kk * 16) * 2);
#pragma unroll
                for (int n = 0; n < BK / 8; n++)
#pragma unroll
                    for (int m = 0; m < MT; m++) mma_bf16_16816(s[m][n], qf[m][kk], kb[n][0], kb[n][1]);
            }
            u32 pa[MT][BK / 16][4];
            // Only a tile holding padded or out-of-range keys needs the mask (warp-uniform).
            const bool edge = k0 < kstart || k0 + BK > S;
#pragma unroll
            for (int m = 0; m < MT; m++) {
                // Raw scores; the scale goes into the exponent's FMA.
                float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
                for (int n = 0; n < BK / 8; n++) {
                    if (edge) {
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            int key = k0 + n * 8 + tq * 2 + (e & 1);
                            if (key < kstart || key >= S) s[m][n][e] = NEG_INF;
                        }
                    }
                    mx0 = fmaxf(mx0, fmaxf(s[m][n][0], s[m][n][1]));
                    mx1 = fmaxf(mx1, fmaxf(s[m][n][2], s[m][n][3]));
                }
                mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
                mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
                mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
                mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
                float mn0 = fmaxf(mrow[m][0], mx0), mn1 = fmaxf(mrow[m][1], mx1);
                // In the log2 domain; a row with every key so far masked keeps base 0 (guards
                // -inf - -inf).
                float base0 = mn0 == NEG_INF ? 0.f : mn0 * scale_log2;
                float base1 = mn1 == NEG_INF ? 0.f : mn1 * scale_log2;
                float a0 = fast_exp2(mrow[m][0] * scale_log2 - base0);
                float a1 = fast_exp2(mrow[m][1] * scale_log2 - base1);
                mrow[m][0] = mn0;
                mrow[m][1] = mn1;
                float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
                for (int n = 0; n < BK / 8; n++) {
                    s[m][n][0] = fast_exp2(fmaf(s[m][n][0], scale_log2, -base0));
                    s[m][n][1] = fast_exp2(fmaf(s[m][n][1], scale_log2, -base0));
                    s[m][n][2] = fast_exp2(fmaf(s[m][n][2], scale_log2, -base1));
                    s[m][n][3] = fast_exp2(fmaf(s[m][n][3], scale_log2, -base1));
                    ps0 += s[m][n][0] + s[m][n][1];
                    ps1 += s[m][n][2] + s[m][n][3];
                }
                lrow[m][0] = lrow[m][0] * a0 + ps0;
                lrow[m][1] = lrow[m][1] * a1 + ps1;
                // Rescale O only when some row's running max moved (rare after the first tiles).
                if (__any_sync(0xffffffffu, a0 != 1.f || a1 != 1.f)) {
#pragma unroll
                    for (int n = 0; n < HD / 8; n++) {
                        o[m][n][0] *= a0;
                        o[m][n][1] *= a0;
                        o[m][n][2] *= a1;
                        o[m][n][3] *= a1;
                    }
                }
                // P's accumulator layout is the A-fragment layout of the next mma.
#pragma unroll
                for (int kc = 0; kc < BK / 16; kc++) {
                    pa[m][kc][0] = pack_bf2(s[m][2 * kc][0], s[m][2 * kc][1]);
                    pa[m][kc][1] = pack_bf2(s[m][2 * kc][2], s[m][2 * kc][3]);
                    pa[m][kc][2] = pack_bf2(s[m][2 * kc + 1][0], s[m][2 * kc + 1][1]);
                    pa[m][kc][3] = pack_bf2(s[m][2 * kc + 1][2], s[m][2 * kc + 1][3]);
                }
            }
            // O += P V.
#pragma unroll
            for (int kc = 0; kc < BK / 16; kc++) {
                const u32 vbase = smem_addr(cV + (kc * 16 + ri + (mi & 1) * 8) * LDS + (mi >> 1) * 8);
#pragma unroll
                for (int n = 0; n < HD / 8; n += 2) {
                    u32 b0, b1, b2, b3;
                    ldsm_x4_t(b0, b1, b2, b3, vbase + n * 8 * 2);
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        mma_bf16_16816(o[m][n], pa[m][kc], b0, b1);
                        mma_bf16_16816(o[m][n + 1], pa[m][kc], b2, b3);
                    }
                }
            }
        }
        __syncthreads();
    }
    if (!active) return;
    const u64 ld = (u64)NH * HD;
#pragma unroll
    for (int m = 0; m < MT; m++) {
        float l0 = lrow[m][0], l1 = lrow[m][1];
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
        const int qa = q0 + m * 16 + g, qb = qa + 8;
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            int col = h * HD + n * 8 + tq * 2;
            if (qa < Sq)
                *(u32*)(O + ((u64)b * Sq + qa) * ld + col) = pack_bf2(o[m][n][0] * inv0, o[m][n][1] * inv0);
            if (qb < Sq)
                *(u32*)(O + ((u64)b * Sq + qb) * ld + col) = pack_bf2(o[m][n][2] * inv1, o[m][n][3] * inv1);
        }
    }
}

#define ATTN_ENTRY(NAME, HDV, NWV, MTV, BKV)                                                      \
    extern "C" __global__ void __launch_bounds__(32 * NWV) NAME(                                 \
        const bf16* __restrict__ QKV, const bf16* __restrict__ K, const bf16* __restrict__ V,    \
        bf16* __restrict__ O, const int* __restrict__ pad, int Sq, int S, int NH, int KVH,       \
        float scale_log2, const float* __restrict__ cos_t, const float* __restrict__ sin_t,      \
        const GenState* __restrict__ st, int W, int win_base, int blk, int q_tail, int q_base,   \
        int q_stride, const float* __restrict__ rr) {                                            \
        const QSrc qs{QKV, cos_t, sin_t, st, rr, W, win_base, blk, q_tail, q_base, q_stride};    \
        attn_impl<HDV, NWV, MTV, BKV>(qs, K, V, O, pad, Sq, S, NH, KVH, scale_log2);             \
    }
ATTN_ENTRY(attn_fwd_hd32, 32, 4, 1, 64)
ATTN_ENTRY(attn_fwd_hd64, 64, 4, 1, 64)
ATTN_ENTRY(attn_fwd_hd128, 128, 4, 1, 64)
ATTN_ENTRY(attn_fwd_w8_hd32, 32, 8, 1, 64)
ATTN_ENTRY(attn_fwd_w8_hd64, 64, 8, 1, 64)
ATTN_ENTRY(attn_fwd_w8_hd128, 128, 8, 1, 64)
ATTN_ENTRY(attn_fwd_m2_hd32, 32, 4, 2, 32)
ATTN_ENTRY(attn_fwd_m2_hd64, 64, 4, 2, 32)
ATTN_ENTRY(attn_fwd_m2_hd128, 128, 4, 2, 32)
