/* Causal multi-head self-attention (Vaswani et al. 2017) over the fused qkv rows
 * (B*T, C + 2 KV) of kernels/common.h (QKV_ROW): q at [0, C), k and v after it with KV = C / ATT_G
 * columns each; query head h owns q channels [h*HD, (h+1)*HD) and reads key/value head
 * h / ATT_G (grouped-query attention, Ainslie et al. 2023; ATT_G 1: multi-head); scores
 * scaled by 1/sqrt(HD). Training runs it fused and tiled as FlashAttention-2 does (Dao 2023):
 * the forward keeps a running max m and sum l per query row and stores only the output y and
 * the logsumexp L (B, H, T) of the scaled scores; the backward recomputes P = exp(S - L) from
 * q, k and L, with D = rowsum(dy * y). No (T, T) matrix is ever stored.
 *
 * Built once per head_dim (engine/model/attention.py): ATT_HD = head_dim, ATT_BK = keys (or queries)
 * per __local tile, ATT_BQ = rows per work-group; both from one table in Python. These are the
 * GPU kernels (docs/DESIGN.md: __local memory is slow on PoCL's CPU device): a work-group per ATT_BQ
 * rows, the other side's rows staged in __local tiles of ATT_BK rows, tiles wholly above the
 * diagonal skipped. CPUs run attention_blocked.cl (register tiles in vectors, no __local).
 * Index z = b * H + h enumerates (batch, query head), in the dk/dv kernels z = b * (H / ATT_G) + kv
 * head, whose dk, dv sum over the ATT_G query heads of the group; launches may cover a chunk of
 * z from z0 on (engine/model/attention.py splits long launches). lse, dsum: (B*H, T) at z * T + t. */

#ifndef ATT_HD
#error "attention.cl is built with -DATT_HD, -DATT_G, -DATT_BK, -DATT_BQ (engine/model/attention.py)"
#endif

/* dst = xr . P over ATT_HD floats. */
#define DOT(dst, xr, P)                                                                         \
    {                                                                                          \
        dst = 0.0f;                                                                            \
        for (int d = 0; d < ATT_HD; d++) dst = MADD((xr)[d], (P)[d], dst);                      \
    }

/* Online-softmax update of (m, l, o[]) with keys j in [j0, j1) of a block: key j at
 * KP + j * KS, value j at VP + j * VS; qr = q * scale, so a dot product is the scaled score.
 * The block is rescaled once (FlashAttention-2), not once per key. */
#define FWD_BLOCK(DOTF, KP, KS, VP, VS, j0, j1)                                                      \
    {                                                                                          \
        float sc[ATT_BK], mx = m;                                                              \
        for (int j = (j0); j < (j1); j++) {                                                    \
            float dot;                                                                         \
            DOTF(dot, qr, (KP) + j * (KS))                                                     \
            sc[j] = dot;                                                                       \
            mx = dot > mx ? dot : mx;                                                          \
        }                                                                                      \
        const float alpha = EXP(m - mx);                                                       \
        l *= alpha;                                                                            \
        for (int d = 0; d < ATT_HD; d++) o[d] *= alpha;                                        \
        for (int j = (j0); j < (j1); j++) {                                                    \
            const float p = EXP(sc[j] - mx);                                                   \
            l += p;                                                                            \
            for (int d = 0; d < ATT_HD; d++) o[d] = MADD(p, (VP)[j * (VS) + d], o[d]);         \
        }                                                                                      \
        m = mx;                                                                                \
    }

/* dq[] += sum over keys j in [j0, j1) of dS_j k_j, dS_j = P_j (dy . v_j - D), P_j =
 * exp(qr . k_j - lse) (the 1/sqrt(HD) of dS is applied once at the end). */
#define DQ_BLOCK(DOTF, KP, KS, VP, VS, j0, j1)                                                 \
    for (int j = (j0); j < (j1); j++) {                                                        \
        float dot, dp;                                                                         \
        DOTF(dot, qr, (KP) + j * (KS))                                                         \
        DOTF(dp, gr, (VP) + j * (VS))                                                          \
        const float ds = EXP(dot - lse_t) * (dp - dsum_t);                                     \
        for (int d = 0; d < ATT_HD; d++) dq[d] = MADD(ds, (KP)[j * (KS) + d], dq[d]);          \
    }

