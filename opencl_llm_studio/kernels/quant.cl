/* A frozen, quantized base weight (W (rows, cols), engine/model/quant.py QuantMatrix) expanded
 * to float32 rows on the device, a panel at a time, for the GEMMs of LoRA tuning; the token
 * embedding's rows gathered from it; and the column block copy the panels' products need.
 *
 * Device forms (one row of W is `cols` values; groups never straddle rows):
 *   q4:   codes (rows, cols / 2) uchar, value 2p in the low nibble of byte p, 2p + 1 in the high;
 *         scale and min float (rows, cols / 32): value = scale * q + min
 *         (GGUF Q4_0: min = -8 d; Q4_1: d, m; Q4_K: d sc_j, -dmin m_j; ggml-quants.c)
 *   q8:   codes (rows, cols) char, scale float (rows, cols / G): value = scale * q
 *         (GGUF Q8_0: G 32; Q6_K: G 16, q the 6-bit code less 32, scale d * scales_j)
 *   f16:  IEEE half bits (rows, cols) ushort;  bf16: bfloat16 bits (rows, cols) ushort
 *   f32:  float (rows, cols)
 * Each value is computed as gguf-py's dequantize computes it (gguf/quants.py): scale * q is
 * exact in float for q4 (at most 17 + 4 significant bits) and the one rounding is the add, as
 * there; for q8 the product is the one rounding, as there. So a fused multiply-add or not,
 * the result is bit-equal to the oracle.
 *
 * Rows are picked by QROW(i): r0 + i for a panel (dequant_*), ids[i] for the embedding
 * (gather_*). out is (n, cols) row-major. One work-item per row on CPUs (FOR_COLUMNS). */

#define Q4_GROUP 32

#define Q4_BODY(QROW)                                                                          \
    const int i = get_global_id(1);                                                            \
    if (i >= n) return;                                                                        \
    const size_t r = (size_t)(QROW);                                                           \
    const __global uchar* q = codes + r * (cols / 2);                                          \
    const __global float* s = scales + r * (cols / Q4_GROUP);                                  \
    const __global float* m = mins + r * (cols / Q4_GROUP);                                    \
    __global float* o = out + (size_t)i * cols;                                                \
    FOR_COLUMNS(p, cols / 2) {                                                                 \
        const uchar b = q[p];                                                                  \
        const int g = (2 * p) / Q4_GROUP;                                                      \
        o[2 * p] = s[g] * (float)(b & 15) + m[g];                                              \
        o[2 * p + 1] = s[g] * (float)(b >> 4) + m[g];                                          \
    }

#define Q8_BODY(QROW)                                                                          \
    const int i = get_global_id(1);                                                            \
    if (i >= n) return;                                                                        \
    const size_t r = (size_t)(QROW);                                                           \
    const __global char* q = codes + r * cols;                                                 \
    const __global float* s = scales + r * (cols / group);                                     \
    __global float* o = out + (size_t)i * cols;                                                \
    FOR_COLUMNS(c, cols) o[c] = s[c / group] * (float)q[c];

#define F16_BODY(QROW)                                                                         \
    const int i = get_global_id(1);                                                            \
    if (i >= n) return;                                                                        \
    const __global half* h = codes + (size_t)(QROW) * cols;                                    \
    __global float* o = out + (size_t)i * cols;                                                \
    FOR_COLUMNS(c, cols) o[c] = vload_half(c, h);

/* bfloat16 is the high half of a float's bits */
#define BF16_BODY(QROW)                                                                        \
    const int i = get_global_id(1);                                                            \
    if (i >= n) return;                                                                        \
    const __global ushort* h = codes + (size_t)(QROW) * cols;                                  \
    __global float* o = out + (size_t)i * cols;                                                \
    FOR_COLUMNS(c, cols) o[c] = as_float((uint)h[c] << 16);

#define F32_BODY(QROW)                                                                         \
    const int i = get_global_id(1);                                                            \
    if (i >= n) return;                                                                        \
    const __global float* w = codes + (size_t)(QROW) * cols;                                   \
    __global float* o = out + (size_t)i * cols;                                                \
    FOR_COLUMNS(c, cols) o[c] = w[c];

/* out (n, cols) = W[r0 .. r0 + n) */
__kernel void dequant_q4(__global float* out, __global const uchar* codes,
                         __global const float* scales, __global const float* mins, int r0, int n,
                         int cols) {
    Q4_BODY(r0 + i)
}

__kernel void dequant_q8(__global float* out, __global const char* codes,
                         __global const float* scales, int group, int r0, int n, int cols) {
    Q8_BODY(r0 + i)
}

__kernel void dequant_f16(__global float* out, __global const half* codes, int r0, int n,
                          int cols) {
    F16_BODY(r0 + i)
}

__kernel void dequant_bf16(__global float* out, __global const ushort* codes, int r0, int n,
                           int cols) {
    BF16_BODY(r0 + i)
}

__kernel void dequant_f32(__global float* out, __global const float* codes, int r0, int n,
                          int cols) {
    F32_BODY(r0 + i)
}

/* out (n, cols) = W[ids[i]] (the token embedding of a quantized base) */
__kernel void gather_q4(__global float* out, __global const int* ids,
                        __global const uchar* codes, __global const float* scales,
                        __global const float* mins, int n, int cols) {
    Q4_BODY(ids[i])
}

__kernel void gather_q8(__global float* out, __global const int* ids,
                        __global const char* codes, __global const float* scales, int group,
                        int n, int cols) {
    Q8_BODY(ids[i])
}

__kernel void gather_f16(__global float* out, __global const int* ids,
                         __global const half* codes, int n, int cols) {
    F16_BODY(ids[i])
}

__kernel void gather_bf16(__global float* out, __global const int* ids,
                          __global const ushort* codes, int n, int cols) {
    BF16_BODY(ids[i])
}

/* dst[m * dst_ld + dst_off + j] = src[m * src_ld + src_off + j] for m < rows, j < n: a panel's
 * output columns into place, or the columns of dout a panel's rows take (offsets as arguments,
 * not sub-buffers, whose origins must be aligned). */
__kernel void copy_columns(__global float* dst, int dst_ld, int dst_off,
                           __global const float* src, int src_ld, int src_off, int rows, int n) {
    const int m = get_global_id(1);
    if (m >= rows) return;
    __global float* d = dst + (size_t)m * dst_ld + dst_off;
    const __global float* s = src + (size_t)m * src_ld + src_off;
    FOR_COLUMNS(j, n) d[j] = s[j];
}
