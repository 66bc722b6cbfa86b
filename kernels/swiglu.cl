/* SwiGLU feed-forward gate (Shazeer 2020): h = silu(g) * u, with g and u the two halves of the
 * fused (BT, 2F) projection: g = gu[:, :F], u = gu[:, F:]. */

__kernel void swiglu_forward(__global float* h, __global const float* gu, int BT, int F) {
    const int f = get_global_id(0), i = get_global_id(1);
    if (f >= F || i >= BT) return;
    const float g = gu[(size_t)i * 2 * F + f], u = gu[(size_t)i * 2 * F + F + f];
    h[(size_t)i * F + f] = g / (1.0f + EXP(-g)) * u;
}

/* dgu (BT, 2F) <- dh (BT, F): dg = dh * u * sig * (1 + g (1 - sig)), du = dh * silu(g) */
__kernel void swiglu_backward(__global float* dgu, __global const float* dh,
                              __global const float* gu, int BT, int F) {
    const int f = get_global_id(0), i = get_global_id(1);
    if (f >= F || i >= BT) return;
    const float g = gu[(size_t)i * 2 * F + f], u = gu[(size_t)i * 2 * F + F + f];
    const float sig = 1.0f / (1.0f + EXP(-g));
    const float d = dh[(size_t)i * F + f];
    dgu[(size_t)i * 2 * F + f] = d * u * sig * (1.0f + g * (1.0f - sig));
    dgu[(size_t)i * 2 * F + F + f] = d * g * sig;
}
