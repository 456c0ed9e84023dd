"""Benchmarks: end to end (e2e), mask memory (masks_memory) and the flashmask-bench CLI."""
