/* Global grad norm, clipping and AdamW over the flat parameter / gradient / moment buffers.
 * The clip scale never leaves the device: grad_norm_finalize writes stats, adamw_update reads
 * them (docs/DESIGN.md: no host round trip inside a step). */

/* The first pass of the grad norm: GRAD_NORM_PARTIALS (engine/opencl/ops.py) partial
 * sums of g[j]^2 over j < n, in a fixed order per launch layout.
 * CPU (SM_LANES 1): partial[i] = work-item i's contiguous chunk, summed in 16 lanes (one
 * float16 accumulator: a single scalar one waits for each add, 4x slower than reading the
 * gradient; benchmarks/RESULTS.md, "The CPU step of the 135M model"); the strided walk is slow
 * under PoCL (benchmarks/results/tuning-timings.md).
 * GPU (SM_LANES lanes per work-group): work-item i reads float4s i, i + P, ... (P = global
 * size; a warp reads 512 contiguous bytes), two loads in flight, and each group's lanes_reduce
 * sum is partial[group]. With one scalar chain per work-item over 8192 of them the pass was
 * latency-bound: 1.23 ms for XL's 88 M gradients on an H200, where reading them takes 0.1 ms.
 * The n % 4 tail goes to work-items 0..2. */
__kernel void grad_norm_partial(__global float* partial, __global const float* g, int n) {
    const int i = get_global_id(0), P = get_global_size(0);
    float acc = 0.0f;
#if SM_LANES == 1
    const int chunk = ((n + P - 1) / P + 15) / 16 * 16; /* whole vectors, so each starts aligned */
    const int j0 = min(n, i * chunk), j1 = min(n, j0 + chunk);
    float16 acc16 = (float16)(0.0f);
    int j = j0;
    for (; j + 16 <= j1; j += 16) {
        const float16 x = vload16(0, g + j);
        acc16 = x * x + acc16;
    }
    for (; j < j1; j++) acc = MADD(g[j], g[j], acc);
    const float8 h8 = acc16.lo + acc16.hi;
    const float4 h4 = h8.lo + h8.hi;
    acc += (h4.x + h4.y) + (h4.z + h4.w);
    partial[i] = acc;
#else
    __local float red[SM_LANES];
    const int n4 = n / 4;
    float4 a0 = (float4)(0.0f), a1 = (float4)(0.0f);
    int j = i;
    for (; j + P < n4; j += 2 * P) {
        const float4 x0 = vload4(j, g), x1 = vload4(j + P, g);
        a0 = MADD(x0, x0, a0);
        a1 = MADD(x1, x1, a1);
    }
    if (j < n4) {
        const float4 x0 = vload4(j, g);
        a0 = MADD(x0, x0, a0);
    }
    a0 += a1;
    acc = (a0.x + a0.y) + (a0.z + a0.w);
    if (i < n - 4 * n4) acc = MADD(g[4 * n4 + i], g[4 * n4 + i], acc);
    acc = lanes_reduce(red, acc, get_local_id(0), 0);
    if (get_local_id(0) == 0) partial[get_group_id(0)] = acc;
#endif
}

/* One work-group of SM_LANES work-items (kernels/common.h): stats[0] = grad norm, stats[1] =
 * clip scale min(1, max_norm / norm) (1 when max_norm <= 0), stats[2] = 1 when the norm is
 * NaN or Inf (the update is then skipped). Lane l sums partial[l], partial[l + SM_LANES], ...
 * (a fixed order, so the same gradients give the same norm). */
__kernel void grad_norm_finalize(__global float* stats, __global const float* partial, int P,
                                 float max_norm) {
    __local float red[SM_LANES];
    const int lane = get_local_id(0);
    float acc = 0.0f;
    #pragma unroll 8
    for (int i = lane; i < P; i += SM_LANES) acc += partial[i];  /* unrolled: loads in flight */
    acc = lanes_reduce(red, acc, lane, 0);
    if (lane != 0) return;
    const float norm = sqrt(acc);
    const int bad = isnan(norm) || isinf(norm);
    stats[0] = norm;
    stats[1] = (max_norm > 0.0f && norm > max_norm) ? max_norm / norm : 1.0f;
    stats[2] = bad ? 1.0f : 0.0f;
}

