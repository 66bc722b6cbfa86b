/* Causal attention on CPUs: the FlashAttention-2 passes of attention.cl (same contracts: y, lse
 * from qkv; dqkv and dsum = D = rowsum(dy * y) from dy, y, qkv, lse) as register-blocked tiles,
 * the scheme of matmul_vec.cl. A work-item walks tiles of ATT_R query rows (backward: key rows)
 * against blocks of ATT_KB = 2 * ATT_VW keys (queries): the (ATT_R x ATT_KB) score tile lives in
 * ATT_R x 2 vector accumulators (16 zmm registers at ATT_VW 16 with ATT_R 8; 12 ymm at ATT_VW 8
 * with ATT_R 6), then online softmax per row, then the (ATT_R x head_dim) output tile takes the
 * block's P.V as vector multiply-adds. No barriers: work-groups of one work-item, whose __local
 * memory is only its own buffer (docs/DESIGN.md).
 *
 * Work-items own whole heads (the forward: a (batch, head); the backward: a (batch, key/value
 * head) with its ATT_G query heads; or a share of its tiles where there are fewer heads than
 * cores), so
 * each transposes what its scores read across lanes once, into its own slice of xt (the
 * runtime's scratch, (ATT_HD, Tp) floats per part, Tp = ATT_TPAD(T), zero past T: pad columns
 * are masked out, and finite), where a separate transpose kernel wrote every head to memory and
 * the tiles read it back: the forward k^T, the backward q^T and dy^T per query head, beside its
 * dq^T accumulator. Memory stays linear in T.
 *
 * Built per (head_dim, group, vector width) by engine/model/attention.py: ATT_HD, ATT_G, ATT_VW
 * (8 or 16), ATT_RF and ATT_RB (rows of the forward's and backward's tiles), ATT_PREFETCH,
 * ATT_LOCAL (xt in __local memory, else in the runtime's scratch).
 * As on CPUs generally (docs/DESIGN.md), plain a*b+c, pointer-cast vector loads and an inline exp:
 * PoCL does not inline OpenCL built-ins. Index z = b * H + h (backward: b * (H / ATT_G) + kv
 * head); launches cover z0 <= z < z_end. */

#ifndef ATT_VW
#error "attention_blocked.cl needs -DATT_HD, -DATT_G, -DATT_VW, -DATT_RF, -DATT_RB, -DATT_PREFETCH, -DATT_LOCAL (engine/model/attention.py)"
#endif
#if ATT_RB % 2
#error "ATT_RB must be even (DQT_ACC sums row pairs)"
#endif
/* ATT_R: rows of a tile in the macros below, ATT_RF in the forward, ATT_RB in the backward
 * (redefined before each kernel: the backward keeps more tiles live, so fewer rows spill less) */
#define ATT_R ATT_RF

#define ATT_KB (2 * ATT_VW)
#define ATT_TP(T) (((T) + ATT_KB - 1) / ATT_KB * ATT_KB)
/* columns of a transposed head: T rounded up to the key block, plus one block, so a block
 * of ATT_KB columns may start at any t < T */
#define ATT_TPAD(T) (ATT_TP(T) + ATT_KB)
/* rows of Tp floats the backward keeps per query head: q^T, dy^T, dq^T (ATT_HD each), the
 * logsumexp L and D = rowsum(dy * y), zero-padded (engine/model/attention.py allocates them) */
#define ATT_BROWS (3 * ATT_HD + 2)
#define VMAX(a, b) ((a) > (b) ? (a) : (b))
/* min of two ints inline: PoCL calls OpenCL's min() as a function, with a vzeroupper before
 * the call; in the backward's key-tile loop the zmm reloads after it took a third of the
 * kernel's time (perf, 2026-12-02) */
#define IMIN(a, b) ((a) < (b) ? (a) : (b))

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
#define VSTORE_G(p, v) (*(__global att_vf_u*)(p) = (v))

/* XT: the address space of a work-item's transposed rows (xt): __local where they fit the
 * device's local memory (ATT_LOCAL 1: a work-group of one work-item, whose local buffer PoCL
 * reuses from group to group, so it stays in L2), else the work-item's slice of a __global
 * scratch (each slice a new stretch of memory: written, read back and written out to DRAM:
 * twice the traffic of the rows themselves, 15-25% of the backward at M's shape). */
