/* Inverted dropout (Srivastava et al. 2014), placed as nanoGPT's resid_dropout: on the attention
 * output projection and on the feed-forward down projection, before the residual add.
 * The keep mask is never stored: element i of a site is kept when dropout_hash(key, i) >= threshold
 * (threshold = p * 2^32, engine/model/dropout.py), so backward regenerates the mask that forward used,
 * with no host transfer. key mixes (seed, step, layer, site) on the host (engine/model/dropout.py);
 * tests/reference.py has the numpy twin of the hash. */

/* lowbias32: kernels/common.h (the bf16 moments' stochastic rounding uses it too). */
inline uint dropout_hash(uint key, uint i) { return lowbias32(lowbias32(i) ^ key); }

/* out (n,) = inp * keep * scale with scale = 1 / (1 - p); out may be inp (in place). */
inline void dropout_apply(__global float* out, __global const float* inp, uint key,
                          uint threshold, float scale, int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    out[i] = dropout_hash(key, (uint)i) >= threshold ? inp[i] * scale : 0.0f;
}

__kernel void dropout_forward(__global float* out, __global const float* inp, uint key,
                              uint threshold, float scale, int n) {
    dropout_apply(out, inp, key, threshold, scale, n);
}

/* dinp = dout * keep * scale: the same mask (same key) as the forward pass. */
__kernel void dropout_backward(__global float* dinp, __global const float* dout, uint key,
                               uint threshold, float scale, int n) {
    dropout_apply(dinp, dout, key, threshold, scale, n);
}
