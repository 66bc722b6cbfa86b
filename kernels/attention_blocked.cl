/* Causal attention on CPUs: the FlashAttention-2 passes of attention.cl (same contracts: y, lse
 * from qkv; dqkv and dsum = D = rowsum(dy * y) from dy, y, qkv, lse) as register-blocked tiles,
 * the scheme of matmul_vec.cl. One work-item owns ATT_R query rows (dk/dv: key rows) and walks
 * blocks of ATT_KB = 2 * ATT_VW keys (queries): the (ATT_R x ATT_KB) score tile lives in
 * ATT_R x 2 vector accumulators (16 zmm registers at ATT_VW 16 with ATT_R 8; 12 ymm at ATT_VW 8
 * with ATT_R 6), then online softmax per row, then the (ATT_R x head_dim) output tile takes the
 * block's P.V as vector multiply-adds. No __local memory, no barriers (docs/DESIGN.md).
 *
 * Scores vectorise over keys, so they read K (and V, Q, dy) transposed: attention_transpose lays
 * a part of each head out as xt (ATT_HD, Tp) per (batch, head), Tp = T rounded up to ATT_KB,
 * zero past T (pad columns are masked out, and finite). The launcher keeps xt in the runtime's
 * scratch: (nz, np, ATT_HD, Tp) floats, np parts per z (forward 1: k; backward 4: q, k, v, dy),
 * z over (batch, query head): the k and v parts of a query head are its key/value head's
 * (grouped-query attention, ATT_G query heads per key/value head: kernels/common.h QKV_ROW).
 * Memory stays linear in T.
 *
 * Built per (head_dim, group, vector width) by engine/attention.py: ATT_HD, ATT_G, ATT_VW (8 or
 * 16), ATT_R.
 * As on CPUs generally (docs/DESIGN.md), plain a*b+c, pointer-cast vector loads and an inline exp:
 * PoCL does not inline OpenCL built-ins. Index z = b * H + h (dk/dv: b * (H / ATT_G) + kv head);
 * launches cover z0 <= z < z_end. */

#ifndef ATT_VW
#error "attention_blocked.cl needs -DATT_HD, -DATT_G, -DATT_VW, -DATT_R (engine/attention.py)"
#endif

#define ATT_KB (2 * ATT_VW)
#define ATT_TP(T) (((T) + ATT_KB - 1) / ATT_KB * ATT_KB)
#define VMAX(a, b) ((a) > (b) ? (a) : (b))

#if ATT_VW == 16
typedef float16 att_vf;
typedef int16 att_vi;
typedef float16 __attribute__((aligned(4))) att_vf_u;
#define AS_VF(x) as_float16(x)
#define AS_VI(x) as_int16(x)
#define ATT_LANES (att_vf)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f, 10.0f, \
                           11.0f, 12.0f, 13.0f, 14.0f, 15.0f)
#elif ATT_VW == 8
typedef float8 att_vf;
typedef int8 att_vi;
typedef float8 __attribute__((aligned(4))) att_vf_u;
#define AS_VF(x) as_float8(x)
#define AS_VI(x) as_int8(x)
#define ATT_LANES (att_vf)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f)
#else
#error "ATT_VW must be 8 or 16"
#endif

/* Unaligned vector load / store at any float address (global or private). */
#define VLOAD_G(p) (*(const __global att_vf_u*)(p))
#define VLOAD_P(p) (*(const att_vf_u*)(p))
#define VSTORE_P(p, v) (*(att_vf_u*)(p) = (v))

/* exp over a vector: fast_exp (common.h) lane-wise, with round-to-nearest by the 1.5 * 2^23
 * trick (no conversion built-ins); 0 below -87, so masked (-inf) scores give exactly 0. */
inline att_vf att_vexp(att_vf x0) {
    const att_vf x = x0 > (att_vf)(88.0f) ? (att_vf)(88.0f) : x0;
    const att_vf big = x * 1.44269504088896341f + 12582912.0f;
    const att_vi n = AS_VI(big) - 0x4B400000;
    const att_vf fn = big - 12582912.0f;
    att_vf r = x - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    const att_vf r2 = r * r;
    att_vf p = 1.9875691500e-4f * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    p = p * AS_VF((n + 127) << 23);
    return x0 < (att_vf)(-87.0f) ? (att_vf)(0.0f) : p;
}

