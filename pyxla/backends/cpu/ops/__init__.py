"""Kernels for single ops on the CPU that are not elementwise loops: concatenation by rows,
gather/scatter and dynamic slices, random bits, sort and top-k, and window reductions. Each
module registers its kernels in codegen.KERNELS (or elemental rules) when imported."""