/* For one key row (kr = k * scale, vr = v): dv[] += P_i dy_i and dk[] += dS_i q_i over
 * queries i in [i0, i1) of a block: q_i at QP + i * QS, dy_i at GP + i * GS, their logsumexp
 * and D at LP[i], DP[i]. */
#define DKV_BLOCK(DOTF, QP, QS, GP, GS, LP, DP, i0, i1)                                        \
    for (int i = (i0); i < (i1); i++) {                                                        \
        float dot, dp;                                                                         \
        DOTF(dot, kr, (QP) + i * (QS))                                                         \
        DOTF(dp, vr, (GP) + i * (GS))                                                          \
        const float p = EXP(dot - (LP)[i]), ds = p * (dp - (DP)[i]);                           \
        for (int d = 0; d < ATT_HD; d++) {                                                     \
            dv[d] = MADD(p, (GP)[i * (GS) + d], dv[d]);                                        \
            dk[d] = MADD(ds, (QP)[i * (QS) + d], dk[d]);                                       \
        }                                                                                      \
    }

/* Loads of private rows: dst[d] = src[d] * s. */
#define ROW_IN(dst, src, s) for (int d = 0; d < ATT_HD; d++) (dst)[d] = (src)[d] * (s)

/* Forward epilogue: y row = o / l; lse = m + log(l). */
#define FWD_STORE                                                                              \
    {                                                                                          \
        __global float* yr = y + ((size_t)b * T + t) * C + h * ATT_HD;                         \
        const float inv = 1.0f / l;                                                            \
        for (int d = 0; d < ATT_HD; d++) yr[d] = o[d] * inv;                                   \
        lse[(size_t)z * T + t] = m + log(l);                                                   \
    }

/* dq prologue: q (scaled), dy rows; D = dy . y stored for the dk/dv pass. */
#define DQ_START(DOTF)                                                                              \
    const int b = z / H, h = z % H;                                                            \
    const float scale = 1.0f / sqrt((float)ATT_HD);                                            \
    float qr[ATT_HD], gr[ATT_HD], dq[ATT_HD];                                                   \
    float lse_t = 0.0f, dsum_t = 0.0f;                                                         \
    if (t < T) {                                                                               \
        const __global float* g = dy + ((size_t)b * T + t) * C + h * ATT_HD;                   \
        const __global float* yo = y + ((size_t)b * T + t) * C + h * ATT_HD;                   \
        ROW_IN(qr, QKV_ROW(qkv, b, t, 0, C, h), scale);                                        \
        ROW_IN(gr, g, 1.0f);                                                                   \
        for (int d = 0; d < ATT_HD; d++) dq[d] = 0.0f;                                         \
        DOTF(dsum_t, gr, yo)  /* summed as dy . v is: exactly equal where y = v (T = 1) */     \
        lse_t = lse[(size_t)z * T + t];                                                        \
        dsum[(size_t)z * T + t] = dsum_t;                                                      \
    }

#define DQ_STORE                                                                               \
    if (t < T) {                                                                               \
        __global float* out = QKV_ROW(dqkv, b, t, 0, C, h);                                    \
        for (int d = 0; d < ATT_HD; d++) out[d] = dq[d] * scale;                               \
    }

/* z = b * (H / ATT_G) + kv head; h = the group's first query head (k, v rows are the group's) */
#define DKV_START                                                                              \
    const int b = z / (H / ATT_G), h = z % (H / ATT_G) * ATT_G;                                \
    const float scale = 1.0f / sqrt((float)ATT_HD);                                            \
    float kr[ATT_HD], vr[ATT_HD], dk[ATT_HD], dv[ATT_HD];                                      \
    for (int d = 0; d < ATT_HD; d++) { dk[d] = 0.0f; dv[d] = 0.0f; kr[d] = 0.0f; vr[d] = 0.0f; } \
    if (j < T) {                                                                               \
        ROW_IN(kr, QKV_ROW(qkv, b, j, 1, C, h), scale);                                        \
        ROW_IN(vr, QKV_ROW(qkv, b, j, 2, C, h), 1.0f);                                         \
    }

