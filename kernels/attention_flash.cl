/* GPU causal attention as cooperative, register-blocked FlashAttention-2 (Dao 2023,
 * "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
 * Algorithms 1 and 2). Same
 * contract as attention.cl's *_tiled kernels (layouts, GQA, lse and dsum at z * T + t, z chunks
 * from z0), which stay as the fallback for tiles that do not fit (engine/model/attention_flash.py).
 *
 * A work-group of 16 x 16 work-items (tx, ty) owns a tile of ATT_BQ query rows (the forward and
 * dq kernels) or ATT_BK key rows (dk/dv). Every product is a small GEMM over __local tiles in
 * which work-item (tx, ty) holds a register block: the NI contiguous rows ty * NI + i of the
 * "A" side (its own tile's rows) and the NJ contiguous rows tx * NJ + j of the "B" side (keys or
 * queries), or the head channels tx + 16 c of a product's output. Tiles are stored channel-major
 * ("transposed": element (row r, channel d) at d * L + r), so one layout serves X and X^T: a
 * work-item's rows are one aligned float2/float4 read, a broadcast within a half-warp on the A
 * side (L = N + 4) and 128 consecutive bytes across a half-warp on the B side, whose stride L =
 * N + 2 (2 mod 32) also keeps the reads of channels tx + 16 c free of bank conflicts. The
 * forward's V tile is row-major: its channels tx * RD + c are float4 reads. head_dim is padded
 * with zeros to ATT_HDP (a multiple of 16); rows past T are zero and masked.
 *
 * -D: ATT_HD head_dim, ATT_HDP padded, ATT_G query heads per key/value head, ATT_BQ, ATT_BK (tile
 * rows, multiples of 16), and one of FLASH_FWD, FLASH_DQ, FLASH_DKV: each kernel is built on its
 * own, with its own tiles, so none of them exceeds the device's local memory. */

#ifndef ATT_HDP
#error "attention_flash.cl is built with -DATT_HD, -DATT_HDP, -DATT_G, -DATT_BQ, -DATT_BK"
#endif

#define RQ (ATT_BQ / 16)   /* query rows per work-item: 1, 2 or 4 */
#define RK (ATT_BK / 16)   /* key rows per work-item: 1, 2 or 4 */
#define RD (ATT_HDP / 16)  /* head channels per work-item */
#define LA(N) ((N) + 4)    /* channel stride of an A-side tile of N rows (float4-aligned) */
#define LB(N) ((N) + ((N) > 32 ? 4 : 2))  /* of a B-side tile: 2 mod 32 for N 16, 32 */
#define RDV (RD % 4 == 0 ? 4 : RD % 2 == 0 ? 2 : 1)  /* channels per vector read of V */

/* a_[0..NI) = p[0..NI) in one vector read (NI 1, 2 or 4; p aligned to NI floats) */
#define LOAD_ROWS(a_, NI, p)                                                                   \
    if ((NI) == 4) {                                                                           \
        const float4 w_ = *(__local const float4*)(p);                                         \
        a_[0] = w_.s0; a_[1 % (NI)] = w_.s1; a_[2 % (NI)] = w_.s2; a_[3 % (NI)] = w_.s3;        \
    } else if ((NI) == 2) {                                                                    \
        const float2 w_ = *(__local const float2*)(p);                                         \
        a_[0] = w_.s0; a_[1 % (NI)] = w_.s1;                                                   \
    } else {                                                                                   \
        a_[0] = *(p);                                                                          \
    }

/* p[0..NI) = a_[0..NI) in one vector write (as LOAD_ROWS) */
#define STORE_ROWS(p, NI, a_)                                                                  \
    if ((NI) == 4)                                                                             \
        *(__local float4*)(p) = (float4)(a_[0], a_[1 % (NI)], a_[2 % (NI)], a_[3 % (NI)]);     \
    else if ((NI) == 2)                                                                        \
        *(__local float2*)(p) = (float2)(a_[0], a_[1 % (NI)]);                                 \
    else                                                                                       \
        *(p) = a_[0];

