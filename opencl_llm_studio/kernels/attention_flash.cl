/* GPU causal attention as cooperative, register-blocked FlashAttention-2 (Dao 2023,
 * "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
 * Algorithms 1 and 2). Same contract as attention.cl's *_tiled kernels (layouts, GQA, lse and
 * dsum at z * T + t in natural-log units, z chunks from z0), which stay as the fallback for
 * tiles that do not fit (engine/model/attention_flash.py).
 *
 * A work-group of ATT_WX x ATT_WY work-items (tx, ty) owns a tile of ATT_BQ query rows (the
 * forward and dq kernels) or ATT_BK key rows (dk/dv). Every product is a small GEMM over
 * __local tiles, as a register-blocked SGEMM: work-item (tx, ty) holds the rows ty + WY i of
 * its own tile (the "A" side), the rows tx + WX j of the other (keys or queries), and the head
 * channels CH(c) of a product's output. All tiles are row-major: head-row tiles with stride LH
 * = hdp + 4, score tiles (P, dS) of N columns with stride N + 4; both are 4 or 20 mod 32, so
 * the float4 reads of 8 interleaved rows hit 32 distinct banks. Both kinds of product read
 * float4s only: a score S = A B^T takes 4 channels of each of its rows per step, an output O
 * += P X takes 4 columns of each of its P rows and a float4 (or float2) of X's channels per
 * column. head_dim is padded with zeros to ATT_HDP (a multiple of 16); rows past T are zero
 * and masked. Scores are kept in base 2 (q or k staged times scale * log2(e), exp2; as
 * FlashAttention-2); lse and dsum stay in natural-log units for attention.cl's kernels.
 *
 * -D: ATT_HD head_dim, ATT_HDP padded, ATT_G query heads per key/value head, ATT_BQ, ATT_BK
 * (tile rows, multiples of 16 and of the work-group's sides), ATT_WX, ATT_WY (work-group
 * sides, 8 or 16), ATT_PF (1: the next tile is fetched into registers while this one is
 * computed on; 0: fetched straight to __local after the barrier, fewer registers), ATT_DS (1:
 * the backward takes dS from global memory instead of recomputing it in the dq kernel, below),
 * and one of FLASH_FWD, FLASH_DQ, FLASH_DKV: each kernel is built on its own, with its own
 * tiles, so none of them exceeds the device's local memory.
 *
 * The backward, two ways. ATT_DS 0 (FlashAttention-2's split without its atomic dQ adds, which
 * OpenCL 1.2 lacks for floats): the dq kernel computes D and recomputes S, dP and dS for its
 * query rows, the dk/dv kernel recomputes them again for its keys (9 products in all, with the
 * forward's 2). ATT_DS 1: attention_dsum_flash computes D, the dk/dv kernel also writes dS^T
 * (keys x queries of each query head, T x T per head, for a chunk of heads) to global memory,
 * and the dq kernel is the one product dq = dS K over tiles of it (7 products, and T^2 floats
 * per head of a chunk written once and read once). */

#ifndef ATT_HDP
#error "attention_flash.cl is built with -DATT_HD, -DATT_HDP, -DATT_G, -DATT_BQ, -DATT_BK, ..."
#endif

#define WX ATT_WX
#define WY ATT_WY
#define NT (WX * WY)            /* work-items per group */
#define LH (ATT_HDP + 4)        /* row stride of a tile of head rows */
#define LS(N) ((N) + 4)         /* row stride of a score tile of N columns */
#define RD (ATT_HDP / WX)       /* output channels per work-item */
#define CV (RD % 4 == 0 ? 4 : RD % 2 == 0 ? 2 : 1)  /* channels per vector read */
/* head channel of a work-item's output element c: CV-wide groups, WX * CV apart */
#define CH(c) (tx * CV + (c) / CV * (WX * CV) + (c) % CV)
#define LOG2E 1.4426950408889634f
#ifdef CPU_DEVICE
#define EXP2(x) fast_exp((x) * 0.6931471805599453f)
#else
#define EXP2(x) native_exp2(x)
#endif

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

