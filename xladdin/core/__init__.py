"""The core: one request resolved, batched, read (the reader processes), prepared, asked and cached."""