/* dst[d * L + r] = s * row r0 + r of src (row stride rs) at channel d; zero for rows at or past
 * T and channels past ATT_HD. All 256 work-items take part (lid = ty * 16 + tx). */
#define STAGE_T(dst, N, L, src, rs, r0, s)                                                     \
    for (int e = lid; e < (N) * ATT_HDP; e += 256) {                                           \
        const int r = e / ATT_HDP, d = e % ATT_HDP;                                            \
        (dst)[d * (L) + r] = (r0) + r < T && d < ATT_HD                                  \
            ? (s) * (src)[(size_t)((r0) + r) * (rs) + d] : 0.0f;                               \
    }

/* dst[r * ATT_HDP + d] = row r0 + r of src (row stride rs) at channel d, zero past T and ATT_HD */
#define STAGE_R(dst, N, src, rs, r0)                                                           \
    for (int e = lid; e < (N) * ATT_HDP; e += 256) {                                           \
        const int r = e / ATT_HDP, d = e % ATT_HDP;                                            \
        (dst)[e] = (r0) + r < T && d < ATT_HD ? (src)[(size_t)((r0) + r) * (rs) + d] : 0.0f;   \
    }

/* acc[i][c] += sum over n < N of P[n * SP + ty NI + i] * X[n * ATT_HDP + tx RD + c], X
 * row-major (the forward's P V) */
#define TILE_MUL_R(acc, NI, N, P, SP, X)                                                       \
    for (int n = 0; n < (N); n++) {                                                            \
        float a_[NI], b_[RD];                                                                  \
        LOAD_ROWS(a_, NI, (P) + n * (SP) + ty * (NI))                                          \
        for (int c = 0; c < RD; c += RDV) {                                                    \
            float v_[RDV];                                                                     \
            LOAD_ROWS(v_, RDV, (X) + n * ATT_HDP + tx * RD + c)                                \
            for (int u = 0; u < RDV; u++) b_[c + u] = v_[u];                                   \
        }                                                                                      \
        for (int i = 0; i < (NI); i++)                                                         \
            for (int c = 0; c < RD; c++) acc[i][c] = MADD(a_[i], b_[c], acc[i][c]);            \
    }

/* acc[i][j] += sum over channels of A row (ty NI + i) * B row (tx NJ + j), A and B
 * channel-major with strides SA, SB (the scores of a tile). */
#define TILE_DOT(acc, NI, NJ, A, SA, B, SB)                                                    \
    for (int d = 0; d < ATT_HDP; d++) {                                                        \
        float a_[NI], b_[NJ];                                                                  \
        LOAD_ROWS(a_, NI, (A) + d * (SA) + ty * (NI))                                          \
        LOAD_ROWS(b_, NJ, (B) + d * (SB) + tx * (NJ))                                          \
        for (int i = 0; i < (NI); i++)                                                         \
            for (int j = 0; j < (NJ); j++) acc[i][j] = MADD(a_[i], b_[j], acc[i][j]);          \
    }

/* acc[i][c] += sum over n < N of P[n * SP + ty NI + i] * X channel (tx + 16 c) of row n, X
 * channel-major with stride SX (P V, dS K, P^T dO, dS^T Q). */
#define TILE_MUL(acc, NI, N, P, SP, X, SX)                                                     \
    for (int n = 0; n < (N); n++) {                                                            \
        float a_[NI], b_[RD];                                                                  \
        LOAD_ROWS(a_, NI, (P) + n * (SP) + ty * (NI))                                          \
        for (int c = 0; c < RD; c++) b_[c] = (X)[(tx + 16 * c) * (SX) + n];                    \
        for (int i = 0; i < (NI); i++)                                                         \
            for (int c = 0; c < RD; c++) acc[i][c] = MADD(a_[i], b_[c], acc[i][c]);            \
    }

#define ZERO2(a, NI, NJ)                                                                      \
    for (int i = 0; i < (NI); i++) for (int j = 0; j < (NJ); j++) a[i][j] = 0.0f

#define FLASH_IDS                                                                              \
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * 16 + tx;                  \
    const int z = z0 + get_group_id(1), W = QKV_W(C);                                          \
    const float scale = 1.0f / sqrt((float)ATT_HD)