/* AdamW (Loshchilov & Hutter 2019) in PyTorch's form (torch.optim.AdamW, single-tensor):
 * m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p = p - lr wd p - (lr / bc1) m / (sqrt(v) /
 * sqrt(bc2) + eps), with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t from the host, the gradient
 * scaled by the clip scale stats[1], and decoupled weight decay on elements [0, n_decay) only
 * (the matrices come first in the flat table). One division and one square root per element. */
#define ADAMW_STEP(P, G, M, V, scale, wd)                                                          \
    {                                                                                              \
        const ADAMW_T grad = (G) * (scale);                                                        \
        const ADAMW_T mi = beta1 * (M) + (1.0f - beta1) * grad;                                    \
        const ADAMW_T vi = beta2 * (V) + (1.0f - beta2) * grad * grad;                             \
        (M) = mi;                                                                                  \
        (V) = vi;                                                                                  \
        (P) = (P) - (lr * (wd)) * (P) - (lr / bc1) * mi / (sqrt(vi) * rsqrt(bc2) + eps);          \
    }

#define ADAMW_T float
__kernel void adamw_update(__global float* p, __global const float* g, __global float* m,
                           __global float* v, __global const float* stats, int n, int n_decay,
                           float lr, float beta1, float beta2, float eps, float weight_decay,
                           float bc1, float bc2) {
    const int i = get_global_id(0);
    if (i >= n || stats[2] != 0.0f) return;
    ADAMW_STEP(p[i], g[i], m[i], v[i], stats[1], i < n_decay ? weight_decay : 0.0f)
}

/* The same over 16 consecutive elements per work-item (CPUs: launch ceil(n / 16) work-items).
 * As float16 vectors where all 16 exist and share one weight decay, else element by element.
 * Per element, PoCL's code was 2.8x slower than reading and writing the four streams. */
__kernel void adamw_update16(__global float* p, __global const float* g, __global float* m,
                             __global float* v, __global const float* stats, int n, int n_decay,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             float bc1, float bc2) {
    const int j = get_global_id(0) * 16;
    if (j >= n || stats[2] != 0.0f) return;
    const float scale = stats[1];
    if (j + 16 <= n && (j + 16 <= n_decay || j >= n_decay)) {
        float16 pv = vload16(0, p + j), mv = vload16(0, m + j), vv = vload16(0, v + j);
#undef ADAMW_T
#define ADAMW_T float16
        ADAMW_STEP(pv, vload16(0, g + j), mv, vv, scale, j < n_decay ? weight_decay : 0.0f)
        vstore16(pv, 0, p + j);
        vstore16(mv, 0, m + j);
        vstore16(vv, 0, v + j);
        return;
    }
#undef ADAMW_T
#define ADAMW_T float
    for (int i = j; i < min(j + 16, n); i++)
        ADAMW_STEP(p[i], g[i], m[i], v[i], scale, i < n_decay ? weight_decay : 0.0f)
}

/* AdamW with its moments stored as bfloat16 (the top 16 bits of a float32), for models whose
 * float32 training state would not fit a laptop (engine/model/moments.py): m and v are read
 * into float32, the step is ADAMW_STEP's, and each new moment is written back with stochastic
 * rounding: a uniform 16-bit draw added below the kept bits before truncation, so the stored
 * value is unbiased (E[stored] = the float32 value). Round-to-nearest would lose v's update
 * whenever (1 - beta2) g^2 is below half a bf16 step of v (2^-9 relative): at beta2 = 0.999 v
 * would never move (Zamirai et al. 2020, "Revisiting BFloat16 Training"; torchao's AdamW
 * bf16_stochastic_round). The draw is lowbias32(lowbias32(i) ^ key) (m) and the same with
 * key ^ 0x9e3779b9 (v); the host gives a key per step (engine/opencl/ops.py). NaN and Inf are
 * kept as they are. */
