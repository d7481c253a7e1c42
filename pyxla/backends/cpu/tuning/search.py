"""The search that runs in the tuning child process (worker.py): for each tunable kernel of a
program, candidates compiled and timed against the best so far, back to back in one process,
each checked against the default's results before it may win.

Kernels. A convolution on a route with a plan (Winograd, the direct tiles, planes) or with more
than one route that fits it (a 1x1 convolution: planes, pointwise GEMM or the tiles), and a
dot that takes pyxla's GEMM on the worker pool (codegen.py: at least OWN_GEMM_MIN_WORK multiply-adds
and more than one thread); other kernels have nothing to tune.

Order. A convolution first tries the other routes that fit it (Winograd F(4x4, 3x3) and
F(2x2, 3x3), the direct tiles, ...); then, on the best route, each parameter of its space
in turn (params.py), every value from the best so far (coordinate descent). A GEMM varies
its blocks per thread, KC, MC, MR and NC the same way. A candidate wins only when it is
faster than the best so far by more than MARGIN, in paired measurements.

Checking. Every candidate's outputs, on the same fresh random inputs, are compared with the
default's: bit for bit when it keeps the default's route (each route's sums do not depend on
its blocking), else within both routes' documented error (params.tolerance). A candidate
that fails to compile, fails to run or differs more is discarded and reported.
"""
from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ....hlo.module import HloModule
from ....hlo.shape import ArrayShape
from ...llvm.ir_types import etype
from ..runtime.llvm_jit import host_jit
from ..runtime.parallel import thread_count
from .params import ConvParams, GemmParams, Params, conv_space, gemm_space, to_json, tolerance
from .selection import EMPTY, Selection, conv_key, dot_key, pinned

MARGIN = 0.03      # a candidate must be this much faster than the best so far
ROUNDS = 7         # paired measurements: rounds of (best so far, candidate)
ROUND_SECONDS = 0.04
GEMM_BLOCKS_PER_THREAD = 2   # codegen.py's GEMM_TASKS_PER_THREAD, the default blocks per thread


@dataclass
class Kernel:
    key: str
    kind: str               # "conv" or "gemm"
    default_route: str      # "winograd4", "winograd2", "tiles", ..., or "gemm"
    routes: list[str]       # every route label that fits, the default first
    element_bytes: int

    @property
    def is_f64(self) -> bool:
        return self.element_bytes == 8


def route_params(label: str) -> ConvParams:
    """The parameters that choose a route label ("winograd4" is Winograd F(4x4, 3x3))."""
    if label.startswith("winograd"):
        return ConvParams(route="winograd", winograd_tile=int(label[len("winograd"):]))
    return ConvParams(route=label)


def route_label(p: Params, kernel: Kernel) -> str:
    if isinstance(p, GemmParams):
        return "gemm"
    if p.route is None:
        return kernel.default_route
    if p.route == "winograd":
        return f"winograd{p.winograd_tile}" if p.winograd_tile else kernel.default_route
    return p.route


def find_kernels(module: HloModule) -> list[Kernel]:
    """The tunable kernels of an optimised module, each once, in program order."""
    from ..codegen import OWN_GEMM_MIN_WORK
    from ..conv.tiles import emitter_class, routes
    from ..conv.winograd import transform
    from ..dot.plan import plan_gemm

    found: dict[str, Kernel] = {}
    with pinned(EMPTY):
        for comp in module.computations:
            for instr in comp.instructions:
                if instr.opcode == "convolution" and etype(instr).name in ("f32", "f64"):
                    emitter = emitter_class(instr)
                    labels = []
                    for route in routes(instr):
                        if route == "winograd":
                            labels += ["winograd4", "winograd2"]
                        else:
                            labels.append(route)
                    if emitter is None or emitter.ROUTE not in ("winograd", "tiles", "planes") and len(labels) < 2:
                        continue   # one route, without a plan to tune
                    default = f"winograd{transform(instr).tile}" if emitter.ROUTE == "winograd" else emitter.ROUTE
                    labels.remove(default)
                    found.setdefault(conv_key(instr), Kernel(conv_key(instr), "conv", default, [default] + labels,
                                                             etype(instr).bytes))
                elif instr.opcode == "dot":
                    plan = plan_gemm(instr, None, instr.shape) if isinstance(instr.shape, ArrayShape) else None
                    key = dot_key(instr)
                    if plan is None or key is None or min(plan.m, plan.n) == 1 or thread_count() < 2 or \
                            plan.batch * plan.m * plan.n * plan.k < OWN_GEMM_MIN_WORK:
                        continue
                    found.setdefault(key, Kernel(key, "gemm", "gemm", ["gemm"], etype(instr).bytes))
    return list(found.values())


