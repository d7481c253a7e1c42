"""Launches in SIMT form: a kernel's work as phases run by every thread of a block, with
block barriers and warp shuffles between them, emitted once and run two ways.

A `Launch` is a grid (blocks x threads) and a list of steps:

  Phase(emit)         straight-line work of one thread (it may loop and branch inside);
  Barrier()           every thread of the block reaches it before any goes on
                      (`llvm.nvvm.barrier0`; shared memory written before it is visible after);
  Shuffle(src, dst, offset, words)
                      a warp shuffle down: a thread's slot `dst` takes slot `src` of the
                      thread `offset` lanes above it in its warp (its own when that lane is
                      past the warp's end), `words` 32-bit words (`llvm.nvvm.shfl.sync.down.i32`);
  Loop(count, steps)  the steps `count` times (the same count for every thread, so barriers
                      inside are legal), the phases seeing the iteration number.

Each phase is an internal function

    void <launch>.p<k>(i64 tid, i64 block, i64 ntid, i64 nblocks, i64 iteration,
                       ptr shared, ptr locals, ptr arg0, ...)

A thread's state that crosses a barrier or a shuffle lives in its `locals`, 8-byte slots;
shared memory is the block's. On the GPU the kernel (`ptx_kernel void <launch>(ptr ...)`,
with nvvm annotations) calls its phases in order with barrier and shuffle intrinsics
between them, the locals an alloca (registers once inlined), shared memory an
addrspace(3) array. gpu-sim's wrapper (`void <launch>(ptr args, i64 blocks, i64 ntid,
ptr shared, ptr locals)`) runs the blocks one after another; within a block it runs the
phases between two synchronisations as a loop over the threads, every thread up to the
next barrier or shuffle before any thread goes past it, and emulates a shuffle by copying
slots between the threads' locals. Consecutive phases with no barrier between them run in
one thread loop, as on the GPU nothing orders them across threads: a missing barrier shows
in gpu-sim as it would on the GPU. So the index arithmetic, shared-memory code and
reduction trees gpu-sim tests are the ones the GPU runs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import llvmlite.ir as ir

from ..llvm.ir_types import I8, I32, I64, PTR, VOID, i64

WARP = 32
SLOT_BYTES = 8


@dataclass
class Phase:
    emit: Callable[[PhaseContext], None]


@dataclass
class Barrier:
    pass


@dataclass
class Shuffle:
    src: int
    dst: int
    offset: int
    words: int = 1


@dataclass
class Loop:
    count: int
    steps: list


@dataclass
class Launch:
    """One kernel launch. `sim_blocks` (grid-stride kernels only, whose result does not
    depend on the grid) is the smaller grid gpu-sim runs."""
    name: str
    blocks: int
    threads: int
    steps: list
    shared_bytes: int = 0
    local_slots: int = 0
    sim_blocks: int | None = None
    phases: list[ir.Function] = field(default_factory=list)

    @property
    def local_bytes(self) -> int:
        return max(1, self.local_slots) * SLOT_BYTES


class PhaseContext:
    """What a phase's emitter sees: the builder inside its function and its arguments."""

    def __init__(self, fn: ir.Function, args_owner):
        self.fn = fn
        self.module = fn.module
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.tid, self.block, self.ntid, self.nblocks, self.iteration, self.shared, self.locals, *self.args = fn.args
        self.owner = args_owner

    @property
    def lane(self) -> ir.Value:
        return self.b.urem(self.tid, i64(WARP))

    @property
    def warp(self) -> ir.Value:
        return self.b.udiv(self.tid, i64(WARP))

    def slot(self, i: int) -> ir.Value:
        return self.b.gep(self.locals, [i64(i * SLOT_BYTES)], source_etype=I8)

    def store_slot(self, i: int, value: ir.Value) -> None:
        store_raw(self.b, self.slot(i), value)

    def load_slot(self, i: int, ty: ir.Type) -> ir.Value:
        return load_raw(self.b, self.slot(i), ty)

    def shared_at(self, byte_offset: ir.Value | int) -> ir.Value:
        off = i64(byte_offset) if isinstance(byte_offset, int) else byte_offset
        return self.b.gep(self.shared, [off], source_etype=I8)


def store_raw(b: ir.IRBuilder, ptr: ir.Value, value: ir.Value) -> None:
    """A compute value in a raw slot (i1 as a byte)."""
    if value.type == ir.IntType(1):
        value = b.zext(value, I8)
    b.store(value, ptr)


def load_raw(b: ir.IRBuilder, ptr: ir.Value, ty: ir.Type) -> ir.Value:
    if ty == ir.IntType(1):
        return b.trunc(b.load(ptr, typ=I8), ty)
    return b.load(ptr, typ=ty)


def words_of(ty: ir.Type) -> int:
    """32-bit words a shuffle moves for a value of `ty`."""
    bits = ty.width if isinstance(ty, ir.IntType) else {"float": 32, "double": 64, "half": 16}[str(ty)]
    return 2 if bits > 32 else 1


