/* Causal multi-head self-attention (Vaswani et al. 2017) over the fused qkv rows (B*T, 3C):
 * q at [0, C), k at [C, 2C), v at [2C, 3C); head h owns channels [h*hd, (h+1)*hd).
 * Scores scaled by 1/sqrt(hd). The probabilities att (B, H, T, T) are kept for backward
 * (zero above the diagonal). One work-item per (query row t, head h, batch b).
 *
 * Layout of att / datt within a head: query-major on CPUs (a work-item's row is contiguous
 * in its cache), key-major on GPUs (neighbouring work-items, i.e. neighbouring queries, read
 * neighbouring words: coalesced). Element (t, s) sits at t * ATT_QS(T) + s * ATT_SS(T). */
#ifdef CPU_DEVICE
#define ATT_QS(T) (T)
#define ATT_SS(T) 1
#else
#define ATT_QS(T) 1
#define ATT_SS(T) (T)
#endif

/* a[s * as] = softmax over s < n of scale * q . k_s, k_s = k0 + s * C3 (one query's causal row). */
inline void causal_softmax_row(__global float* a, int as, const __global float* q,
                               const __global float* k0, int n, int C3, int hd) {
    const float scale = 1.0f / sqrt((float)hd);
    float mx = -INFINITY;
    for (int s = 0; s < n; s++) {
        const __global float* k = k0 + (size_t)s * C3;
        float dot = 0.0f;
        for (int d = 0; d < hd; d++) dot = MADD(q[d], k[d], dot);
        dot *= scale;
        a[s * as] = dot;
        mx = dot > mx ? dot : mx;
    }
    float sum = 0.0f;
    for (int s = 0; s < n; s++) {
        const float e = EXP(a[s * as] - mx);
        a[s * as] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
    for (int s = 0; s < n; s++) a[s * as] *= inv;
}

/* out[d] = sum over s < n of a[s * as] * v_s[d], with v_s = v0 + s * C3. */
inline void weighted_rows(__global float* out, const __global float* a, int as,
                          const __global float* v0, int n, int C3, int hd) {
#ifdef CPU_DEVICE  /* rows of v stream through the cache; out stays in L1 */
    for (int d = 0; d < hd; d++) out[d] = 0.0f;
    for (int s = 0; s < n; s++) {
        const __global float* v = v0 + (size_t)s * C3;
        const float p = a[s * as];
        for (int d = 0; d < hd; d++) out[d] = MADD(p, v[d], out[d]);
    }
#else  /* GPU: accumulate in a register, one global write per channel (no read-modify-write) */
    for (int d = 0; d < hd; d++) {
        float acc = 0.0f;
        for (int s = 0; s < n; s++) acc = MADD(a[s * as], v0[(size_t)s * C3 + d], acc);
        out[d] = acc;
    }
#endif
}

__kernel void attention_forward(__global float* y, __global float* att,
                                __global const float* qkv, int B, int T, int C, int H) {
    const int t = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
    if (t >= T || h >= H || b >= B) return;
    const int hd = C / H, C3 = 3 * C;
    const __global float* rows = qkv + (size_t)(b * T) * C3 + h * hd;  /* q of row 0, head h */
    const int as = ATT_SS(T);
    __global float* a = att + (size_t)(b * H + h) * T * T + (size_t)t * ATT_QS(T);
    causal_softmax_row(a, as, rows + (size_t)t * C3, rows + C, t + 1, C3, hd);
    for (int s = t + 1; s < T; s++) a[s * as] = 0.0f;
    weighted_rows(y + (size_t)(b * T + t) * C + h * hd, a, as, rows + 2 * C, t + 1, C3, hd);
}

/* Per query row: dP = dy . v, dS = P * (dP - sum(dP * P)) * scale (softmax backward), stored in
 * datt (B, H, T, T); dq = dS @ k written into the q part of dqkv. */
__kernel void attention_backward_dq(__global float* dqkv, __global float* datt,
                                    __global const float* dy, __global const float* qkv,
                                    __global const float* att, int B, int T, int C, int H) {
    const int t = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
    if (t >= T || h >= H || b >= B) return;
    const int hd = C / H, C3 = 3 * C;
    const float scale = 1.0f / sqrt((float)hd);
    const __global float* g = dy + (size_t)(b * T + t) * C + h * hd;
    const size_t row = (size_t)(b * H + h) * T * T + (size_t)t * ATT_QS(T);
    const int as = ATT_SS(T);
    const __global float* p = att + row;
    __global float* ds = datt + row;
    float dot_pp = 0.0f;
    for (int s = 0; s <= t; s++) {
        const __global float* v = qkv + (size_t)(b * T + s) * C3 + 2 * C + h * hd;
        float dp = 0.0f;
        for (int d = 0; d < hd; d++) dp = MADD(g[d], v[d], dp);
        ds[s * as] = dp;
        dot_pp = MADD(dp, p[s * as], dot_pp);
    }
    for (int s = 0; s <= t; s++) ds[s * as] = p[s * as] * (ds[s * as] - dot_pp) * scale;
    for (int s = t + 1; s < T; s++) ds[s * as] = 0.0f;
    __global float* dq = dqkv + (size_t)(b * T + t) * C3 + h * hd;
#ifdef CPU_DEVICE
    for (int d = 0; d < hd; d++) dq[d] = 0.0f;
    for (int s = 0; s <= t; s++) {
        const __global float* k = qkv + (size_t)(b * T + s) * C3 + C + h * hd;
        const float w = ds[s * as];
        for (int d = 0; d < hd; d++) dq[d] = MADD(w, k[d], dq[d]);
    }
#else
    const __global float* k0 = qkv + (size_t)(b * T) * C3 + C + h * hd;
    for (int d = 0; d < hd; d++) {
        float acc = 0.0f;
        for (int s = 0; s <= t; s++) acc = MADD(ds[s * as], k0[(size_t)s * C3 + d], acc);
        dq[d] = acc;
    }
#endif
}

/* Per key row s: dk = sum_{t>=s} dS[t,s] q_t, dv = sum_{t>=s} P[t,s] dy_t, into dqkv. */
__kernel void attention_backward_dkv(__global float* dqkv, __global const float* datt,
                                     __global const float* dy, __global const float* qkv,
                                     __global const float* att, int B, int T, int C, int H) {
    const int s = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
    if (s >= T || h >= H || b >= B) return;
    const int hd = C / H, C3 = 3 * C;
    __global float* dk = dqkv + (size_t)(b * T + s) * C3 + C + h * hd;
    __global float* dv = dqkv + (size_t)(b * T + s) * C3 + 2 * C + h * hd;
    const size_t base = (size_t)(b * H + h) * T * T;
#ifdef CPU_DEVICE
    for (int d = 0; d < hd; d++) { dk[d] = 0.0f; dv[d] = 0.0f; }
    for (int t = s; t < T; t++) {
        const size_t e = base + (size_t)t * ATT_QS(T) + (size_t)s * ATT_SS(T);
        const float w = datt[e], p = att[e];
        const __global float* q = qkv + (size_t)(b * T + t) * C3 + h * hd;
        const __global float* g = dy + (size_t)(b * T + t) * C + h * hd;
        for (int d = 0; d < hd; d++) {
            dk[d] = MADD(w, q[d], dk[d]);
            dv[d] = MADD(p, g[d], dv[d]);
        }
    }
#else  /* GPU: every work-item reads the same q / dy row (a broadcast); sums stay in
        * registers. (att / datt are key-major here, so these reads are strided: the price of
        * coalesced reads in attention_forward and attention_backward_dq, which cost more.) */
    const __global float* q0 = qkv + (size_t)(b * T) * C3 + h * hd;
    const __global float* g0 = dy + (size_t)(b * T) * C + h * hd;
    for (int d = 0; d < hd; d++) {
        float ak = 0.0f, av = 0.0f;
        for (int t = s; t < T; t++) {
            const size_t e = base + (size_t)t * ATT_QS(T) + (size_t)s * ATT_SS(T);
            ak = MADD(datt[e], q0[(size_t)t * C3 + d], ak);
            av = MADD(att[e], g0[(size_t)t * C + d], av);
        }
        dk[d] = ak;
        dv[d] = av;
    }
#endif
}

/* Decoding with a KV cache: one new query at position pos attends to rows 0..pos of the
 * layer's cached qkv rows (T_max, 3C) (k and v of earlier tokens, already rotated).
 * q comes from qkv_row (3C); scores (H, T_max) is scratch; one work-item per head. */
__kernel void attention_decode(__global float* y, __global float* scores,
                               __global const float* qkv_row, __global const float* cache,
                               int pos, int T_max, int C, int H) {
    const int h = get_global_id(0);
    if (h >= H) return;
    const int hd = C / H, C3 = 3 * C;
    __global float* a = scores + (size_t)h * T_max;
    causal_softmax_row(a, 1, qkv_row + h * hd, cache + C + h * hd, pos + 1, C3, hd);
    weighted_rows(y + h * hd, a, 1, cache + 2 * C + h * hd, pos + 1, C3, hd);
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