def space(kernel: Kernel, incumbent: Params) -> list[tuple[str, list]]:
    vector_bytes = host_jit().vector_bytes
    if kernel.kind == "gemm":
        resolved = effective(kernel, incumbent)
        assert isinstance(resolved, GemmParams)
        return gemm_space(vector_bytes, kernel.element_bytes, resolved)
    route = route_label(incumbent, kernel)
    return conv_space("winograd" if route.startswith("winograd") else route, vector_bytes)


def effective(kernel: Kernel, p: Params) -> Params:
    """`p` with the defaults it leaves to the cost model filled in where they do not depend
    on the kernel's plan (so that the search does not try a default again as a candidate)."""
    if isinstance(p, GemmParams):
        from ..dot.gemm import tiling
        t = tiling("f64" if kernel.is_f64 else "f32", p)
        return GemmParams(t.mr, t.kc, t.mc, t.nc, p.blocks_per_thread or GEMM_BLOCKS_PER_THREAD)
    from ..codegen import TASKS_PER_THREAD
    from ..conv.tile_plan import BLOCK_BYTES
    from ..conv.tiles import KERNEL_PREFETCH_ROWS, UNROLL
    p = replace(p, tasks_per_thread=p.tasks_per_thread or TASKS_PER_THREAD)
    if route_label(p, kernel).startswith("winograd"):
        from ..conv.winograd import TILES
        strips = TILES[host_jit().vector_bytes]
        return replace(p, positions=p.positions or (strips[0] if len(strips) == 1 else None))
    if route_label(p, kernel) != "tiles":
        return p
    from ..conv.tile_plan import PANEL_TILE_POSITIONS, TILE_POSITIONS
    vector_bytes = host_jit().vector_bytes
    sizes = set(TILE_POSITIONS[vector_bytes] + PANEL_TILE_POSITIONS[vector_bytes])
    return replace(p, prefetch_rows=KERNEL_PREFETCH_ROWS if p.prefetch_rows is None else p.prefetch_rows,
                   block_bytes=p.block_bytes or BLOCK_BYTES, unroll=p.unroll or UNROLL,
                   positions=p.positions or (sizes.pop() if len(sizes) == 1 else None))


def check(reference: list[np.ndarray], outputs: list[np.ndarray], bound: float) -> tuple[bool, float]:
    """(within bound, the largest |difference| over max |reference|, over all outputs): bit
    for bit when bound is 0; NaN where the reference has NaN, and nowhere else."""
    worst = 0.0
    ok = True
    for want, got in zip(reference, outputs):
        want, got = np.asarray(want), np.asarray(got)
        if want.shape != got.shape or want.dtype != got.dtype:
            return False, float("inf")
        if bound == 0.0:
            same = np.array_equal(want.view(np.uint8), got.view(np.uint8)) if want.size else True
            if not same:
                ok = False
                gap = np.abs(got.astype(np.float64) - want.astype(np.float64))
                worst = max(worst, float(np.nanmax(gap)) if gap.size else 0.0, float(np.finfo(np.float64).tiny))
            continue
        w, g = want.astype(np.float64), got.astype(np.float64)
        finite = np.isfinite(w)
        if not np.array_equal(finite, np.isfinite(g)) or not np.array_equal(w[~finite], g[~finite], equal_nan=True):
            return False, float("inf")
        scale = float(np.max(np.abs(w[finite]))) if finite.any() else 0.0
        diff = float(np.max(np.abs(w[finite] - g[finite]))) if finite.any() else 0.0
        relative = diff / scale if scale else diff
        worst = max(worst, relative)
        ok = ok and bool(relative <= bound)
    return ok, worst


def random_inputs(module: HloModule, seed: int = 0) -> list[np.ndarray]:
    """Fresh random arguments for the module's parameters: normal floats, small integers,
    random booleans."""
    rng = np.random.default_rng(seed)
    args = []
    assert module.entry is not None
    for p in module.entry.parameters:
        shape = p.shape
        if not isinstance(shape, ArrayShape):
            raise NotImplementedError(f"tuning a module with a tuple-shaped parameter ({p.name})")
        dtype = shape.dtype.np_dtype
        dims = tuple(shape.dims)
        if shape.dtype.is_pred:
            args.append(rng.integers(0, 2, dims).astype(bool))
        elif shape.dtype.is_integral:
            args.append(rng.integers(0, 8, dims).astype(dtype))
        else:
            args.append(rng.standard_normal(dims).astype(dtype))
    return args


class Program:
    """One module compiled under selections and run on fixed random inputs."""

    def __init__(self, text: str, compile_fn: Callable | None = None):
        from ....hlo.stablehlo import parse_program
        self.text = text
        self.parse = lambda: parse_program(text, source="<tuned program>")
        self.args = random_inputs(self.parse())
        self.compile_fn = compile_fn

    def compile(self, selection: Selection):
        from .. import BACKEND
        with pinned(selection):
            return (self.compile_fn or BACKEND.compile)(self.parse())

    def run(self, executable) -> list[np.ndarray]:
        return [np.array(o) for o in executable.run_flat(self.args)]