#define DKV_STORE                                                                              \
    if (j < T) {                                                                               \
        __global float* ok = QKV_ROW(dqkv, b, j, 1, C, h);                                     \
        __global float* ov = QKV_ROW(dqkv, b, j, 2, C, h);                                     \
        for (int d = 0; d < ATT_HD; d++) { ok[d] = dk[d] * scale; ov[d] = dv[d]; }             \
    }

/* --------------------------------------------------- GPU: a work-group per tile of ATT_BQ rows */

/* Stage rows r0..r0+ATT_BK-1 (those < T) of src (row stride rs) in dst (ATT_BK, ATT_HD);
 * every work-item of the group takes part. */
#define STAGE(dst, src, rs, r0)                                                                \
    for (int e = get_local_id(0); e < ATT_BK * ATT_HD; e += ATT_BQ) {                          \
        const int r = e / ATT_HD;                                                              \
        (dst)[e] = (r0) + r < T ? (src)[(size_t)((r0) + r) * (rs) + e % ATT_HD] : 0.0f;        \
    }
#define STAGE_VEC(dst, src, r0)                                                                \
    for (int e = get_local_id(0); e < ATT_BK; e += ATT_BQ)                                     \
        (dst)[e] = (r0) + e < T ? (src)[(r0) + e] : 0.0f;

/* As attention_forward. Global (ATT_BQ * ceil(T / ATT_BQ), z chunk), local (ATT_BQ, 1). */
__kernel __attribute__((reqd_work_group_size(ATT_BQ, 1, 1)))
void attention_forward_tiled(__global float* y, __global float* lse, __global const float* qkv,
                             int T, int C, int H, int z0, int z_end) {
    __local float Ks[ATT_BK * ATT_HD], Vs[ATT_BK * ATT_HD];
    const int t = get_global_id(0), z = z0 + get_group_id(1);  /* z < z_end: the grid is exact */
    const int b = z / H, h = z % H, q_end = min(T, (int)get_group_id(0) * ATT_BQ + ATT_BQ);
    float qr[ATT_HD], o[ATT_HD], m = -INFINITY, l = 0.0f;
    for (int d = 0; d < ATT_HD; d++) { o[d] = 0.0f; qr[d] = 0.0f; }
    if (t < T) ROW_IN(qr, QKV_ROW(qkv, b, t, 0, C, h), 1.0f / sqrt((float)ATT_HD));
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    const __global float* v0 = QKV_ROW(qkv, b, 0, 2, C, h);
    for (int s0 = 0; s0 < q_end; s0 += ATT_BK) {  /* key tiles above the diagonal: skipped */
        STAGE(Ks, k0, QKV_W(C), s0)
        STAGE(Vs, v0, QKV_W(C), s0)
        barrier(CLK_LOCAL_MEM_FENCE);
        const int n = t < T ? min(ATT_BK, t + 1 - s0) : 0;
        if (n > 0) FWD_BLOCK(DOT, Ks, ATT_HD, Vs, ATT_HD, 0, n)
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t < T) FWD_STORE
}

