/* SwiGLU feed-forward gate (Shazeer 2020): h = silu(g) * u, with g and u the two halves of the
 * fused (BT, 2F) projection: g = gu[:, :F], u = gu[:, F:]. */

__kernel void swiglu_forward(__global float* h, __global const float* gu, int BT, int F) {
    const int i = get_global_id(1);
    if (i >= BT) return;
    const __global float* gr = gu + (size_t)i * 2 * F;
    __global float* hr = h + (size_t)i * F;
    FOR_COLUMNS(f, F) {
        const float g = gr[f], u = gr[F + f];
        hr[f] = g / (1.0f + EXP(-g)) * u;
    }
}

/* dgu (BT, 2F) <- dh (BT, F): dg = dh * u * sig * (1 + g (1 - sig)), du = dh * silu(g) */
__kernel void swiglu_backward(__global float* dgu, __global const float* dh,
                              __global const float* gu, int BT, int F) {
    const int i = get_global_id(1);
    if (i >= BT) return;
    const __global float* gr = gu + (size_t)i * 2 * F;
    const __global float* dr = dh + (size_t)i * F;
    __global float* out = dgu + (size_t)i * 2 * F;
    FOR_COLUMNS(f, F) {
        const float g = gr[f], u = gr[F + f], d = dr[f];
        const float sig = 1.0f / (1.0f + EXP(-g));
        out[f] = d * u * sig * (1.0f + g * (1.0f - sig));
        out[F + f] = d * g * sig;
    }
}
