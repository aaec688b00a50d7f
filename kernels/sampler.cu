// LLaDA's sampler on the GPU, over the current block's logits only.
//  - sample_block: one CTA per (batch row, block position), one fused pass over the vocabulary:
//    argmax of the logits (temperature 0) or of the Gumbel-perturbed scores in float64 with the
//    counter-based RNG of src/distill/rng.rs (temperature > 0), the log-sum-exp, and the chosen
//    token's probability under the un-noised softmax (the low-confidence score). Positions that
//    are not masked get confidence -inf (only masked positions compete).
//    Excluded tokens (mask, EOS/EoT under the LLaDA flags) follow the CPU sampler exactly.
//    A non-finite logit of a masked position is reported, not sampled from: the smallest
//    (step << 32 | row) goes to *nf_key by atomicMin and its row's first non-finite token to
//    nf_info[row] = gen position << 34 | class << 32 | token (class 0 NaN, 1 +inf, 2 -inf);
//    the host reads nf_key once after the run and fails naming prompt, step, position, token.
//  - commit_topk: per batch row, commit the k most confident masked positions of the block
//    (k from the linear schedule; ties go to the lower position), or, in threshold mode, the
//    top one and all above the threshold; committed tokens stay.
//  - advance: moves the device-side generation state to the next step, row by row (rows may
//    sit at different blocks), and retires rows that are finished (early exit at EOS).
//  - letter_head: MCQ letter logits -> raw log-probs (full-vocabulary log-softmax) and the
//    distribution renormalised over the item's letters.

struct ArgBest { double score; float logit; int idx; };

__device__ __forceinline__ bool better(double s, int i, double bs, int bi) {
    return s > bs || (s == bs && i < bi);
}

// Online (max, sum of exp) pair merge.
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
    if (m2 == NEG_INF) return;
    if (m == NEG_INF) { m = m2; s = s2; return; }
    if (m2 > m) { s = s * __expf(m - m2) + s2; m = m2; }
    else { s = s + s2 * __expf(m2 - m); }
}

#define SAMPLER_THREADS 512
#define MAX_BAN 32

// Token exclusions, as the CPU sampler applies them: ban[0..n_choice) are never candidates and
// are left out of the confidence softmax (the mask token; EOS under logits_eos_inf);
// ban[n_choice..n_all) are candidates but get confidence 0 and are left out of the softmax
// (EOS/EoT under confidence_eos_eot_inf).
__device__ __forceinline__ bool banned(const u32* sban, int lo, int hi, int i) {
    for (int k = lo; k < hi; k++)
        if (sban[k] == (u32)i) return true;
    return false;
}

