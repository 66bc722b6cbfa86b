/* Residual connection: out = a + b, elementwise over n floats. */
__kernel void residual_forward(__global float* out, __global const float* a,
                               __global const float* b, int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    out[i] = a[i] + b[i];
}