#if ATT_LOCAL
#define XT __local
#else
#define XT __global
#endif
#define VLOAD_X(p) (*(const XT att_vf_u*)(p))
#define VSTORE_X(p, v) (*(XT att_vf_u*)(p) = (v))
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
    {                                                                                          \
        const __global float* ap[ATT_R]; /* row pointers: one address register each */         \
        _Pragma("unroll") for (int i = 0; i < ATT_R; i++) {                                    \
            s[i][0] = (att_vf)(0.0f);                                                          \
            s[i][1] = (att_vf)(0.0f);                                                          \
            ap[i] = (A) + ro[i];                                                               \
        }                                                                                      \
        const XT float* bp = (Bt) + (j0);                                                      \
        for (int d = 0; d < ATT_HD; d++, bp += (Tp)) {                                         \
            const att_vf b0 = VLOAD_X(bp), b1 = VLOAD_X(bp + ATT_VW);                          \
            _Pragma("unroll") for (int i = 0; i < ATT_R; i++) {                                \
                const float a = ap[i][d];                                                      \
                s[i][0] = a * b0 + s[i][0];                                                    \
                s[i][1] = a * b1 + s[i][1];                                                    \
            }                                                                                  \
        }                                                                                      \
    }

/* One width of ROWS_ACC's column loop: NV vectors (1 or 2) from column c0. */
#define ROWS_ACC_COLS(NV, dst, keep, coef, SRC, SS, nj, c0)                                    \
    {                                                                                          \
        att_vf acc[ATT_R][NV];                                                                 \
        _Pragma("unroll") for (int i = 0; i < ATT_R; i++)                                      \
            _Pragma("unroll") for (int u = 0; u < NV; u++)                                     \
                acc[i][u] = VLOAD_P(dst[i] + c0 + u * ATT_VW) * keep[i];                       \
        const __global float* sp = (SRC) + c0;                                                 \
        for (int j = 0; j < (nj); j++, sp += (SS)) {                                           \
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

/* x (ATT_R, ATT_HD) private rows = 0, in vector stores where ROWS_ACC loads vectors: a vector
 * load of floats that scalar stores just wrote cannot be forwarded from them and waits until
 * they reach the cache (perf put a third of the backward's time on such a load) */
#define ZERO_ROWS(x)                                                                           \
    for (int i = 0; i < ATT_R; i++) {                                                          \
        int d = 0;                                                                             \
        for (; d + ATT_VW <= ATT_HD; d += ATT_VW) VSTORE_P(x[i] + d, (att_vf)(0.0f));          \
        for (; d < ATT_HD; d++) x[i][d] = 0.0f;                                                \
    }

/* Software prefetch of the ATT_HD floats of row t of a matrix at src with row stride rs, for
 * reading (rw 0) or writing (rw 1), where ATT_PREFETCH (CPU compilers; Oclgrind cannot run
 * llvm.prefetch; OpenCL's prefetch() compiles to nothing in PoCL). qkv rows are 3 C floats
 * apart, past the hardware prefetcher's stride: a head's rows read one by one wait on memory
 * (the transposes below ran 2-3x longer without). */
#if ATT_PREFETCH
#define PF_ROW(src, rs, t, rw)                                                                 \
    {                                                                                          \
        const __global float* pf_ = (src) + (size_t)(t) * (rs);                                \
        for (int d_ = 0; d_ < ATT_HD; d_ += 16) __builtin_prefetch(pf_ + d_, rw);              \
        __builtin_prefetch(pf_ + ATT_HD - 1, rw);                                              \
    }
#else
#define PF_ROW(src, rs, t, rw) {}
#endif

/* dst (ATT_HD, Tp) = the ATT_HD channels at src of rows t < T (row t at src + t * rs),
 * transposed; zero for T <= t < Tp. Block t0 of 16 rows: the rows stay in L1 while the stores
 * of one channel fill a cache line. */
#define TRANSPOSE_BLOCK(dst, src, rs, T, Tp, t0)                                               \
    if ((t0) + 16 <= (T)) { /* a full block: no bounds in the loop, which then vectorises */   \
        const __global float* sb = (src) + (size_t)(t0) * (rs);                                \
        for (int d = 0; d < ATT_HD; d++)                                                       \
            _Pragma("unroll") for (int t = 0; t < 16; t++)                                     \
                (dst)[(size_t)d * (Tp) + (t0) + t] = sb[(size_t)t * (rs) + d];                 \
    } else {                                                                                   \
        for (int d = 0; d < ATT_HD; d++)                                                       \
            for (int t = 0; t < 16; t++)                                                       \
                (dst)[(size_t)d * (Tp) + (t0) + t] =                                           \
                    (t0) + t < (T) ? (src)[(size_t)((t0) + t) * (rs) + d] : 0.0f;             \
    }

/* y (B*T, C) and lse (B*H, T) from qkv (B*T, C + 2 KV). Global (nsplit, z chunk), local
 * (1, 1): work-item (s, z) first transposes the k rows of its key/value head into its slice of
 * xt (ATT_HD, Tp) (scratch: (z chunk, nsplit) slices), then takes the query tiles s,
 * s + nsplit, ... (ATT_R rows each; nsplit > 1 only where few (batch, head) pairs would leave
 * cores idle). Queries i0..i0+ATT_R-1 attend to keys 0..i. */
__kernel void attention_forward(__global float* y, __global float* lse, __global const float* qkv,
                                XT float* xt, int T, int C, int H, int z0, int z_end) {
    const int split = get_global_id(0), nsplit = get_global_size(0);
    const int z = z0 + get_global_id(1);
    if (z >= z_end) return;
    const int b = z / H, h = z % H, Tp = ATT_TPAD(T);
    const float scale = 1.0f / sqrt((float)ATT_HD);
    const __global float* q0 = QKV_ROW(qkv, b, 0, 0, C, h);
    const __global float* v0 = QKV_ROW(qkv, b, 0, 2, C, h);
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    XT float* Kt = ATT_LOCAL ? xt : xt + ((size_t)(z - z0) * nsplit + split) * ATT_HD * Tp;
    for (int t0 = 0; t0 < Tp; t0 += 16) {  /* k^T; q and v rows prefetched for the tiles */
        for (int t = t0 + 16; t < IMIN(T, t0 + 32); t++) {
            PF_ROW(k0, QKV_W(C), t, 0)
            PF_ROW(q0, QKV_W(C), t, 0)
            PF_ROW(v0, QKV_W(C), t, 0)
        }
        TRANSPOSE_BLOCK(Kt, k0, QKV_W(C), T, Tp, t0)
    }
    for (int i0 = split * ATT_R; i0 < T; i0 += nsplit * ATT_R) {
        const int last = IMIN(T, i0 + ATT_R) - 1;
        ROW_OFFSETS(ro, i0, T, QKV_W(C))
        float o[ATT_R][ATT_HD], p[ATT_R][ATT_KB], m[ATT_R], alpha[ATT_R];
        att_vf l[ATT_R];  /* lane-wise sums, added up once at the end */
        ZERO_ROWS(o)
        for (int i = 0; i < ATT_R; i++) { m[i] = -INFINITY; l[i] = (att_vf)(0.0f); }
        for (int j0 = 0; j0 <= last; j0 += ATT_KB) {
            att_vf s[ATT_R][2];
            TILE_DOTS(s, q0, ro, Kt, Tp, j0)
            const bool diag = j0 + ATT_KB - 1 > i0;
            _Pragma("unroll") for (int i = 0; i < ATT_R; i++) {
                if (diag)
                    _Pragma("unroll") for (int u = 0; u < 2; u++)
                        s[i][u] = ATT_LANES + (float)(j0 + u * ATT_VW) > (float)(i0 + i)
                                  ? (att_vf)(-INFINITY) : s[i][u];
                float mx;  /* the scaled maximum (scale > 0): scaling folds into the exp's FMA */
                ATT_HRED(VMAX(s[i][0], s[i][1]), VMAX, mx)
                mx = VMAX(mx * scale, m[i]);  /* finite: key 0 is in every row's first block */
                alpha[i] = EXP(m[i] - mx);
                const att_vf p0 = att_vexp(s[i][0] * scale - mx);
                const att_vf p1 = att_vexp(s[i][1] * scale - mx);
                l[i] = l[i] * alpha[i] + (p0 + p1);
                m[i] = mx;
                VSTORE_P(p[i], p0);
                VSTORE_P(p[i] + ATT_VW, p1);
            }
            ROWS_ACC(o, alpha, p, v0 + (size_t)j0 * QKV_W(C), QKV_W(C),
                     IMIN(ATT_KB, last + 1 - j0))
        }
        for (int i = 0; i < last + 1 - i0; i++) {
            __global float* yr = y + ((size_t)b * T + i0 + i) * C + h * ATT_HD;
            float sum;
            ATT_HRED(l[i], VADD, sum)
            const float inv = 1.0f / sum;
            for (int d = 0; d < ATT_HD; d++) yr[d] = o[i][d] * inv;
            lse[(size_t)z * T + i0 + i] = m[i] + log(sum);
        }
    }
}

#undef ATT_R
#define ATT_R ATT_RB

/* dQt[d * Tp + i0 + lane] += sum over rows r of A(row r, d) * c[r][lane]: the (ATT_HD x ATT_KB)
 * tile of dq^T from the (ATT_R x ATT_KB) tile c in vector registers, rows of A at A + ro[r]. */
#define DQT_ACC(dQt, Tp, i0, A, ro, c)                                                         \
    {                                                                                          \
        const __global float* ap[ATT_R];                                                       \
        _Pragma("unroll") for (int r = 0; r < ATT_R; r++) ap[r] = (A) + ro[r];                 \
        XT float* qp = (dQt) + (i0);                                                           \
        for (int d = 0; d < ATT_HD; d++, qp += (Tp)) {                                         \
            att_vf a0 = VLOAD_X(qp), a1 = VLOAD_X(qp + ATT_VW), e0 = 0.0f, e1 = 0.0f;          \
            _Pragma("unroll") for (int r = 0; r < ATT_R; r += 2) { /* two chains per vector */ \
                const float a = ap[r][d], e = ap[r + 1][d];                                    \
                a0 = a * c[r][0] + a0;                                                         \
                a1 = a * c[r][1] + a1;                                                         \
                e0 = e * c[r + 1][0] + e0;                                                     \
                e1 = e * c[r + 1][1] + e1;                                                     \
            }                                                                                  \
            VSTORE_X(qp, a0 + e0);                                                             \
            VSTORE_X(qp + ATT_VW, a1 + e1);                                                    \
        }                                                                                      \
    }

/* The whole backward of one (batch, key/value head) z = b * (H / ATT_G) + kv head: dq, dk, dv
 * parts of dqkv and dsum (D = rowsum(dy * y)) of its ATT_G query heads, from dy, y, qkv, lse.
 * Global (nsplit, z chunk), local (1, 1): work-item s takes the key tiles s, s + nsplit, ...
 * (nsplit > 1 only where few heads would leave cores idle; then dq goes to dqp in shares and
 * attention_dq_sum adds them up). Its xt (__local, or its slice of the scratch: ATT_G *
 * ATT_BROWS rows of Tp floats) holds per query head q^T, dy^T, the dq^T accumulator, L and D.
 * Then per tile of
 * ATT_R keys j (rows) and per block of ATT_KB queries i >= j (vector lanes, the block starting
 * at the tile's first key, so only the first block of a tile is masked): S^T = k q^T,
 * dP^T = v dy^T, P^T = exp(scale S^T - L), dS^T = P^T (dP^T - D); dv += P^T dy,
 * dk += dS^T q (private rows), dq^T += k^T dS^T (the tile's dS^T still in registers): five
 * products per (query, key) pair, where separate dq and dk/dv passes recompute S and dP^T
 * (seven). dk = scale dS^T q, dq = scale dS k (FlashAttention-2, Algorithm 2). */
__kernel void attention_backward(__global float* dqkv, __global float* dsum,
                                 __global const float* dy, __global const float* y,
                                 __global const float* qkv, __global const float* lse,
                                 __global float* dqp, int dqp_off, XT float* xt, int T, int C,
                                 int H, int z0, int z_end) {
    const int split = get_global_id(0), nsplit = get_global_size(0);
    const int z = z0 + get_global_id(1);
    if (z >= z_end) return;
    /* h: the group's first query head; its k, v rows are the group's key/value head */
    const int b = z / (H / ATT_G), h = z % (H / ATT_G) * ATT_G, Tp = ATT_TPAD(T);
    const float scale = 1.0f / sqrt((float)ATT_HD);
    XT float* xz = ATT_LOCAL ? xt
                             : xt + ((size_t)(z - z0) * nsplit + split) * ATT_G * ATT_BROWS * Tp;
    const __global float* k0 = QKV_ROW(qkv, b, 0, 1, C, h);
    const __global float* v0 = QKV_ROW(qkv, b, 0, 2, C, h);
    for (int g = 0; g < ATT_G; g++) {  /* q^T, dy^T, dq^T = 0, D; rows prefetched a block on */
        const __global float* q0 = QKV_ROW(qkv, b, 0, 0, C, h + g);
        const __global float* g0 = dy + (size_t)b * T * C + (h + g) * ATT_HD;
        const __global float* y0 = y + (size_t)b * T * C + (h + g) * ATT_HD;
        XT float* Qt = xz + (size_t)g * ATT_BROWS * Tp;
        XT float* LD = Qt + (size_t)3 * ATT_HD * Tp;
        const __global float* Ls = lse + ((size_t)b * H + h + g) * T;
        __global float* Ds = dsum + ((size_t)b * H + h + g) * T;
        for (int t0 = 0; t0 < Tp; t0 += 16) {
            for (int t = t0 + 16; t < IMIN(T, t0 + 32); t++) {
                PF_ROW(q0, QKV_W(C), t, 0)
                PF_ROW(g0, C, t, 0)
                PF_ROW(y0, C, t, 0)
                if (g == 0) {
                    PF_ROW(k0, QKV_W(C), t, 0)
                    PF_ROW(v0, QKV_W(C), t, 0)
                }
            }
            TRANSPOSE_BLOCK(Qt, q0, QKV_W(C), T, Tp, t0)
            TRANSPOSE_BLOCK(Qt + (size_t)ATT_HD * Tp, g0, C, T, Tp, t0)
            for (int d = 0; d < ATT_HD; d++)
                for (int t = 0; t < 16; t++) Qt[(size_t)(2 * ATT_HD + d) * Tp + t0 + t] = 0.0f;
            for (int t = t0; t < t0 + 16; t++) {
                float D = 0.0f;
                if (t < T) {
                    for (int d = 0; d < ATT_HD; d++)
                        D = MADD(g0[(size_t)t * C + d], y0[(size_t)t * C + d], D);
                    if (split == 0) Ds[t] = D;
                }
                LD[t] = t < T ? Ls[t] : 0.0f;
                LD[Tp + t] = D;
            }
        }
    }
    for (int j0 = split * ATT_R; j0 < T; j0 += nsplit * ATT_R) {
        const int nk = IMIN(ATT_R, T - j0);
        ROW_OFFSETS(ro, j0, T, QKV_W(C))
        float dk[ATT_R][ATT_HD], dv[ATT_R][ATT_HD], pt[ATT_R][ATT_KB], dst[ATT_R][ATT_KB];
        float one[ATT_R];
        for (int i = 0; i < ATT_R; i++) one[i] = 1.0f;
        ZERO_ROWS(dk)
        ZERO_ROWS(dv)
        for (int g = 0; g < ATT_G; g++) {
            const __global float* q0 = QKV_ROW(qkv, b, 0, 0, C, h + g);
            const __global float* g0 = dy + (size_t)b * T * C + (h + g) * ATT_HD;
            const XT float* Qt = xz + (size_t)g * ATT_BROWS * Tp;
            const XT float* Gt = Qt + (size_t)ATT_HD * Tp;
            XT float* dQt = xz + ((size_t)g * ATT_BROWS + 2 * ATT_HD) * Tp;
            const XT float* LD = dQt + (size_t)ATT_HD * Tp;
            for (int i0 = j0; i0 < T; i0 += ATT_KB) {
                const int ni = IMIN(ATT_KB, T - i0);
                att_vf L[2], D[2];  /* zero-padded copies: vector loads at any i0 < T */
                _Pragma("unroll") for (int u = 0; u < 2; u++) {
                    L[u] = VLOAD_X(LD + i0 + u * ATT_VW);
                    D[u] = VLOAD_X(LD + Tp + i0 + u * ATT_VW);
                }
                /* P^T into pt before dP^T is summed, so one tile of accumulators is live */
                att_vf s[ATT_R][2];
                TILE_DOTS(s, k0, ro, Qt, Tp, i0)
                /* masked: queries before the key (first block), past T, and key rows past T
                 * (clamped copies of row T - 1, which must not reach dq) */
                const bool edge = i0 == j0 || ni < ATT_KB || nk < ATT_R;
                _Pragma("unroll") for (int i = 0; i < ATT_R; i++)
                    _Pragma("unroll") for (int u = 0; u < 2; u++) {
                        att_vf x = s[i][u] * scale - L[u];
                        if (edge) {
                            const att_vf qi = ATT_LANES + (float)(i0 + u * ATT_VW);
                            x = qi < (float)(j0 + i) || qi >= (float)T || i >= nk
                                ? (att_vf)(-INFINITY) : x;
                        }
                        VSTORE_P(pt[i] + u * ATT_VW, att_vexp(x));
                    }
                TILE_DOTS(s, v0, ro, Gt, Tp, i0)  /* dP^T */
                _Pragma("unroll") for (int i = 0; i < ATT_R; i++)
                    _Pragma("unroll") for (int u = 0; u < 2; u++) {
                        s[i][u] = VLOAD_P(pt[i] + u * ATT_VW) * (s[i][u] - D[u]);  /* dS^T */
                        VSTORE_P(dst[i] + u * ATT_VW, s[i][u]);
                    }
                DQT_ACC(dQt, Tp, i0, k0, ro, s)
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
    for (int g = 0; g < ATT_G; g++) {
        const XT float* dQt = xz + ((size_t)g * ATT_BROWS + 2 * ATT_HD) * Tp;
        /* one work-item per head: dq straight into dqkv; else this split's share of every dq row
         * into dqp (split, z chunk, G, T, ATT_HD), summed by attention_dq_sum */
        __global float* dq0 = nsplit == 1 ? QKV_ROW(dqkv, b, 0, 0, C, h + g)
            : dqp + dqp_off + ((((size_t)split * (z_end - z0) + z - z0) * ATT_G + g) * T) * ATT_HD;
        const int rs = nsplit == 1 ? QKV_W(C) : ATT_HD;
        for (int t = 0; t < T; t++) {
            if (t + 8 < T) PF_ROW(dq0, rs, t + 8, 1)
            __global float* out = dq0 + (size_t)t * rs;
            for (int d = 0; d < ATT_HD; d++) out[d] = dQt[(size_t)d * Tp + t] * scale;
        }
    }
}

/* The dq parts of dqkv for attention_backward's launch over nsplit work-items per head: the sum
 * of their dqp shares. Global (T, z chunk * ATT_G): a work-item per dq row. */
__kernel void attention_dq_sum(__global float* dqkv, __global const float* dqp, int dqp_off,
                               int nsplit, int T, int C, int H, int z0, int z_end) {
    const int t = get_global_id(0), zg = get_global_id(1), n = (z_end - z0) * ATT_G;
    if (t >= T || zg >= n) return;
    const int z = z0 + zg / ATT_G, g = zg % ATT_G;
    const int b = z / (H / ATT_G), h = z % (H / ATT_G) * ATT_G + g;
    __global float* out = QKV_ROW(dqkv, b, t, 0, C, h);
    for (int d = 0; d < ATT_HD; d++) {
        float a = 0.0f;
        for (int s = 0; s < nsplit; s++)
            a += dqp[dqp_off + (((size_t)s * n + zg) * T + t) * ATT_HD + d];
        out[d] = a;
    }
}
