"""Where generated code finds the runtime's native helpers: the JIT target or an object file.

The CPU backend emits code for one of two targets sharing all of codegen:

- **JIT** (the default): the helpers (worker pool, GEMM and GEMV kernels) are loaded into
  this process once, and kernels call them by address (`inttoptr` of a constant).
- **Ahead of time** (`pyxla.aot`): the code goes into an object file that runs in another
  process, so no address of this one may appear in it. A kernel calls a helper by symbol;
  the helper's own module is linked into the object (`AotEmission.helpers`), and the pool
  is planned for a thread count given at compile time rather than started here.

Emission for the AOT target happens inside `with ahead_of_time(emission):` on the emitting
thread; everywhere else, and on every other thread, nothing changes for the JIT.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import llvmlite.ir as ir

from ...llvm.ir_types import PTR, FunctionPointer, i64


@dataclass
class PlannedPool:
    """The worker pool as an AOT object will have it: kernels are cut for `threads` threads
    (the object's pool may run another number; every task still runs exactly once)."""
    threads: int


@dataclass
class AotEmission:
    threads: int                                              # the pool kernels are planned for
    helpers: dict[str, Callable[[], str]] = field(default_factory=dict)   # symbol -> its module's IR
    pool: PlannedPool | None = None

    def __post_init__(self):
        self.pool = PlannedPool(self.threads) if self.threads > 1 else None


_state = threading.local()

# address in this process -> the helper's symbol, for every helper the JIT's code has called
# by address: the executable cache names them by symbol in the objects it keeps
# (executable_cache.py), as an object file does.
EMITTED_ADDRESSES: dict[int, str] = {}


def aot_emission() -> AotEmission | None:
    """The AOT emission in progress on this thread, or None (the JIT target)."""
    return getattr(_state, "emission", None)


@contextmanager
def ahead_of_time(emission: AotEmission):
    """Emit code for an object file on this thread while the block runs."""
    previous = aot_emission()
    _state.emission = emission
    try:
        yield emission
    finally:
        _state.emission = previous


def native_function(b: ir.IRBuilder, fn_type: ir.FunctionType, symbol: str, address: Callable[[], int],
                    helper_ir: Callable[[], str] | None = None):
    """The callee for a runtime helper function: for the JIT its address in this process as a
    constant (`address()`, which loads the helper); for an object file a declaration of
    `symbol`, whose defining module (`helper_ir()`) is recorded to be linked in."""
    aot = aot_emission()
    if aot is None:
        value = address()
        EMITTED_ADDRESSES[value] = symbol
        return FunctionPointer(b.inttoptr(i64(value), PTR), fn_type)
    if helper_ir is not None:
        aot.helpers.setdefault(symbol, helper_ir)
    module = b.module
    known = module.globals.get(symbol)
    return known if known is not None else ir.Function(module, fn_type, name=symbol)
