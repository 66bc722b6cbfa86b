/* Shared by every kernel file; prepended once to the program source (engine/runtime.py).
 *
 * Why macros: PoCL's CPU device does not inline OpenCL built-ins (exp, mad, vload, ...): each
 * is a call and kernels ran 4-10x slower (docs/DESIGN.md). On CPU_DEVICE we use plain arithmetic
 * and an inline exp polynomial; GPUs keep the native built-ins.
 * OpenCL C 1.2 throughout.
 */

#ifdef CPU_DEVICE
/* exp(x) for float: n = round(x / ln2), r = x - n ln2 (Cody-Waite split), 2^n * P(r) with the
 * Cephes expf polynomial (relative error ~2e-7 on [-87, 88]). */
inline float fast_exp(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float t = x * 1.44269504088896341f;
    int n = (int)(t + (t >= 0.0f ? 0.5f : -0.5f));
    float fn = (float)n;
    float r = x - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    return p * as_float((n + 127) << 23);
}
#define EXP(x) fast_exp(x)
#else
#define EXP(x) exp(x)
#endif

/* Element-wise kernels over (rows, columns) walk the columns of their row with FOR_COLUMNS:
 * on CPUs one work-item takes a whole row (a contiguous loop the compiler vectorises; one
 * work-item per element ran 2-5x slower under PoCL: benchmarks/results/tuning-timings.md),
 * on GPUs a work-item takes every get_global_size(0)-th column (one, as launched). The
 * launcher (engine/ops.py elementwise) runs (1, rows) work-items on CPUs, (columns, rows) on
 * GPUs. */
#ifdef CPU_DEVICE
#define FOR_COLUMNS(f, n) for (int f = 0; f < (n); f++)
#else
#define FOR_COLUMNS(f, n) for (int f = get_global_id(0); f < (n); f += get_global_size(0))
#endif

/* Scaled sum of squares helpers use plain a*b+c: mad()/fma() are calls on PoCL. */
#define MADD(a, b, c) ((a) * (b) + (c))

/* Row kernels share a row among SM_LANES work-items (1 on CPUs: one work-item per contiguous
 * row, which PoCL runs fastest; 64 on GPUs, so a row is read coalesced), SM_ROWS rows per
 * work-group; both come from the build options (engine/runtime.py). lanes_reduce returns the
 * max (is_max) or sum of v over the SM_LANES lanes of one row; red holds SM_LANES floats of
 * __local scratch for the row. Every lane must call it (it has barriers). */
inline float lanes_reduce(__local float* red, float v, int lane, int is_max) {
#if SM_LANES > 1
    red[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = SM_LANES / 2; w > 0; w >>= 1) {
        if (lane < w) {
            const float a = red[lane], o = red[lane + w];
            red[lane] = is_max ? (a > o ? a : o) : a + o;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    v = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);  /* everyone has read red[0] before it is reused */
#endif
    return v;
}

/* Attention's shared layout (engine/attention.py, attention_gemm.py): the fused qkv rows
 * (B*T, C + 2 KV) hold q at [0, C), k at [C, C + KV), v at [C + KV, C + 2 KV), KV = C / ATT_G
 * (grouped-query attention, Ainslie et al. 2023: ATT_G query heads share one key/value head;
 * ATT_G 1 is multi-head attention). Query head h reads key/value head h / ATT_G (the
 * llama.cpp / transformers convention). QKV_ROW is the head-h channels of row t of batch b
 * (part 0 q, 1 k, 2 v; h is the query head); T comes from the kernel, ATT_HD and ATT_G from
 * the build options. */
#define QKV_KV(C) ((C) / ATT_G)
#define QKV_W(C) ((C) + 2 * QKV_KV(C))
#define QKV_COL(part, C, h) \
    ((part) == 0 ? (h) * ATT_HD : (C) + ((part) - 1) * QKV_KV(C) + ((h) / ATT_G) * ATT_HD)
#define QKV_ROW(qkv, b, t, part, C, h) \
    ((qkv) + ((size_t)(b) * T + (t)) * QKV_W(C) + QKV_COL(part, C, h))

/* The causal mode of a batched attention product (engine.attention_gemm.Causal, same values):
 * NONE a plain product; SKIP_ABOVE skips output tiles wholly above the diagonal (n > m
 * everywhere: masked scores, never read); K_UPTO_M sums only k <= m (the product with causal
 * probabilities P, zero above the diagonal), bounded per tile; K_FROM_M only k >= m (P^T @ X:
 * rows are keys). */
#define CAUSAL_NONE 0
#define CAUSAL_SKIP_ABOVE 1
#define CAUSAL_K_UPTO_M 2
#define CAUSAL_K_FROM_M 3

/* The part the batched attention products (bmm_blocked, bmm_tiled: same arguments) share, for
 * the tile of tm rows at (m0, n0): return when the tile lies wholly above the diagonal under
 * CAUSAL_SKIP_ABOVE; Az, Bz, Cz = A, B, C of this (b, h), z = b * H + h the third grid index;
 * [kb, ke) = the K range the causal mode leaves (tile-granular). */
#define BMM_SLICE(tm)                                                                          \
    if (causal == CAUSAL_SKIP_ABOVE && n0 > m0 + (tm) - 1) return;                            \
    const int z = get_global_id(2), b = z / H, h = z % H;                                      \
    __global const float* Az = A + a_off + (size_t)b * a_bs + (size_t)h * a_hs;                \
    __global const float* Bz = B + b_off + (size_t)b * b_bs + (size_t)h * b_hs;                \
    __global float* Cz = C + c_off + (size_t)b * c_bs + (size_t)h * c_hs;                      \
    const int kb = causal == CAUSAL_K_FROM_M ? m0 : 0;                                         \
    const int ke = causal == CAUSAL_K_UPTO_M ? min(K, m0 + (tm)) : K;

/* The CPU GEMMs' vectors (matmul_vec.cl, matmul_packed.cl: built with -DVEC_W 8 or 16). */
#ifdef VEC_W
#if VEC_W == 16
typedef float16 vm_float;
typedef float16 __attribute__((aligned(4))) vm_float_u; /* rows of B and C start anywhere */
#elif VEC_W == 8
typedef float8 vm_float;
typedef float8 __attribute__((aligned(4))) vm_float_u;
#else
#error "the CPU GEMMs are built with -DVEC_W=8 or -DVEC_W=16 (engine/gemm_tiles.py)"
#endif
#endif

/* lowbias32 (C. Wellons, hash-prospector): a full-avalanche 32-bit integer hash (dropout's
 * masks, kernels/dropout.cl; the stochastic rounding of bf16 AdamW moments, optimizer.cl). */
#define LOWBIAS32(x) \
    (x) ^= (x) >> 16; (x) *= 0x7feb352du; (x) ^= (x) >> 15; (x) *= 0x846ca68bu; (x) ^= (x) >> 16;
inline uint lowbias32(uint x) { LOWBIAS32(x) return x; }
/* the same over 16 lanes (optimizer.cl's vector AdamW) */
inline uint16 lowbias32_16(uint16 x) { LOWBIAS32(x) return x; }
