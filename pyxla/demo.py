"""`make demo`: compile a bundled HLO program and show what pyxla did and how fast it runs.

The program is a small MLP with a softmax head (pyxla/examples/mlp_softmax.hlo). pyxla parses
and verifies it, optimises and fuses it, compiles it to native code through LLVM, runs it on
random inputs on both the native `cpu` backend and the reference `interpreter`, checks both
against NumPy in float64, and times them beside NumPy itself.

The timing: the same float32 inputs, both warmed up; NumPy's calls, then pyxla's, each side
on its own (a pause between them lets OpenBLAS's threads stop spinning: they do for about a
tenth of a second after each of NumPy's matrix products), and the medians compared. Then
the case of a program that uses both libraries: calls alternating NumPy, pyxla, NumPy, ...,
so that every pyxla call runs while OpenBLAS's threads still spin and take a core
(docs/benchmarks.md's co-tenancy scenario measures it in full).
"""
from __future__ import annotations

import time
from importlib import resources

import numpy as np

from .backends import get_backend
from .compiler import compile_module
from .fusion.instruction_fusion import kernels
from .hlo import parse_module, print_module


def numpy_reference(x, w1, b1, w2):
    logits = np.tanh(x @ w1 + b1) @ w2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def median_seconds(fn, repeats: int = 50) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def separate_medians(fns, repeats: int = 50, pause: float = 0.3) -> list[float]:
    """Each function's median time over `repeats` calls, one function after another, with
    `pause` seconds before each (another library's threads stop spinning meanwhile)."""
    medians = []
    for fn in fns:
        time.sleep(pause)
        medians.append(median_seconds(fn, repeats))
    return medians


def interleaved_medians(fns, repeats: int = 50, warmup: int = 3) -> list[float]:
    """Each function's median time over `repeats` rounds that call them in turn, each call
    timed on its own (after `warmup` untimed rounds)."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, spent in zip(fns, times):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return [float(np.median(t)) for t in times]


def main() -> None:
    text = resources.files("pyxla.examples").joinpath("mlp_softmax.hlo").read_text()
    start = time.perf_counter()
    module = parse_module(text, source="mlp_softmax.hlo")
    parse_ms = (time.perf_counter() - start) * 1e3
    print("== the program (pyxla/examples/mlp_softmax.hlo) ==")
    n_instr = sum(len(c.instructions) for c in module.computations)
    print(f"parsed {len(module.computations)} computations, {n_instr} instructions in {parse_ms:.1f} ms")

    optimised = compile_module(module.clone())
    print("\n== after passes, fusion, scheduling (the ENTRY computation) ==")
    entry_text = print_module(optimised.module, print_metadata=False).split("ENTRY", 1)[1]
    print("ENTRY" + entry_text.rstrip())
    ks = kernels(optimised.module.entry)
    print(f"{len(ks)} kernels: " + ", ".join(f"{k.opcode}" + (f" ({k.attrs['kind']})" if 'kind' in k.attrs else "")
                                              for k in ks))
    print(f"temp arena {optimised.buffers.arena_size} bytes "
          f"(without reuse: {sum(b.size for b in optimised.buffers.temps)} bytes)")

    start = time.perf_counter()
    cpu = get_backend("cpu").compile(module)
    compile_ms = (time.perf_counter() - start) * 1e3
    interpreter = get_backend("interpreter").compile(module)

    rng = np.random.default_rng()
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    expected = numpy_reference(*(a.astype(np.float64) for a in args))
    print("\n== results on random inputs ==")
    ok = True
    for name, run in (("cpu", cpu), ("interpreter", interpreter)):
        result = run(*args)
        error = float(np.max(np.abs(result - expected)))
        good = bool(np.allclose(result, expected, rtol=1e-4, atol=1e-5))   # f32 GEMMs over K=512 and 1024
        ok &= good
        print(f"{name:<12} max |pyxla - numpy float64| = {error:.1e}  {'OK' if good else 'MISMATCH'}")

    print(f"\n== speed (median of 50 calls; native compile took {compile_ms:.0f} ms) ==")
    t_np, t_cpu = separate_medians([lambda: numpy_reference(*args), lambda: cpu(*args)])
    t_int = median_seconds(lambda: interpreter(*args), repeats=5)
    print(f"pyxla cpu          {t_cpu * 1e6:9.1f} us")
    print(f"numpy (float32)    {t_np * 1e6:9.1f} us   ({t_np / t_cpu:.2f}x pyxla's time)")
    print(f"pyxla interpreter  {t_int * 1e6:9.1f} us   (the reference evaluator)")
    t_np_mixed, t_cpu_mixed = interleaved_medians([lambda: numpy_reference(*args), lambda: cpu(*args)])
    print(f"alternating with NumPy in one process: pyxla {t_cpu_mixed * 1e6:.1f} us, NumPy {t_np_mixed * 1e6:.1f} us "
          "(OpenBLAS's threads spin after each NumPy call and take a core; OPENBLAS_THREAD_TIMEOUT=4 stops that)")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