def paired(program: Program, a, b) -> tuple[float, float]:
    """Seconds per call of executables a and b, measured in alternating rounds: the fastest
    round of each (other processes only ever add time, so the minimum is the least noisy)."""
    program.run(a)
    program.run(b)
    start = time.perf_counter()
    program.run(a)
    once = max(1e-6, time.perf_counter() - start)
    calls = max(1, min(50, int(ROUND_SECONDS / once)))
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(ROUNDS):
        for exe, into in ((a, times[0]), (b, times[1])):
            start = time.perf_counter()
            for _ in range(calls):
                exe.run_flat(program.args)
            into.append((time.perf_counter() - start) / calls)
    return min(times[0]), min(times[1])


def search(program: Program, budget: float, emit: Callable[[dict], None],
           spaces: Callable[[Kernel, Params], list[tuple[str, list]]] | None = None,
           try_routes: bool = True, outputs_hook: Callable | None = None,
           timer: Callable = paired) -> dict[str, Params]:
    """Tune every kernel of `program` within `budget` seconds; emit(event) for each step
    (see worker.py); the winners by kernel key. `spaces` replaces the parameter spaces,
    `outputs_hook(kernel, candidate, outputs)` sees (and may change) a candidate's outputs
    before they are checked, `timer(program, a, b)` replaces the paired measurement (tests
    use all three)."""
    started = time.perf_counter()
    spaces = spaces or space
    default_exe = program.compile(EMPTY)
    reference = program.run(default_exe)
    kernels = find_kernels(default_exe.module)
    estimate = sum((len(k.routes) - 1 if try_routes else 0) +
                   sum(len(v) - 1 for _, v in spaces(k, GemmParams() if k.kind == "gemm" else ConvParams()))
                   for k in kernels)
    emit({"event": "kernels", "estimate": estimate,
          "kernels": [{"key": k.key, "kind": k.kind, "route": k.default_route, "routes": k.routes} for k in kernels]})
    winners: dict[str, Params] = {}

    def out_of_time() -> bool:
        return time.perf_counter() - started > budget

    for kernel in kernels:
        default: Params = GemmParams() if kernel.kind == "gemm" else ConvParams()
        incumbent, incumbent_exe = default, default_exe

        def trial(candidate: Params):
            nonlocal incumbent, incumbent_exe
            label = route_label(candidate, kernel)
            event = {"event": "candidate", "kernel": kernel.key, "params": to_json(candidate), "route": label}
            try:
                exe = program.compile(Selection({**winners, kernel.key: candidate}))
                outputs = program.run(exe)
            except Exception as e:   # a candidate that cannot be built or run is reported, never fatal
                emit({**event, "status": "failed", "reason": f"{type(e).__name__}: {e}",
                      "trace": traceback.format_exc(limit=3)})
                return
            if outputs_hook is not None:
                outputs = outputs_hook(kernel, candidate, outputs)
            bound = tolerance(kernel.default_route, label, kernel.is_f64)
            ok, worst = check(reference, outputs, bound)
            if not ok:
                emit({**event, "status": "rejected",
                      "reason": f"results differ from the default's by {worst:.3g} of the largest (allowed {bound:g})"})
                return
            t_best, t_new = timer(program, incumbent_exe, exe)
            better = t_new < t_best * (1 - MARGIN)
            emit({**event, "status": "faster" if better else "slower", "seconds": t_new, "best_seconds": t_best,
                  "error": worst})
            if better:
                incumbent, incumbent_exe = candidate, exe

        if try_routes:
            for label in kernel.routes[1:]:
                if out_of_time():
                    break
                trial(route_params(label))
        for name, values in spaces(kernel, incumbent):
            for value in values:
                if out_of_time():
                    break
                if getattr(effective(kernel, incumbent), name) != value:
                    trial(replace(incumbent, **{name: value}))
        if incumbent != default:   # confirmed against the defaults, else the defaults stay
            t_default, t_won = timer(program, default_exe, incumbent_exe)
            if not t_won < t_default * (1 - MARGIN):
                emit({"event": "unconfirmed", "kernel": kernel.key, "params": to_json(incumbent),
                      "seconds": t_won, "default_seconds": t_default})
                incumbent, t_won = default, t_default
        else:
            t_default = t_won = timer(program, default_exe, default_exe)[0]
        winners[kernel.key] = incumbent
        emit({"event": "result", "kernel": kernel.key, "params": to_json(incumbent),
              "route": route_label(incumbent, kernel), "default_route": kernel.default_route,
              "seconds": t_won, "default_seconds": t_default, "complete": not out_of_time()})
        if out_of_time():
            break
    emit({"event": "done", "elapsed": time.perf_counter() - started})
    return winners