extern "C" __global__ void __launch_bounds__(SAMPLER_THREADS) sample_block(
    const float* __restrict__ logits, int V, const u32* __restrict__ x, int S, int blk,
    const GenState* __restrict__ st, int gen_start, u32 mask_id, double temperature,
    int remask_random, u64 seed, const u64* __restrict__ prompt_keys,
    u32* __restrict__ x0_out, double* __restrict__ conf_out, const u32* __restrict__ ban,
    int n_choice, int n_all, int nblocks, u64* __restrict__ nf_key, u64* __restrict__ nf_info) {
    const int r = blockIdx.x, b = r / blk, j = r % blk;
    const int pos = gen_start + st->rblock[b] * blk + j;
    const u32 cur = x[(u64)b * S + pos];
    if (!st->rlive[b] || cur != mask_id) {
        if (threadIdx.x == 0) { x0_out[r] = cur; conf_out[r] = NEG_INF_D; }
        return;
    }
    __shared__ u32 sban[MAX_BAN];
    if (threadIdx.x < n_all) sban[threadIdx.x] = ban[threadIdx.x];
    __syncthreads();
    const u64 gpos = (u64)(pos - gen_start);
    const u64 step = (u64)st->step;       // the batch's step (the non-finite report)
    const u64 rstep = (u64)st->rstep[b];  // the row's random-stream step
    const u64 prefix = rng_prefix(seed, STREAM_GUMBEL, prompt_keys[b], rstep, gpos);
    const float* row = logits + (u64)r * V;
    const bool noisy = temperature > 0.0;

    // Pass 1: the maximum logit over the softmax's support and the best (noised) candidate;
    // pass 2: the softmax normaliser in float64 (as the CPU path computes the confidence).
    float m = NEG_INF;
    double bs = NEG_INF_D;
    float bl = NEG_INF;
    int bi = 0x7fffffff;
    int nf = 0x7fffffff;  // this thread's first non-finite logit (token id)
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float l = row[i];
        if (!isfinite(l) && i < nf) nf = i;
        if (banned(sban, 0, n_choice, i)) continue;
        if (!banned(sban, n_choice, n_all, i)) m = fmaxf(m, l);
        double sc = (double)l;
        if (noisy) {
            double u = rng_uniform(prefix, (u64)i);
            sc = sc - temperature * log(-log(u));
        }
        if (better(sc, i, bs, bi)) { bs = sc; bl = l; bi = i; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        double bs2 = __shfl_xor_sync(0xffffffffu, bs, o);
        int bi2 = __shfl_xor_sync(0xffffffffu, bi, o);
        float bl2 = __shfl_xor_sync(0xffffffffu, bl, o);
        if (better(bs2, bi2, bs, bi)) { bs = bs2; bi = bi2; bl = bl2; }
    }
    __shared__ float sm[32], sl[32];
    __shared__ double sb[32], sz[32];
    __shared__ int si[32];
    __shared__ int snf;
    if (__syncthreads_or(nf != 0x7fffffff)) {  // uniform: every thread takes the same branch
        if (threadIdx.x == 0) snf = 0x7fffffff;
        __syncthreads();
        if (nf != 0x7fffffff) atomicMin(&snf, nf);
        __syncthreads();
        if (threadIdx.x == 0) {
            const u64 key = (step << 32) | (u64)r;
            const float v = row[snf];
            const u64 cls = isnan(v) ? 0ull : (v > 0.0f ? 1ull : 2ull);
            if (key < atomicMin((unsigned long long*)nf_key, (unsigned long long)key))
                nf_info[r] = (gpos << 34) | (cls << 32) | (u64)snf;
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) { sm[warp] = m; sb[warp] = bs; si[warp] = bi; sl[warp] = bl; }
    __syncthreads();
    if (warp == 0) {
        m = lane < nw ? sm[lane] : NEG_INF;
        bs = lane < nw ? sb[lane] : NEG_INF_D;
        bi = lane < nw ? si[lane] : 0x7fffffff;
        bl = lane < nw ? sl[lane] : NEG_INF;
        for (int o = 16; o > 0; o >>= 1) {
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            double bs2 = __shfl_xor_sync(0xffffffffu, bs, o);
            int bi2 = __shfl_xor_sync(0xffffffffu, bi, o);
            float bl2 = __shfl_xor_sync(0xffffffffu, bl, o);
            if (better(bs2, bi2, bs, bi)) { bs = bs2; bi = bi2; bl = bl2; }
        }
        if (lane == 0) { sm[0] = m; si[0] = bi; sl[0] = bl; }
    }
    __syncthreads();
    m = sm[0];
    double z = 0.0;
    if (!remask_random) {
        const double md = (double)m;
        for (int i = threadIdx.x; i < V; i += blockDim.x)
            if (!banned(sban, 0, n_all, i)) z += exp((double)row[i] - md);
        for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
        if (lane == 0) sz[warp] = z;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const int x0 = si[0] == 0x7fffffff ? 0 : si[0];
        x0_out[r] = (u32)x0;
        double conf;
        if (remask_random) {
            u64 pr = rng_prefix(seed, STREAM_REMASK, prompt_keys[b], rstep, gpos);
            conf = rng_uniform(pr, 0);
        } else if (banned(sban, 0, n_all, x0)) {
            conf = 0.0;  // an EOS/EoT candidate under confidence_eos_eot_inf
        } else {
            double zz = 0.0;
            for (int w = 0; w < nw; w++) zz += sz[w];
            conf = exp((double)sl[0] - (double)m) / zz;  // p(x0) under the un-noised softmax
        }
        conf_out[r] = conf;
    }
}

// One CTA per batch row, one thread per block position (blockDim >= blk, blk <= 1024).
// Fixed schedule (threshold < 0): the k most confident masked positions, k from the linear
// schedule, ties to the lower position. Confidence threshold (Fast-dLLM's parallel decoding,
// approximate): the most confident masked position and every other one with confidence >=
// threshold. Committed tokens stay.
extern "C" __global__ void commit_topk(u32* __restrict__ x, int S, int blk,
                                       GenState* __restrict__ st, int gen_start,
                                       const int* __restrict__ ntrans, u32 mask_id,
                                       const u32* __restrict__ x0, const double* __restrict__ conf,
                                       double threshold, int nblocks) {
    extern __shared__ double sconf[];
    const int b = blockIdx.x, j = threadIdx.x;
    if (!st->rlive[b]) return;
    const int pos0 = gen_start + st->rblock[b] * blk;
    const int k = ntrans[st->rsib[b]];
    bool masked = false;
    double c = NEG_INF_D;
    if (j < blk) {
        masked = x[(u64)b * S + pos0 + j] == mask_id;
        c = masked ? conf[b * blk + j] : NEG_INF_D;
        sconf[j] = c;
    }
    __syncthreads();
    if (j < blk && masked) {
        int rank = 0;
        for (int i = 0; i < blk; i++) {
            double ci = sconf[i];
            rank += (ci > c) || (ci == c && i < j);
        }
        bool take = threshold < 0.0 ? rank < k : (rank == 0 || c >= threshold);
        if (take) x[(u64)b * S + pos0 + j] = x0[b * blk + j];
    }
    // Threshold mode: the row's random stream counts the steps it ran with a mask left.
    if (__syncthreads_or(masked) && threshold >= 0.0 && j == 0) st->rstep[b] += 1;
}

// Whether row r is finished: an EOS/EoT (stop[0..n_stop)) committed with every generated
// position before it committed (src/sampling/early_exit.rs).
__device__ __forceinline__ bool row_finished(const u32* __restrict__ g, int gen_length, u32 mask_id,
                                             const u32* __restrict__ stop, int n_stop) {
    for (int i = 0; i < gen_length; i++) {
        const u32 t = g[i];
        if (t == mask_id) return false;
        for (int k = 0; k < n_stop; k++)
            if (t == stop[k]) return true;
    }
    return false;
}

// Moves the device-side state to the next step. One CTA.
// Aligned (lockstep: the KV-cache modes and the fixed batches of --no-early-exit): every live
// row is at the same step of its block; fixed schedule: a block lasts steps_per_block steps;
// threshold (adaptive != 0): the block ends when no live row has a masked position left in
// its block. Free (exact, no cache): each live row moves on by itself.
// A row leaves (rlive = 0; rblock stays a valid block) past its last block, or, with n_stop
// > 0, as soon as it is finished (row_finished).
extern "C" __global__ void advance(GenState* st, int steps_per_block, const u32* __restrict__ x,
                                   int S, int B, int blk, int gen_start, u32 mask_id,
                                   int adaptive, int nblocks, int aligned,
                                   const u32* __restrict__ stop, int n_stop, int gen_length) {
    int left = 0;
    if (adaptive && aligned) {
        for (int t = threadIdx.x; t < B * blk; t += blockDim.x) {
            const int r = t / blk;
            if (st->rlive[r])
                left |= x[(u64)r * S + gen_start + st->rblock[r] * blk + t % blk] == mask_id;
        }
    }
    left = __syncthreads_or(left);
    const int sib0 = st->step_in_block;
    const bool phase_done = adaptive ? !left : sib0 + 1 == steps_per_block;
    __syncthreads();
    if (threadIdx.x == 0) {
        st->step += 1;
        st->step_in_block = phase_done ? 0 : sib0 + 1;
        if (phase_done) st->block += 1;
    }
    for (int r = threadIdx.x; r < B; r += blockDim.x) {
        if (!st->rlive[r]) continue;
        const u32* g = x + (u64)r * S + gen_start;
        if (n_stop > 0 && row_finished(g, gen_length, mask_id, stop, n_stop)) {
            st->rlive[r] = 0;
            continue;
        }
        bool done;
        if (aligned) {
            done = phase_done;
        } else if (adaptive) {
            done = true;
            const u32* blkp = g + st->rblock[r] * blk;
            for (int j = 0; j < blk; j++) done &= blkp[j] != mask_id;
        } else {
            done = st->rsib[r] + 1 == steps_per_block;
        }
        int sib = done ? 0 : st->rsib[r] + 1, nb = st->rblock[r] + (done ? 1 : 0);
        if (nb >= nblocks) {
            st->rlive[r] = 0;
            nb = nblocks - 1;
        }
        st->rsib[r] = sib;
        st->rblock[r] = nb;
        if (!adaptive) st->rstep[r] = nb * steps_per_block + sib;
    }
}

// MCQ letter head: one CTA per row of full-vocabulary logits; letters[r*10 + i] for
// i < nletters[r]. Writes raw log-probs and renormalised probabilities, [rows, 10].
extern "C" __global__ void __launch_bounds__(SAMPLER_THREADS) letter_head(
    const float* __restrict__ logits, int V, const u32* __restrict__ letters,
    const int* __restrict__ nletters, float* __restrict__ logprob, float* __restrict__ prob) {
    const int r = blockIdx.x;
    const float* row = logits + (u64)r * V;
    float m = NEG_INF, s = 0.f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) lse_merge(m, s, row[i], 1.f);
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lse_merge(m, s, m2, s2);
    }
    __shared__ float sm[32], ss[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    if (threadIdx.x == 0) {
        m = NEG_INF; s = 0.f;
        for (int w = 0; w < nw; w++) lse_merge(m, s, sm[w], ss[w]);
        float lse = m + logf(s);
        int n = nletters[r];
        float lm = NEG_INF;
        for (int i = 0; i < n; i++) lm = fmaxf(lm, row[letters[r * 10 + i]]);
        float z = 0.f;
        for (int i = 0; i < n; i++) z += expf(row[letters[r * 10 + i]] - lm);
        for (int i = 0; i < 10; i++) {
            if (i < n) {
                float l = row[letters[r * 10 + i]];
                logprob[r * 10 + i] = l - lse;
                prob[r * 10 + i] = expf(l - lm) / z;
            } else {
                logprob[r * 10 + i] = NEG_INF;
                prob[r * 10 + i] = 0.f;
            }
        }
    }
}