/* Tiles go global -> registers -> __local. Work-item lid (= ty * WX + tx) takes elements e =
 * lid + NT u, u < NPF(N), of an N-row tile: row e / ATT_HDP, channel e % ATT_HDP (coalesced
 * global reads, consecutive __local writes). With ATT_PF, FETCH loads the next tile while the
 * current one is computed on (hiding global latency) and PUT stores it after the barrier; the
 * fetch runs unconditionally (rows past T read as zero; one spare tile at the end): under PoCL
 * a fetch skipped on the last step left the dk/dv kernel reading NaN (a miscompile of values
 * kept across barriers). */
#define NPF(N) ((N) * ATT_HDP / NT)

/* buf[u] = row r0 + r of src (row stride rs) at channel d; zero at or past T or ATT_HD */
#define FETCH(buf, N, src, rs, r0)                                                             \
    for (int u = 0; u < NPF(N); u++) {                                                         \
        const int e = lid + NT * u, r = e / ATT_HDP, d = e % ATT_HDP;                          \
        buf[u] = (r0) + r < T && d < ATT_HD ? (src)[(size_t)((r0) + r) * (rs) + d] : 0.0f;     \
    }

/* dst[r * LH + d] = s * buf[u] */
#define PUT(dst, N, buf, s)                                                                    \
    for (int u = 0; u < NPF(N); u++) {                                                         \
        const int e = lid + NT * u;                                                            \
        (dst)[e / ATT_HDP * LH + e % ATT_HDP] = (s) * buf[u];                                  \
    }

/* A tile straight to __local */
#define STAGE_ROWS(dst, N, src, rs, r0, s)                                                         \
    {                                                                                          \
        float f_[NPF(N)];                                                                      \
        FETCH(f_, N, src, rs, r0)                                                              \
        PUT(dst, N, f_, s)                                                                     \
    }

/* acc[i][j] += A row (ty + WY i) . B row (tx + WX j), both head-row tiles (a score tile) */
#define TILE_DOT(acc, NI, NJ, A, B)                                                            \
    for (int d = 0; d < ATT_HDP; d += 4) {                                                     \
        float a_[NI][4], b_[NJ][4];                                                            \
        for (int i = 0; i < (NI); i++) { LOAD_ROWS(a_[i], 4, (A) + (ty + WY * i) * LH + d) }   \
        for (int j = 0; j < (NJ); j++) { LOAD_ROWS(b_[j], 4, (B) + (tx + WX * j) * LH + d) }   \
        for (int e = 0; e < 4; e++)                                                            \
            for (int i = 0; i < (NI); i++)                                                     \
                for (int j = 0; j < (NJ); j++) acc[i][j] = MADD(a_[i][e], b_[j][e], acc[i][j]); \
    }

/* acc[i][c] += sum over n < N of P[(ty + WY i) * SP + n] * X[n * LH + CH(c)]: a score tile
 * P (stride SP) times a head-row tile X (P V, dS K, P^T dO, dS^T Q) */
#define TILE_MUL(acc, NI, N, P, SP, X)                                                         \
    for (int n = 0; n < (N); n += 4) {                                                         \
        float p_[NI][4];                                                                       \
        for (int i = 0; i < (NI); i++) { LOAD_ROWS(p_[i], 4, (P) + (ty + WY * i) * (SP) + n) } \
        for (int e = 0; e < 4; e++) {                                                          \
            float x_[RD];                                                                      \
            for (int c = 0; c < RD; c += CV) {                                                 \
                float v_[CV];                                                                  \
                LOAD_ROWS(v_, CV, (X) + (n + e) * LH + CH(c))                                  \
                for (int u = 0; u < CV; u++) x_[c + u] = v_[u];                                \
            }                                                                                  \
            for (int i = 0; i < (NI); i++)                                                     \
                for (int c = 0; c < RD; c++) acc[i][c] = MADD(p_[i][e], x_[c], acc[i][c]);     \
        }                                                                                      \
    }

#define ZERO2(a, NI, NJ)                                                                      \
    for (int i = 0; i < (NI); i++) for (int j = 0; j < (NJ); j++) a[i][j] = 0.0f

