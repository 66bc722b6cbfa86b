/* out (M, N) = x (M, K) @ W (N, K)^T for a few rows of x (KV decoding: M = 1), W a quantized
 * base weight read in its own form (kernels/quant.cl has the layouts: q4, q8, f16, bf16).
 * The panel products of engine/model/quant.py expand W to float32 and transpose it before the
 * GEMM: at one row of x that moved 8-16 bytes per weight where this reads 0.5-2 (llama.cpp's
 * decoding reads the blocks in place too: ggml-cpu's vec_dot_q4_0_q8_0 and kin). Each value
 * is dequantized as dequant_* computes it (scale * q + min; scale * q), then multiplied with
 * x in float32, so the result is the dequantized matrix's product up to summation order.
 *
 * QV_VALUE(r, c): W[r, c] as a float; QV_CHUNK(r, k): W[r, k .. k + 16) as a float16 (k a
 * multiple of 16, which every q4 / q8 group is). Rows of x: the M of the call (the launcher
 * keeps it small: engine/model/quant.py MATVEC_MAX_ROWS); for M > 1 the same rows of W are
 * walked again per row of x, from cache. */

#define Q4_VALUE(r, c) (scales[(size_t)(r) * (K / 32) + (c) / 32] *                              \
    (float)((codes[(size_t)(r) * (K / 2) + (c) / 2] >> (4 * ((c) & 1))) & 15) +                \
    mins[(size_t)(r) * (K / 32) + (c) / 32])
#define Q8_VALUE(r, c) (scales[(size_t)(r) * (K / group) + (c) / group] *                        \
    (float)codes[(size_t)(r) * K + (c)])
#define F16_VALUE(r, c) vload_half((size_t)(r) * K + (c), codes)
#define BF16_VALUE(r, c) as_float((uint)codes[(size_t)(r) * K + (c)] << 16)

inline float16 q4_chunk(__global const uchar* codes, __global const float* scales,
                        __global const float* mins, int K, int r, int k) {
    const uchar8 b = vload8(0, codes + (size_t)r * (K / 2) + k / 2);
    float16 v;
    v.even = convert_float8(b & (uchar8)(15));   /* value 2p: the low nibble of byte p */
    v.odd = convert_float8(b >> (uchar8)(4));
    const size_t g = (size_t)r * (K / 32) + k / 32;
    return v * scales[g] + mins[g];
}

inline float16 q8_chunk(__global const char* codes, __global const float* scales, int group,
                        int K, int r, int k) {
    return scales[(size_t)r * (K / group) + k / group] *
        convert_float16(vload16(0, codes + (size_t)r * K + k));
}

inline float16 f16_chunk(__global const half* codes, int K, int r, int k) {
    return vload_half16(0, codes + (size_t)r * K + k);
}

inline float16 bf16_chunk(__global const ushort* codes, int K, int r, int k) {
    return as_float16(convert_uint16(vload16(0, codes + (size_t)r * K + k)) << 16);
}

/* GPUs: output column n is SM_LANES lanes walking W's row n (kernels/common.h), SM_ROWS
 * columns per work-group, as matvec_nt. */
#define QV_GPU_BODY(VALUE)                                                                     \
    __local float red[SM_ROWS * SM_LANES];                                                     \
    const int lane = get_local_id(0), n = get_global_id(1);                                    \
    __local float* rd = red + get_local_id(1) * SM_LANES;                                      \
    const int r = n < N ? n : 0;  /* no early return: lanes_reduce has barriers */             \
    for (int m = 0; m < M; m++) {                                                              \
        const __global float* xm = x + (size_t)m * K;                                          \
        float acc = 0.0f;                                                                      \
        for (int c = lane; c < K; c += SM_LANES) acc += VALUE(r, c) * xm[c];                   \
        const float s = lanes_reduce(rd, acc, lane, 0);                                        \
        if (lane == 0 && n < N) out[(size_t)m * N + n] = s;                                    \
    }

/* CPUs: one work-item per work-group (as matvec_nt_cpu: PoCL's vectorising across work-items
 * turned the walk along K into gathers) takes blocks of QV_R columns, block b = group, group +
 * groups, ...; each row of W is read along K 16 values at a time (float16 accumulators). */
