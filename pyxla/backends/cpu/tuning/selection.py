"""Which parameters each kernel of a compile uses. The emitters ask `conv_params(conv)` and
`gemm_params(...)`; the answer comes from the selection pinned on this thread (the tuner's
candidate, or the one a compile fixed for its executable-cache key), else from this
machine's tuning database, else the defaults (every parameter None). Code emitted for
another machine (`pyxla aot`) always takes the defaults.

A kernel is named by a key made from what its code depends on: a convolution by its
operand and result shapes (layouts included) and its attributes, a dot by its element type
and plan (batch, m, n, k, which operand is transposed). The same key is computed by the
emitters and by `for_module`, which lists the tuned kernels of a module: what the
executable cache key includes (runtime/executable_cache.py), and what
`parameters_of(executable)` reports.
"""
from __future__ import annotations

import contextvars
import json
import os
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field

from ....hlo.instruction import HloInstruction
from ....hlo.module import HloModule
from ....hlo.printer import attribute_text
from ...llvm.ir_types import etype
from ..runtime.native_target import aot_emission
from . import database
from .params import ConvParams, GemmParams, Params, to_json


@dataclass(frozen=True)
class Selection:
    """Parameters by kernel key; a kernel not named takes the defaults."""
    kernels: dict[str, Params] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """A text that differs whenever the parameters differ (for cache keys)."""
        return json.dumps({k: to_json(p) for k, p in sorted(self.kernels.items())}, sort_keys=True)


EMPTY = Selection()
_pinned: contextvars.ContextVar[Selection | None] = contextvars.ContextVar("pyxla_tuning", default=None)
_db_lock = threading.Lock()
_db_copy: list = [None, None]   # [stamp, Selection] of the database as last read by this process


def conv_key(conv: HloInstruction) -> str:
    operands = " ".join(op.shape.to_text() for op in conv.operands)
    attrs = " ".join(f"{k}={attribute_text(k, v)}" for k, v in sorted(conv.attrs.items()) if k != "metadata")
    return f"convolution {operands} -> {conv.shape.to_text()} {attrs}"


def gemm_key(dtype_name: str, batch: int, m: int, n: int, k: int, a_transposed: bool, b_transposed: bool) -> str:
    return f"dot {dtype_name} batch={batch} m={m} n={n} k={k} " + \
        f"a={'t' if a_transposed else 'n'} b={'t' if b_transposed else 'n'}"


def dot_key(dot: HloInstruction) -> str | None:
    """The key dot/tasks.py asks with for this dot, or None when it is no matrix product."""
    from ....hlo.shape import ArrayShape
    from ..dot.plan import plan_gemm
    p = plan_gemm(dot, None, dot.shape) if isinstance(dot.shape, ArrayShape) else None
    if p is None:
        return None
    return gemm_key(p.dtype, p.batch, p.m, p.n, p.k, p.a_transposed, p.b_transposed)


def kernel_keys(module: HloModule) -> dict[str, str]:
    """key -> the kind of parameters ("conv" or "gemm") for every convolution and dot of
    `module`, in fused computations too."""
    found: dict[str, str] = {}
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.opcode == "convolution" and etype(instr).name in ("f32", "f64"):
                found[conv_key(instr)] = ConvParams.KIND
            elif instr.opcode == "dot":
                key = dot_key(instr)
                if key is not None:
                    found[key] = GemmParams.KIND
    return found


def current() -> Selection:
    """The selection in force on this thread: pinned, else this machine's database."""
    pinned = _pinned.get()
    if pinned is not None:
        return pinned
    if os.environ.get("PYXLA_TUNING", "").strip().lower() in ("0", "off"):
        return EMPTY
    return database_selection()


def database_selection() -> Selection:
    stamp = database.stamp()
    if stamp is None:
        return EMPTY
    with _db_lock:
        if _db_copy[0] == stamp:
            return _db_copy[1]
    db = database.load()
    selection = Selection({k: r.params for k, r in db.kernels.items()})
    with _db_lock:
        _db_copy[:] = [database.stamp(), selection]
    return selection


@contextmanager
def pinned(selection: Selection):
    """Kernels emitted on this thread while the block runs take `selection` (nothing else)."""
    token = _pinned.set(selection)
    try:
        yield selection
    finally:
        _pinned.reset(token)


def conv_params(conv: HloInstruction) -> ConvParams:
    if aot_emission() is not None:
        return ConvParams()
    p = current().kernels.get(conv_key(conv))
    return p if isinstance(p, ConvParams) else ConvParams()


def gemm_params(dtype_name: str, batch: int, m: int, n: int, k: int, a_transposed: bool,
                b_transposed: bool) -> GemmParams:
    if aot_emission() is not None:
        return GemmParams()
    p = current().kernels.get(gemm_key(dtype_name, batch, m, n, k, a_transposed, b_transposed))
    return p if isinstance(p, GemmParams) else GemmParams()


def for_module(module: HloModule, selection: Selection | None = None) -> Selection:
    """The part of `selection` (default: the one in force) that names kernels of `module`."""
    selection = current() if selection is None else selection
    keys = kernel_keys(module)
    return Selection({k: p for k, p in selection.kernels.items() if keys.get(k) == p.KIND})


# --- what a compile used ---------------------------------------------------------------------------

_used: dict[int, tuple[weakref.ref, Selection]] = {}


def record(module: HloModule, used: Selection) -> None:
    """Remember that `module`'s code was made with `used` (until the module is freed)."""
    number = id(module)
    _used[number] = (weakref.ref(module, lambda _: _used.pop(number, None)), used)


def parameters_of(executable) -> dict[str, dict]:
    """The tuned parameters a CPU executable's kernels were compiled with, by kernel key
    (to_json's form); kernels not named used the defaults."""
    module = executable.module
    found = _used.get(id(module))
    used = found[1] if found is not None and found[0]() is module else for_module(module)
    return {k: to_json(p) for k, p in sorted(used.kernels.items())}


def parameters_for_compile(module: HloModule, has_parameter_forms: bool) -> Selection:
    """The selection a compile of `module` uses (the executable cache key includes its
    fingerprint, and emission pins it): the database's entries for the module's kernels.
    With PYXLA_AUTOTUNE=1 the module's kernels are tuned first (tuner.autotune, in a child
    process); the winners apply to this compile unless its parameters have forms, which
    were chosen before (then from the next compile on)."""
    used = for_module(module)
    if os.environ.get("PYXLA_AUTOTUNE", "").strip() in ("1", "true", "yes") and _pinned.get() is None:
        from .tuner import autotune
        autotune(module)
        if not has_parameter_forms:
            used = for_module(module)
    record(module, used)
    return used
