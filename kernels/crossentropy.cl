/* Fused softmax + cross-entropy: one work-item per row of logits (R, V).
 * losses[r] = logsumexp(z) - z[target]; when want_grad, logits are overwritten in place by
 * dlogits = (softmax - onehot(target)) * inv_count, the gradient of the mean loss over counted
 * rows. A target < 0 marks a row that is not counted (masked dialogue tokens): loss 0, grad 0. */
__kernel void crossentropy_forward_backward(__global float* logits, __global float* losses,
                                            __global const int* targets, int R, int V,
                                            float inv_count, int want_grad) {
    const int r = get_global_id(0);
    if (r >= R) return;
    __global float* z = logits + (size_t)r * V;
    const int tgt = targets[r];
    if (tgt < 0) {
        losses[r] = 0.0f;
        if (want_grad) for (int v = 0; v < V; v++) z[v] = 0.0f;
        return;
    }
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    float sum = 0.0f;
    for (int v = 0; v < V; v++) sum += EXP(z[v] - mx);
    losses[r] = log(sum) + mx - z[tgt];
    if (want_grad) {
        const float inv = inv_count / sum;
        for (int v = 0; v < V; v++) z[v] = EXP(z[v] - mx) * inv;
        z[tgt] -= inv_count;
    }
}
