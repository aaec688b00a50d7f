// Shared helpers for every kernel in kernels/*.cu. Prepended by src/gpu/nvrtc.rs, so the
// kernels compile with NVRTC alone: no CUDA headers, bf16 handled as raw 16-bit words.
typedef unsigned short bf16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define NEG_INF (__int_as_float(0xff800000))
#define NEG_INF_D (__longlong_as_double(0xfff0000000000000LL))

__device__ __forceinline__ float bf2f(bf16 x) { return __uint_as_float(((u32)x) << 16); }

// float -> bf16, round to nearest even: one hardware cvt (sm_80+).
__device__ __forceinline__ bf16 f2bf(float f) {
    bf16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}

// Two floats -> one 32-bit word of bf16 (a in the low half, as mma fragments expect); one cvt.
__device__ __forceinline__ u32 pack_bf2(float a, float b) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
    return r;
}

// 2^x, the SFU approximation (flushes denormal results to 0; exp2(-inf) = 0).
__device__ __forceinline__ float fast_exp2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over a CTA of up to 1024 threads; `red` holds 32 floats. All threads get the result.
__device__ __forceinline__ float block_sum(float v, float* red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = lane < nw ? red[lane] : 0.f;
    return warp_sum(t);
}

// The sampler's counter-based RNG, the exact u64 arithmetic of src/distill/rng.rs.
#define STREAM_GUMBEL 0x67756d62ULL
#define STREAM_REMASK 0x72656d61ULL

__device__ __forceinline__ u64 mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// The hash state after (seed, stream, prompt, step, pos): only the token remains to mix.
__device__ __forceinline__ u64 rng_prefix(u64 seed, u64 stream, u64 prompt, u64 step, u64 pos) {
    u64 h = mix64(seed ^ 0x9E3779B97F4A7C15ULL);
    h = mix64(h ^ stream);
    h = mix64(h ^ prompt);
    h = mix64(h ^ (step * 0xD6E8FEB86659FD93ULL));
    h = mix64(h ^ (pos * 0xA0761D6478BD642FULL));
    return h;
}

// Uniform in (0, 1), float64, from the prefix state and the token.
__device__ __forceinline__ double rng_uniform(u64 prefix, u64 token) {
    u64 h = mix64(prefix ^ (token * 0xE7037ED1A0B428DBULL));
    return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// The generation state read by every per-step kernel, so one captured CUDA graph serves all
// steps: the batch's step counter, step within the block and block (lockstep phase), and per
// batch row (slot) its own block, step within that block, random-stream step (fixed
// schedule: block * steps_per_block + step in block, LLaDA's global step; threshold: the
// steps the row has run) and whether it is still decoding. Rows may sit at different blocks
// (continuous batching refills a finished row's slot with a new prompt at block 0).
#define MAX_SLOTS 1024
struct GenState {
    int step; int step_in_block; int block; int pad;
    int rblock[MAX_SLOTS]; int rsib[MAX_SLOTS]; int rstep[MAX_SLOTS]; int rlive[MAX_SLOTS];
};

// One rotary pair (x1 at column j, x2 at j + HD/2) by angle (c, s), with the roundings spelled
// out so that every kernel that rotates (qkv_rope for K, attention for Q) rounds identically.
__device__ __forceinline__ void rope_pair(float x1, float x2, float c, float s, float& y1, float& y2) {
    y1 = __fmaf_rn(x1, c, __fmul_rn(-x2, s));
    y2 = __fmaf_rn(x2, c, __fmul_rn(x1, s));
}