// distill --trajectory / --top-k (src/sampling/trajectory.rs): after commit_topk, before
// advance. One CTA per (batch row, block position); a position this step committed (it was a
// live masked position -- conf not -inf -- and holds a token now) gets its commit step (the
// row's random-stream step: threshold mode's commit_topk already counted this step, so one
// less) in step_out[b * gen_length + gpos] and, with K > 0, the K most probable tokens of its
// logits over the sampler's support (ban[0..n_choice) excluded: the mask, EOS under
// logits_eos_inf), most probable first with ties to the lower id, their log-probabilities
// (logit - logsumexp, float64 then f32) and the logsumexp, at [(b * gen_length + gpos) * K].
// K rounds of a CTA-wide argmax over the tokens ranked after the previous pick: exact, no
// scratch beyond registers. Only these buffers cross to the host, when a row leaves.
__device__ __forceinline__ bool tk_after(float l, int i, float pl, int pi) {
    return l < pl || (l == pl && i > pi);
}
__device__ __forceinline__ bool tk_better(float l, int i, float bl, int bi) {
    return l > bl || (l == bl && i < bi);
}

extern "C" __global__ void __launch_bounds__(SAMPLER_THREADS) record_topk(
    const float* __restrict__ logits, int V, const u32* __restrict__ x, int S, int blk,
    const GenState* __restrict__ st, int gen_start, int gen_length, u32 mask_id,
    const double* __restrict__ conf, const u32* __restrict__ ban, int n_choice, int adaptive,
    int K, int* __restrict__ step_out, u32* __restrict__ ids_out, float* __restrict__ lp_out,
    float* __restrict__ lse_out) {
    const int r = blockIdx.x, b = r / blk, j = r % blk;
    const int gpos = st->rblock[b] * blk + j;
    if (conf[r] == NEG_INF_D || x[(u64)b * S + gen_start + gpos] == mask_id) return;
    const u64 o = (u64)b * gen_length + gpos;
    if (threadIdx.x == 0) step_out[o] = st->rstep[b] - (adaptive ? 1 : 0);
    if (K <= 0) return;
    __shared__ u32 sban[MAX_BAN];
    if (threadIdx.x < n_choice) sban[threadIdx.x] = ban[threadIdx.x];
    __syncthreads();
    const float* row = logits + (u64)r * V;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __shared__ float sl[32];
    __shared__ int si[32];
    __shared__ double sz[32];
    float pl = __int_as_float(0x7f800000);  // +inf: every token ranks after it
    int pi = -1;
    double m = 0.0;
    for (int t = 0; t < K; t++) {
        float bl = NEG_INF;
        int bi = 0x7fffffff;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            const float l = row[i];
            if (banned(sban, 0, n_choice, i) || !tk_after(l, i, pl, pi)) continue;
            if (tk_better(l, i, bl, bi)) { bl = l; bi = i; }
        }
        for (int s = 16; s > 0; s >>= 1) {
            const float l2 = __shfl_xor_sync(0xffffffffu, bl, s);
            const int i2 = __shfl_xor_sync(0xffffffffu, bi, s);
            if (tk_better(l2, i2, bl, bi)) { bl = l2; bi = i2; }
        }
        if (lane == 0) { sl[warp] = bl; si[warp] = bi; }
        __syncthreads();
        bl = sl[0]; bi = si[0];
        for (int w = 1; w < nw; w++)
            if (tk_better(sl[w], si[w], bl, bi)) { bl = sl[w]; bi = si[w]; }
        __syncthreads();
        if (bi == 0x7fffffff) {  // fewer allowed tokens than K
            if (threadIdx.x == 0) { ids_out[o * K + t] = 0xffffffffu; lp_out[o * K + t] = NEG_INF; }
            continue;
        }
        if (t == 0) m = (double)bl;
        if (threadIdx.x == 0) { ids_out[o * K + t] = (u32)bi; lp_out[o * K + t] = bl; }
        pl = bl; pi = bi;
    }
    double z = 0.0;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        if (!banned(sban, 0, n_choice, i)) z += exp((double)row[i] - m);
    for (int s = 16; s > 0; s >>= 1) z += __shfl_xor_sync(0xffffffffu, z, s);
    if (lane == 0) sz[warp] = z;
    __syncthreads();
    if (threadIdx.x == 0) {
        double zz = 0.0;
        for (int w = 0; w < nw; w++) zz += sz[w];
        const double lse = m + log(zz);
        for (int t = 0; t < K; t++)
            if (ids_out[o * K + t] != 0xffffffffu)
                lp_out[o * K + t] = (float)((double)lp_out[o * K + t] - lse);
        lse_out[o] = (float)lse;
    }
}
