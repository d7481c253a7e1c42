"""The tunable choices of the CPU backend's kernels as parameters: what each route may
change, the search space the tuner tries, the cost model that gives the defaults, and how
far a candidate's results may differ from the default's.

A parameter left None is the cost model's default; the emitters resolve it where the
choice is made (dot/gemm.py, dot/tasks.py, conv/tile_plan.py, conv/tiles.py,
conv/winograd.py). With no tuning database every parameter is None, and the code is what
the cost model chooses, which on the machines the tables were measured on is what the
constants chose before they were parameters.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar


@dataclass(frozen=True)
class GemmParams:
    """pyxla's GEMM (dot/gemm.py) and how a dot is cut into blocks (dot/tasks.py)."""
    mr: int | None = None                  # rows of the register tile (MR x 2 vectors of accumulators)
    kc: int | None = None                  # depth of a packed slice
    mc: int | None = None                  # rows of A packed at once (elements of the dot's type)
    nc: int | None = None                  # columns of B packed at once
    blocks_per_thread: int | None = None   # blocks of a product per thread of the pool

    KIND: ClassVar[str] = "gemm"


@dataclass(frozen=True)
class ConvParams:
    """A convolution's route and the plan of its tiles (conv/tiles.py, conv/winograd.py)."""
    route: str | None = None               # an emitter's ROUTE (conv/tiles.py EMITTERS) that fits
    winograd_tile: int | None = None       # Winograd: 2 for F(2x2, 3x3), 4 for F(4x4, 3x3)
    positions: int | None = None           # direct tiles: positions per register tile; Winograd: tiles per strip
    tasks_per_thread: int | None = None    # tasks per thread of the pool (chunking)
    block_bytes: int | None = None         # direct tiles: a task's block of results
    slice_bytes: int | None = None         # direct tiles: a panel's kernel rows per slice of the depth;
                                           # planes: a depth chunk of the planes under a position tile
    prefetch_rows: int | None = None       # direct tiles: kernel rows prefetched ahead (0: none); planes:
                                           # input features ahead whose weights are prefetched
    unroll: int | None = None              # direct tiles: input features per trip of the inner loop

    KIND: ClassVar[str] = "conv"


KINDS: dict[str, type[GemmParams] | type[ConvParams]] = {GemmParams.KIND: GemmParams, ConvParams.KIND: ConvParams}
Params = GemmParams | ConvParams


def to_json(p: Params) -> dict:
    """The parameters a candidate sets (those not None), with its kind."""
    return {"kind": p.KIND, **{k: v for k, v in asdict(p).items() if v is not None}}


def from_json(data) -> Params:
    """Parameters from to_json's form; ValueError naming what is wrong."""
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        raise ValueError(f"not a parameter set: {data!r}")
    cls = KINDS[data["kind"]]
    known = {f.name: f for f in fields(cls)}
    values = {}
    for name, value in data.items():
        if name == "kind":
            continue
        if name not in known:
            raise ValueError(f"unknown {cls.KIND} parameter {name!r}")
        valid = isinstance(value, str) if name == "route" else \
            isinstance(value, int) and not isinstance(value, bool) and value >= 0
        if not valid:
            kind = "name" if name == "route" else "whole number"
            raise ValueError(f"{cls.KIND} parameter {name} = {value!r}: not a valid {kind}")
        values[name] = value
    return cls(**values)


def describe(p: Params | None) -> str:
    """`name=value ...` of the parameters set, or "default"."""
    if p is None:
        return "default"
    items = to_json(p)
    items.pop("kind")
    return " ".join(f"{k}={v}" for k, v in items.items()) or "default"


# --- the cost model -------------------------------------------------------------------------------

# GEMM tables by vector width, (MR, KC, MC of f32), measured by single-thread GFLOP/s over the
# products the MLP and attention cut into blocks (the measurements are in dot/gemm.py). The cost
# model keeps them on caches at least as large as the rules below need, and shrinks them on
# smaller ones: an NR-wide panel of B, KC deep, stays in L1; MC x KC of A in half of L2; KC x NC
# of B in half of L3.
GEMM_TABLE = {32: (6, 512, 72), 64: (8, 256, 128)}
GEMM_NC = 1024


