// Embedding gather: token ids -> rows of the bf16 table, written to the residual stream
// (bf16 by default: a straight copy; fp32 with DLM_RESID=f32) — 8 values per 16-byte load, H a
// multiple of 8. `embed_gather` takes every position; `embed_window` the W positions from the
// current block's start (cache steps: the rows of the window only, read from the full [B, S]
// token matrix through the device-side state).
__device__ __forceinline__ void embed_store(const uint4 v, bf16* out) { *(uint4*)out = v; }
__device__ __forceinline__ void embed_store(const uint4 v, float* out) {
    const u32 w[4] = {v.x, v.y, v.z, v.w};
    float4 a, b;
    a.x = __uint_as_float(w[0] << 16); a.y = __uint_as_float(w[0] & 0xffff0000u);
    a.z = __uint_as_float(w[1] << 16); a.w = __uint_as_float(w[1] & 0xffff0000u);
    b.x = __uint_as_float(w[2] << 16); b.y = __uint_as_float(w[2] & 0xffff0000u);
    b.z = __uint_as_float(w[3] << 16); b.w = __uint_as_float(w[3] & 0xffff0000u);
    *(float4*)out = a;
    *(float4*)(out + 4) = b;
}

template <typename R>
__device__ __forceinline__ void embed_row(const bf16* __restrict__ row, R* __restrict__ out, int H) {
    for (int i = threadIdx.x * 8; i < H; i += blockDim.x * 8) embed_store(*(const uint4*)(row + i), out + i);
}

template <typename R>
__device__ __forceinline__ void embed_gather_impl(const u32* __restrict__ tokens,
                                                  const bf16* __restrict__ emb, R* __restrict__ resid,
                                                  int H) {
    u64 t = blockIdx.x;
    embed_row(emb + (u64)tokens[t] * H, resid + t * H, H);
}

template <typename R>
__device__ __forceinline__ void embed_window_impl(const u32* __restrict__ tokens,
                                                  const bf16* __restrict__ emb, R* __restrict__ resid,
                                                  int H, int S, int W, const GenState* __restrict__ st,
                                                  int gen_start, int blk) {
    u64 t = blockIdx.x;
    int b = (int)(t / W), i = (int)(t % W);
    int pos = gen_start + st->rblock[b] * blk + i;
    if (pos >= S) pos = S - 1;
    embed_row(emb + (u64)tokens[(u64)b * S + pos] * H, resid + t * H, H);
}

#define EMBED_ENTRIES(SUF, R)                                                                    \
    extern "C" __global__ void embed_gather##SUF(const u32* __restrict__ tokens,                 \
                                                 const bf16* __restrict__ emb,                   \
                                                 R* __restrict__ resid, int H) {                 \
        embed_gather_impl<R>(tokens, emb, resid, H);                                             \
    }                                                                                            \
    extern "C" __global__ void embed_window##SUF(                                               \
        const u32* __restrict__ tokens, const bf16* __restrict__ emb, R* __restrict__ resid,     \
        int H, int S, int W, const GenState* __restrict__ st, int gen_start, int blk) {          \
        embed_window_impl<R>(tokens, emb, resid, H, S, W, st, gen_start, blk);                   \
    }
EMBED_ENTRIES(, bf16)
EMBED_ENTRIES(_f32, float)