/* Horizontal max and sum of one vector, by halves. */
#define ATT_HRED(v, OP, out)                                                                   \
    {                                                                                          \
        HALF16(v, OP)                                                                          \
        const float4 v4 = OP(v8.lo, v8.hi);                                                    \
        const float2 v2 = OP(v4.lo, v4.hi);                                                    \
        out = OP(v2.x, v2.y);                                                                  \
    }
#if ATT_VW == 16
#define HALF16(v, OP) const float8 v8 = OP((v).lo, (v).hi);
#else
#define HALF16(v, OP) const float8 v8 = (v);
#endif
#define VADD(a, b) ((a) + (b))

/* s[i][u] = sum over d of A(row i, d) * Bt[d * Tp + j0 + u * ATT_VW + lane], rows of A at
 * A + ro[i] (private offsets), Bt (ATT_HD, Tp) global: a (ATT_R x ATT_KB) product tile. */
#define TILE_DOTS(s, A, ro, Bt, Tp, j0)                                                       \
    _Pragma("unroll") for (int i = 0; i < ATT_R; i++) {                                        \
        s[i][0] = (att_vf)(0.0f);                                                              \
        s[i][1] = (att_vf)(0.0f);                                                              \
    }                                                                                          \
    for (int d = 0; d < ATT_HD; d++) {                                                         \
        const __global float* bp = (Bt) + (size_t)d * (Tp) + (j0);                             \
        const att_vf b0 = VLOAD_G(bp), b1 = VLOAD_G(bp + ATT_VW);                              \
        _Pragma("unroll") for (int i = 0; i < ATT_R; i++) {                                    \
            const float a = (A)[ro[i] + d];                                                    \
            s[i][0] = a * b0 + s[i][0];                                                        \
            s[i][1] = a * b1 + s[i][1];                                                        \
        }                                                                                      \
    }

/* One width of ROWS_ACC's column loop: NV vectors (1 or 2) from column c0. */
#define ROWS_ACC_COLS(NV, dst, keep, coef, SRC, SS, nj, c0)                                    \
    {                                                                                          \
        att_vf acc[ATT_R][NV];                                                                 \
        _Pragma("unroll") for (int i = 0; i < ATT_R; i++)                                      \
            _Pragma("unroll") for (int u = 0; u < NV; u++)                                     \
                acc[i][u] = VLOAD_P(dst[i] + c0 + u * ATT_VW) * keep[i];                       \
        for (int j = 0; j < (nj); j++) {                                                       \
            const __global float* sp = (SRC) + (size_t)j * (SS) + c0;                          \
            att_vf sv[NV];                                                                     \
            _Pragma("unroll") for (int u = 0; u < NV; u++) sv[u] = VLOAD_G(sp + u * ATT_VW);   \
            _Pragma("unroll") for (int i = 0; i < ATT_R; i++) {                                \
                const float cf = coef[i][j];                                                   \
                _Pragma("unroll") for (int u = 0; u < NV; u++) acc[i][u] = cf * sv[u] + acc[i][u]; \
            }                                                                                  \
        }                                                                                      \
        _Pragma("unroll") for (int i = 0; i < ATT_R; i++)                                      \
            _Pragma("unroll") for (int u = 0; u < NV; u++)                                     \
                VSTORE_P(dst[i] + c0 + u * ATT_VW, acc[i][u]);                                 \
    }

/* dst[i][d] = keep[i] * dst[i][d] + sum over j < nj of coef[i][j] * SRC[j * SS + d] for the
 * ATT_R private rows (ATT_R, ATT_HD) of dst: columns in pairs of vectors, then one vector, then
 * scalars (head_dim not a multiple of ATT_VW). */
#define ROWS_ACC(dst, keep, coef, SRC, SS, nj)                                                 \
    {                                                                                          \
        int c0 = 0;                                                                            \
        for (; c0 + 2 * ATT_VW <= ATT_HD; c0 += 2 * ATT_VW)                                    \
            ROWS_ACC_COLS(2, dst, keep, coef, SRC, SS, nj, c0)                                 \
        if (c0 + ATT_VW <= ATT_HD) {                                                           \
            ROWS_ACC_COLS(1, dst, keep, coef, SRC, SS, nj, c0)                                 \
            c0 += ATT_VW;                                                                      \
        }                                                                                      \
        for (; c0 < ATT_HD; c0++)                                                              \
            _Pragma("unroll") for (int i = 0; i < ATT_R; i++) {                                \
                float a = dst[i][c0] * keep[i];                                                \
                for (int j = 0; j < (nj); j++) a = coef[i][j] * (SRC)[(size_t)j * (SS) + c0] + a; \
                dst[i][c0] = a;                                                                \
            }                                                                                  \
    }