def gemm_defaults(vector_bytes: int, element_bytes: int, caches: dict[str, int]) -> GemmParams:
    mr, kc, mc_f32 = GEMM_TABLE[vector_bytes]
    nr = 2 * vector_bytes // element_bytes
    mc = mc_f32 * 4 // element_bytes
    nc = GEMM_NC
    if "L1" in caches:
        kc = max(16, min(kc, caches["L1"] // (nr * element_bytes)) // 8 * 8)
    if "L2" in caches:
        mc = max(mr, min(mc, caches["L2"] // 2 // (kc * element_bytes)) // mr * mr)
    if "L3" in caches:
        nc = max(nr, min(nc, caches["L3"] // 2 // (kc * element_bytes)) // nr * nr)
    return GemmParams(mr, kc, mc, nc, 2)


# Direct convolution tiles: a panel's kernel rows read per slice of the depth stay in L1
# (conv/tile_plan.py gives the measured sizes, 16 KiB read where the kernel lies and 32 KiB
# in panel order); on a smaller L1 they shrink with it.
def conv_slice_bytes(table_bytes: int, caches: dict[str, int], share: int) -> int:
    """table_bytes, at most L1 / share."""
    if "L1" in caches:
        return max(1024, min(table_bytes, caches["L1"] // share))
    return table_bytes


# --- search spaces -------------------------------------------------------------------------------

def gemm_space(vector_bytes: int, element_bytes: int, default: GemmParams) -> list[tuple[str, list]]:
    """(parameter, values) in the order the tuner varies them, each from the best so far."""
    mrs = [4, 6] if vector_bytes == 32 else [6, 8, 12]
    mr = default.mr or mrs[0]
    return [("blocks_per_thread", [1, 2, 4]),
            ("kc", [128, 192, 256, 384, 512, 768]),
            ("mc", [mr * k for k in (4, 6, 8, 12, 16, 24, 32)]),
            ("mr", mrs),
            ("nc", [256, 512, 1024, 2048, 4096])]


def conv_space(route: str, vector_bytes: int) -> list[tuple[str, list]]:
    """(parameter, values) of one route's plan, in the order the tuner varies them."""
    if route == "winograd":
        strips = [4, 5, 6] if vector_bytes == 32 else [7, 8, 10, 12, 14]
        return [("tasks_per_thread", [1, 2, 4, 8]), ("positions", strips)]
    if route == "tiles":
        positions = [4, 5, 6, 7] if vector_bytes == 32 else [7, 8, 10, 12, 14]
        return [("tasks_per_thread", [1, 2, 4, 8]), ("positions", positions),
                ("prefetch_rows", [0, 8, 16, 32, 64]), ("slice_bytes", [1 << 13, 1 << 14, 1 << 15]),
                ("block_bytes", [1 << 16, 1 << 17, 1 << 18]), ("unroll", [1, 2, 4])]
    if route == "planes":
        return [("tasks_per_thread", [1, 2, 4, 8]), ("prefetch_rows", [0, 8, 16, 32, 64]),
                ("slice_bytes", [1 << 13, 1 << 14, 1 << 15])]
    return []


# --- how far results may move ------------------------------------------------------------------

# Largest difference from the exact result a route documents, as a fraction of the largest
# result, in f32 (docs/cpu-backend.md: Winograd F(4x4, 3x3) about 1.7e-6 over 64 input
# features, F(2x2, 3x3) 2.2e-7, a direct sum 1.1e-7), with room for deeper sums.
ROUTE_ERROR = {"winograd4": 1e-5, "winograd2": 2e-6}
DIRECT_ERROR = 1e-6
F64_SCALE = 1e-9   # f64's epsilon over f32's, rounded up


def route_error(route: str) -> float:
    return ROUTE_ERROR.get(route, DIRECT_ERROR)


def tolerance(default_route: str, candidate_route: str, is_f64: bool) -> float:
    """The largest |candidate - default| allowed, as a fraction of max |default|: 0 when the
    route is the same (each route's sums do not depend on its blocking, tiles or threads:
    a candidate must then match bit for bit), else both routes' documented error."""
    if default_route == candidate_route:
        return 0.0
    bound = route_error(default_route) + route_error(candidate_route)
    return bound * (F64_SCALE if is_f64 else 1.0)
