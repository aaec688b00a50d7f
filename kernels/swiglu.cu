// SwiGLU: act = silu(gate) * up, reading the fused [gate; up] GEMM output row by row
// (8 values per 16-byte load and store; I is a multiple of 8). rr (folded RMSNorm, else null):
// gate and up of row t are first scaled by rr[t].
extern "C" __global__ void swiglu(const bf16* __restrict__ gu, bf16* __restrict__ act, int I,
                                  const float* __restrict__ rr) {
    u64 t = blockIdx.x;
    const float sc = rr ? rr[t] : 1.f;
    const bf16* g = gu + t * 2 * I;
    const bf16* u = g + I;
    bf16* o = act + t * I;
    for (int i = threadIdx.x * 8; i < I; i += blockDim.x * 8) {
        uint4 gv = *(const uint4*)(g + i), uv = *(const uint4*)(u + i);
        const u32 gw[4] = {gv.x, gv.y, gv.z, gv.w}, uw[4] = {uv.x, uv.y, uv.z, uv.w};
        u32 ow[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float g0 = __uint_as_float(gw[k] << 16) * sc, g1 = __uint_as_float(gw[k] & 0xffff0000u) * sc;
            float u0 = __uint_as_float(uw[k] << 16) * sc, u1 = __uint_as_float(uw[k] & 0xffff0000u) * sc;
            ow[k] = pack_bf2(g0 / (1.f + __expf(-g0)) * u0, g1 / (1.f + __expf(-g1)) * u1);
        }
        *(uint4*)(o + i) = make_uint4(ow[0], ow[1], ow[2], ow[3]);
    }
}
