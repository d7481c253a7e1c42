"""`PYXLA_PROFILE=1`: where a compiled program's time goes, kernel by kernel, measured by
the program itself.

With the variable set at compile time, every kernel call in the native entry function
(and in the bodies of its loops and conditionals) is wrapped in two reads of the CPU's cycle
counter (`llvm.readcyclecounter`: the constant-rate TSC on x86), and the difference and a
call count are added atomically to a pair of counters of that call site; a last pair
times the whole call. The counters are a global of the program's own module, so the cost
is two counter reads and two atomic adds per kernel (tens of nanoseconds), not a sampling
profiler's guesswork or a Python callback. At exit every profiled program prints its
kernels by total time (HLO name, what the kernel is, result shape, calls, time, share of
the whole call, and the rates its flops and bytes (hlo/cost_analysis.py) were done at) to
stderr; `report()` gives the same text at any time and `CpuExecutable.profile.rows()` the
numbers.

The counter's rate is measured once per process against `time.perf_counter`.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
import time
from dataclasses import dataclass

import llvmlite.ir as ir

from ....hlo.cost_analysis import kernel_cost
from ....hlo.instruction import HloInstruction
from ...llvm.ir_types import I64, i64

ENVIRONMENT_VARIABLE = "PYXLA_PROFILE"
WHOLE_CALL = "(whole call)"


def enabled() -> bool:
    return os.environ.get(ENVIRONMENT_VARIABLE, "") not in ("", "0")


@dataclass(frozen=True)
class Site:
    name: str      # the HLO instruction the kernel computes
    what: str      # its opcode, with the fusion kind or library routine
    shape: str
    flops: int = 0
    bytes: int = 0

    @staticmethod
    def of(instr: HloInstruction) -> Site:
        if instr.opcode == "fusion":
            what = f"fusion:{instr.attrs.get('kind', '?')}"
        elif instr.opcode == "custom-call":
            what = f"custom-call:{instr.attrs.get('custom_call_target', '?')}"
        else:
            what = instr.opcode
        flops, _, nbytes = kernel_cost(instr)
        return Site(instr.name, what, str(instr.shape), flops, nbytes)


class KernelProfile:
    """The counters of one compiled program: emitted with it, read after it runs."""

    def __init__(self, module: ir.Module, entry_name: str, program: str):
        self.program = program
        self.counters_name = f"{entry_name}.profile"
        self.clock_name = f"{entry_name}.profile_clock"
        self.sites: list[Site] = []
        # The global's length is known once every call site is emitted (finish sets it);
        # call sites address it as i64 elements, which needs only its address.
        self._counters = ir.GlobalVariable(module, ir.ArrayType(I64, 2), name=self.counters_name)
        self._clock = module.declare_intrinsic("llvm.readcyclecounter", fnty=ir.FunctionType(I64, []))
        self._module = module
        self._address = 0

    # --- emission ---------------------------------------------------------------------------
    def start(self, b: ir.IRBuilder, site: Site) -> tuple[int, ir.Value]:
        self.sites.append(site)
        return len(self.sites) - 1, b.call(self._clock, [])

    def stop(self, b: ir.IRBuilder, started: tuple[int, ir.Value]) -> None:
        index, begin = started
        elapsed = b.sub(b.call(self._clock, []), begin)
        for slot, amount in ((2 * index, elapsed), (2 * index + 1, i64(1))):
            b.atomic_rmw("add", b.gep(self._counters, [i64(slot)], source_etype=I64), amount, "monotonic")

    def finish(self) -> None:
        """Size the counters and add the function that reads the clock from Python."""
        ty = ir.ArrayType(I64, 2 * len(self.sites))
        self._counters.value_type = ty
        self._counters.initializer = ir.Constant(ty, None)
        fn = ir.Function(self._module, ir.FunctionType(I64, []), name=self.clock_name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(b.call(self._clock, []))
        self._module = self._counters = self._clock = None   # the IR is not needed after this

    # --- after compilation ------------------------------------------------------------------
    def attach(self, counters_address: int, clock_address: int, code: object) -> None:
        """The counters and clock at these addresses of `code`, the loaded machine code that
        holds them. The profile keeps `code` alive: the report at exit reads the counters of
        executables that were dropped long before (each executable owns its engine, which
        would free them with it)."""
        self._address = counters_address
        self._code = code
        _calibrate(ctypes.CFUNCTYPE(ctypes.c_int64)(clock_address))
        _live.append(self)

    def _counts(self) -> list[tuple[int, int]]:
        raw = (ctypes.c_int64 * (2 * len(self.sites))).from_address(self._address)
        return [(raw[2 * k], raw[2 * k + 1]) for k in range(len(self.sites))]

    def rows(self) -> list[dict]:
        """One dict per call site: name, what, shape, calls, seconds, share of the whole call
        (the kernels inside loops count once per trip)."""
        per_second = _ticks_per_second()
        counts = self._counts()
        whole = next((ticks for site, (ticks, _) in zip(self.sites, counts) if site.name == WHOLE_CALL), 0)
        return [dict(name=s.name, what=s.what, shape=s.shape, calls=calls, seconds=ticks / per_second,
                     share=ticks / whole if whole else 0.0, flops=s.flops * calls, bytes=s.bytes * calls)
                for s, (ticks, calls) in zip(self.sites, counts)]

    def reset(self) -> None:
        ctypes.memset(self._address, 0, 16 * len(self.sites))

    def whole_seconds(self) -> float:
        return sum(r["seconds"] for r in self.rows() if r["name"] == WHOLE_CALL)

    def text(self, top: int = 25) -> str:
        rows = sorted(self.rows(), key=lambda r: -r["seconds"])
        whole = next((r for r in rows if r["name"] == WHOLE_CALL), None)
        if whole is None or whole["calls"] == 0:
            return ""
        lines = [f"pyxla profile of {self.program}: {whole['calls']} calls, "
                 f"{1e3 * whole['seconds'] / whole['calls']:.3f} ms per call",
                 f"  {'total ms':>10} {'share':>6} {'calls':>7} {'us/call':>10} {'GFLOP/s':>8} {'GB/s':>6}  kernel"]
        kernels = [r for r in rows if r is not whole]
        for r in kernels[:top]:
            per_call = 1e6 * r["seconds"] / r["calls"] if r["calls"] else 0.0

            def rate(amount, r=r):
                return f"{amount / r['seconds'] / 1e9:.1f}" if r["seconds"] and amount else ""

            lines.append(f"  {1e3 * r['seconds']:10.3f} {100 * r['share']:5.1f}% {r['calls']:7d} {per_call:10.1f}"
                         f" {rate(r['flops']):>8} {rate(r['bytes']):>6}  {r['name']} ({r['what']}) {r['shape']}")
        if len(kernels) > top:
            rest = kernels[top:]
            lines.append(f"  {1e3 * sum(r['seconds'] for r in rest):10.3f} "
                         f"{100 * sum(r['share'] for r in rest):5.1f}%  ... {len(rest)} more kernels")
        return "\n".join(lines)


_live: list[KernelProfile] = []
_rate: list[float] = []
_rate_lock = threading.Lock()
_clock_reader = []


def _calibrate(read_clock) -> None:
    with _rate_lock:
        if not _clock_reader:
            _clock_reader.append(read_clock)


def _ticks_per_second() -> float:
    """The cycle counter's rate, measured once over 20 ms of wall time."""
    with _rate_lock:
        if not _rate:
            read = _clock_reader[0]
            t0, c0 = time.perf_counter(), read()
            time.sleep(0.02)
            t1, c1 = time.perf_counter(), read()
            _rate.append((c1 - c0) / (t1 - t0))
        return _rate[0]


def report() -> str:
    """Every profiled program's table, programs with most time first."""
    texts = [p.text() for p in sorted(_live, key=lambda p: -p.whole_seconds())]
    return "\n\n".join(t for t in texts if t)


@atexit.register
def _print_at_exit() -> None:
    if _live and enabled():
        text = report()
        if text:
            print(text, file=sys.stderr)
