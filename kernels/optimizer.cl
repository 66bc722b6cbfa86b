/* Global grad norm, clipping and AdamW over the flat parameter / gradient / moment buffers.
 * The clip scale never leaves the device: grad_norm_finalize writes stats, adamw_update reads
 * them (docs/DESIGN.md: no host round trip inside a step). */

/* partial[i] = sum of g[j]^2 over work-item i's share of j < n (P = global size work-items).
 * GPU: j = i, i + P, ... (neighbours read neighbouring words); CPU: one contiguous chunk per
 * work-item (the strided walk is slow under PoCL: benchmarks/RESULTS.md, tuning timings). */
__kernel void grad_norm_partial(__global float* partial, __global const float* g, int n) {
    const int i = get_global_id(0), P = get_global_size(0);
    float acc = 0.0f;
#ifdef CPU_DEVICE
    const int chunk = (n + P - 1) / P, j1 = min(n, (i + 1) * chunk);
    for (int j = i * chunk; j < j1; j++) acc = MADD(g[j], g[j], acc);
#else
    for (int j = i; j < n; j += P) acc = MADD(g[j], g[j], acc);
#endif
    partial[i] = acc;
}

/* One work-group of SM_LANES work-items (kernels/common.h): stats[0] = grad norm, stats[1] =
 * clip scale min(1, max_norm / norm) (1 when max_norm <= 0), stats[2] = 1 when the norm is
 * NaN or Inf (the update is then skipped). Lane l sums partial[l], partial[l + SM_LANES], ...
 * (a fixed order, so the same gradients give the same norm). */
__kernel void grad_norm_finalize(__global float* stats, __global const float* partial, int P,
                                 float max_norm) {
    __local float red[SM_LANES];
    const int lane = get_local_id(0);
    float acc = 0.0f;
    for (int i = lane; i < P; i += SM_LANES) acc += partial[i];
    acc = lanes_reduce(red, acc, lane, 0);
    if (lane != 0) return;
    const float norm = sqrt(acc);
    const int bad = isnan(norm) || isinf(norm);
    stats[0] = norm;
    stats[1] = (max_norm > 0.0f && norm > max_norm) ? max_norm / norm : 1.0f;
    stats[2] = bad ? 1.0f : 0.0f;
}

/* AdamW (Loshchilov & Hutter 2019; PyTorch's form): decoupled weight decay on elements
 * [0, n_decay) only (the matrices come first in the flat table). bc1 = 1 - beta1^t,
 * bc2 = 1 - beta2^t are computed by the host. */
__kernel void adamw_update(__global float* p, __global const float* g, __global float* m,
                           __global float* v, __global const float* stats, int n, int n_decay,
                           float lr, float beta1, float beta2, float eps, float weight_decay,
                           float bc1, float bc2) {
    const int i = get_global_id(0);
    if (i >= n || stats[2] != 0.0f) return;
    const float grad = g[i] * stats[1];
    const float mi = beta1 * m[i] + (1.0f - beta1) * grad;
    const float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi / bc1) / (sqrt(vi / bc2) + eps);
    const float wd = i < n_decay ? weight_decay : 0.0f;
    p[i] -= lr * (update + wd * p[i]);
}
