/* out (M, N) = x (M, K) @ W (N, K)^T for a few rows of x (KV decoding: M = 1), W read in place.
 * The GEMM path of this form transposes W into scratch first (kernels/matmul.cl): for one row of
 * x that moved the weights twice more than the product reads them (a 135M model decoding on a
 * CPU: 495 of 742 ms a token in the transposes). Here output column n is SM_LANES lanes
 * (kernels/common.h: 1 on CPUs, 64 on GPUs) walking W's row n, contiguous, in float4 steps, then
 * lanes_reduce; SM_ROWS columns per work-group. MATVEC_ROWS: the most rows of x (engine/opencl/
 * ops.py MATVEC_ROWS). */
#define MATVEC_ROWS 4

__kernel void matvec_nt(__global float* out, __global const float* x, __global const float* W,
                        int M, int N, int K) {
    __local float red[SM_ROWS * SM_LANES];
    const int lane = get_local_id(0), n = get_global_id(1);
    __local float* rd = red + get_local_id(1) * SM_LANES;
    /* no early return past the last column: lanes_reduce has barriers */
    __global const float* w = W + (size_t)(n < N ? n : 0) * K;
    float acc[MATVEC_ROWS];
    #pragma unroll
    for (int m = 0; m < MATVEC_ROWS; m++) acc[m] = 0.0f;
    const int K4 = K / 4 * 4;
    for (int k = 4 * lane; k < K4; k += 4 * SM_LANES) {
        const float4 wv = vload4(0, w + k);
        #pragma unroll
        for (int m = 0; m < MATVEC_ROWS; m++)   /* constant trip count: acc stays in registers */
            if (m < M) acc[m] += dot(wv, vload4(0, x + (size_t)m * K + k));
    }
    for (int k = K4 + lane; k < K; k += SM_LANES) {
        #pragma unroll
        for (int m = 0; m < MATVEC_ROWS; m++)
            if (m < M) acc[m] += w[k] * x[(size_t)m * K + k];
    }
    #pragma unroll
    for (int m = 0; m < MATVEC_ROWS; m++) {
        const float s = lanes_reduce(rd, acc[m], lane, 0);
        if (lane == 0 && n < N && m < M) out[(size_t)m * N + n] = s;
    }
}

/* The CPU form: one work-item per work-group (PoCL then does not vectorise across work-items,
 * which turned the walk along K into strided gathers: 2.9 GB/s) takes blocks of MV_R columns,
 * block b = group, group + groups, ..., so a few work-groups per core cover any N; each column's
 * row of W is read along K in float8 steps, MV_R rows at once (float8 accumulators: MV_R x M of
 * at most 16). */
#define MV_R 4
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void matvec_nt_cpu(__global float* out, __global const float* x, __global const float* W,
                   int M, int N, int K) {
    const int K8 = K / 8 * 8, blocks = (N + MV_R - 1) / MV_R;
    for (int b = get_group_id(0); b < blocks; b += get_num_groups(0)) {
        const int n0 = b * MV_R;
        float8 acc[MV_R][MATVEC_ROWS];
        #pragma unroll
        for (int r = 0; r < MV_R; r++)
            #pragma unroll
            for (int m = 0; m < MATVEC_ROWS; m++) acc[r][m] = (float8)(0.0f);
        __global const float* w[MV_R];
        #pragma unroll
        for (int r = 0; r < MV_R; r++) w[r] = W + (size_t)(n0 + r < N ? n0 + r : n0) * K;
        for (int k = 0; k < K8; k += 8) {
            float8 xv[MATVEC_ROWS];
            #pragma unroll
            for (int m = 0; m < MATVEC_ROWS; m++)
                xv[m] = m < M ? vload8(0, x + (size_t)m * K + k) : (float8)(0.0f);
            /* multiply-adds, not fma(): PoCL 3.0 calls fma() out of line; one row of x (every
             * decoded token) skips the other three rows' arithmetic */
            #pragma unroll
            for (int r = 0; r < MV_R; r++) {
                const float8 wv = vload8(0, w[r] + k);
                acc[r][0] += wv * xv[0];
                if (M > 1) {
                    #pragma unroll
                    for (int m = 1; m < MATVEC_ROWS; m++) acc[r][m] += wv * xv[m];
                }
            }
        }
        #pragma unroll
        for (int r = 0; r < MV_R; r++) {
            #pragma unroll
            for (int m = 0; m < MATVEC_ROWS; m++) {
                if (m >= M || n0 + r >= N) continue;
                const float8 a = acc[r][m];
                float s = (a.s0 + a.s1) + (a.s2 + a.s3) + (a.s4 + a.s5) + (a.s6 + a.s7);
                for (int k = K8; k < K; k++) s += w[r][k] * x[(size_t)m * K + k];
                out[(size_t)m * N + n0 + r] = s;
            }
        }
    }
}
