/* Fused softmax + cross-entropy over rows of logits (R, V), SM_LANES work-items per row
 * (kernels/common.h; one per row on CPUs, 64 on GPUs).
 * losses[r] = logsumexp(z) - z[target]; when want_grad, logits are overwritten in place by
 * dlogits = (softmax - onehot(target)) * inv_count, the gradient of the mean loss over counted
 * rows. A target < 0 marks a row that is not counted (masked dialogue tokens): loss 0, grad 0. */
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
    if (tgt < 0) {
        if (lane == 0) losses[r] = 0.0f;
        if (want_grad) for (int v = lane; v < V; v += SM_LANES) z[v] = 0.0f;
        return;
    }
    if (lane == 0) losses[r] = log(sum) + mx - zt;
    if (want_grad) {
        const float inv = inv_count / sum;
        for (int v = lane; v < V; v += SM_LANES)
            z[v] = EXP(z[v] - mx) * inv - (v == tgt ? inv_count : 0.0f);
    }
}
