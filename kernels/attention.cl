/* Causal multi-head self-attention (Vaswani et al. 2017) over the fused qkv rows (B*T, 3C):
 * q at [0, C), k at [C, 2C), v at [2C, 3C); head h owns channels [h*hd, (h+1)*hd); scores
 * scaled by 1/sqrt(hd). Training runs it as batched products (bmm_* in matmul*.cl, launched by
 * engine/ops.py) around the row softmax kernels below; decoding with a KV cache uses
 * attention_decode. */

/* Decoding with a KV cache: one new query at position pos attends to rows 0..pos of the
 * layer's cached qkv rows (T_max, 3C) (k and v of earlier tokens, already rotated).
 * q comes from qkv_row (3C); scores (H, T_max) is scratch; one work-item per head. */
__kernel void attention_decode(__global float* y, __global float* scores,
                               __global const float* qkv_row, __global const float* cache,
                               int pos, int T_max, int C, int H) {
    const int h = get_global_id(0);
    if (h >= H) return;
    const int hd = C / H, C3 = 3 * C, n = pos + 1;
    const float scale = 1.0f / sqrt((float)hd);
    const __global float* q = qkv_row + h * hd;
    const __global float* k0 = cache + C + h * hd;
    const __global float* v0 = cache + 2 * C + h * hd;
    __global float* a = scores + (size_t)h * T_max;
    __global float* out = y + h * hd;
    /* a[s] = softmax over s < n of scale * q . k_s */
    float mx = -INFINITY;
    for (int s = 0; s < n; s++) {
        const __global float* k = k0 + (size_t)s * C3;
        float dot = 0.0f;
        for (int d = 0; d < hd; d++) dot = MADD(q[d], k[d], dot);
        dot *= scale;
        a[s] = dot;
        mx = dot > mx ? dot : mx;
    }
    float sum = 0.0f;
    for (int s = 0; s < n; s++) {
        const float e = EXP(a[s] - mx);
        a[s] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
    for (int s = 0; s < n; s++) a[s] *= inv;
    /* out[d] = sum over s < n of a[s] * v_s[d] */
#ifdef CPU_DEVICE  /* rows of v stream through the cache; out stays in L1 */
    for (int d = 0; d < hd; d++) out[d] = 0.0f;
    for (int s = 0; s < n; s++) {
        const __global float* v = v0 + (size_t)s * C3;
        for (int d = 0; d < hd; d++) out[d] = MADD(a[s], v[d], out[d]);
    }
#else  /* GPU: accumulate in a register, one global write per channel (no read-modify-write) */
    for (int d = 0; d < hd; d++) {
        float acc = 0.0f;
        for (int s = 0; s < n; s++) acc = MADD(a[s], v0[(size_t)s * C3 + d], acc);
        out[d] = acc;
    }
#endif
}

/* Row softmax of the causal scores for the GEMM form of attention (engine/ops.py): att holds
 * (B*H*T, T) rows, query-major; row r is query t = r % T. SM_LANES work-items share a row
 * (see lanes_reduce in common.h). Launch: global (SM_LANES, rows rounded up to SM_ROWS),
 * local (SM_LANES, SM_ROWS). */

/* In place: att[r, s] = softmax over s <= t of scale * att[r, s]; 0 for s > t (entries above
 * the diagonal may hold anything on entry: the score product skips those tiles). */
__kernel void attention_softmax(__global float* att, int rows, int T, float scale) {
    __local float red[SM_ROWS * SM_LANES];
    const int lane = get_local_id(0), r = get_global_id(1);
    const int t = r < rows ? r % T : -1;  /* no early return: the reductions have barriers */
    __global float* a = att + (size_t)(r < rows ? r : 0) * T;
    __local float* rd = red + get_local_id(1) * SM_LANES;
    float mx = -INFINITY;
    for (int s = lane; s <= t; s += SM_LANES) {
        const float x = a[s] * scale;
        mx = x > mx ? x : mx;
    }
    mx = lanes_reduce(rd, mx, lane, 1);
    float sum = 0.0f;
    for (int s = lane; s <= t; s += SM_LANES) {
        const float e = EXP(a[s] * scale - mx);
        a[s] = e;
        sum += e;
    }
    sum = lanes_reduce(rd, sum, lane, 0);
    const float inv = 1.0f / sum;
    if (t >= 0)
        for (int s = lane; s < T; s += SM_LANES) a[s] = s <= t ? a[s] * inv : 0.0f;
}

/* Softmax backward in place: datt holds dP on entry and dS = scale * P * (dP - sum_s dP * P)
 * on exit (0 above the diagonal), with P = att from attention_softmax. */
__kernel void attention_softmax_backward(__global float* datt, __global const float* att,
                                         int rows, int T, float scale) {
    __local float red[SM_ROWS * SM_LANES];
    const int lane = get_local_id(0), r = get_global_id(1);
    const int t = r < rows ? r % T : -1;
    const size_t row = (size_t)(r < rows ? r : 0) * T;
    __global float* d = datt + row;
    const __global float* p = att + row;
    float dot = 0.0f;
    for (int s = lane; s <= t; s += SM_LANES) dot = MADD(d[s], p[s], dot);
    dot = lanes_reduce(red + get_local_id(1) * SM_LANES, dot, lane, 0);
    if (t >= 0)
        for (int s = lane; s < T; s += SM_LANES)
            d[s] = s <= t ? scale * p[s] * (d[s] - dot) : 0.0f;
}