#define ALIGNED __attribute__((aligned(16)))  /* float4 reads of the tiles */

#ifdef FLASH_FWD
/* As attention_forward_tiled. Global (16 * ceil(T / ATT_BQ), 16 * z chunk), local (16, 16).
 * Per key tile: S = (q scale) K^T in registers; the row max over the tile from 16 partial maxima
 * in red; P = exp(S - m) to __local; o = o * exp(m_old - m) + P V. The row sums l stay partial per
 * work-item (its own key columns) until the end. */
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void attention_forward_flash(__global float* y, __global float* lse,
                             __global const float* qkv, int T, int C, int H, int z0,
                             int z_end) {
    __local float Qt[ATT_HDP * LA(ATT_BQ)] ALIGNED, KVt[ATT_HDP * LB(ATT_BK)] ALIGNED,
        Pt[ATT_BK * LA(ATT_BQ)] ALIGNED, red[ATT_BQ * 16] ALIGNED;
    FLASH_IDS;
    /* the last query tiles (the most key tiles) first: less of a tail (as FlashAttention-2) */
    const int b = z / H, h = z % H, q0 = (get_num_groups(0) - 1 - get_group_id(0)) * ATT_BQ;
    STAGE_T(Qt, ATT_BQ, LA(ATT_BQ), QKV_ROW(qkv, b, 0, 0, C, h), W, q0, scale)
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    const __global float* v0 = QKV_ROW(qkv, b, 0, 2, C, h);
    float m[RQ], l[RQ], o[RQ][RD];
    for (int i = 0; i < RQ; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
    ZERO2(o, RQ, RD);
    for (int s0 = 0; s0 < min(T, q0 + ATT_BQ); s0 += ATT_BK) {  /* tiles above: skipped */
        barrier(CLK_LOCAL_MEM_FENCE);  /* the last tile's P V is done with KVt and Pt */
        STAGE_T(KVt, ATT_BK, LB(ATT_BK), k0, W, s0, 1.0f)
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[RQ][RK];
        ZERO2(s, RQ, RK);
        TILE_DOT(s, RQ, RK, Qt, LA(ATT_BQ), KVt, LB(ATT_BK))
        for (int i = 0; i < RQ; i++) {
            const int row = q0 + ty * RQ + i;
            float pm = -INFINITY;
            for (int j = 0; j < RK; j++) {
                const int key = s0 + tx * RK + j;
                s[i][j] = key <= row && key < T ? s[i][j] : -INFINITY;
                pm = s[i][j] > pm ? s[i][j] : pm;
            }
            red[(ty * RQ + i) * 16 + tx] = pm;
        }
        barrier(CLK_LOCAL_MEM_FENCE);  /* K read, partial maxima written */
        STAGE_R(KVt, ATT_BK, v0, W, s0)
        for (int i = 0; i < RQ; i++) {
            float mx = m[i];  /* key 0 is in every row's first tile: mx is finite */
            for (int t = 0; t < 16; t += 4) {  /* float4 reads of the 16 partial maxima */
                float v[4];
                LOAD_ROWS(v, 4, red + (ty * RQ + i) * 16 + t)
                for (int u = 0; u < 4; u++) mx = v[u] > mx ? v[u] : mx;
            }
            const float alpha = EXP(m[i] - mx);
            m[i] = mx;
            l[i] *= alpha;
            for (int c = 0; c < RD; c++) o[i][c] *= alpha;
            for (int j = 0; j < RK; j++) {
                s[i][j] = s[i][j] == -INFINITY ? 0.0f : EXP(s[i][j] - mx);  /* now P */
                l[i] += s[i][j];
            }
        }
        for (int j = 0; j < RK; j++) {
            float p[RQ];
            for (int i = 0; i < RQ; i++) p[i] = s[i][j];
            STORE_ROWS(Pt + (tx * RK + j) * LA(ATT_BQ) + ty * RQ, RQ, p)
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        TILE_MUL_R(o, RQ, ATT_BK, Pt, LA(ATT_BQ), KVt)
    }
    barrier(CLK_LOCAL_MEM_FENCE);  /* red: the partial row sums */
    for (int i = 0; i < RQ; i++) red[(ty * RQ + i) * 16 + tx] = l[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < RQ; i++) {
        const int row = q0 + ty * RQ + i;
        if (row >= T) continue;
        float sum = 0.0f;
        for (int t = 0; t < 16; t++) sum += red[(ty * RQ + i) * 16 + t];
        __global float* yr = y + ((size_t)b * T + row) * C + h * ATT_HD;
        const float inv = 1.0f / sum;
        for (int c = 0; c < RD; c++)
            if (tx * RD + c < ATT_HD) yr[tx * RD + c] = o[i][c] * inv;
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
                                 __global const float* qkv, __global const float* lse, int T,
                                 int C, int H, int z0, int z_end) {
    __local float Qt[ATT_HDP * LA(ATT_BQ)] ALIGNED, Gt[ATT_HDP * LA(ATT_BQ)] ALIGNED,
        Kt[ATT_HDP * LB(ATT_BK)] ALIGNED, Vt[ATT_HDP * LB(ATT_BK)] ALIGNED,
        St[ATT_BK * LA(ATT_BQ)] ALIGNED;
    FLASH_IDS;
    /* the last query tiles (the most key tiles) first: less of a tail (as FlashAttention-2) */
    const int b = z / H, h = z % H, q0 = (get_num_groups(0) - 1 - get_group_id(0)) * ATT_BQ;
    STAGE_T(Qt, ATT_BQ, LA(ATT_BQ), QKV_ROW(qkv, b, 0, 0, C, h), W, q0, scale)
    STAGE_T(Gt, ATT_BQ, LA(ATT_BQ), dy + (size_t)b * T * C + h * ATT_HD, C, q0, 1.0f)
    barrier(CLK_LOCAL_MEM_FENCE);
    /* D of row r by work-item r, summed in the order dP's products are (exactly dy . v at T 1) */
    if (lid < ATT_BQ && q0 + lid < T) {
        const __global float* yr = y + ((size_t)b * T + q0 + lid) * C + h * ATT_HD;
        float acc = 0.0f;
        for (int d = 0; d < ATT_HD; d++) acc = MADD(Gt[d * LA(ATT_BQ) + lid], yr[d], acc);
        St[lid] = acc;
        dsum[(size_t)z * T + q0 + lid] = acc;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float Dr[RQ], Lr[RQ], dq[RQ][RD];
    for (int i = 0; i < RQ; i++) {
        const int row = q0 + ty * RQ + i;
        Dr[i] = row < T ? St[ty * RQ + i] : 0.0f;
        Lr[i] = row < T ? lse[(size_t)z * T + row] : 0.0f;
    }
    ZERO2(dq, RQ, RD);
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    const __global float* v0 = QKV_ROW(qkv, b, 0, 2, C, h);
    for (int s0 = 0; s0 < min(T, q0 + ATT_BQ); s0 += ATT_BK) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* St (D, or the last dS) and Kt are read */
        STAGE_T(Kt, ATT_BK, LB(ATT_BK), k0, W, s0, 1.0f)
        STAGE_T(Vt, ATT_BK, LB(ATT_BK), v0, W, s0, 1.0f)
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[RQ][RK], dp[RQ][RK];
        ZERO2(s, RQ, RK);
        ZERO2(dp, RQ, RK);
        TILE_DOT(s, RQ, RK, Qt, LA(ATT_BQ), Kt, LB(ATT_BK))
        TILE_DOT(dp, RQ, RK, Gt, LA(ATT_BQ), Vt, LB(ATT_BK))
        for (int j = 0; j < RK; j++) {
            const int key = s0 + tx * RK + j;
            float ds[RQ];
            for (int i = 0; i < RQ; i++)
                ds[i] = key <= q0 + ty * RQ + i && key < T
                    ? EXP(s[i][j] - Lr[i]) * (dp[i][j] - Dr[i]) : 0.0f;
            STORE_ROWS(St + (tx * RK + j) * LA(ATT_BQ) + ty * RQ, RQ, ds)
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        TILE_MUL(dq, RQ, ATT_BK, St, LA(ATT_BQ), Kt, LB(ATT_BK))
    }
    for (int i = 0; i < RQ; i++) {
        const int row = q0 + ty * RQ + i;
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
                                  __global const float* qkv, __global const float* lse,
                                  __global const float* dsum, int T, int C, int H, int z0,
                                  int z_end) {
    __local float Kt[ATT_HDP * LA(ATT_BK)] ALIGNED, Vt[ATT_HDP * LA(ATT_BK)] ALIGNED,
        Qt[ATT_HDP * LB(ATT_BQ)] ALIGNED, Gt[ATT_HDP * LB(ATT_BQ)] ALIGNED,
        Pq[ATT_BQ * LA(ATT_BK)] ALIGNED,
        Sq[ATT_BQ * LA(ATT_BK)] ALIGNED, Ls[ATT_BQ], Ds[ATT_BQ];
    FLASH_IDS;
    const int b = z / (H / ATT_G), h = z % (H / ATT_G) * ATT_G, k0 = get_group_id(0) * ATT_BK;
    STAGE_T(Kt, ATT_BK, LA(ATT_BK), QKV_ROW(qkv, b, 0, 1, C, h), W, k0, scale)
    STAGE_T(Vt, ATT_BK, LA(ATT_BK), QKV_ROW(qkv, b, 0, 2, C, h), W, k0, 1.0f)
    float dk[RK][RD], dv[RK][RD];
    ZERO2(dk, RK, RD);
    ZERO2(dv, RK, RD);
    for (int hq = h; hq < h + ATT_G; hq++) {  /* dk, dv sum over the group's query heads */
        const __global float* q0 = QKV_ROW(qkv, b, 0, 0, C, hq);
        const __global float* g0 = dy + (size_t)b * T * C + hq * ATT_HD;
        const size_t zq = ((size_t)b * H + hq) * T;
        for (int i0 = k0 - k0 % ATT_BQ; i0 < T; i0 += ATT_BQ) {
            barrier(CLK_LOCAL_MEM_FENCE);  /* the last tile's products are done */
            STAGE_T(Qt, ATT_BQ, LB(ATT_BQ), q0, W, i0, 1.0f)
            STAGE_T(Gt, ATT_BQ, LB(ATT_BQ), g0, C, i0, 1.0f)
            for (int e = lid; e < ATT_BQ; e += 256) {
                Ls[e] = i0 + e < T ? lse[zq + i0 + e] : 0.0f;
                Ds[e] = i0 + e < T ? dsum[zq + i0 + e] : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            float st[RK][RQ], dpt[RK][RQ];
            ZERO2(st, RK, RQ);
            ZERO2(dpt, RK, RQ);
            TILE_DOT(st, RK, RQ, Kt, LA(ATT_BK), Qt, LB(ATT_BQ))
            TILE_DOT(dpt, RK, RQ, Vt, LA(ATT_BK), Gt, LB(ATT_BQ))
            for (int j = 0; j < RQ; j++) {
                const int q = tx * RQ + j;
                float p[RK], ds[RK];
                for (int i = 0; i < RK; i++) {
                    const int key = k0 + ty * RK + i;
                    p[i] = i0 + q >= key && i0 + q < T ? EXP(st[i][j] - Ls[q]) : 0.0f;
                    ds[i] = p[i] * (dpt[i][j] - Ds[q]);
                }
                STORE_ROWS(Pq + q * LA(ATT_BK) + ty * RK, RK, p)
                STORE_ROWS(Sq + q * LA(ATT_BK) + ty * RK, RK, ds)
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            TILE_MUL(dv, RK, ATT_BQ, Pq, LA(ATT_BK), Gt, LB(ATT_BQ))
            TILE_MUL(dk, RK, ATT_BQ, Sq, LA(ATT_BK), Qt, LB(ATT_BQ))
        }
    }
    for (int i = 0; i < RK; i++) {
        const int key = k0 + ty * RK + i;
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
