// The QKV step after the fused [q;k;v] GEMM: rotary embedding on q and k with position ids
// taken from the key-padding mask (left padding: position = index among the real tokens),
// and the split into per-head layouts [B, heads, S, head_dim] for attention.
extern "C" __global__ void qkv_rope(const bf16* __restrict__ qkv, const float* __restrict__ cos_t,
                                    const float* __restrict__ sin_t, const int* __restrict__ pad,
                                    bf16* __restrict__ q, bf16* __restrict__ k, bf16* __restrict__ v,
                                    int S, int NH, int KVH, int HD) {
    int t = blockIdx.x, b = t / S, s = t % S;
    int pos = s - pad[b];
    if (pos < 0) pos = 0;
    int half = HD / 2, heads = NH + 2 * KVH;
    const bf16* src = qkv + (u64)t * heads * HD;
    const float* c = cos_t + (u64)pos * half;
    const float* sn = sin_t + (u64)pos * half;
    for (int p = threadIdx.x; p < heads * half; p += blockDim.x) {
        int h = p / half, i = p % half;
        float x1 = bf2f(src[h * HD + i]), x2 = bf2f(src[h * HD + i + half]);
        bf16* dst;
        if (h < NH) {
            dst = q + (((u64)b * NH + h) * S + s) * HD;
        } else if (h < NH + KVH) {
            dst = k + (((u64)b * KVH + (h - NH)) * S + s) * HD;
        } else {
            dst = v + (((u64)b * KVH + (h - NH - KVH)) * S + s) * HD;
            dst[i] = f2bf(x1);
            dst[i + half] = f2bf(x2);
            continue;
        }
        float cc = c[i], ss = sn[i];
        dst[i] = f2bf(x1 * cc - x2 * ss);
        dst[i + half] = f2bf(x2 * cc + x1 * ss);
    }
}
