/* Causal row softmax of the batched-product ("gemm") attention path on GPUs (engine/
 * attention_gemm.py): att holds (B*H*T, T) rows, query-major; row r is query t = r % T.
 * SM_LANES work-items share a row (see lanes_reduce in common.h). Launch: global (SM_LANES,
 * rows rounded up to SM_ROWS), local (SM_LANES, SM_ROWS). */

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
