/* Matrix products for GPUs: local-memory tiled, 16x16 work-items per group, each computing a
 * 4x4 register block of a 64x64 output tile; K advances in slices of 16 staged in __local
 * memory with coalesced loads (CLBlast / Volkov-style SGEMM). Same contracts as matmul.cl:
 *   matmul_nn_tiled:  C(M,N) = beta*C + A(M,K)   @ B(K,N)
 *   matmul_tn_tiled:  C(M,N) = beta*C + A(K,M)^T @ B(K,N)
 * Work-item (tx, ty) owns rows ty + 16 i and columns tx + 16 j (i, j < 4): neighbours read
 * neighbouring local words, so there are no bank conflicts. Edges are zero-filled on load and
 * guarded on store. Launch: global (16 * ceil(N/64), 16 * ceil(M/64)), local (16, 16). */

#define TL 64  /* output tile edge */
#define TK 16  /* K slice */

inline void tile_store(__global float* C, float acc[4][4], int m0, int n0, int tx, int ty,
                       int M, int N, float beta) {
    for (int i = 0; i < 4; i++) {
        const int m = m0 + ty + 16 * i;
        if (m >= M) continue;
        for (int j = 0; j < 4; j++) {
            const int n = n0 + tx + 16 * j;
            if (n >= N) continue;
            __global float* c = C + (size_t)m * N + n;
            *c = beta == 0.0f ? acc[i][j] : beta * *c + acc[i][j];
        }
    }
}

inline void tile_fma(__local const float* As, __local const float* Bs, float acc[4][4],
                     int tx, int ty) {
    for (int kk = 0; kk < TK; kk++) {
        float a[4], b[4];
        for (int i = 0; i < 4; i++) a[i] = As[kk * TL + ty + 16 * i];
        for (int j = 0; j < 4; j++) b[j] = Bs[kk * TL + tx + 16 * j];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) acc[i][j] = MADD(a[i], b[j], acc[i][j]);
    }
}

__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void matmul_nn_tiled(__global float* C, __global const float* A, __global const float* B,
                     int M, int N, int K, float beta) {
    __local float As[TK * TL];  /* As[k][m] = A[m0 + m][k0 + k] */
    __local float Bs[TK * TL];  /* Bs[k][n] = B[k0 + k][n0 + n] */
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int n0 = get_group_id(0) * TL, m0 = get_group_id(1) * TL;
    const int tid = ty * 16 + tx;
    float acc[4][4] = {{0}};
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int e = tid; e < TK * TL; e += 256) {
            /* A: 64 rows x 16 columns; consecutive tids walk along k (the row) */
            const int am = e / TK, ak = e % TK;
            const int gm = m0 + am, gk = k0 + ak;
            As[ak * TL + am] = (gm < M && gk < K) ? A[(size_t)gm * K + gk] : 0.0f;
            /* B: 16 rows x 64 columns; consecutive tids walk along n */
            const int bk = e / TL, bn = e % TL;
            const int gk2 = k0 + bk, gn = n0 + bn;
            Bs[bk * TL + bn] = (gk2 < K && gn < N) ? B[(size_t)gk2 * N + gn] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        tile_fma(As, Bs, acc, tx, ty);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    tile_store(C, acc, m0, n0, tx, ty, M, N, beta);
}

/* Split-K: group z of the third grid dimension sums rows [z * kslice, (z+1) * kslice) of K
 * into C + z * M * N (with beta when there is one slice; scratch slices are then added up by
 * sum_slices). A weight gradient has a small M x N and a long K = B*T: without the split, a
 * 256 x 256 gradient is 16 work-groups on a GPU with 132 compute units. */
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void matmul_tn_tiled(__global float* C, __global const float* A, __global const float* B,
                     int M, int N, int K, float beta, int kslice) {
    __local float As[TK * TL];  /* As[k][m] = A[k0 + k][m0 + m]  (A stored K x M) */
    __local float Bs[TK * TL];
    const int tx = get_local_id(0), ty = get_local_id(1), z = get_group_id(2);
    const int n0 = get_group_id(0) * TL, m0 = get_group_id(1) * TL;
    const int tid = ty * 16 + tx;
    const int kb = z * kslice, ke = min(K, kb + kslice);
    float acc[4][4] = {{0}};
    for (int k0 = kb; k0 < ke; k0 += TK) {
        for (int e = tid; e < TK * TL; e += 256) {
            const int r = e / TL, c = e % TL;  /* both tiles are 16 rows of 64, coalesced */
            const int gk = k0 + r, gm = m0 + c, gn = n0 + c;
            As[r * TL + c] = (gk < ke && gm < M) ? A[(size_t)gk * M + gm] : 0.0f;
            Bs[r * TL + c] = (gk < ke && gn < N) ? B[(size_t)gk * N + gn] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        tile_fma(As, Bs, acc, tx, ty);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    tile_store(C + (size_t)z * M * N, acc, m0, n0, tx, ty, M, N, beta);
}

/* C[i] = beta * C[i] + sum over z < n_slices of parts[z * n + i] (the split-K partial sums). */
__kernel void sum_slices(__global float* C, __global const float* parts, int n_slices, int n,
                         float beta) {
    const int i = get_global_id(0);
    if (i >= n) return;
    float acc = 0.0f;
    for (int z = 0; z < n_slices; z++) acc += parts[(size_t)z * n + i];
    C[i] = beta == 0.0f ? acc : beta * C[i] + acc;
}
