/* GPU causal attention as cooperative, register-blocked FlashAttention-2 (Dao 2023, "FlashAttention-2:
 * Faster Attention with Better Parallelism and Work Partitioning", Algorithms 1 and 2). Same
 * contract as attention.cl's *_tiled kernels (layouts, GQA, lse and dsum at z * T + t, z chunks
 * from z0), which stay as the fallback for tiles that do not fit (engine/model/attention_flash.py).
 *
 * A work-group of 16 x 16 work-items (tx, ty) owns a tile of ATT_BQ query rows (the forward and
 * dq kernels) or ATT_BK key rows (dk/dv). Every product is a small GEMM over __local tiles in
 * which work-item (tx, ty) holds a register block: rows ty + 16 i of the tile's own side and
 * columns tx + 16 j of the other side (keys, queries or head channels). Tiles are stored
 * channel-major ("transposed": element (row r, channel d) of an N-row tile at d * (N + 1) + r), so
 * the row side's reads are broadcasts within a half-warp and the column side's consecutive or of
 * odd stride N + 1: no bank conflicts, one layout for X and X^T. head_dim is padded with zeros to
 * ATT_HDP (a multiple of 16); rows past T are zero and masked.
 *
 * -D: ATT_HD head_dim, ATT_HDP padded, ATT_G query heads per key/value head, ATT_BQ, ATT_BK (tile
 * rows, multiples of 16), and one of FLASH_FWD, FLASH_DQ, FLASH_DKV: each kernel is built on its
 * own, with its own tiles, so none of them exceeds the device's local memory. */

#ifndef ATT_HDP
#error "attention_flash.cl is built with -DATT_HD, -DATT_HDP, -DATT_G, -DATT_BQ, -DATT_BK"
#endif

#define RQ (ATT_BQ / 16)   /* query rows per work-item */
#define RK (ATT_BK / 16)   /* key rows per work-item */
#define RD (ATT_HDP / 16)  /* head channels per work-item */
#define LQ (ATT_BQ + 1)    /* channel stride of a query tile */
#define LK (ATT_BK + 1)    /* channel stride of a key tile */

/* dst[d * (N + 1) + r] = s * row r0 + r of src (row stride rs) at channel d; zero for rows at
 * or past T and channels past ATT_HD. All 256 work-items take part (lid = ty * 16 + tx). */
#define STAGE_T(dst, N, src, rs, r0, s)                                                        \
    for (int e = lid; e < (N) * ATT_HDP; e += 256) {                                           \
        const int r = e / ATT_HDP, d = e % ATT_HDP;                                            \
        (dst)[d * ((N) + 1) + r] = (r0) + r < T && d < ATT_HD                                  \
            ? (s) * (src)[(size_t)((r0) + r) * (rs) + d] : 0.0f;                               \
    }

/* acc[i][j] += sum over channels of A row (ty + 16 i) * B row (tx + 16 j), A and B channel-major
 * with strides LA, LB (the scores of a tile). */
#define TILE_DOT(acc, NI, NJ, A, LA, B, LB)                                                    \
    for (int d = 0; d < ATT_HDP; d++) {                                                        \
        float a_[NI], b_[NJ];                                                                  \
        for (int i = 0; i < (NI); i++) a_[i] = (A)[d * (LA) + ty + 16 * i];                    \
        for (int j = 0; j < (NJ); j++) b_[j] = (B)[d * (LB) + tx + 16 * j];                    \
        for (int i = 0; i < (NI); i++)                                                         \
            for (int j = 0; j < (NJ); j++) acc[i][j] = MADD(a_[i], b_[j], acc[i][j]);          \
    }

/* acc[i][c] += sum over n < N of P[n * LP + ty + 16 i] * X channel (tx + 16 c) of row n, X
 * channel-major with stride LX (P V, dS K, P^T dO, dS^T Q). */
#define TILE_MUL(acc, NI, N, P, LP, X, LX)                                                     \
    for (int n = 0; n < (N); n++) {                                                            \
        float a_[NI], b_[RD];                                                                  \
        for (int i = 0; i < (NI); i++) a_[i] = (P)[n * (LP) + ty + 16 * i];                    \
        for (int c = 0; c < RD; c++) b_[c] = (X)[(tx + 16 * c) * (LX) + n];                    \
        for (int i = 0; i < (NI); i++)                                                         \
            for (int c = 0; c < RD; c++) acc[i][c] = MADD(a_[i], b_[c], acc[i][c]);            \
    }

