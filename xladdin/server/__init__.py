"""The GPU-box side: launch vLLM from a profile or serve the CPU engine, and verify models."""
