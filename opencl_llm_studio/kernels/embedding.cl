/* Token embedding lookup and its gradient. */

/* out (BT, C) <- wte (V, C) rows picked by ids (BT) */
__kernel void embedding_forward(__global float* out, __global const int* ids,
                                __global const float* wte, int BT, int C) {
    const int i = get_global_id(1);
    if (i >= BT) return;
    const __global float* src = wte + (size_t)ids[i] * C;
    FOR_COLUMNS(c, C) out[(size_t)i * C + c] = src[c];
}

/* dwte[uniq[u], c] += sum of dout rows at positions order[starts[u] .. starts[u+1]).
 * The host groups positions by token (CSR), so each output row has one writer: no atomics,
 * and the summation order is fixed, which keeps training bit-reproducible. */
__kernel void embedding_backward(__global float* dwte, __global const float* dout,
                                 __global const int* uniq, __global const int* starts,
                                 __global const int* order, int U, int C) {
    const int u = get_global_id(1);
    if (u >= U) return;
    FOR_COLUMNS(c, C) {
        float acc = 0.0f;
        for (int p = starts[u]; p < starts[u + 1]; p++) acc += dout[(size_t)order[p] * C + c];
        dwte[(size_t)uniq[u] * C + c] += acc;
    }
}
