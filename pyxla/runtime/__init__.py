"""What runs a compiled program: cost and memory analysis, (later) executables and caches."""
