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

/* Tiles go global -> registers -> __local: FETCH loads the next tile into registers while the
 * current one is computed on (hiding global latency), PUT_T / PUT_R store it after the barrier.
 * The fetch runs unconditionally (rows past T read as zero; one spare tile at the end): under
 * PoCL a fetch skipped on the last step left the dk/dv kernel reading NaN (a miscompile of values
 * kept across barriers); the spare tile is one more read per work-group.
 * Work-item lid (= ty * 16 + tx) takes elements e = lid + 256 u, u < NPF(N), of an N-row tile:
 * row e / ATT_HDP, channel e % ATT_HDP (coalesced global reads). */
#define NPF(N) ((N) * ATT_HDP / 256)

/* buf[u] = row r0 + r of src (row stride rs) at channel d; zero at or past T or ATT_HD */
#define FETCH(buf, N, src, rs, r0)                                                             \
    for (int u = 0; u < NPF(N); u++) {                                                         \
        const int e = lid + 256 * u, r = e / ATT_HDP, d = e % ATT_HDP;                         \
        buf[u] = (r0) + r < T && d < ATT_HD ? (src)[(size_t)((r0) + r) * (rs) + d] : 0.0f;     \
    }

/* channel-major: dst[d * L + r] = s * buf[u] */
#define PUT_T(dst, N, L, buf, s)                                                               \
    for (int u = 0; u < NPF(N); u++) {                                                         \
        const int e = lid + 256 * u;                                                           \
        (dst)[e % ATT_HDP * (L) + e / ATT_HDP] = (s) * buf[u];                                 \
    }

/* row-major: dst[r * ATT_HDP + d] = buf[u] */
#define PUT_R(dst, N, buf) for (int u = 0; u < NPF(N); u++) (dst)[lid + 256 * u] = buf[u];

/* A tile straight to __local, channel-major (tiles staged once per work-group) */
#define STAGE_T(dst, N, L, src, rs, r0, s)                                                     \
    {                                                                                          \
        float f_[NPF(N)];                                                                      \
        FETCH(f_, N, src, rs, r0)                                                              \
        PUT_T(dst, N, L, f_, s)                                                                \
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

/* The backward's two score-shaped products of a tile, in new register blocks s, dp (NI x NJ):
 * s = A1 B1^T and dp = A2 B2^T (dq: S = q K^T, dP = dy V^T; dk/dv: S^T = K q^T, dP^T = V dy^T) */
#define SCORES_AND_DP(s, dp, NI, NJ, A1, A2, SA, B1, B2, SB)                                   \
    float s[NI][NJ], dp[NI][NJ];                                                               \
    ZERO2(s, NI, NJ);                                                                          \
    ZERO2(dp, NI, NJ);                                                                         \
    TILE_DOT(s, NI, NJ, A1, SA, B1, SB)                                                        \
    TILE_DOT(dp, NI, NJ, A2, SA, B2, SB)

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
    const int s_end = min(T, q0 + ATT_BQ);  /* key tiles above the diagonal: skipped */
    float fk[NPF(ATT_BK)], fv[NPF(ATT_BK)];  /* the next K tile, this tile's V, in flight */
    FETCH(fk, ATT_BK, k0, W, 0)
    for (int s0 = 0; s0 < s_end; s0 += ATT_BK) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* the last tile's P V is done with KVt and Pt */
        PUT_T(KVt, ATT_BK, LB(ATT_BK), fk, 1.0f)
        barrier(CLK_LOCAL_MEM_FENCE);
        FETCH(fv, ATT_BK, v0, W, s0)
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
        PUT_R(KVt, ATT_BK, fv)
        FETCH(fk, ATT_BK, k0, W, s0 + ATT_BK)  /* (past the last tile: unused) */
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
    const int s_end = min(T, q0 + ATT_BQ);
    float fk[NPF(ATT_BK)], fv[NPF(ATT_BK)];  /* the next K and V tiles, in flight */
    FETCH(fk, ATT_BK, k0, W, 0)
    FETCH(fv, ATT_BK, v0, W, 0)
    for (int s0 = 0; s0 < s_end; s0 += ATT_BK) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* St (D, or the last dS) and Kt are read */
        PUT_T(Kt, ATT_BK, LB(ATT_BK), fk, 1.0f)
        PUT_T(Vt, ATT_BK, LB(ATT_BK), fv, 1.0f)
        barrier(CLK_LOCAL_MEM_FENCE);
        FETCH(fk, ATT_BK, k0, W, s0 + ATT_BK)  /* (past the last tile: unused) */
        FETCH(fv, ATT_BK, v0, W, s0 + ATT_BK)
        SCORES_AND_DP(s, dp, RQ, RK, Qt, Gt, LA(ATT_BQ), Kt, Vt, LB(ATT_BK))
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
/* fq, fg, fl, fd = q and dy rows, L and D of step `it` of the dk/dv kernel's walk (query head
 * h + it / n_tiles, tile i_first + it % n_tiles) */
#define FETCH_Q(it)                                                                            \
    {                                                                                          \
        const int hq_ = h + (it) / n_tiles, i_ = i_first + (it) % n_tiles * ATT_BQ;            \
        const size_t zq_ = ((size_t)b * H + hq_) * T;                                          \
        FETCH(fq, ATT_BQ, QKV_ROW(qkv, b, 0, 0, C, hq_), W, i_)                                \
        FETCH(fg, ATT_BQ, dy + (size_t)b * T * C + hq_ * ATT_HD, C, i_)                        \
        fl = lid < ATT_BQ && i_ + lid < T ? lse[zq_ + i_ + lid] : 0.0f;                        \
        fd = lid < ATT_BQ && i_ + lid < T ? dsum[zq_ + i_ + lid] : 0.0f;                       \
    }

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
    /* it walks (query head hq of the group, query tile i0 from the first key's on): dk, dv sum
     * over the group's query heads; the next tile's q, dy, L and D are fetched during this one */
    const int i_first = k0 - k0 % ATT_BQ, n_tiles = (T - i_first + ATT_BQ - 1) / ATT_BQ;
    float fq[NPF(ATT_BQ)], fg[NPF(ATT_BQ)], fl = 0.0f, fd = 0.0f;
    FETCH_Q(0)
    for (int it = 0; it < ATT_G * n_tiles; it++) {
        const int i0 = i_first + it % n_tiles * ATT_BQ;
        barrier(CLK_LOCAL_MEM_FENCE);  /* the last tile's products are done */
        PUT_T(Qt, ATT_BQ, LB(ATT_BQ), fq, 1.0f)
        PUT_T(Gt, ATT_BQ, LB(ATT_BQ), fg, 1.0f)
        if (lid < ATT_BQ) { Ls[lid] = fl; Ds[lid] = fd; }
        barrier(CLK_LOCAL_MEM_FENCE);
        FETCH_Q(min(it + 1, ATT_G * n_tiles - 1))  /* the last tile again at the end */
        SCORES_AND_DP(st, dpt, RK, RQ, Kt, Vt, LA(ATT_BK), Qt, Gt, LB(ATT_BQ))
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
