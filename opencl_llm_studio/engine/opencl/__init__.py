"""The OpenCL device and its launchers: device choice (device), one context/queue/program per device
(runtime), the GEMM tile table (gemm_tiles), one Python launcher per kernel (ops), PoCL fixes (pocl_compat)."""
