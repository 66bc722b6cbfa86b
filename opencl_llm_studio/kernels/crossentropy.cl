/* Fused softmax + cross-entropy over rows of logits (R, V), SM_LANES work-items per row
 * (kernels/common.h; one per row on CPUs, 64 on GPUs).
 * losses[r] = logsumexp(z) - z[target]; when want_grad, logits are overwritten in place by
 * dlogits = (softmax - onehot(target)) * inv_count, the gradient of the mean loss over counted
 * rows. A target < 0 marks a row that is not counted (masked dialogue tokens): loss 0, grad 0. */

/* Both kernels' last pass over row z (V logits) once its max mx and sum of e^(z - mx) are known
 * (zt = z[tgt]): loss[0] (by lane 0) and, with want_grad, dlogits in place, lanes `lanes` apart. */
inline void crossentropy_row_out(__global float* z, __global float* loss, int V, int tgt,
                                 float mx, float sum, float zt, float inv_count, int want_grad,
                                 int lane, int lanes) {
    if (tgt < 0) {   /* a row that is not counted: loss 0, gradient 0 */
        if (lane == 0) *loss = 0.0f;
        if (want_grad) for (int v = lane; v < V; v += lanes) z[v] = 0.0f;
        return;
    }
    if (lane == 0) *loss = log(sum) + mx - zt;
    if (want_grad) {
        const float inv = inv_count / sum;
        for (int v = lane; v < V; v += lanes)
            z[v] = EXP(z[v] - mx) * inv - (v == tgt ? inv_count : 0.0f);
    }
}

__kernel void crossentropy_forward_backward(__global float* logits, __global float* losses,
                                            __global const int* targets, int R, int V,
                                            float inv_count, int want_grad) {
    __local float red[SM_ROWS * SM_LANES];
    const int lane = get_local_id(0), r = get_global_id(1);
    __local float* rd = red + get_local_id(1) * SM_LANES;
    const int tgt = r < R ? targets[r] : -1;  /* no early return: lanes_reduce has barriers */
    const int n = tgt >= 0 ? V : 0;           /* elements this row reads */
    __global float* z = logits + (size_t)(r < R ? r : 0) * V;
    float mx = -INFINITY;
    for (int v = lane; v < n; v += SM_LANES) mx = z[v] > mx ? z[v] : mx;
    mx = lanes_reduce(rd, mx, lane, 1);
    const float zt = n && lane == 0 ? z[tgt] : 0.0f;
    float sum = 0.0f;
    for (int v = lane; v < n; v += SM_LANES) sum += EXP(z[v] - mx);
    sum = lanes_reduce(rd, sum, lane, 0);
#if SM_LANES > 1
    /* lane 0 read z[tgt] and every lane read its z[v]; the gradient below overwrites them
     * from other lanes (Oclgrind reported the race without this global fence) */
    barrier(CLK_GLOBAL_MEM_FENCE);
#endif
    if (r >= R) return;
    crossentropy_row_out(z, losses + r, V, tgt, mx, sum, zt, inv_count, want_grad, lane,
                         SM_LANES);
}

/* The same for long rows on GPUs (a vocabulary of tens of thousands): one row per work-group of
 * CE_LANES work-items, and the max and the sum of exponentials in ONE pass (online softmax,
 * Milakov & Gimelshein 2018: each lane keeps its running max m and sum s, rescaling s when m
 * grows; lanes combine as m = max(ma, mb), s = sa e^(ma-m) + sb e^(mb-m)), so a row is read twice
 * (statistics, gradient) instead of three times. 64 lanes per row left 256 rows of 49,152
 * logits at 2 warps per row: the kernel ran at a tenth of the memory bandwidth (H200). */
#define CE_LANES 256
__kernel __attribute__((reqd_work_group_size(CE_LANES, 1, 1)))
void crossentropy_wide(__global float* logits, __global float* losses,
                       __global const int* targets, int V, float inv_count, int want_grad) {
    __local float red_m[CE_LANES], red_s[CE_LANES];
    const int lane = get_local_id(0), r = get_group_id(1);
    const int tgt = targets[r];
    const int n = tgt >= 0 ? V : 0;   /* no early return: the reduction has barriers (PoCL) */
    __global float* z = logits + (size_t)r * V;
    float m = -INFINITY, s = 0.0f;
    for (int v = lane; v < n; v += CE_LANES) {
        const float x = z[v];
        if (x > m) { s = s * EXP(m - x) + 1.0f; m = x; }
        else s += EXP(x - m);
    }
    red_m[lane] = m;
    red_s[lane] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = CE_LANES / 2; w > 0; w >>= 1) {
        if (lane < w) {
            const float ma = red_m[lane], mb = red_m[lane + w], mm = ma > mb ? ma : mb;
            /* a lane that saw no element has m = -inf and s = 0: its term is 0, not NaN */
            const float sa = ma == -INFINITY ? 0.0f : red_s[lane] * EXP(ma - mm);
            const float sb = mb == -INFINITY ? 0.0f : red_s[lane + w] * EXP(mb - mm);
            red_m[lane] = mm;
            red_s[lane] = sa + sb;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float mx = red_m[0], sum = red_s[0];
    const float zt = n ? z[tgt] : 0.0f;
    /* every lane has read z[tgt] and its own z[v] before any lane overwrites them */
    barrier(CLK_GLOBAL_MEM_FENCE);
    crossentropy_row_out(z, losses + r, V, tgt, mx, sum, zt, inv_count, want_grad, lane,
                         CE_LANES);
}
