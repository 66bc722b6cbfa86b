/* Rotary position embedding (Su et al. 2021) in llama.cpp's NORM convention: within each head
 * the pair (x[2i], x[2i+1]) is rotated by pos * base^(-2i/head_dim). cos/sin come from a host
 * table (context_length, head_dim/2) computed in float64, so no trig runs on the device.
 * Applied in place to the q and k parts of the fused qkv rows (BT, 3C): q at [0, C), k at [C, 2C).
 * sign +1 rotates by +angle (forward); sign -1 by -angle, which is the backward: the rotation
 * is orthogonal, so its gradient is the inverse rotation, applied in place on dqkv. */

__kernel void rope(__global float* qkv, __global const float* cos_t, __global const float* sin_t,
                   int BT, int T, int C, int head_dim, int pos0, float sign) {
    const int pair = get_global_id(0), i = get_global_id(1);  /* pair over 2 * C/2: q then k */
    const int half_c = C / 2;
    if (pair >= 2 * half_c || i >= BT) return;
    const int part = pair / half_c, p = pair % half_c;            /* part 0 = q, 1 = k */
    const int hp = head_dim / 2, j = p % hp;
    const int pos = i % T + pos0;
    const float c = cos_t[pos * hp + j], s = sign * sin_t[pos * hp + j];
    __global float* x = qkv + (size_t)i * 3 * C + part * C + 2 * p;
    const float a = x[0], b = x[1];
    x[0] = a * c - b * s;
    x[1] = a * s + b * c;
}
