// Embedding gather: token ids -> rows of the bf16 table, written to the fp32 residual stream.
extern "C" __global__ void embed_gather(const u32* __restrict__ tokens, const bf16* __restrict__ emb,
                                        float* __restrict__ resid, int H) {
    u64 t = blockIdx.x;
    const bf16* row = emb + (u64)tokens[t] * H;
    float* out = resid + t * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) out[i] = bf2f(row[i]);
}