/* Row offsets of the ATT_R rows r0.. of a matrix with row stride rs, rows past n clamped to
 * row n - 1 (computed, never stored). */
#define ROW_OFFSETS(ro, r0, n, rs)                                                             \
    int ro[ATT_R];                                                                             \
    _Pragma("unroll") for (int i = 0; i < ATT_R; i++)                                          \
        ro[i] = ((r0) + i < (n) ? (r0) + i : (n) - 1) * (rs);

#define ZERO_ROWS(x)                                                                           \
    for (int i = 0; i < ATT_R; i++)                                                            \
        for (int d = 0; d < ATT_HD; d++) x[i][d] = 0.0f;

/* Prologue of the kernels over query tiles: rows i0..last (< T) of (batch b, head h), q rows. */
#define QUERY_TILE_START                                                                       \
    const int i0 = get_global_id(0) * ATT_R, z = z0 + get_global_id(1);                       \
    if (i0 >= T || z >= z_end) return;                                                         \
    const int b = z / H, h = z % H, Tp = ATT_TP(T), last = min(T, i0 + ATT_R) - 1;             \
    const float scale = 1.0f / sqrt((float)ATT_HD);                                            \
    const __global float* q0 = QKV_ROW(qkv, b, 0, 0, C, h);

/* xt[z][part] (ATT_HD, Tp) = the channels of head h / hdiv of rows t of src, transposed: row
 * (b, t) at src + (b * T + t) * rs + off; zero for T <= t < Tp (hdiv: ATT_G for k and v, whose
 * heads are key/value heads, 1 for q and dy). Global (Tp / ATT_KB, z chunk): a work-item per
 * ATT_KB columns. */
__kernel void attention_transpose(__global float* xt, __global const float* src, int rs, int off,
                                  int hdiv, int np, int part, int T, int C, int H, int z0,
                                  int z_end) {
    const int t0 = get_global_id(0) * ATT_KB, z = z0 + get_global_id(1), Tp = ATT_TP(T);
    if (t0 >= Tp || z >= z_end) return;
    const int b = z / H, h = z % H;
    __global float* out = xt + ((size_t)z * np + part) * ATT_HD * Tp + t0;
    const __global float* in = src + ((size_t)b * T + t0) * rs + off + h / hdiv * ATT_HD;
    const int n = T - t0 < ATT_KB ? T - t0 : ATT_KB;
    for (int d = 0; d < ATT_HD; d++) {
        for (int t = 0; t < n; t++) out[(size_t)d * Tp + t] = in[(size_t)t * rs + d];
        for (int t = n; t < ATT_KB; t++) out[(size_t)d * Tp + t] = 0.0f;
    }
}

/* y (B*T, C) and lse (B*H, T) from qkv (B*T, C + 2 KV) and kt = k transposed (np 1). Global
 * (ceil(T / ATT_R), z chunk). Queries i0..i0+ATT_R-1 attend to keys 0..i. */
