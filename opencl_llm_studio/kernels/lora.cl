/* Column moves of the LoRA adapters (engine/model/lora.py). An adapter's output is a column
 * range [c0, c0 + n) of its weight group's output (q, k and v share one (M, W) product; gate and
 * up one (M, 2F)), so its delta is computed as a dense (M, n) matrix and added into place, and
 * its gradient is gathered out of the group's (M, W) gradient. Launched element-wise (one
 * work-item per row on CPUs, FOR_COLUMNS). */

/* out[m, c0 + j] += scale * src[m, j]; out (M, width), src (M, n). */
__kernel void lora_add_columns(__global float* out, __global const float* src, int M, int width,
                               int c0, int n, float scale) {
    const int m = get_global_id(1);
    if (m >= M) return;
    __global float* row = out + (size_t)m * width + c0;
    const __global float* s = src + (size_t)m * n;
    FOR_COLUMNS(j, n) row[j] += scale * s[j];
}

/* dst[m, j] = scale * src[m, c0 + j]; dst (M, n), src (M, width). */
__kernel void lora_gather_columns(__global float* dst, __global const float* src, int M,
                                  int width, int c0, int n, float scale) {
    const int m = get_global_id(1);
    if (m >= M) return;
    const __global float* row = src + (size_t)m * width + c0;
    __global float* d = dst + (size_t)m * n;
    FOR_COLUMNS(j, n) d[j] = scale * row[j];
}