/* The backward's two score-shaped products of a tile, in new register blocks s, dp (NI x NJ):
 * s = A1 B1^T and dp = A2 B2^T (dq: S = q K^T, dP = dy V^T; dk/dv: S^T = K q^T, dP^T = V dy^T) */
#define SCORES_AND_DP(s, dp, NI, NJ, A1, B1, A2, B2)                                           \
    float s[NI][NJ], dp[NI][NJ];                                                               \
    ZERO2(s, NI, NJ);                                                                          \
    ZERO2(dp, NI, NJ);                                                                         \
    TILE_DOT(s, NI, NJ, A1, B1)                                                                \
    TILE_DOT(dp, NI, NJ, A2, B2)

#define FLASH_IDS                                                                              \
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * WX + tx;                  \
    const int z = z0 + get_group_id(1), W = QKV_W(C);                                          \
    const float scale = 1.0f / sqrt((float)ATT_HD)

#define ALIGNED __attribute__((aligned(16)))  /* float4 reads of the tiles */
#define RQ_F (ATT_BQ / WY)  /* forward, dq: query rows per work-item */
#define RK_F (ATT_BK / WX)  /* forward, dq: key columns per work-item */

#ifdef FLASH_FWD
/* As attention_forward_tiled. Global (WX * ceil(T / ATT_BQ), WY * z chunk), local (WX, WY).
 * Per key tile: S = (q scale log2 e) K^T in registers; the row max over the tile from WX
 * partial maxima in red; P = exp2(S - m) to __local; o = o * exp2(m_old - m) + P V. The row
 * sums l stay partial per work-item (its own key columns) until the end. */