inline float bf16_load(ushort h) { return as_float(((uint)h) << 16); }

inline ushort bf16_round(float x, uint draw) {
    const uint b = as_uint(x);
    if ((b & 0x7f800000u) == 0x7f800000u) return (ushort)(b >> 16);   /* Inf, NaN */
    return (ushort)((b + (draw & 0xffffu)) >> 16);
}

/* bf16_round over 16 lanes */
inline ushort16 bf16_round16(float16 x, uint16 draw) {
    const uint16 b = as_uint16(x);
    const int16 special = (b & 0x7f800000u) == 0x7f800000u;
    return convert_ushort16(select(b + (draw & 0xffffu), b, as_uint16(special)) >> 16);
}

#define ADAMW_BF16(I, scale, wd)                                                                    \
    {                                                                                              \
        float m_f = bf16_load(m[I]), v_f = bf16_load(v[I]), p_f = p[I];                            \
        ADAMW_STEP(p_f, g[I], m_f, v_f, scale, wd)                                                 \
        p[I] = p_f;                                                                                \
        const uint h = lowbias32((uint)(I));                                                       \
        m[I] = bf16_round(m_f, lowbias32(h ^ key));                                                \
        v[I] = bf16_round(v_f, lowbias32(h ^ key ^ 0x9e3779b9u));                                  \
    }

__kernel void adamw_update_bf16(__global float* p, __global const float* g, __global ushort* m,
                                __global ushort* v, __global const float* stats, int n,
                                int n_decay, float lr, float beta1, float beta2, float eps,
                                float weight_decay, float bc1, float bc2, uint key) {
    const int i = get_global_id(0);
    if (i >= n || stats[2] != 0.0f) return;
#undef ADAMW_T
#define ADAMW_T float
    ADAMW_BF16(i, stats[1], i < n_decay ? weight_decay : 0.0f)
}

/* The same over 16 consecutive elements per work-item (CPUs), as adamw_update16: float16
 * vectors where all 16 exist and share one weight decay, else element by element. */
__kernel void adamw_update16_bf16(__global float* p, __global const float* g, __global ushort* m,
                                  __global ushort* v, __global const float* stats, int n,
                                  int n_decay, float lr, float beta1, float beta2, float eps,
                                  float weight_decay, float bc1, float bc2, uint key) {
    const int j = get_global_id(0) * 16;
    if (j >= n || stats[2] != 0.0f) return;
    const float scale = stats[1];
    if (j + 16 <= n && (j + 16 <= n_decay || j >= n_decay)) {
        const uint16 mb = convert_uint16(vload16(0, m + j)) << 16;
        const uint16 vb = convert_uint16(vload16(0, v + j)) << 16;
        float16 pv = vload16(0, p + j), mv = as_float16(mb), vv = as_float16(vb);
#undef ADAMW_T
#define ADAMW_T float16
        ADAMW_STEP(pv, vload16(0, g + j), mv, vv, scale, j < n_decay ? weight_decay : 0.0f)
        vstore16(pv, 0, p + j);
        const uint16 h = lowbias32_16((uint16)((uint)j) + (uint16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                                                                   10, 11, 12, 13, 14, 15));
        vstore16(bf16_round16(mv, lowbias32_16(h ^ key)), 0, m + j);
        vstore16(bf16_round16(vv, lowbias32_16(h ^ (key ^ 0x9e3779b9u))), 0, v + j);
        return;
    }
#undef ADAMW_T
#define ADAMW_T float
    for (int i = j; i < min(j + 16, n); i++)
        ADAMW_BF16(i, scale, i < n_decay ? weight_decay : 0.0f)
}
