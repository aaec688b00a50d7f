// The QKV step after the fused [q;k;v] GEMM: rotary embedding on q and k with position ids
// taken from the key-padding mask (left padding: position = index among the real tokens),
// and the split into per-head layouts for attention: q [B, NH, W, HD]; k, v [B, KVH, S, HD].
// Full pass: W = S, row i is position i (win_base < 0). Window pass (cache steps): row i is
// position win_base + block*blk + i, and k/v land at that position of the layer's KV cache.
// rr (folded RMSNorm, else null): every q/k/v value of row t is first scaled by rr[t].
// q_rows > 0 (the last layer, whose output only the block's rows need): q keeps only rows
// i - (q_base + block*q_stride) in [0, q_rows), as [B, NH, q_rows, HD]; k and v keep every row.
// q null (what the engine passes): only k and v; attention reads and rotates q from qkv.
extern "C" __global__ void qkv_rope(const bf16* __restrict__ qkv, const float* __restrict__ cos_t,
                                    const float* __restrict__ sin_t, const int* __restrict__ pad,
                                    bf16* __restrict__ q, bf16* __restrict__ k, bf16* __restrict__ v,
                                    int S, int W, int NH, int KVH, int HD,
                                    const GenState* __restrict__ st, int win_base, int blk,
                                    int q_rows, int q_base, int q_stride,
                                    const float* __restrict__ rr) {
    int t = blockIdx.x, b = t / W, i = t % W;
    int s = win_base < 0 ? i : win_base + st->rblock[b] * blk + i;
    int qi = i, qn = W;
    if (q_rows > 0) {
        qi = i - (q_base + st->rblock[b] * q_stride);
        qn = q_rows;
    }
    const bool keep_q = qi >= 0 && qi < qn;
    const float scale = rr ? rr[t] : 1.f;
    int pos = s - pad[b];
    if (pos < 0) pos = 0;
    int half = HD / 2, heads = NH + 2 * KVH, quarter = half / 4;
    const bf16* src = qkv + (u64)t * heads * HD;
    const float* c = cos_t + (u64)pos * half;
    const float* sn = sin_t + (u64)pos * half;
    // 4 rotation pairs per thread: 8-byte loads and stores of bf16, 16-byte loads of cos/sin.
    // q == null: attention rotates the queries itself as it loads them (K and V only here).
    const int h0 = q ? 0 : NH;
    for (int p = threadIdx.x + h0 * quarter; p < heads * quarter; p += blockDim.x) {
        int h = p / quarter, j = (p % quarter) * 4;
        uint2 w1 = *(const uint2*)(src + h * HD + j), w2 = *(const uint2*)(src + h * HD + j + half);
        float x1[4] = {__uint_as_float(w1.x << 16), __uint_as_float(w1.x & 0xffff0000u),
                       __uint_as_float(w1.y << 16), __uint_as_float(w1.y & 0xffff0000u)};
        float x2[4] = {__uint_as_float(w2.x << 16), __uint_as_float(w2.x & 0xffff0000u),
                       __uint_as_float(w2.y << 16), __uint_as_float(w2.y & 0xffff0000u)};
        bf16* dst;
        if (h < NH) {
            if (!keep_q) continue;
            dst = q + (((u64)b * NH + h) * qn + qi) * HD;
        } else if (h < NH + KVH) {
            dst = k + (((u64)b * KVH + (h - NH)) * S + s) * HD;
        } else {
            dst = v + (((u64)b * KVH + (h - NH - KVH)) * S + s) * HD;
            if (rr) {
                *(uint2*)(dst + j) = make_uint2(pack_bf2(x1[0] * scale, x1[1] * scale),
                                                pack_bf2(x1[2] * scale, x1[3] * scale));
                *(uint2*)(dst + j + half) = make_uint2(pack_bf2(x2[0] * scale, x2[1] * scale),
                                                       pack_bf2(x2[2] * scale, x2[3] * scale));
            } else {
                *(uint2*)(dst + j) = w1;
                *(uint2*)(dst + j + half) = w2;
            }
            continue;
        }
        if (rr) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                x1[e] *= scale;
                x2[e] *= scale;
            }
        }
        float4 cc = *(const float4*)(c + j), ss = *(const float4*)(sn + j);
        const float cv[4] = {cc.x, cc.y, cc.z, cc.w}, sv[4] = {ss.x, ss.y, ss.z, ss.w};
        float y1[4], y2[4];
#pragma unroll
        for (int e = 0; e < 4; e++) rope_pair(x1[e], x2[e], cv[e], sv[e], y1[e], y2[e]);
        *(uint2*)(dst + j) = make_uint2(pack_bf2(y1[0], y1[1]), pack_bf2(y1[2], y1[3]));
        *(uint2*)(dst + j + half) = make_uint2(pack_bf2(y2[0], y2[1]), pack_bf2(y2[2], y2[3]));
    }
}
