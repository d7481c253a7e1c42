"""The C interface of an AOT object, as LLVM IR around the backend's entry function.

    int  NAME_run(const void *const *args, void *const *results, void *temp);
    void NAME_set_num_threads(int n);
    const size_t NAME_arg_sizes[], NAME_result_sizes[], NAME_temp_size;

The backend's entry function takes the parameters' pointers, one pointer per *output buffer*
(a tuple result may share one buffer, or a result may be a parameter or constant passing
through) and the arena. `NAME_run` maps the caller's result pointers onto those buffers:
a result that is a whole output buffer of its own is written where the caller wants it;
any other output buffer lies in the temp memory after the arena and its results are copied
out afterwards, as are parameters and constants that pass through.

Temp memory: the caller's, or (temp == NULL) the object's own. The object keeps one arena,
allocated on first use, for whichever call takes it first (an atomic flag); a call that
finds it taken allocates and frees its own, so concurrent calls stay correct.

Threads: when the program has parallel tasks the worker pool (backends/cpu/runtime/
parallel.py, linked in) is started by the first call (pthread_once), with
NAME_set_num_threads's count or the cores the process may run on (sched_getaffinity).
`NAME_set_num_threads` restarts the pool with the new count; call it when no NAME_run is
in progress. Everything calls libc, libm and pthreads only.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from ..backends.cpu.runtime.parallel import MAX_THREADS, START, STOP
from ..backends.llvm.ir_types import I8, I32, I64, PTR, VOID, i64

ALIGN = 64
MASK_WORDS = 16      # sched_getaffinity's mask: 1024 CPUs


def align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass
class ResultSource:
    """Where result j comes from after the entry function ran."""
    kind: str            # "direct" (the caller's buffer is the output buffer), "buffer", "parameter", "constant"
    index: int           # output buffer number or parameter number
    offset: int          # byte offset inside the output buffer
    size: int            # bytes of the result
    data: bytes = b""    # a constant's bytes in the result's layout


@dataclass
class Interface:
    name: str
    entry: str                     # the backend's entry function
    arg_sizes: list[int]
    results: list[ResultSource]
    buffer_sizes: list[int]        # of each output buffer
    arena_size: int
    pooled: bool                   # whether the code calls the worker pool

    def buffer_layout(self) -> tuple[dict[int, int], dict[int, int], int]:
        """(output buffer -> the result written directly into it, output buffer -> its offset in
        temp, the temp size)."""
        direct = {r.index: j for j, r in enumerate(self.results) if r.kind == "direct"}
        at = align(self.arena_size)
        placed = {}
        for i, size in enumerate(self.buffer_sizes):
            if i not in direct:
                placed[i] = at
                at = align(at + max(size, 1))
        return direct, placed, (at if placed else self.arena_size)


class _Wrapper:
    def __init__(self, face: Interface, triple: str):
        self.face = face
        self.m = ir.Module(name=f"{face.name}_interface")
        self.m.triple = triple
        self.direct, self.placed, self.temp_size = face.buffer_layout()

        def declare(ret, args, name):
            return ir.Function(self.m, ir.FunctionType(ret, args), name=name)
        self.entry = declare(VOID, [PTR, PTR, PTR], face.entry)
        self.memalign = declare(I32, [PTR, I64, I64], "posix_memalign")
        self.free = declare(VOID, [PTR], "free")
        self.memcpy = self.m.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
        self._size_tables()
        self.pool_init = self._emit_pool() if face.pooled else None
        self._emit_set_num_threads()
        self._emit_run()

    def _global(self, name, ty, value=None, constant=False, internal=True):
        g = ir.GlobalVariable(self.m, ty, name=name)
        g.initializer = ir.Constant(ty, value)
        g.global_constant = constant
        if internal:
            g.linkage = "internal"
        return g

    def _size_tables(self) -> None:
        name = self.face.name
        for what, sizes in (("arg", self.face.arg_sizes), ("result", [r.size for r in self.face.results])):
            ty = ir.ArrayType(I64, max(1, len(sizes)))
            self._global(f"{name}_{what}_sizes", ty, list(sizes) or [0], constant=True, internal=False)
        self._global(f"{name}_temp_size", I64, self.temp_size, constant=True, internal=False)

    # --- the worker pool's lifetime -------------------------------------------------------------
    def _emit_pool(self) -> ir.Function:
        name = self.face.name
        self.requested = self._global(f"{name}.threads", I32, 0)
        self.running = self._global(f"{name}.workers", I64, 0)
        self.once = self._global(f"{name}.once", I32, 0)
        self.start = ir.Function(self.m, ir.FunctionType(I64, [I64]), name=START)
        self.stop = ir.Function(self.m, ir.FunctionType(VOID, []), name=STOP)
        self.pthread_once = ir.Function(self.m, ir.FunctionType(I32, [PTR, PTR]), name="pthread_once")
        self.wanted = self._emit_wanted()
        fn = ir.Function(self.m, ir.FunctionType(VOID, []), name=f"{name}.pool_init")
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("start"))
        b.store(b.call(self.start, [b.sub(b.call(self.wanted, []), i64(1))]), self.running)
        b.ret_void()
        return fn

    def _emit_wanted(self) -> ir.Function:
        """i64 wanted(): the requested thread count, else the cores of the affinity mask."""
        fn = ir.Function(self.m, ir.FunctionType(I64, []), name=f"{self.face.name}.wanted_threads")
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("start"))
        requested = b.sext(b.load(self.requested, typ=I32), I64)
        given = b.append_basic_block("given")
        probe = b.append_basic_block("probe")
        b.cbranch(b.icmp_signed(">", requested, i64(0)), given, probe)
        b.position_at_end(given)
        b.ret(b.select(b.icmp_signed(">", requested, i64(MAX_THREADS)), i64(MAX_THREADS), requested))
        b.position_at_end(probe)
        mask_ty = ir.ArrayType(I64, MASK_WORDS)
        mask = b.alloca(mask_ty)
        b.store(ir.Constant(mask_ty, None), mask)
        affinity = ir.Function(self.m, ir.FunctionType(I32, [I32, I64, PTR]), name="sched_getaffinity")
        status = b.call(affinity, [ir.Constant(I32, 0), i64(8 * MASK_WORDS), mask])
        popcount = self.m.declare_intrinsic("llvm.ctpop", [I64])
        count = i64(0)
        for w in range(MASK_WORDS):
            word = b.load(b.gep(mask, [i64(0), ir.Constant(I32, w)]), typ=I64)
            count = b.add(count, b.call(popcount, [word]))
        ok = b.and_(b.icmp_signed("==", status, ir.Constant(I32, 0)), b.icmp_signed(">", count, i64(0)))
        count = b.select(ok, count, i64(1))
        b.ret(b.select(b.icmp_signed(">", count, i64(MAX_THREADS)), i64(MAX_THREADS), count))
        return fn

    def _emit_set_num_threads(self) -> None:
        fn = ir.Function(self.m, ir.FunctionType(VOID, [I32]), name=f"{self.face.name}_set_num_threads")
        b = ir.IRBuilder(fn.append_basic_block("start"))
        if self.pool_init is None:   # no parallel tasks in this program: nothing to start
            b.ret_void()
            return
        b.store(fn.args[0], self.requested)
        b.call(self.pthread_once, [self.once, self.pool_init])
        wanted = b.sub(b.call(self.wanted, []), i64(1))
        with b.if_then(b.icmp_signed("!=", b.load(self.running, typ=I64), wanted)):
            b.call(self.stop, [])
            b.store(b.call(self.start, [wanted]), self.running)
        b.ret_void()

    # --- the call --------------------------------------------------------------------------------
    def _emit_run(self) -> None:
        name, face = self.face.name, self.face
        fn = ir.Function(self.m, ir.FunctionType(I32, [PTR, PTR, PTR]), name=f"{name}_run")
        args, results, temp = fn.args
        b = ir.IRBuilder(fn.append_basic_block("start"))
        if self.pool_init is not None:
            b.call(self.pthread_once, [self.once, self.pool_init])
        arena_slot = b.alloca(PTR)
        b.store(temp, arena_slot)
        release = None
        if self.temp_size:
            release = self._own_temp(b, fn, temp, arena_slot)
        arena = b.load(arena_slot, typ=PTR)
        outs = b.alloca(PTR, size=i64(max(1, len(face.buffer_sizes))))
        for i in range(len(face.buffer_sizes)):
            if i in self.direct:
                ptr = b.load(b.gep(results, [i64(self.direct[i])], source_etype=PTR), typ=PTR)
            else:
                ptr = b.gep(arena, [i64(self.placed[i])], source_etype=I8)
            b.store(ptr, b.gep(outs, [i64(i)], source_etype=PTR))
        b.call(self.entry, [args, outs, arena])
        for j, r in enumerate(face.results):
            if r.kind == "direct" or r.size == 0:
                continue
            if r.kind == "buffer":
                src = b.gep(b.load(b.gep(outs, [i64(r.index)], source_etype=PTR), typ=PTR), [i64(r.offset)],
                            source_etype=I8)
            elif r.kind == "parameter":
                src = b.load(b.gep(args, [i64(r.index)], source_etype=PTR), typ=PTR)
            else:
                src = self._global(f"{name}.result{j}", ir.ArrayType(I8, len(r.data)), bytearray(r.data),
                                   constant=True)
            dst = b.load(b.gep(results, [i64(j)], source_etype=PTR), typ=PTR)
            b.call(self.memcpy, [dst, src, i64(r.size), ir.Constant(ir.IntType(1), 0)])
        if release is not None:
            release(b)
        b.ret(ir.Constant(I32, 0))

    def _own_temp(self, b: ir.IRBuilder, fn: ir.Function, temp, arena_slot):
        """When temp is NULL: the object's kept arena if no other call holds it, else memory of
        this call's own; returns the emitter of the release at the end."""
        name = self.face.name
        kept = self._global(f"{name}.arena", PTR)
        busy = self._global(f"{name}.arena_busy", I32, 0)
        how = b.alloca(I32)          # 0: the caller's, 1: the kept arena, 2: this call's own
        b.store(ir.Constant(I32, 0), how)
        failed = fn.append_basic_block("no_memory")
        with b.if_then(b.icmp_unsigned("==", temp, ir.Constant(PTR, None))):
            taken = b.extract_value(b.cmpxchg(busy, ir.Constant(I32, 0), ir.Constant(I32, 1), "acquire", "monotonic"),
                                    1)
            with b.if_else(taken) as (shared, own):
                with shared:
                    with b.if_then(b.icmp_unsigned("==", b.load(kept, typ=PTR), ir.Constant(PTR, None))):
                        status = b.call(self.memalign, [kept, i64(ALIGN), i64(self.temp_size)])
                        with b.if_then(b.icmp_signed("!=", status, ir.Constant(I32, 0))):
                            b.store(ir.Constant(PTR, None), kept)
                    b.store(b.load(kept, typ=PTR), arena_slot)
                    b.store(ir.Constant(I32, 1), how)
                with own:
                    status = b.call(self.memalign, [arena_slot, i64(ALIGN), i64(self.temp_size)])
                    with b.if_then(b.icmp_signed("!=", status, ir.Constant(I32, 0))):
                        b.store(ir.Constant(PTR, None), arena_slot)
                    b.store(ir.Constant(I32, 2), how)
        go = fn.append_basic_block("go")
        lacking = b.icmp_unsigned("==", b.load(arena_slot, typ=PTR), ir.Constant(PTR, None))
        b.cbranch(lacking, failed, go)
        b.position_at_end(failed)
        with b.if_then(b.icmp_signed("==", b.load(how, typ=I32), ir.Constant(I32, 1))):
            b.store_atomic(ir.Constant(I32, 0), busy, "release", 4)
        b.ret(ir.Constant(I32, 1))
        b.position_at_end(go)

        def release(b):
            state = b.load(how, typ=I32)
            with b.if_then(b.icmp_signed("==", state, ir.Constant(I32, 1))):
                b.store_atomic(ir.Constant(I32, 0), busy, "release", 4)
            with b.if_then(b.icmp_signed("==", state, ir.Constant(I32, 2))):
                b.call(self.free, [b.load(arena_slot, typ=PTR)])
        return release


def interface_ir(face: Interface, triple: str) -> tuple[str, int]:
    """(the interface module's IR, NAME_temp_size)."""
    w = _Wrapper(face, triple)
    return str(w.m), w.temp_size