__kernel void attention_forward(__global float* y, __global float* lse, __global const float* qkv,
                                __global const float* kt, int T, int C, int H, int z0,
                                int z_end) {
    QUERY_TILE_START
    const __global float* v0 = QKV_ROW(qkv, b, 0, 2, C, h);
    const __global float* Kt = kt + (size_t)z * ATT_HD * Tp;
    ROW_OFFSETS(ro, i0, T, QKV_W(C))
    float o[ATT_R][ATT_HD], p[ATT_R][ATT_KB], m[ATT_R], l[ATT_R], alpha[ATT_R];
    ZERO_ROWS(o)
    for (int i = 0; i < ATT_R; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
    for (int j0 = 0; j0 <= last; j0 += ATT_KB) {
        att_vf s[ATT_R][2];
        TILE_DOTS(s, q0, ro, Kt, Tp, j0)
        const bool diag = j0 + ATT_KB - 1 > i0;
        _Pragma("unroll") for (int i = 0; i < ATT_R; i++) {
            _Pragma("unroll") for (int u = 0; u < 2; u++) {
                s[i][u] *= scale;
                if (diag) s[i][u] = ATT_LANES + (float)(j0 + u * ATT_VW) > (float)(i0 + i)
                                    ? (att_vf)(-INFINITY) : s[i][u];
            }
            float mx;
            ATT_HRED(VMAX(s[i][0], s[i][1]), VMAX, mx)
            mx = VMAX(mx, m[i]);  /* finite: key 0 is in the first block of every row */
            alpha[i] = EXP(m[i] - mx);
            const att_vf p0 = att_vexp(s[i][0] - mx), p1 = att_vexp(s[i][1] - mx);
            float sum;
            ATT_HRED(p0 + p1, VADD, sum)
            l[i] = l[i] * alpha[i] + sum;
            m[i] = mx;
            VSTORE_P(p[i], p0);
            VSTORE_P(p[i] + ATT_VW, p1);
        }
        ROWS_ACC(o, alpha, p, v0 + (size_t)j0 * QKV_W(C), QKV_W(C), min(ATT_KB, last + 1 - j0))
    }
    for (int i = 0; i < last + 1 - i0; i++) {
        __global float* yr = y + ((size_t)b * T + i0 + i) * C + h * ATT_HD;
        const float inv = 1.0f / l[i];
        for (int d = 0; d < ATT_HD; d++) yr[d] = o[i][d] * inv;
        lse[(size_t)z * T + i0 + i] = m[i] + log(l[i]);
    }
}

/* dq part of dqkv and dsum, from dy, y, qkv, lse and xt (np 4: parts k 1, v 2). Global
 * (ceil(T / ATT_R), z chunk). dS = P (dy.v - D), P = exp(scale q.k - lse); dq = scale dS k. */
__kernel void attention_backward_dq(__global float* dqkv, __global float* dsum,
                                    __global const float* dy, __global const float* y,
                                    __global const float* qkv, __global const float* lse,
                                    __global const float* xt, int T, int C, int H, int z0,
                                    int z_end) {
    QUERY_TILE_START
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    const __global float* g0 = dy + (size_t)b * T * C + h * ATT_HD;
    const __global float* Kt = xt + ((size_t)z * 4 + 1) * ATT_HD * Tp;
    const __global float* Vt = Kt + (size_t)ATT_HD * Tp;
    ROW_OFFSETS(ro, i0, T, QKV_W(C))
    ROW_OFFSETS(rg, i0, T, C)
    float dq[ATT_R][ATT_HD], ds[ATT_R][ATT_KB], L[ATT_R], D[ATT_R], one[ATT_R];
    ZERO_ROWS(dq)
    for (int i = 0; i < ATT_R; i++) {
        one[i] = 1.0f;
        L[i] = 0.0f;
        D[i] = 0.0f;
        if (i0 + i <= last) {
            const __global float* yr = y + ((size_t)b * T + i0 + i) * C + h * ATT_HD;
            for (int d = 0; d < ATT_HD; d++) D[i] = MADD(g0[rg[i] + d], yr[d], D[i]);
            L[i] = lse[(size_t)z * T + i0 + i];
            dsum[(size_t)z * T + i0 + i] = D[i];
        }
    }
    for (int j0 = 0; j0 <= last; j0 += ATT_KB) {
        att_vf s[ATT_R][2], dp[ATT_R][2];
        TILE_DOTS(s, q0, ro, Kt, Tp, j0)
        TILE_DOTS(dp, g0, rg, Vt, Tp, j0)
        const bool diag = j0 + ATT_KB - 1 > i0;
        _Pragma("unroll") for (int i = 0; i < ATT_R; i++)
            _Pragma("unroll") for (int u = 0; u < 2; u++) {
                att_vf x = s[i][u] * scale - L[i];
                if (diag) x = ATT_LANES + (float)(j0 + u * ATT_VW) > (float)(i0 + i)
                              ? (att_vf)(-INFINITY) : x;
                VSTORE_P(ds[i] + u * ATT_VW, att_vexp(x) * (dp[i][u] - D[i]));
            }
        ROWS_ACC(dq, one, ds, k0 + (size_t)j0 * QKV_W(C), QKV_W(C), min(ATT_KB, last + 1 - j0))
    }
    for (int i = 0; i < last + 1 - i0; i++) {
        __global float* out = QKV_ROW(dqkv, b, i0 + i, 0, C, h);
        for (int d = 0; d < ATT_HD; d++) out[d] = dq[i][d] * scale;
    }
}

/* dk, dv parts of dqkv, after attention_backward_dq wrote dsum; xt np 4 (parts q 0, dy 3).
 * Global (ceil(T / ATT_R), z chunk), z = b * (H / ATT_G) + kv head: a work-item per ATT_R keys
 * j, over the query blocks from the one holding its first key on (queries i >= j) of each of
 * the ATT_G query heads sharing the key/value head, summed. dv = P^T dy; dk = scale dS^T q. */
__kernel void attention_backward_dkv(__global float* dqkv, __global const float* dy,
                                     __global const float* qkv, __global const float* lse,
                                     __global const float* dsum, __global const float* xt, int T,
                                     int C, int H, int z0, int z_end) {
    const int j0 = get_global_id(0) * ATT_R, z = z0 + get_global_id(1);
    if (j0 >= T || z >= z_end) return;
    /* h: the group's first query head; its k, v rows are the group's key/value head */
    const int b = z / (H / ATT_G), h = z % (H / ATT_G) * ATT_G, Tp = ATT_TP(T);
    const int nk = min(ATT_R, T - j0);
    const float scale = 1.0f / sqrt((float)ATT_HD);
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    const __global float* v0 = QKV_ROW(qkv, b, 0, 2, C, h);
    ROW_OFFSETS(ro, j0, T, QKV_W(C))
    float dk[ATT_R][ATT_HD], dv[ATT_R][ATT_HD], pt[ATT_R][ATT_KB], dst[ATT_R][ATT_KB];
    float Lb[ATT_KB], Db[ATT_KB], one[ATT_R];
    ZERO_ROWS(dk)
    ZERO_ROWS(dv)
    for (int i = 0; i < ATT_R; i++) one[i] = 1.0f;
    for (int hq = h; hq < h + ATT_G; hq++) {
        const size_t zq = (size_t)b * H + hq;
        const __global float* q0 = QKV_ROW(qkv, b, 0, 0, C, hq);
        const __global float* g0 = dy + (size_t)b * T * C + hq * ATT_HD;
        const __global float* Qt = xt + zq * 4 * ATT_HD * Tp;
        const __global float* Gt = Qt + (size_t)3 * ATT_HD * Tp;
        for (int i0 = j0 - j0 % ATT_KB; i0 < T; i0 += ATT_KB) {
            const int ni = min(ATT_KB, T - i0);
            for (int t = 0; t < ATT_KB; t++) {
                Lb[t] = t < ni ? lse[zq * T + i0 + t] : 0.0f;
                Db[t] = t < ni ? dsum[zq * T + i0 + t] : 0.0f;
            }
            att_vf s[ATT_R][2], dp[ATT_R][2];
            TILE_DOTS(s, k0, ro, Qt, Tp, i0)
            TILE_DOTS(dp, v0, ro, Gt, Tp, i0)
            const bool edge = i0 < j0 + ATT_R || ni < ATT_KB;
            _Pragma("unroll") for (int i = 0; i < ATT_R; i++)
                _Pragma("unroll") for (int u = 0; u < 2; u++) {
                    att_vf x = s[i][u] * scale - VLOAD_P(Lb + u * ATT_VW);
                    if (edge) {
                        const att_vf qi = ATT_LANES + (float)(i0 + u * ATT_VW);
                        x = qi < (float)(j0 + i) || qi >= (float)T ? (att_vf)(-INFINITY) : x;
                    }
                    const att_vf pv = att_vexp(x);
                    VSTORE_P(pt[i] + u * ATT_VW, pv);
                    VSTORE_P(dst[i] + u * ATT_VW, pv * (dp[i][u] - VLOAD_P(Db + u * ATT_VW)));
                }
            ROWS_ACC(dv, one, pt, g0 + (size_t)i0 * C, C, ni)
            ROWS_ACC(dk, one, dst, q0 + (size_t)i0 * QKV_W(C), QKV_W(C), ni)
        }
    }
    for (int i = 0; i < nk; i++) {
        __global float* ok = QKV_ROW(dqkv, b, j0 + i, 1, C, h);
        __global float* ov = QKV_ROW(dqkv, b, j0 + i, 2, C, h);
        for (int d = 0; d < ATT_HD; d++) { ok[d] = dk[i][d] * scale; ov[d] = dv[i][d]; }
    }
}