#define QV_R 4
#define QV_CPU_BODY(CHUNK, VALUE)                                                              \
    const int K16 = K / 16 * 16, blocks = (N + QV_R - 1) / QV_R;                               \
    for (int b = get_group_id(0); b < blocks; b += get_num_groups(0)) {                        \
        const int n0 = b * QV_R;                                                               \
        int rows[QV_R];                                                                        \
        _Pragma("unroll")                                                                      \
        for (int i = 0; i < QV_R; i++) rows[i] = n0 + i < N ? n0 + i : n0;                     \
        for (int m = 0; m < M; m++) {                                                          \
            const __global float* xm = x + (size_t)m * K;                                      \
            float16 acc[QV_R];                                                                 \
            _Pragma("unroll")                                                                  \
            for (int i = 0; i < QV_R; i++) acc[i] = (float16)(0.0f);                           \
            for (int k = 0; k < K16; k += 16) {                                                \
                const float16 xv = vload16(0, xm + k);                                         \
                _Pragma("unroll")                                                              \
                for (int i = 0; i < QV_R; i++) acc[i] += CHUNK(rows[i], k) * xv;               \
            }                                                                                  \
            _Pragma("unroll")                                                                  \
            for (int i = 0; i < QV_R; i++) {                                                   \
                float s = 0.0f;                                                                \
                for (int c = K16; c < K; c++) s += VALUE(rows[i], c) * xm[c];                  \
                const float8 h = acc[i].lo + acc[i].hi;                                        \
                const float4 q = h.lo + h.hi;                                                  \
                s += (q.x + q.y) + (q.z + q.w);                                                \
                if (n0 + i < N) out[(size_t)m * N + n0 + i] = s;                               \
            }                                                                                  \
        }                                                                                      \
    }

#define Q4_CHUNK(r, k) q4_chunk(codes, scales, mins, K, r, k)
#define Q8_CHUNK(r, k) q8_chunk(codes, scales, group, K, r, k)
#define F16_CHUNK(r, k) f16_chunk(codes, K, r, k)
#define BF16_CHUNK(r, k) bf16_chunk(codes, K, r, k)

/* Written out, not made by a macro: the runtime reads each kernel's signature from the source
 * (engine/opencl/runtime.py). */
__kernel void matvec_q4(__global float* out, __global const float* x,
                        __global const uchar* codes, __global const float* scales,
                        __global const float* mins, int M, int N, int K) {
    QV_GPU_BODY(Q4_VALUE)
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void matvec_q4_cpu(__global float* out, __global const float* x, __global const uchar* codes,
                   __global const float* scales, __global const float* mins, int M, int N,
                   int K) {
    QV_CPU_BODY(Q4_CHUNK, Q4_VALUE)
}

__kernel void matvec_q8(__global float* out, __global const float* x,
                        __global const char* codes, __global const float* scales, int group,
                        int M, int N, int K) {
    QV_GPU_BODY(Q8_VALUE)
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void matvec_q8_cpu(__global float* out, __global const float* x, __global const char* codes,
                   __global const float* scales, int group, int M, int N, int K) {
    QV_CPU_BODY(Q8_CHUNK, Q8_VALUE)
}

__kernel void matvec_f16(__global float* out, __global const float* x,
                         __global const half* codes, int M, int N, int K) {
    QV_GPU_BODY(F16_VALUE)
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void matvec_f16_cpu(__global float* out, __global const float* x, __global const half* codes,
                    int M, int N, int K) {
    QV_CPU_BODY(F16_CHUNK, F16_VALUE)
}

__kernel void matvec_bf16(__global float* out, __global const float* x,
                          __global const ushort* codes, int M, int N, int K) {
    QV_GPU_BODY(BF16_VALUE)
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void matvec_bf16_cpu(__global float* out, __global const float* x, __global const ushort* codes,
                     int M, int N, int K) {
    QV_CPU_BODY(BF16_CHUNK, BF16_VALUE)
}