def emit_phases(module: ir.Module, launch: Launch, n_args: int, emitters_owner) -> None:
    """The phase functions of `launch` (every Phase in its steps, in order)."""
    fnty = ir.FunctionType(VOID, [I64] * 5 + [PTR, PTR] + [PTR] * n_args)
    launch.phases = []

    def walk(steps):
        for step in steps:
            if isinstance(step, Phase):
                fn = ir.Function(module, fnty, name=f"{launch.name}.p{len(launch.phases)}")
                fn.linkage = "internal"
                fn.attributes.add("alwaysinline")
                ctx = PhaseContext(fn, emitters_owner)
                step.emit(ctx)
                if not ctx.b.block.is_terminated:
                    ctx.b.ret_void()
                launch.phases.append(fn)
            elif isinstance(step, Loop):
                walk(step.steps)

    walk(launch.steps)


# --- the GPU's kernel -----------------------------------------------------------------------------

def _intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name=name)
    return fn


def _sreg(module: ir.Module, b: ir.IRBuilder, name: str) -> ir.Value:
    return b.zext(b.call(_intrinsic(module, f"llvm.nvvm.read.ptx.sreg.{name}", I32, []), []), I64)


def emit_ptx_kernel(module: ir.Module, launch: Launch, n_args: int) -> ir.Function:
    """`ptx_kernel void <name>(ptr ...)`: the phases in order, barriers and shuffles between."""
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * n_args), name=launch.name)
    fn.calling_convention = "ptx_kernel"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    sregs = [_sreg(module, b, r) for r in ("tid.x", "ctaid.x", "ntid.x", "nctaid.x")]
    if launch.shared_bytes:
        array = ir.ArrayType(I8, launch.shared_bytes)
        g = ir.GlobalVariable(module, array, name=f"{launch.name}.shared", addrspace=3)
        g.linkage = "internal"
        g.align = 16
        g.initializer = ir.Constant(array, ir.Undefined)
        shared_arg = b.addrspacecast(g, PTR)
    else:
        shared_arg = ir.Constant(PTR, None)
    local_array = ir.ArrayType(I64, max(1, launch.local_slots))
    # the steps run in a function of their own, whose locals argument is an opaque pointer
    # (llvmlite types an alloca's pointer); inlined, the alloca becomes registers
    run = ir.Function(module, ir.FunctionType(VOID, [I64] * 4 + [PTR, PTR] + [PTR] * n_args),
                      name=f"{launch.name}.steps")
    run.linkage = "internal"
    run.attributes.add("alwaysinline")
    b.call(run, [*sregs, shared_arg, b.alloca(local_array), *fn.args])
    b.ret_void()
    _annotate(module, fn, launch.threads)
    b = ir.IRBuilder(run.append_basic_block("entry"))
    tid, block, ntid, nblocks, shared, locals_, *args = run.args
    phases = iter(launch.phases)
    barrier = _intrinsic(module, "llvm.nvvm.barrier0", VOID, [])
    shfl = _intrinsic(module, "llvm.nvvm.shfl.sync.down.i32", I32, [I32, I32, I32, I32])

    def walk(steps, iteration):
        for step in steps:
            if isinstance(step, Phase):
                b.call(next(phases), [tid, block, ntid, nblocks, iteration, shared, locals_, *args])
            elif isinstance(step, Barrier):
                b.call(barrier, [])
            elif isinstance(step, Shuffle):
                for w in range(step.words):
                    src = b.gep(locals_, [i64(step.src * SLOT_BYTES + 4 * w)], source_etype=I8)
                    dst = b.gep(locals_, [i64(step.dst * SLOT_BYTES + 4 * w)], source_etype=I8)
                    moved = b.call(shfl, [ir.Constant(I32, -1), b.load(src, typ=I32),
                                          ir.Constant(I32, step.offset), ir.Constant(I32, WARP - 1)])
                    b.store(moved, dst)
            elif isinstance(step, Loop):
                _uniform_loop(b, step.count, lambda i, s=step: walk(s.steps, i))

    walk(launch.steps, i64(0))
    b.ret_void()
    return fn


def _uniform_loop(b: ir.IRBuilder, count: int, body) -> None:
    if count <= 0:
        return
    pre = b.block
    loop = b.append_basic_block("uniform.loop")
    done = b.append_basic_block("uniform.done")
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64, name="iteration")
    i.add_incoming(i64(0), pre)
    body(i)
    nxt = b.add(i, i64(1))
    i.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_unsigned("<", nxt, i64(count)), loop, done)
    b.position_at_end(done)


def _annotate(module: ir.Module, fn: ir.Function, threads: int) -> None:
    """nvvm annotations: the function is a kernel launched with at most `threads` threads."""
    annotations = module.add_named_metadata("nvvm.annotations")
    annotations.add(module.add_metadata([fn, ir.MetaDataString(module, "kernel"), ir.Constant(I32, 1)]))
    annotations.add(module.add_metadata([fn, ir.MetaDataString(module, "maxntidx"), ir.Constant(I32, threads)]))


