/* RMSNorm (Zhang & Sennrich 2019), as Llama and llama.cpp: out = x / sqrt(mean(x^2) + eps) * w.
 * Row kernels: one work-item per row on a CPU (beats local-memory reductions there, docs/DESIGN.md),
 * 64 lanes per row on a GPU (coalesced reads; one work-item per row leaves bandwidth unused:
 * benchmarks/results/tuning-timings.md). */

/* Row r (= global id 1, shared by SM_LANES lanes, common.h) of x = inp (+ res when res is not
 * 0, then also stored to sum): out = x / sqrt(mean(x^2) + eps) * w, rstd[r] = 1 / sqrt(...).
 * The kernels pass literal 0 pointers where they have no residual, so those branches fold. */
inline void rmsnorm_row(__global float* out, __global float* rstd, __global float* sum,
                        __global const float* inp, __global const float* res,
                        __global const float* w, int R, int C, float eps, __local float* red) {
    const int lane = get_local_id(0), r = get_global_id(1);
    const int n = r < R ? C : 0;  /* no early return: lanes_reduce has barriers */
    const size_t row = (size_t)(r < R ? r : 0) * C;
    float ss = 0.0f;
    for (int c = lane; c < n; c += SM_LANES) {
        float x = inp[row + c];
        if (res) {
            x += res[row + c];
            sum[row + c] = x;
        }
        ss = MADD(x, x, ss);
    }
    ss = lanes_reduce(red + get_local_id(1) * SM_LANES, ss, lane, 0);
    const float s = 1.0f / sqrt(ss / C + eps);
    if (r < R && lane == 0) rstd[r] = s;
    const __global float* x = res ? sum : inp;  /* this lane's own elements: no race */
    for (int c = lane; c < n; c += SM_LANES) out[row + c] = x[row + c] * s * w[c];
}

/* out, rstd <- inp (R, C), w (C) */
__kernel void rmsnorm_forward(__global float* out, __global float* rstd,
                              __global const float* inp, __global const float* w,
                              int R, int C, float eps) {
    __local float red[SM_ROWS * SM_LANES];
    rmsnorm_row(out, rstd, 0, inp, 0, w, R, C, eps, red);
}

/* A residual connection and the RMSNorm after it in one pass over the rows (Llama: x + f(x),
 * then the next block's norm): sum = a + b (R, C), kept for the backward pass and the next
 * residual; out, rstd as rmsnorm_forward of sum. One pass where a separate residual kernel
 * took another over (R, C). */
__kernel void residual_rmsnorm_forward(__global float* sum, __global float* out,
                                       __global float* rstd, __global const float* a,
                                       __global const float* b, __global const float* w,
                                       int R, int C, float eps) {
    __local float red[SM_ROWS * SM_LANES];
    rmsnorm_row(out, rstd, sum, a, b, w, R, C, eps, red);
}

/* dinp += d(out)/d(inp) . dout  (accumulates: the residual stream's gradient); rows as above */
__kernel void rmsnorm_backward(__global float* dinp, __global const float* dout,
                               __global const float* inp, __global const float* w,
                               __global const float* rstd, int R, int C) {
    __local float red[SM_ROWS * SM_LANES];
    const int lane = get_local_id(0), r = get_global_id(1);
    const int n = r < R ? C : 0;
    const size_t row = (size_t)(r < R ? r : 0) * C;
    const __global float* x = inp + row;
    const __global float* dy = dout + row;
    const float s = r < R ? rstd[r] : 0.0f;
    float dot = 0.0f;  /* sum_c dy*w*xhat */
    for (int c = lane; c < n; c += SM_LANES) dot = MADD(dy[c] * w[c], x[c] * s, dot);
    dot = lanes_reduce(red + get_local_id(1) * SM_LANES, dot, lane, 0) / C;
    __global float* dx = dinp + row;
    for (int c = lane; c < n; c += SM_LANES) dx[c] += s * (dy[c] * w[c] - x[c] * s * dot);
}

/* dw (C) += sum_r dout[r,c] * inp[r,c] * rstd[r], one work-item per column c and row slice z
 * (rows [z * slice_rows, (z+1) * slice_rows)): with one slice it adds into dw; with several
 * (any device once R >= 128: one column walk of R = B*T rows was slow on GPUs and CPUs) each
 * writes its partial sum to dw + z * C, and sum_slices (matmul_tiled.cl) adds them up. */
__kernel void rmsnorm_backward_dweight(__global float* dw, __global const float* dout,
                                       __global const float* inp, __global const float* rstd,
                                       int R, int C, int slice_rows, int accumulate) {
    const int c = get_global_id(0), z = get_global_id(1);
    const int r0 = z * slice_rows, r1 = min(R, r0 + slice_rows);
    if (c >= C || r0 >= R) return;
    float acc = 0.0f;
    for (int r = r0; r < r1; r++)
        acc = MADD(dout[(size_t)r * C + c], inp[(size_t)r * C + c] * rstd[r], acc);
    __global float* out = dw + (size_t)z * C + c;
    *out = accumulate ? *out + acc : acc;
}