__kernel __attribute__((reqd_work_group_size(ATT_WX, ATT_WY, 1)))
void attention_forward_flash(__global float* y, __global float* lse,
                             __global const float* qkv, int T, int C, int H, int z0,
                             int z_end) {
    __local float Qs[ATT_BQ * LH] ALIGNED, KVs[ATT_BK * LH] ALIGNED,
        Ps[ATT_BQ * LS(ATT_BK)] ALIGNED, red[ATT_BQ * WX] ALIGNED;
    FLASH_IDS;
    /* the last query tiles (the most key tiles) first: less of a tail (as FlashAttention-2) */
    const int b = z / H, h = z % H, q0 = (get_num_groups(0) - 1 - get_group_id(0)) * ATT_BQ;
    STAGE_ROWS(Qs, ATT_BQ, QKV_ROW(qkv, b, 0, 0, C, h), W, q0, scale * LOG2E)
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    const __global float* v0 = QKV_ROW(qkv, b, 0, 2, C, h);
    float m[RQ_F], l[RQ_F], o[RQ_F][RD];
    for (int i = 0; i < RQ_F; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
    ZERO2(o, RQ_F, RD);
    const int s_end = min(T, q0 + ATT_BQ);  /* key tiles above the diagonal: skipped */
#if ATT_PF
    float fk[NPF(ATT_BK)], fv[NPF(ATT_BK)];  /* the next K tile, this tile's V, in flight */
    FETCH(fk, ATT_BK, k0, W, 0)
#endif
    for (int s0 = 0; s0 < s_end; s0 += ATT_BK) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* the last tile's P V is done with KVs and Ps */
#if ATT_PF
        PUT(KVs, ATT_BK, fk, 1.0f)
        barrier(CLK_LOCAL_MEM_FENCE);
        FETCH(fv, ATT_BK, v0, W, s0)
#else
        STAGE_ROWS(KVs, ATT_BK, k0, W, s0, 1.0f)
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        float s[RQ_F][RK_F];
        ZERO2(s, RQ_F, RK_F);
        TILE_DOT(s, RQ_F, RK_F, Qs, KVs)
        for (int i = 0; i < RQ_F; i++) {
            const int row = q0 + ty + WY * i;
            float pm = -INFINITY;
            for (int j = 0; j < RK_F; j++) {
                const int key = s0 + tx + WX * j;
                s[i][j] = key <= row && key < T ? s[i][j] : -INFINITY;
                pm = s[i][j] > pm ? s[i][j] : pm;
            }
            red[(ty + WY * i) * WX + tx] = pm;
        }
        barrier(CLK_LOCAL_MEM_FENCE);  /* K read, partial maxima written */
#if ATT_PF
        PUT(KVs, ATT_BK, fv, 1.0f)
        FETCH(fk, ATT_BK, k0, W, s0 + ATT_BK)  /* (past the last tile: unused) */
#else
        STAGE_ROWS(KVs, ATT_BK, v0, W, s0, 1.0f)
#endif
        for (int i = 0; i < RQ_F; i++) {
            float mx = m[i];  /* key 0 is in every row's first tile: mx is finite */
            for (int t = 0; t < WX; t += 4) {  /* float4 reads of the WX partial maxima */
                float v[4];
                LOAD_ROWS(v, 4, red + (ty + WY * i) * WX + t)
                for (int u = 0; u < 4; u++) mx = v[u] > mx ? v[u] : mx;
            }
            const float alpha = EXP2(m[i] - mx);
            m[i] = mx;
            l[i] *= alpha;
            for (int c = 0; c < RD; c++) o[i][c] *= alpha;
            for (int j = 0; j < RK_F; j++) {
                s[i][j] = s[i][j] == -INFINITY ? 0.0f : EXP2(s[i][j] - mx);  /* now P */
                l[i] += s[i][j];
                Ps[(ty + WY * i) * LS(ATT_BK) + tx + WX * j] = s[i][j];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        TILE_MUL(o, RQ_F, ATT_BK, Ps, LS(ATT_BK), KVs)
    }
    barrier(CLK_LOCAL_MEM_FENCE);  /* red: the partial row sums */
    for (int i = 0; i < RQ_F; i++) red[(ty + WY * i) * WX + tx] = l[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < RQ_F; i++) {
        const int row = q0 + ty + WY * i;
        if (row >= T) continue;
        float sum = 0.0f;
        for (int t = 0; t < WX; t++) sum += red[(ty + WY * i) * WX + t];
        __global float* yr = y + ((size_t)b * T + row) * C + h * ATT_HD;
        const float inv = 1.0f / sum;
        for (int c = 0; c < RD; c++)
            if (CH(c) < ATT_HD) yr[CH(c)] = o[i][c] * inv;
        /* m in base 2: natural-log lse for the backward kernels (and attention.cl's) */
        if (tx == 0) lse[(size_t)z * T + row] = m[i] * 0.6931471805599453f + log(sum);
    }
}
#endif

#ifdef FLASH_DQ
/* dq rows (times scale: the product used unscaled K) into dqkv's q columns */
#define WRITE_DQ                                                                               \
    for (int i = 0; i < RQ_F; i++) {                                                           \
        const int row = q0 + ty + WY * i;                                                      \
        if (row >= T) continue;                                                                \
        __global float* out = QKV_ROW(dqkv, b, row, 0, C, h);                                  \
        for (int c = 0; c < RD; c++)                                                           \
            if (CH(c) < ATT_HD) out[CH(c)] = dq[i][c] * scale;                                 \
    }
#endif

#if defined(FLASH_DQ) && !ATT_DS
/* As attention_backward_dq_tiled (ds unused). Global (WX * ceil(T / ATT_BQ), WY * z chunk),
 * local (WX, WY). D = rowsum(dy * y) first (stored in dsum for the dk/dv kernel); per key
 * tile: S = (q scale log2 e) K^T and dP = dy V^T in registers, dS = exp2(S - L log2 e) (dP - D)
 * to __local, dq += dS K. */
__kernel __attribute__((reqd_work_group_size(ATT_WX, ATT_WY, 1)))
void attention_backward_dq_flash(__global float* dqkv, __global float* dsum,
                                 __global const float* dy, __global const float* y,
                                 __global const float* qkv, __global const float* lse,
                                 __global const float* ds, int T, int C, int H, int z0,
                                 int z_end) {
    __local float Qs[ATT_BQ * LH] ALIGNED, Gs[ATT_BQ * LH] ALIGNED, Ks[ATT_BK * LH] ALIGNED,
        Vs[ATT_BK * LH] ALIGNED, Ss[ATT_BQ * LS(ATT_BK)] ALIGNED;
    FLASH_IDS;
    const int b = z / H, h = z % H, q0 = (get_num_groups(0) - 1 - get_group_id(0)) * ATT_BQ;
    STAGE_ROWS(Qs, ATT_BQ, QKV_ROW(qkv, b, 0, 0, C, h), W, q0, scale * LOG2E)
    STAGE_ROWS(Gs, ATT_BQ, dy + (size_t)b * T * C + h * ATT_HD, C, q0, 1.0f)
    barrier(CLK_LOCAL_MEM_FENCE);
    /* D of row r by work-item r, summed in the order dP's products are (exactly dy . v at T 1) */
    for (int r = lid; r < ATT_BQ; r += NT)
        if (q0 + r < T) {
            const __global float* yr = y + ((size_t)b * T + q0 + r) * C + h * ATT_HD;
            float acc = 0.0f;
            for (int d = 0; d < ATT_HD; d++) acc = MADD(Gs[r * LH + d], yr[d], acc);
            Ss[r] = acc;
            dsum[(size_t)z * T + q0 + r] = acc;
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    float Dr[RQ_F], Lr[RQ_F], dq[RQ_F][RD];
    for (int i = 0; i < RQ_F; i++) {
        const int row = q0 + ty + WY * i;
        Dr[i] = row < T ? Ss[ty + WY * i] : 0.0f;
        Lr[i] = row < T ? lse[(size_t)z * T + row] * LOG2E : 0.0f;
    }
    ZERO2(dq, RQ_F, RD);
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    const __global float* v0 = QKV_ROW(qkv, b, 0, 2, C, h);
    const int s_end = min(T, q0 + ATT_BQ);
#if ATT_PF
    float fk[NPF(ATT_BK)], fv[NPF(ATT_BK)];  /* the next K and V tiles, in flight */
    FETCH(fk, ATT_BK, k0, W, 0)
    FETCH(fv, ATT_BK, v0, W, 0)
#endif
    for (int s0 = 0; s0 < s_end; s0 += ATT_BK) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* Ss (D, or the last dS) and Ks are read */
#if ATT_PF
        PUT(Ks, ATT_BK, fk, 1.0f)
        PUT(Vs, ATT_BK, fv, 1.0f)
        barrier(CLK_LOCAL_MEM_FENCE);
        FETCH(fk, ATT_BK, k0, W, s0 + ATT_BK)  /* (past the last tile: unused) */
        FETCH(fv, ATT_BK, v0, W, s0 + ATT_BK)
#else
        STAGE_ROWS(Ks, ATT_BK, k0, W, s0, 1.0f)
        STAGE_ROWS(Vs, ATT_BK, v0, W, s0, 1.0f)
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        SCORES_AND_DP(s, dp, RQ_F, RK_F, Qs, Ks, Gs, Vs)
        for (int i = 0; i < RQ_F; i++)
            for (int j = 0; j < RK_F; j++) {
                const int key = s0 + tx + WX * j;
                Ss[(ty + WY * i) * LS(ATT_BK) + tx + WX * j] =
                    key <= q0 + ty + WY * i && key < T
                    ? EXP2(s[i][j] - Lr[i]) * (dp[i][j] - Dr[i]) : 0.0f;
            }
        barrier(CLK_LOCAL_MEM_FENCE);
        TILE_MUL(dq, RQ_F, ATT_BK, Ss, LS(ATT_BK), Ks)
    }
    WRITE_DQ
}
#endif

#if defined(FLASH_DQ) && ATT_DS
/* dq = dS K from the dS^T the dk/dv kernel wrote for this chunk: ds[((z - z0) T + key) T +
 * query]. Global (WX * ceil(T / ATT_BQ), WY * z chunk), local (WX, WY); dsum and dy, y unused
 * (the same arguments as the recomputing kernel). Per key tile: dS (query rows x keys, only key
 * <= query read) and K to __local, dq += dS K. */
#define NDS (ATT_BQ * ATT_BK / NT)  /* dS elements per work-item per tile */

/* buf[u] = dS of query q0 + e % ATT_BQ, key s0 + e / ATT_BK (coalesced along queries) */
#define FETCH_DS(buf, s0)                                                                      \
    for (int u = 0; u < NDS; u++) {                                                            \
        const int e = lid + NT * u, key = (s0) + e / ATT_BQ, q = q0 + e % ATT_BQ;              \
        buf[u] = key <= q && q < T ? dsz[(size_t)key * T + q] : 0.0f;                          \
    }
#define PUT_DS(buf)                                                                            \
    for (int u = 0; u < NDS; u++) {                                                            \
        const int e = lid + NT * u;                                                            \
        Ss[e % ATT_BQ * LS(ATT_BK) + e / ATT_BQ] = buf[u];                                     \
    }

__kernel __attribute__((reqd_work_group_size(ATT_WX, ATT_WY, 1)))
void attention_backward_dq_flash(__global float* dqkv, __global float* dsum,
                                 __global const float* dy, __global const float* y,
                                 __global const float* qkv, __global const float* lse,
                                 __global const float* ds, int T, int C, int H, int z0,
                                 int z_end) {
    __local float Ks[ATT_BK * LH] ALIGNED, Ss[ATT_BQ * LS(ATT_BK)] ALIGNED;
    FLASH_IDS;
    const int b = z / H, h = z % H, q0 = (get_num_groups(0) - 1 - get_group_id(0)) * ATT_BQ;
    const __global float* dsz = ds + (size_t)(z - z0) * T * T;
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    float dq[RQ_F][RD];
    ZERO2(dq, RQ_F, RD);
    const int s_end = min(T, q0 + ATT_BQ);
#if ATT_PF
    float fk[NPF(ATT_BK)], fs[NDS];  /* the next K and dS tiles, in flight */
    FETCH(fk, ATT_BK, k0, W, 0)
    FETCH_DS(fs, 0)
#endif
    for (int s0 = 0; s0 < s_end; s0 += ATT_BK) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* the last tile's product is done */
#if ATT_PF
        PUT(Ks, ATT_BK, fk, 1.0f)
        PUT_DS(fs)
        barrier(CLK_LOCAL_MEM_FENCE);
        FETCH(fk, ATT_BK, k0, W, s0 + ATT_BK)  /* (past the last tile: unused) */
        FETCH_DS(fs, s0 + ATT_BK)
#else
        STAGE_ROWS(Ks, ATT_BK, k0, W, s0, 1.0f)
        {
            float f_[NDS];
            FETCH_DS(f_, s0)
            PUT_DS(f_)
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        TILE_MUL(dq, RQ_F, ATT_BK, Ss, LS(ATT_BK), Ks)
    }
    WRITE_DQ
}
#endif

#ifdef FLASH_DKV
#define RK_B (ATT_BK / WY)  /* keys (own rows) per work-item */
#define RQ_B (ATT_BQ / WX)  /* query columns per work-item */

/* q and dy rows, L (base 2) and D of step `it` of the dk/dv kernel's walk (query head h + it /
 * n_tiles, tile i_first + it % n_tiles) into registers fq, fg, fl, fd, or with STAGE_Q straight
 * into Qs, Gs, Ls, Ds */
#define Q_STEP(it)                                                                             \
    const int hq_ = h + (it) / n_tiles, i_ = i_first + (it) % n_tiles * ATT_BQ;                \
    const size_t zq_ = ((size_t)b * H + hq_) * T;                                              \
    const __global float* qs_ = QKV_ROW(qkv, b, 0, 0, C, hq_);                                 \
    const __global float* gs_ = dy + (size_t)b * T * C + hq_ * ATT_HD
#define FETCH_Q(it)                                                                            \
    {                                                                                          \
        Q_STEP(it);                                                                            \
        FETCH(fq, ATT_BQ, qs_, W, i_)                                                          \
        FETCH(fg, ATT_BQ, gs_, C, i_)                                                          \
        fl = lid < ATT_BQ && i_ + lid < T ? lse[zq_ + i_ + lid] * LOG2E : 0.0f;                \
        fd = lid < ATT_BQ && i_ + lid < T ? dsum[zq_ + i_ + lid] : 0.0f;                       \
    }
#define STAGE_Q(it)                                                                            \
    {                                                                                          \
        Q_STEP(it);                                                                            \
        STAGE_ROWS(Qs, ATT_BQ, qs_, W, i_, 1.0f)                                                   \
        STAGE_ROWS(Gs, ATT_BQ, gs_, C, i_, 1.0f)                                                   \
        for (int r = lid; r < ATT_BQ; r += NT) {                                               \
            Ls[r] = i_ + r < T ? lse[zq_ + i_ + r] * LOG2E : 0.0f;                             \
            Ds[r] = i_ + r < T ? dsum[zq_ + i_ + r] : 0.0f;                                    \
        }                                                                                      \
    }

#if ATT_DS
/* D = rowsum(dy * y) of every row of query heads z0..z_end (summed in the order dP's products
 * are: exactly dy . v at T 1). Global (NT * ceil(T / NT), z chunk), local (NT, 1); st: __local
 * scratch of DSUM_LOCAL_FLOATS(NT) (engine/model/attention_flash.py launch_dsum). A group's NT
 * rows come through __local DSUM_CH channels at a time, read by consecutive work-items along
 * each row (a warp reads 32-byte runs); read straight, work-item by row, a warp touched 32 rows
 * C floats apart per load: 0.15 ms a launch for L's 6 M elements on an H200, ~10x its traffic. */
#ifndef DSUM_CH
#error "attention_flash.cl needs -DDSUM_CH (engine/model/attention_flash.py)"
#endif
__kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void attention_dsum_flash(__global float* dsum, __global const float* dy,
                          __global const float* y, int T, int C, int H, int z0, int z_end,
                          __local float* st) {
    const int lid = get_local_id(0), t0 = get_group_id(0) * NT, z = z0 + get_global_id(1);
    const int b = z / H, h = z % H;
    __local float* gs = st;
    __local float* ys = st + NT * (DSUM_CH + 1);
    const __global float* g0 = dy + (size_t)b * T * C + h * ATT_HD;
    const __global float* y0 = y + (size_t)b * T * C + h * ATT_HD;
    float acc = 0.0f;
    for (int d0 = 0; d0 < ATT_HD; d0 += DSUM_CH) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* the last chunk's reads are done */
        for (int e = lid; e < NT * DSUM_CH; e += NT) {
            const int r = e / DSUM_CH, c = e % DSUM_CH, t = t0 + r, d = d0 + c;
            const int ok = t < T && d < ATT_HD;
            gs[r * (DSUM_CH + 1) + c] = ok ? g0[(size_t)t * C + d] : 0.0f;
            ys[r * (DSUM_CH + 1) + c] = ok ? y0[(size_t)t * C + d] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int n = min(DSUM_CH, ATT_HD - d0);
        for (int c = 0; c < n; c++)
            acc = MADD(gs[lid * (DSUM_CH + 1) + c], ys[lid * (DSUM_CH + 1) + c], acc);
    }
    if (t0 + lid < T) dsum[(size_t)z * T + t0 + lid] = acc;
}
#endif

/* As attention_backward_dkv_tiled: a work-group per ATT_BK keys of one key/value head (z = b *
 * (H / ATT_G) + kv head) walks the query tiles from its first key on, of each query head of the
 * group. Global (WX * ceil(T / ATT_BK), WY * z chunk), local (WX, WY). Per query tile: S^T =
 * (k scale log2 e) Q^T and dP^T = V dy^T in registers, P^T and dS^T = P^T (dP^T - D) to
 * __local, dv += P^T dy, dk += dS^T q; no atomics (each work-group owns its keys). */
__kernel __attribute__((reqd_work_group_size(ATT_WX, ATT_WY, 1)))
void attention_backward_dkv_flash(__global float* dqkv, __global const float* dy,
                                  __global const float* qkv, __global const float* lse,
                                  __global const float* dsum, __global float* ds, int T,
                                  int C, int H, int z0, int z_end) {
    __local float Ks[ATT_BK * LH] ALIGNED, Vs[ATT_BK * LH] ALIGNED, Qs[ATT_BQ * LH] ALIGNED,
        Gs[ATT_BQ * LH] ALIGNED, Pk[ATT_BK * LS(ATT_BQ)] ALIGNED,
        Sk[ATT_BK * LS(ATT_BQ)] ALIGNED, Ls[ATT_BQ], Ds[ATT_BQ];
    FLASH_IDS;
    const int b = z / (H / ATT_G), h = z % (H / ATT_G) * ATT_G, k0 = get_group_id(0) * ATT_BK;
    STAGE_ROWS(Ks, ATT_BK, QKV_ROW(qkv, b, 0, 1, C, h), W, k0, scale * LOG2E)
    STAGE_ROWS(Vs, ATT_BK, QKV_ROW(qkv, b, 0, 2, C, h), W, k0, 1.0f)
    float dk[RK_B][RD], dv[RK_B][RD];
    ZERO2(dk, RK_B, RD);
    ZERO2(dv, RK_B, RD);
    /* it walks (query head hq of the group, query tile i0 from the first key's on): dk, dv sum
     * over the group's query heads */
    const int i_first = k0 - k0 % ATT_BQ, n_tiles = (T - i_first + ATT_BQ - 1) / ATT_BQ;
#if ATT_PF
    float fq[NPF(ATT_BQ)], fg[NPF(ATT_BQ)], fl = 0.0f, fd = 0.0f;
    FETCH_Q(0)
#endif
    for (int it = 0; it < ATT_G * n_tiles; it++) {
        const int i0 = i_first + it % n_tiles * ATT_BQ;
        barrier(CLK_LOCAL_MEM_FENCE);  /* the last tile's products are done */
#if ATT_PF
        PUT(Qs, ATT_BQ, fq, 1.0f)
        PUT(Gs, ATT_BQ, fg, 1.0f)
        if (lid < ATT_BQ) { Ls[lid] = fl; Ds[lid] = fd; }
        barrier(CLK_LOCAL_MEM_FENCE);
        FETCH_Q(min(it + 1, ATT_G * n_tiles - 1))  /* the last tile again at the end */
#else
        STAGE_Q(it)
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        SCORES_AND_DP(st, dpt, RK_B, RQ_B, Ks, Qs, Vs, Gs)
        for (int i = 0; i < RK_B; i++)
            for (int j = 0; j < RQ_B; j++) {
                const int key = k0 + ty + WY * i, q = tx + WX * j;
                const float p = i0 + q >= key && i0 + q < T ? EXP2(st[i][j] - Ls[q]) : 0.0f;
                const float dsv = p * (dpt[i][j] - Ds[q]);
                Pk[(ty + WY * i) * LS(ATT_BQ) + q] = p;
                Sk[(ty + WY * i) * LS(ATT_BQ) + q] = dsv;
#if ATT_DS
                /* dS^T of query head (it / n_tiles) of this chunk's z: coalesced along queries */
                if (key < T && i0 + q < T)
                    ds[(((size_t)(z - z0) * ATT_G + it / n_tiles) * T + key) * T + i0 + q] = dsv;
#endif
            }
        barrier(CLK_LOCAL_MEM_FENCE);
        TILE_MUL(dv, RK_B, ATT_BQ, Pk, LS(ATT_BQ), Gs)
        TILE_MUL(dk, RK_B, ATT_BQ, Sk, LS(ATT_BQ), Qs)
    }
    for (int i = 0; i < RK_B; i++) {
        const int key = k0 + ty + WY * i;
        if (key >= T) continue;
        __global float* ok = QKV_ROW(dqkv, b, key, 1, C, h);
        __global float* ov = QKV_ROW(dqkv, b, key, 2, C, h);
        for (int c = 0; c < RD; c++)
            if (CH(c) < ATT_HD) {
                ok[CH(c)] = dk[i][c] * scale;
                ov[CH(c)] = dv[i][c];
            }
    }
}
#endif
