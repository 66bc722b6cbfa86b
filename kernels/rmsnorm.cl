/* RMSNorm (Zhang & Sennrich 2019), as Llama and llama.cpp: out = x / sqrt(mean(x^2) + eps) * w.
 * Row kernels: one work-item per row; on a CPU this beats local-memory reductions (DESIGN.md). */

/* out, rstd <- inp (R, C), w (C) */
__kernel void rmsnorm_forward(__global float* out, __global float* rstd,
                              __global const float* inp, __global const float* w,
                              int R, int C, float eps) {
    const int r = get_global_id(0);
    if (r >= R) return;
    const __global float* x = inp + (size_t)r * C;
    float ss = 0.0f;
    for (int c = 0; c < C; c++) ss = MADD(x[c], x[c], ss);
    const float s = 1.0f / sqrt(ss / C + eps);
    rstd[r] = s;
    __global float* o = out + (size_t)r * C;
    for (int c = 0; c < C; c++) o[c] = x[c] * s * w[c];
}

/* dinp += d(out)/d(inp) . dout  (accumulates: the residual stream's gradient) */
__kernel void rmsnorm_backward(__global float* dinp, __global const float* dout,
                               __global const float* inp, __global const float* w,
                               __global const float* rstd, int R, int C) {
    const int r = get_global_id(0);
    if (r >= R) return;
    const __global float* x = inp + (size_t)r * C;
    const __global float* dy = dout + (size_t)r * C;
    const float s = rstd[r];
    float dot = 0.0f;  /* sum_c dy*w*xhat */
    for (int c = 0; c < C; c++) dot = MADD(dy[c] * w[c], x[c] * s, dot);
    dot /= C;
    __global float* dx = dinp + (size_t)r * C;
    for (int c = 0; c < C; c++) dx[c] += s * (dy[c] * w[c] - x[c] * s * dot);
}

/* dw (C) += sum_r dout[r,c] * inp[r,c] * rstd[r]; one work-item per column. */
__kernel void rmsnorm_backward_dweight(__global float* dw, __global const float* dout,
                                       __global const float* inp, __global const float* rstd,
                                       int R, int C) {
    const int c = get_global_id(0);
    if (c >= C) return;
    float acc = 0.0f;
    for (int r = 0; r < R; r++) acc = MADD(dout[(size_t)r * C + c], inp[(size_t)r * C + c] * rstd[r], acc);
    dw[c] += acc;
}
