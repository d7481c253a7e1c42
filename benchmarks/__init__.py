"""pyxla's benchmark suite: the same workloads on pyxla and its peers, one process each."""
