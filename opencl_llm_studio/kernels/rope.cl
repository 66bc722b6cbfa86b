/* Rotary position embedding (Su et al. 2021) in llama.cpp's NORM convention: within each head
 * the pair (x[2i], x[2i+1]) is rotated by pos * base^(-2i/head_dim). cos/sin come from a host
 * table (context_length, head_dim/2) computed in float64, so no trig runs on the device.
 * Applied in place to the q and k parts of the fused qkv rows (BT, W): q at [0, C), k (kv_heads
 * heads, grouped-query attention) right after it, so the rotated pairs are the first np of a
 * row, np = (C + kv_heads * head_dim) / 2.
 * sign +1 rotates by +angle (forward); sign -1 by -angle, which is the backward: the rotation
 * is orthogonal, so its gradient is the inverse rotation, applied in place on dqkv. */

/* Rotates pair p of row x by the angle whose cosine is c and sine s. */
#define ROPE_PAIR(x, p, c, s)                                                                      \
    {                                                                                              \
        const float a_ = x[2 * (p)], b_ = x[2 * (p) + 1];                                          \
        x[2 * (p)] = a_ * (c) - b_ * (s);                                                          \
        x[2 * (p) + 1] = a_ * (s) + b_ * (c);                                                      \
    }

__kernel void rope(__global float* qkv, __global const float* cos_t, __global const float* sin_t,
                   int BT, int T, int W, int np, int head_dim, int pos0, float sign) {
    const int i = get_global_id(1);  /* row; columns: the np pairs of q then k */
    if (i >= BT) return;
    const int hp = head_dim / 2, pos = i % T + pos0;
    const __global float* ct = cos_t + (size_t)pos * hp;
    const __global float* st = sin_t + (size_t)pos * hp;
    __global float* x = qkv + (size_t)i * W;  /* q then k: contiguous */
#ifdef CPU_DEVICE  /* head by head: contiguous inner loops, no modulo (vectorised) */
    for (int p0 = 0; p0 < np; p0 += hp)
        for (int j = 0; j < hp; j++) ROPE_PAIR(x, p0 + j, ct[j], sign * st[j])
#else
    FOR_COLUMNS(p, np) ROPE_PAIR(x, p, ct[p % hp], sign * st[p % hp])
#endif
}
