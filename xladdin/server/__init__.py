"""The GPU-box side: launch vLLM from a profile (``xladdin.engine.profiles``) or serve the CPU engine,
and verify models."""