#define ZERO2(a, NI, NJ) for (int i = 0; i < (NI); i++) for (int j = 0; j < (NJ); j++) a[i][j] = 0.0f

#define FLASH_IDS                                                                              \
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * 16 + tx;                  \
    const int z = z0 + get_group_id(1), W = QKV_W(C);                                          \
    const float scale = 1.0f / sqrt((float)ATT_HD)

#ifdef FLASH_FWD
/* As attention_forward_tiled. Global (16 * ceil(T / ATT_BQ), 16 * z chunk), local (16, 16).
 * Per key tile: S = (q scale) K^T in registers; the row max over the tile from 16 partial maxima
 * in red; P = exp(S - m) to __local; o = o * exp(m_old - m) + P V. The row sums l stay partial per
 * work-item (its own key columns) until the end. */
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void attention_forward_flash(__global float* y, __global float* lse,
                             __global const float* qkv, int T, int C, int H, int z0,
                             int z_end) {
    __local float Qt[ATT_HDP * LQ], KVt[ATT_HDP * LK], Pt[ATT_BK * LQ], red[ATT_BQ * 16];
    FLASH_IDS;
    const int b = z / H, h = z % H, q0 = get_group_id(0) * ATT_BQ;
    STAGE_T(Qt, ATT_BQ, QKV_ROW(qkv, b, 0, 0, C, h), W, q0, scale)
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    const __global float* v0 = QKV_ROW(qkv, b, 0, 2, C, h);
    float m[RQ], l[RQ], o[RQ][RD];
    for (int i = 0; i < RQ; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
    ZERO2(o, RQ, RD);
    for (int s0 = 0; s0 < min(T, q0 + ATT_BQ); s0 += ATT_BK) {  /* tiles above: skipped */
        barrier(CLK_LOCAL_MEM_FENCE);  /* the last tile's P V is done with KVt and Pt */
        STAGE_T(KVt, ATT_BK, k0, W, s0, 1.0f)
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[RQ][RK];
        ZERO2(s, RQ, RK);
        TILE_DOT(s, RQ, RK, Qt, LQ, KVt, LK)
        for (int i = 0; i < RQ; i++) {
            const int row = q0 + ty + 16 * i;
            float pm = -INFINITY;
            for (int j = 0; j < RK; j++) {
                const int key = s0 + tx + 16 * j;
                s[i][j] = key <= row && key < T ? s[i][j] : -INFINITY;
                pm = s[i][j] > pm ? s[i][j] : pm;
            }
            red[(ty + 16 * i) * 16 + tx] = pm;
        }
        barrier(CLK_LOCAL_MEM_FENCE);  /* K read, partial maxima written */
        STAGE_T(KVt, ATT_BK, v0, W, s0, 1.0f)
        for (int i = 0; i < RQ; i++) {
            float mx = m[i];  /* key 0 is in every row's first tile: mx is finite */
            for (int t = 0; t < 16; t++) {
                const float v = red[(ty + 16 * i) * 16 + t];
                mx = v > mx ? v : mx;
            }
            const float alpha = EXP(m[i] - mx);
            m[i] = mx;
            l[i] *= alpha;
            for (int c = 0; c < RD; c++) o[i][c] *= alpha;
            for (int j = 0; j < RK; j++) {
                const float p = s[i][j] == -INFINITY ? 0.0f : EXP(s[i][j] - mx);
                l[i] += p;
                Pt[(tx + 16 * j) * LQ + ty + 16 * i] = p;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        TILE_MUL(o, RQ, ATT_BK, Pt, LQ, KVt, LK)
    }
    barrier(CLK_LOCAL_MEM_FENCE);  /* red: the partial row sums */
    for (int i = 0; i < RQ; i++) red[(ty + 16 * i) * 16 + tx] = l[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < RQ; i++) {
        const int row = q0 + ty + 16 * i;
        if (row >= T) continue;
        float sum = 0.0f;
        for (int t = 0; t < 16; t++) sum += red[(ty + 16 * i) * 16 + t];
        __global float* yr = y + ((size_t)b * T + row) * C + h * ATT_HD;
        const float inv = 1.0f / sum;
        for (int c = 0; c < RD; c++)
            if (tx + 16 * c < ATT_HD) yr[tx + 16 * c] = o[i][c] * inv;
        if (tx == 0) lse[(size_t)z * T + row] = m[i] + log(sum);
    }
}
#endif

#ifdef FLASH_DQ
/* As attention_backward_dq_tiled. Global (16 * ceil(T / ATT_BQ), 16 * z chunk), local (16, 16).
 * D = rowsum(dy * y) first (stored in dsum for the dk/dv kernel); per key tile: S = (q scale) K^T
 * and dP = dy V^T in registers, dS = exp(S - L) (dP - D) to __local, dq += dS K. */
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void attention_backward_dq_flash(__global float* dqkv, __global float* dsum,
                                 __global const float* dy, __global const float* y,
                                 __global const float* qkv,
                                 __global const float* lse, int T, int C, int H,
                                 int z0, int z_end) {
    __local float Qt[ATT_HDP * LQ], Gt[ATT_HDP * LQ], Kt[ATT_HDP * LK], Vt[ATT_HDP * LK],
        St[ATT_BK * LQ];
    FLASH_IDS;
    const int b = z / H, h = z % H, q0 = get_group_id(0) * ATT_BQ;
    STAGE_T(Qt, ATT_BQ, QKV_ROW(qkv, b, 0, 0, C, h), W, q0, scale)
    STAGE_T(Gt, ATT_BQ, dy + (size_t)b * T * C + h * ATT_HD, C, q0, 1.0f)
    barrier(CLK_LOCAL_MEM_FENCE);
    /* D of row r by work-item r, summed in the order dP's products are (exactly dy . v at T 1) */
    if (lid < ATT_BQ && q0 + lid < T) {
        const __global float* yr = y + ((size_t)b * T + q0 + lid) * C + h * ATT_HD;
        float acc = 0.0f;
        for (int d = 0; d < ATT_HD; d++) acc = MADD(Gt[d * LQ + lid], yr[d], acc);
        St[lid] = acc;
        dsum[(size_t)z * T + q0 + lid] = acc;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float Dr[RQ], Lr[RQ], dq[RQ][RD];
    for (int i = 0; i < RQ; i++) {
        const int row = q0 + ty + 16 * i;
        Dr[i] = row < T ? St[ty + 16 * i] : 0.0f;
        Lr[i] = row < T ? lse[(size_t)z * T + row] : 0.0f;
    }
    ZERO2(dq, RQ, RD);
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    const __global float* v0 = QKV_ROW(qkv, b, 0, 2, C, h);
    for (int s0 = 0; s0 < min(T, q0 + ATT_BQ); s0 += ATT_BK) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* St (D, or the last dS) and Kt are read */
        STAGE_T(Kt, ATT_BK, k0, W, s0, 1.0f)
        STAGE_T(Vt, ATT_BK, v0, W, s0, 1.0f)
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[RQ][RK], dp[RQ][RK];
        ZERO2(s, RQ, RK);
        ZERO2(dp, RQ, RK);
        TILE_DOT(s, RQ, RK, Qt, LQ, Kt, LK)
        TILE_DOT(dp, RQ, RK, Gt, LQ, Vt, LK)
        for (int i = 0; i < RQ; i++)
            for (int j = 0; j < RK; j++) {
                const int row = q0 + ty + 16 * i, key = s0 + tx + 16 * j;
                St[(tx + 16 * j) * LQ + ty + 16 * i] = key <= row && key < T
                    ? EXP(s[i][j] - Lr[i]) * (dp[i][j] - Dr[i]) : 0.0f;
            }
        barrier(CLK_LOCAL_MEM_FENCE);
        TILE_MUL(dq, RQ, ATT_BK, St, LQ, Kt, LK)
    }
    for (int i = 0; i < RQ; i++) {
        const int row = q0 + ty + 16 * i;
        if (row >= T) continue;
        __global float* out = QKV_ROW(dqkv, b, row, 0, C, h);
        for (int c = 0; c < RD; c++)
            if (tx + 16 * c < ATT_HD) out[tx + 16 * c] = dq[i][c] * scale;
    }
}
#endif

#ifdef FLASH_DKV
/* As attention_backward_dkv_tiled: a work-group per ATT_BK keys of one key/value head (z = b *
 * (H / ATT_G) + kv head) walks the query tiles from its first key on, of each query head of the
 * group. Global (16 * ceil(T / ATT_BK), 16 * z chunk), local (16, 16). Per query tile: S^T =
 * (k scale) Q^T and dP^T = V dy^T in registers, P^T and dS^T = P^T (dP^T - D) to __local,
 * dv += P^T dy, dk += dS^T q; no atomics (each work-group owns its keys). */
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void attention_backward_dkv_flash(__global float* dqkv, __global const float* dy,
                                  __global const float* qkv,
                                  __global const float* lse,
                                  __global const float* dsum, int T, int C, int H,
                                  int z0, int z_end) {
    __local float Kt[ATT_HDP * LK], Vt[ATT_HDP * LK], Qt[ATT_HDP * LQ], Gt[ATT_HDP * LQ],
        Pq[ATT_BQ * LK], Sq[ATT_BQ * LK], Ls[ATT_BQ], Ds[ATT_BQ];
    FLASH_IDS;
    const int b = z / (H / ATT_G), h = z % (H / ATT_G) * ATT_G, k0 = get_group_id(0) * ATT_BK;
    STAGE_T(Kt, ATT_BK, QKV_ROW(qkv, b, 0, 1, C, h), W, k0, scale)
    STAGE_T(Vt, ATT_BK, QKV_ROW(qkv, b, 0, 2, C, h), W, k0, 1.0f)
    float dk[RK][RD], dv[RK][RD];
    ZERO2(dk, RK, RD);
    ZERO2(dv, RK, RD);
    for (int hq = h; hq < h + ATT_G; hq++) {  /* dk, dv sum over the group's query heads */
        const __global float* q0 = QKV_ROW(qkv, b, 0, 0, C, hq);
        const __global float* g0 = dy + (size_t)b * T * C + hq * ATT_HD;
        const size_t zq = ((size_t)b * H + hq) * T;
        for (int i0 = k0 - k0 % ATT_BQ; i0 < T; i0 += ATT_BQ) {
            barrier(CLK_LOCAL_MEM_FENCE);  /* the last tile's products are done */
            STAGE_T(Qt, ATT_BQ, q0, W, i0, 1.0f)
            STAGE_T(Gt, ATT_BQ, g0, C, i0, 1.0f)
            for (int e = lid; e < ATT_BQ; e += 256) {
                Ls[e] = i0 + e < T ? lse[zq + i0 + e] : 0.0f;
                Ds[e] = i0 + e < T ? dsum[zq + i0 + e] : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            float st[RK][RQ], dpt[RK][RQ];
            ZERO2(st, RK, RQ);
            ZERO2(dpt, RK, RQ);
            TILE_DOT(st, RK, RQ, Kt, LK, Qt, LQ)
            TILE_DOT(dpt, RK, RQ, Vt, LK, Gt, LQ)
            for (int i = 0; i < RK; i++)
                for (int j = 0; j < RQ; j++) {
                    const int key = k0 + ty + 16 * i, q = tx + 16 * j;
                    const float p = i0 + q >= key && i0 + q < T ? EXP(st[i][j] - Ls[q]) : 0.0f;
                    Pq[q * LK + ty + 16 * i] = p;
                    Sq[q * LK + ty + 16 * i] = p * (dpt[i][j] - Ds[q]);
                }
            barrier(CLK_LOCAL_MEM_FENCE);
            TILE_MUL(dv, RK, ATT_BQ, Pq, LK, Gt, LQ)
            TILE_MUL(dk, RK, ATT_BQ, Sq, LK, Qt, LQ)
        }
    }
    for (int i = 0; i < RK; i++) {
        const int key = k0 + ty + 16 * i;
        if (key >= T) continue;
        __global float* ok = QKV_ROW(dqkv, b, key, 1, C, h);
        __global float* ov = QKV_ROW(dqkv, b, key, 2, C, h);
        for (int c = 0; c < RD; c++)
            if (tx + 16 * c < ATT_HD) {
                ok[tx + 16 * c] = dk[i][c] * scale;
                ov[tx + 16 * c] = dv[i][c];
            }
    }
}
#endif