# --- gpu-sim's wrapper ------------------------------------------------------------------------------

def emit_host_launch(module: ir.Module, launch: Launch, n_args: int, prologue=None, epilogue=None) -> ir.Function:
    """`void <name>(ptr args, i64 blocks, i64 ntid, ptr shared, ptr locals)`: the blocks in
    turn; in a block, the threads run each stretch of phases between synchronisations in
    turn (locals: ntid * local_bytes bytes)."""
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64, I64, PTR, PTR]), name=launch.name)
    argv, blocks, ntid, shared, locals_ = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    saved = prologue(b) if prologue else None
    args = [b.load(b.gep(argv, [i64(i)], source_etype=PTR), typ=PTR) for i in range(n_args)]
    phases = iter(launch.phases)
    stride = i64(launch.local_bytes)

    def thread_locals(t):
        return b.gep(locals_, [b.mul(t, stride)], source_etype=I8)

    def each_thread(body):
        _host_loop(b, ntid, body, "thread")

    def walk(steps, block, iteration):
        pending: list[ir.Function] = []

        def flush():
            if pending:
                fns = list(pending)
                each_thread(lambda t: [b.call(f, [t, block, ntid, blocks, iteration, shared, thread_locals(t), *args])
                                       for f in fns])
                pending.clear()

        for step in steps:
            if isinstance(step, Phase):
                pending.append(next(phases))
            elif isinstance(step, Barrier):
                flush()
            elif isinstance(step, Shuffle):
                flush()

                def move(t, step=step):
                    lane = b.urem(t, i64(WARP))
                    inside = b.icmp_unsigned("<", b.add(lane, i64(step.offset)), i64(WARP))
                    other = b.select(inside, b.add(t, i64(step.offset)), t)
                    for w in range(step.words):
                        src = b.gep(thread_locals(other), [i64(step.src * SLOT_BYTES + 4 * w)], source_etype=I8)
                        dst = b.gep(thread_locals(t), [i64(step.dst * SLOT_BYTES + 4 * w)], source_etype=I8)
                        b.store(b.load(src, typ=I32), dst)

                each_thread(move)
            elif isinstance(step, Loop):
                flush()
                _uniform_loop(b, step.count, lambda i, s=step: walk(s.steps, block, i))
        flush()

    _host_loop(b, blocks, lambda block: walk(launch.steps, block, i64(0)), "block")
    if epilogue:
        epilogue(b, saved)
    b.ret_void()
    return fn


def _host_loop(b: ir.IRBuilder, count: ir.Value, body, name: str) -> None:
    pre = b.block
    loop = b.append_basic_block(f"{name}.loop")
    done = b.append_basic_block(f"{name}.done")
    b.cbranch(b.icmp_unsigned("<", i64(0), count), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64, name=name)
    i.add_incoming(i64(0), pre)
    body(i)
    nxt = b.add(i, i64(1))
    i.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_unsigned("<", nxt, count), loop, done)
    b.position_at_end(done)


# --- building blocks ----------------------------------------------------------------------------------

def warp_tree(value_slots: list[int], other_slots: list[int], words: list[int],
              combine: Callable[[PhaseContext], None]) -> list:
    """Steps folding every lane's values (in `value_slots`) into lane 0's by shuffles down
    (offsets 16, 8, 4, 2, 1): after each shuffle `combine` folds `other_slots` into
    `value_slots`. Lanes other than 0 end with partial values."""
    steps: list = []
    offset = WARP // 2
    while offset:
        for v, o, w in zip(value_slots, other_slots, words):
            steps.append(Shuffle(v, o, offset, w))
        steps.append(Phase(combine))
        offset //= 2
    return steps


MXCSR_FTZ_DAZ = 0x8040   # x86's flush-to-zero and denormals-are-zero bits


def flush_subnormals(b: ir.IRBuilder) -> ir.Value:
    """Set MXCSR's FTZ and DAZ bits (the GPU kernels' f32 arithmetic is .ftz); the slot
    holding the old value, for restore_mxcsr."""
    module = b.module
    stmxcsr = _intrinsic(module, "llvm.x86.sse.stmxcsr", VOID, [PTR])
    ldmxcsr = _intrinsic(module, "llvm.x86.sse.ldmxcsr", VOID, [PTR])
    saved = b.alloca(I32)
    b.call(stmxcsr, [saved])
    flushed = b.alloca(I32)
    b.store(b.or_(b.load(saved), ir.Constant(I32, MXCSR_FTZ_DAZ)), flushed)
    b.call(ldmxcsr, [flushed])
    return saved


def restore_mxcsr(b: ir.IRBuilder, saved: ir.Value) -> None:
    b.call(b.module.globals["llvm.x86.sse.ldmxcsr"], [saved])
