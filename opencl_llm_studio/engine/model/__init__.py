"""The Llama-style model on the device: the parameter table (params), activation buffers (activations), the
forward/backward/AdamW model (transformer), attention (attention, attention_gemm), RoPE scaling, the chunked output
head, dropout masks, the memory estimate checked before allocation (memory) and the tuner that
times a model's products on the device (gemm_tune)."""