/* As attention_backward_dq. Global (ATT_BQ * ceil(T / ATT_BQ), z chunk), local (ATT_BQ, 1). */
__kernel __attribute__((reqd_work_group_size(ATT_BQ, 1, 1)))
void attention_backward_dq_tiled(__global float* dqkv, __global float* dsum,
                                 __global const float* dy, __global const float* y,
                                 __global const float* qkv, __global const float* lse,
                                 int T, int C, int H, int z0, int z_end) {
    __local float Ks[ATT_BK * ATT_HD], Vs[ATT_BK * ATT_HD];
    const int t = get_global_id(0), z = z0 + get_group_id(1);
    const int q_end = min(T, (int)get_group_id(0) * ATT_BQ + ATT_BQ);
    DQ_START(DOT)
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    const __global float* v0 = QKV_ROW(qkv, b, 0, 2, C, h);
    for (int s0 = 0; s0 < q_end; s0 += ATT_BK) {
        STAGE(Ks, k0, QKV_W(C), s0)
        STAGE(Vs, v0, QKV_W(C), s0)
        barrier(CLK_LOCAL_MEM_FENCE);
        const int n = t < T ? min(ATT_BK, t + 1 - s0) : 0;
        DQ_BLOCK(DOT, Ks, ATT_HD, Vs, ATT_HD, 0, n)
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    DQ_STORE
}

/* As attention_backward_dkv: a work-group per ATT_BQ keys of one key/value head walks the query
 * tiles from its first key on (tiles wholly above the diagonal skipped) of each query head of
 * the group, staging q, dy, lse and dsum. */
__kernel __attribute__((reqd_work_group_size(ATT_BQ, 1, 1)))
void attention_backward_dkv_tiled(__global float* dqkv, __global const float* dy,
                                  __global const float* qkv, __global const float* lse,
                                  __global const float* dsum, int T, int C, int H, int z0,
                                  int z_end) {
    __local float Qs[ATT_BK * ATT_HD], Gs[ATT_BK * ATT_HD], Ls[ATT_BK], Ds[ATT_BK];
    const int j = get_global_id(0), z = z0 + get_group_id(1);
    const int k_start = get_group_id(0) * ATT_BQ;
    DKV_START
    for (int hq = h; hq < h + ATT_G; hq++) {  /* dk, dv sum over the group's query heads */
        const __global float* q0 = QKV_ROW(qkv, b, 0, 0, C, hq);
        const __global float* g0 = dy + (size_t)b * T * C + hq * ATT_HD;
        const size_t zq = (size_t)b * H + hq;
        for (int i0 = k_start - k_start % ATT_BK; i0 < T; i0 += ATT_BK) {
            STAGE(Qs, q0, QKV_W(C), i0)
            STAGE(Gs, g0, C, i0)
            STAGE_VEC(Ls, lse + zq * T, i0)
            STAGE_VEC(Ds, dsum + zq * T, i0)
            barrier(CLK_LOCAL_MEM_FENCE);
            /* queries i0 + i with j <= i0 + i < T */
            const int lo = j < T ? max(0, j - i0) : ATT_BK, hi = min(ATT_BK, T - i0);
            DKV_BLOCK(DOT, Qs, ATT_HD, Gs, ATT_HD, Ls, Ds, lo, hi)
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    DKV_STORE
}

/* Decoding with a KV cache: one new query at position pos attends to rows 0..pos of the
 * layer's cached qkv rows (T_max, C + 2 KV) (k and v of earlier tokens, already rotated).
 * q comes from qkv_row (C + 2 KV); scores (H, T_max) is scratch; one work-item per query head,
 * reading key/value head h / ATT_G. */
__kernel void attention_decode(__global float* y, __global float* scores,
                               __global const float* qkv_row, __global const float* cache,
                               int pos, int T_max, int C, int H) {
    const int h = get_global_id(0);
    if (h >= H) return;
    const int C3 = QKV_W(C), n = pos + 1;
    const float scale = 1.0f / sqrt((float)ATT_HD);
    const __global float* q = qkv_row + h * ATT_HD;
    const __global float* k0 = cache + QKV_COL(1, C, h);
    const __global float* v0 = cache + QKV_COL(2, C, h);
    __global float* a = scores + (size_t)h * T_max;
    __global float* out = y + h * ATT_HD;
    /* a[s] = softmax over s < n of scale * q . k_s */
    float mx = -INFINITY;
    for (int s = 0; s < n; s++) {
        const __global float* k = k0 + (size_t)s * C3;
        float dot = 0.0f;
        for (int d = 0; d < ATT_HD; d++) dot = MADD(q[d], k[d], dot);
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
    for (int d = 0; d < ATT_HD; d++) out[d] = 0.0f;
    for (int s = 0; s < n; s++) {
        const __global float* v = v0 + (size_t)s * C3;
        for (int d = 0; d < ATT_HD; d++) out[d] = MADD(a[s], v[d], out[d]);
    }
#else  /* GPU: accumulate in a register, one global write per channel (no read-modify-write) */
    for (int d = 0; d < ATT_HD; d++) {
        float acc = 0.0f;
        for (int s = 0; s < n; s++) acc = MADD(a[s], v0[(size_t)s * C3 + d], acc);
        out[d] = acc;
    }
#endif
}
