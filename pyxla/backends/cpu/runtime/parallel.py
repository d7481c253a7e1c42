"""The worker pool that splits a large kernel across the cores.

Generated code calls

    void parallel_for(ptr task, ptr context, i64 n_tasks)

which runs `task(context, i)` for every i in [0, n_tasks) on the pool's threads and the
calling thread, and returns when all have finished. A kernel worth splitting outlines the
body of its outermost loop for a range of iterations into such a task (codegen.py).

Why the pool is LLVM IR. The pool sits on the hot path of every large kernel, so the
handing out of work must cost microseconds at most and must not involve Python (which
would take the GIL on every call and serialise the threads). The project installs with
pip and no compiler, so a C extension is out. The pool is therefore emitted here as a
small LLVM module, loaded once per process into the same JIT as the kernels, calling libc's
pthread functions (pthread_create / mutex / condition variables, found by name in the
process as libm's functions are) and LLVM atomics. Generated kernels call it by address.
Its machine code is compiled once per machine and kept in the on-disk cache
(`LlvmJit.compile_helper`), so a process pays milliseconds to load it, not the tens that
LLVM takes to compile it.

Protocol. One job runs at a time; a job is (task, context, n_tasks). The caller takes the
pool with a compare-and-swap on `busy` (if another Python thread holds it, the caller runs
its tasks itself, serially: calls from several threads stay correct, each on its own
arena), writes the job and opens it in `state` = (job number << 32) | closed | workers
inside, then bumps `generation` to wake the workers (a futex broadcast only when one
sleeps). A worker that sees a new generation joins the job with a compare-and-swap on
`state`, which fails if the job has another number or is closed already; inside, it claims
task indices with an atomic increment of `next_task` until they run out, then leaves
(decrements `state`). The caller claims tasks too; when none is left it closes the job and
waits only for the workers inside to leave. So a job never waits for a worker that was
asleep and had not joined yet (a small job is done by the caller alone before a sleeping
worker wakes), and no worker can still be reading a job when the next one is written.

Waiting. After a job a worker spins for a short while (`SPIN_CYCLES` of the time-stamp
counter, some tens of microseconds) watching `generation`, so a kernel that follows soon
finds it awake, then sleeps on `work_cv`. The spin is plain loads, without `pause`: under
a hypervisor a pause loop makes the virtual CPU exit to the host, which costs far more
than it saves. `yield_cores()` tells spinning workers to sleep at once, for a caller about
to hand the cores to threads of its own.

Other libraries' threads. In a process that also uses NumPy, torch or onnxruntime, their
idle workers busy-wait after each of their calls (OpenBLAS for about 0.1 s) and take cores
from the pool. Dynamic claiming is the pool's defence: a thread that gets less of a core
runs fewer tasks, and the job waits at most for the task it holds. The pool does not touch
those libraries' settings (none of their calls ends a spin already begun: measured for
OpenBLAS; docs/cpu-backend.md and benchmarks/cotenancy.py). Where one of them brought GNU
OpenMP (torch), the pool hands its jobs to it instead (`share_openmp`, set by
pool_threads.share_loaded_openmp): `GOMP_parallel` runs `openmp_team` on OpenMP's threads,
which claim tasks from a job on the caller's stack as the pool's threads do, with the job's
MXCSR and their own put back afterwards; OpenMP's workers, spinning after torch's last
parallel region, are then the ones that run pyxla's tasks. The caller takes `busy` first
either way, so one Python thread at a time hands work to OpenMP (which keeps a team per
calling thread: concurrent callers would each bring one). The public GOMP_parallel entry
is GCC's ABI, the same in every libgomp since GCC 4.9.

Workers run with the caller's MXCSR (flush-to-zero, denormals-are-zero, rounding), copied
into the job, so every thread computes bit for bit what a serial run computes.

Size. `PYXLA_NUM_THREADS` sets the number of threads (the caller included); by default it
is the number of cores this process may run on (`os.sched_getaffinity`). With one thread
no pool is started and kernels are emitted without outlining. The pool starts on first use,
stops (its threads joined) at interpreter exit, and restarts in the child after a fork.
"""
from __future__ import annotations

from collections.abc import Callable

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ...llvm.ir_types import I32, I64, PTR, VOID, FunctionPointer, i64
from ...llvm.loops import counted_loop
from . import pool_threads
from .llvm_jit import host_jit
from .native_target import aot_emission, native_function
from .pool_threads import (
    MAX_THREADS,
    PARALLEL_FOR,
    POOL_FUNCTIONS,
    RESET,
    SHARE_OPENMP,
    START,
    STOP,
    YIELD_CORES,
    WorkerPool,
    thread_count,
)

SPIN_CYCLES = 200_000        # time-stamp counter ticks a worker spins after a job before it sleeps
SPIN_ROUNDS = 20_000         # and at most this many checks (where the counter does not tick)
SYNC_OBJECT_BYTES = 128      # room for a pthread_mutex_t / pthread_cond_t on every glibc target
CACHE_LINE = 64


# --- the pool as LLVM IR --------------------------------------------------------------------

COUNT_BITS = 0x7FFFFFFF      # state: workers inside the job
CLOSED = 0x80000000          # state: the job takes no more workers
JOB_BITS = ~(CLOSED | COUNT_BITS) & 0xFFFFFFFFFFFFFFFF

# a job handed to OpenMP: on the caller's stack, byte offsets
OPENMP_JOB_TASK, OPENMP_JOB_CONTEXT, OPENMP_JOB_TASKS, OPENMP_JOB_NEXT, OPENMP_JOB_MXCSR = 0, 8, 16, 24, 32
OPENMP_JOB_BYTES = 40


class _PoolIr:
    """Emits the pool's module: its state as globals, the worker loop and the entry points."""

    def __init__(self, triple: str):
        self.m = ir.Module(name="pyxla_pool")
        self.m.triple = triple
        self.x86 = triple.startswith(("x86_64", "i686", "i386"))
        sync = ir.ArrayType(ir.IntType(8), SYNC_OBJECT_BYTES)
        self.mutex = self._global("pool.mutex", sync)
        self.work_cv = self._global("pool.work_cv", sync)
        self.done_cv = self._global("pool.done_cv", sync)
        self.generation = self._global("pool.generation", I64)   # bumped by every job
        self.state = self._global("pool.state", I64)             # job number | CLOSED | workers inside
        self.next_task = self._global("pool.next_task", I64)
        self.sleepers = self._global("pool.sleepers", I32)       # workers waiting on work_cv
        self.busy = self._global("pool.busy", I32)               # a caller holds the pool
        self.napping = self._global("pool.napping", I32)         # spinning workers should sleep
        self.stopping = self._global("pool.stopping", I32)
        self.job_task = self._global("pool.job_task", PTR)
        self.job_context = self._global("pool.job_context", PTR)
        self.job_tasks = self._global("pool.job_tasks", I64)
        self.job_mxcsr = self._global("pool.job_mxcsr", I32)
        self.workers = self._global("pool.workers", I64)
        self.threads = self._global("pool.threads", ir.ArrayType(I64, MAX_THREADS))
        self.openmp_parallel = self._global("pool.openmp_parallel", I64)   # GOMP_parallel's address, when shared
        self.openmp_threads = self._global("pool.openmp_threads", I32)

        def declare(ret, args, name):
            return ir.Function(self.m, ir.FunctionType(ret, args), name=name)
        self.pthread_create = declare(I32, [PTR, PTR, PTR, PTR], "pthread_create")
        self.pthread_join = declare(I32, [I64, PTR], "pthread_join")
        self.lock = declare(I32, [PTR], "pthread_mutex_lock")
        self.unlock = declare(I32, [PTR], "pthread_mutex_unlock")
        self.wait = declare(I32, [PTR, PTR], "pthread_cond_wait")
        self.broadcast = declare(I32, [PTR], "pthread_cond_broadcast")
        self.cycles = declare(I64, [], "llvm.readcyclecounter")
        if self.x86:
            self.stmxcsr = declare(VOID, [PTR], "llvm.x86.sse.stmxcsr")
            self.ldmxcsr = declare(VOID, [PTR], "llvm.x86.sse.ldmxcsr")
        self.task_type = ir.FunctionType(VOID, [PTR, I64])

        self.run_tasks = self._emit_run_tasks()
        self.worker = self._emit_worker()
        self.openmp_team = self._emit_openmp_team()
        self._emit_parallel_for()
        self._emit_share_openmp()
        self._emit_yield_cores()
        self._emit_start()
        self._emit_stop()
        self._emit_reset()

    def _global(self, name: str, ty: ir.Type) -> ir.GlobalVariable:
        g = ir.GlobalVariable(self.m, ty, name=name)
        g.initializer = ir.Constant(ty, None)
        g.align = CACHE_LINE   # each on its own line: workers hammer next_task, not their neighbours
        return g

    # small pieces
    @staticmethod
    def _load(b, g, ty, ordering="acquire"):
        return b.load_atomic(g, ordering, ty.width // 8, typ=ty)

    @staticmethod
    def _store(b, value, g, ordering="release"):
        b.store_atomic(value, g, ordering, value.type.width // 8)

    def _is_set(self, b, g):
        return b.icmp_unsigned("!=", self._load(b, g, I32), ir.Constant(I32, 0))

    def _locked(self, b, action):
        b.call(self.lock, [self.mutex])
        action()
        b.call(self.unlock, [self.mutex])

    def _wait_until(self, b: ir.IRBuilder, name: str, done, cv, spin_stops=None, count_sleepers=False):
        """Spin for SPIN_CYCLES checking done(b), then sleep on `cv` until it holds (checked
        under the mutex, which whoever makes it hold takes before broadcasting on `cv`).
        `spin_stops(b)` ends the spin early; `count_sleepers` keeps `sleepers` up to date."""
        pre = b.block
        spin = b.append_basic_block(f"{name}.spin")
        again = b.append_basic_block(f"{name}.again")
        sleep = b.append_basic_block(f"{name}.sleep")
        check = b.append_basic_block(f"{name}.check")
        wait = b.append_basic_block(f"{name}.wait")
        woken = b.append_basic_block(f"{name}.woken")
        out = b.append_basic_block(f"{name}.out")
        since = b.call(self.cycles, [])
        b.branch(spin)
        b.position_at_end(spin)
        rounds = b.phi(I64)
        rounds.add_incoming(i64(0), pre)
        b.cbranch(done(b), out, again)
        b.position_at_end(again)
        more = b.add(rounds, i64(1))
        rounds.add_incoming(more, again)
        keep_spinning = b.and_(b.icmp_unsigned("<", more, i64(SPIN_ROUNDS)),
                               b.icmp_unsigned("<", b.sub(b.call(self.cycles, []), since), i64(SPIN_CYCLES)))
        if spin_stops is not None:
            keep_spinning = b.and_(keep_spinning, b.not_(spin_stops(b)))
        b.cbranch(keep_spinning, spin, sleep)
        b.position_at_end(sleep)
        b.call(self.lock, [self.mutex])
        if count_sleepers:   # seq_cst, paired with the caller's seq_cst store of generation / load of sleepers
            b.atomic_rmw("add", self.sleepers, ir.Constant(I32, 1), "seq_cst")
        b.branch(check)
        b.position_at_end(check)
        b.cbranch(done(b), woken, wait)
        b.position_at_end(wait)
        b.call(self.wait, [cv, self.mutex])
        b.branch(check)
        b.position_at_end(woken)
        if count_sleepers:
            b.atomic_rmw("sub", self.sleepers, ir.Constant(I32, 1), "seq_cst")
        b.call(self.unlock, [self.mutex])
        b.branch(out)
        b.position_at_end(out)

    # functions
    def _emit_run_tasks(self) -> ir.Function:
        """void run_tasks(): claim and run the current job's tasks until none is left."""
        fn = ir.Function(self.m, ir.FunctionType(VOID, []), name="pool.run_tasks")
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("start"))
        task = b.load(self.job_task, typ=PTR)
        context = b.load(self.job_context, typ=PTR)
        n = b.load(self.job_tasks, typ=I64)
        claim = b.append_basic_block("claim")
        run = b.append_basic_block("run")
        done = b.append_basic_block("done")
        b.branch(claim)
        b.position_at_end(claim)
        i = b.atomic_rmw("add", self.next_task, i64(1), "monotonic")
        b.cbranch(b.icmp_unsigned("<", i, n), run, done)
        b.position_at_end(run)
        b.call(FunctionPointer(task, self.task_type), [context, i])
        b.branch(claim)
        b.position_at_end(done)
        b.ret_void()
        return fn

    def _emit_worker(self) -> ir.Function:
        """ptr worker(ptr first_generation): wait for a job, join it, run tasks, leave, repeat."""
        fn = ir.Function(self.m, ir.FunctionType(PTR, [PTR]), name="pool.worker")
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("start"))
        seen_slot = b.alloca(I64)
        mxcsr_slot = b.alloca(I32)
        b.store(b.ptrtoint(fn.args[0], I64), seen_slot)
        next_job = b.append_basic_block("next_job")
        exit_ = b.append_basic_block("exit")
        b.branch(next_job)

        b.position_at_end(next_job)
        seen = b.load(seen_slot)
        self._wait_until(
            b, "wait_job",
            lambda b: b.or_(b.icmp_unsigned("!=", self._load(b, self.generation, I64, "seq_cst"), seen),
                            self._is_set(b, self.stopping)),
            self.work_cv, spin_stops=lambda b: self._is_set(b, self.napping), count_sleepers=True)
        join = b.append_basic_block("join")
        b.cbranch(self._is_set(b, self.stopping), exit_, join)

        b.position_at_end(join)
        generation = self._load(b, self.generation, I64)
        b.store(generation, seen_slot)
        job = b.shl(b.and_(generation, i64(0xFFFFFFFF)), i64(32))
        attempt = b.append_basic_block("join.attempt")
        swap = b.append_basic_block("join.swap")
        inside = b.append_basic_block("inside")
        b.branch(attempt)
        b.position_at_end(attempt)
        state = self._load(b, self.state, I64)
        open_ = b.icmp_unsigned("==", b.and_(state, ir.Constant(I64, JOB_BITS | CLOSED)), job)
        b.cbranch(open_, swap, next_job)
        b.position_at_end(swap)
        joined = b.cmpxchg(self.state, state, b.add(state, i64(1)), "acq_rel", "acquire")
        b.cbranch(b.extract_value(joined, 1), inside, attempt)

        b.position_at_end(inside)
        if self.x86:
            b.store(b.load(self.job_mxcsr, typ=I32), mxcsr_slot)
            b.call(self.ldmxcsr, [mxcsr_slot])
        b.call(self.run_tasks, [])
        before = b.atomic_rmw("sub", self.state, i64(1), "acq_rel")
        last = b.append_basic_block("last_out")
        closed_and_last = b.icmp_unsigned("==", b.and_(before, ir.Constant(I64, CLOSED | COUNT_BITS)),
                                          ir.Constant(I64, CLOSED | 1))
        b.cbranch(closed_and_last, last, next_job)
        b.position_at_end(last)
        self._locked(b, lambda: b.call(self.broadcast, [self.done_cv]))
        b.branch(next_job)

        b.position_at_end(exit_)
        b.ret(ir.Constant(PTR, None))
        return fn

    def _emit_openmp_team(self) -> ir.Function:
        """void openmp_team(ptr job): what each thread of an OpenMP team runs for a job handed
        to OpenMP: the job's MXCSR for the while (the thread is OpenMP's, so its own is put
        back), tasks claimed from the job's counter until none is left."""
        fn = ir.Function(self.m, ir.FunctionType(VOID, [PTR]), name="pool.openmp_team")
        fn.linkage = "internal"
        job = fn.args[0]
        b = ir.IRBuilder(fn.append_basic_block("start"))
        own_mxcsr = b.alloca(I32)
        if self.x86:
            b.call(self.stmxcsr, [own_mxcsr])
            b.call(self.ldmxcsr, [self._job_field(b, job, OPENMP_JOB_MXCSR)])
        task = b.load(self._job_field(b, job, OPENMP_JOB_TASK), typ=PTR)
        context = b.load(self._job_field(b, job, OPENMP_JOB_CONTEXT), typ=PTR)
        n = b.load(self._job_field(b, job, OPENMP_JOB_TASKS), typ=I64)
        claim = b.append_basic_block("claim")
        run = b.append_basic_block("run")
        done = b.append_basic_block("done")
        b.branch(claim)
        b.position_at_end(claim)
        i = b.atomic_rmw("add", self._job_field(b, job, OPENMP_JOB_NEXT), i64(1), "monotonic")
        b.cbranch(b.icmp_unsigned("<", i, n), run, done)
        b.position_at_end(run)
        b.call(FunctionPointer(task, self.task_type), [context, i])
        b.branch(claim)
        b.position_at_end(done)
        if self.x86:
            b.call(self.ldmxcsr, [own_mxcsr])
        b.ret_void()
        return fn

    @staticmethod
    def _job_field(b, job, offset):
        return b.gep(job, [i64(offset)], source_etype=ir.IntType(8))

    def _emit_share_openmp(self) -> None:
        """void share_openmp(i64 gomp_parallel, i32 threads): hand every later job to the
        OpenMP runtime whose GOMP_parallel is at that address, on `threads` threads (0: the
        pool's own threads again). The count is stored before the address, which a caller
        loads first (release / acquire)."""
        fn = ir.Function(self.m, ir.FunctionType(VOID, [I64, I32]), name=SHARE_OPENMP)
        b = ir.IRBuilder(fn.append_basic_block("start"))
        self._store(b, fn.args[1], self.openmp_threads)
        self._store(b, fn.args[0], self.openmp_parallel)
        b.ret_void()

    def _emit_parallel_for(self) -> None:
        fn = ir.Function(self.m, ir.FunctionType(VOID, [PTR, PTR, I64]), name=PARALLEL_FOR)
        task, context, n = fn.args
        b = ir.IRBuilder(fn.append_basic_block("start"))
        job = b.alloca(ir.ArrayType(I64, OPENMP_JOB_BYTES // 8))
        job.type = PTR   # llvmlite types an alloca's address by its contents; fields are read by offset
        serial = b.append_basic_block("serial")
        own_or_openmp = b.append_basic_block("own_or_openmp")
        openmp = b.append_basic_block("openmp")
        take = b.append_basic_block("take")
        pooled = b.append_basic_block("pooled")
        worth = b.and_(b.icmp_unsigned(">", n, i64(1)),
                       b.icmp_unsigned(">", self._load(b, self.workers, I64), i64(0)))
        b.cbranch(worth, take, serial)
        b.position_at_end(take)
        taken = b.cmpxchg(self.busy, ir.Constant(I32, 0), ir.Constant(I32, 1), "acquire", "monotonic")
        b.cbranch(b.extract_value(taken, 1), own_or_openmp, serial)

        # One caller at a time hands work to OpenMP too, as to the pool's threads: concurrent
        # callers would each get a team of their own (OpenMP keeps one per calling thread),
        # all spinning on the same cores.
        b.position_at_end(own_or_openmp)
        gomp_parallel = self._load(b, self.openmp_parallel, I64)
        b.cbranch(b.icmp_unsigned("!=", gomp_parallel, i64(0)), openmp, pooled)

        b.position_at_end(openmp)
        b.store(task, self._job_field(b, job, OPENMP_JOB_TASK))
        b.store(context, self._job_field(b, job, OPENMP_JOB_CONTEXT))
        b.store(n, self._job_field(b, job, OPENMP_JOB_TASKS))
        b.store(i64(0), self._job_field(b, job, OPENMP_JOB_NEXT))
        if self.x86:
            b.call(self.stmxcsr, [self._job_field(b, job, OPENMP_JOB_MXCSR)])
        b.call(FunctionPointer(b.inttoptr(gomp_parallel, PTR), ir.FunctionType(VOID, [PTR, PTR, I32, I32])),
               [self.openmp_team, job, self._load(b, self.openmp_threads, I32), ir.Constant(I32, 0)])
        self._store(b, ir.Constant(I32, 0), self.busy)
        b.ret_void()

        b.position_at_end(pooled)
        b.store(task, self.job_task)
        b.store(context, self.job_context)
        b.store(n, self.job_tasks)
        if self.x86:
            b.call(self.stmxcsr, [self.job_mxcsr])
        self._store(b, i64(0), self.next_task, "monotonic")
        self._store(b, ir.Constant(I32, 0), self.napping, "monotonic")
        generation = b.add(b.load(self.generation, typ=I64), i64(1))
        self._store(b, b.shl(b.and_(generation, i64(0xFFFFFFFF)), i64(32)), self.state)   # open, nobody inside
        self._store(b, generation, self.generation, "seq_cst")
        wake = b.append_basic_block("wake")
        work = b.append_basic_block("work")
        b.cbranch(b.icmp_unsigned("!=", self._load(b, self.sleepers, I32, "seq_cst"), ir.Constant(I32, 0)), wake, work)
        b.position_at_end(wake)
        self._locked(b, lambda: b.call(self.broadcast, [self.work_cv]))
        b.branch(work)
        b.position_at_end(work)
        b.call(self.run_tasks, [])
        before = b.atomic_rmw("or", self.state, ir.Constant(I64, CLOSED), "acq_rel")
        wait = b.append_basic_block("wait")
        release = b.append_basic_block("release")
        b.cbranch(b.icmp_unsigned("!=", b.and_(before, ir.Constant(I64, COUNT_BITS)), i64(0)), wait, release)
        b.position_at_end(wait)
        self._wait_until(b, "wait_workers",
                         lambda b: b.icmp_unsigned("==", b.and_(self._load(b, self.state, I64),
                                                                ir.Constant(I64, COUNT_BITS)), i64(0)),
                         self.done_cv)
        b.branch(release)
        b.position_at_end(release)
        self._store(b, ir.Constant(I32, 0), self.busy)
        b.ret_void()

        b.position_at_end(serial)
        counted_loop(b, i64(0), n, lambda i: b.call(FunctionPointer(task, self.task_type), [context, i]))
        b.ret_void()

    def _emit_yield_cores(self) -> None:
        fn = ir.Function(self.m, ir.FunctionType(VOID, []), name=YIELD_CORES)
        b = ir.IRBuilder(fn.append_basic_block("start"))
        self._store(b, ir.Constant(I32, 1), self.napping, "monotonic")
        b.ret_void()

    def _emit_start(self) -> None:
        """i64 start(i64 n_workers): start the workers; the number running."""
        fn = ir.Function(self.m, ir.FunctionType(I64, [I64]), name=START)
        b = ir.IRBuilder(fn.append_basic_block("start"))
        first_generation = b.inttoptr(b.load(self.generation, typ=I64), PTR)
        failed = b.append_basic_block("failed")

        def create(i):
            slot = b.gep(self.threads, [i64(0), i])
            status = b.call(self.pthread_create, [slot, ir.Constant(PTR, None), self.worker, first_generation])
            created = b.append_basic_block("created")
            b.cbranch(b.icmp_unsigned("!=", status, ir.Constant(I32, 0)), failed, created)
            b.position_at_end(created)
            self._store(b, b.add(i, i64(1)), self.workers)

        counted_loop(b, i64(0), fn.args[0], create)
        b.branch(failed)
        b.position_at_end(failed)
        b.ret(self._load(b, self.workers, I64))

    def _emit_stop(self) -> None:
        """void stop(): wake every worker with `stopping` set and join it."""
        fn = ir.Function(self.m, ir.FunctionType(VOID, []), name=STOP)
        b = ir.IRBuilder(fn.append_basic_block("start"))
        n = self._load(b, self.workers, I64)
        self._store(b, i64(0), self.workers)   # from here on, parallel_for runs serially
        self._locked(b, lambda: (self._store(b, ir.Constant(I32, 1), self.stopping, "seq_cst"),
                                 b.call(self.broadcast, [self.work_cv])))
        counted_loop(b, i64(0), n, lambda i: b.call(self.pthread_join, [
            b.load(b.gep(self.threads, [i64(0), i]), typ=I64), ir.Constant(PTR, None)]))
        self._store(b, ir.Constant(I32, 0), self.stopping)
        b.ret_void()

    def _emit_reset(self) -> None:
        """void reset(): in a forked child, where the workers do not exist: forget them and
        put the synchronisation objects back to their initial (all-zero) state."""
        fn = ir.Function(self.m, ir.FunctionType(VOID, []), name=RESET)
        b = ir.IRBuilder(fn.append_basic_block("start"))
        for g in (self.mutex, self.work_cv, self.done_cv):
            b.store(ir.Constant(g.value_type, None), g)
        for g in (self.workers, self.state, self.next_task):
            b.store(i64(0), g)
        for g in (self.busy, self.napping, self.stopping, self.sleepers):
            b.store(ir.Constant(I32, 0), g)
        b.store(i64(0), self.openmp_parallel)   # OpenMP's threads are not in the child either
        b.ret_void()


# --- the process's pool -----------------------------------------------------------------------

def worker_pool() -> WorkerPool | None:
    """The process's pool, started on first use; None when kernels run on one thread."""
    aot = aot_emission()
    if aot is not None:   # code for an object file: its own pool, planned for the object's threads
        return aot.pool
    pool = pool_threads.current()
    if pool is not None:
        return pool
    threads = thread_count()
    if threads == 1:
        return None
    triple = llvm.get_process_triple()
    addresses = host_jit().compile_helper("worker-pool", lambda: str(_PoolIr(triple).m), POOL_FUNCTIONS,
                                          recipe=(triple,))
    return pool_threads.start(addresses, threads)


# --- splitting a kernel: outlining a loop body into a task -------------------------------------

def emit_parallel_tasks(b: ir.IRBuilder, pool: WorkerPool, n_tasks: int, body: Callable[[ir.Value], None]) -> None:
    """At the builder's position: run body(task_index) for task_index in [0, n_tasks) on the
    pool. The body is emitted into a task function of its own, `void task(ptr context, i64
    task_index)`, with the same builder; values of the calling function that it uses
    (pointers, loop-invariant values the emitters remembered) are passed in `context`, one
    8-byte slot each, and loaded in the task's entry block."""
    caller = b.function
    here = b.block
    module = caller.module
    task = ir.Function(module, TASK_TYPE, name=module.get_unique_name(f"{caller.name}.task"))
    task.linkage = "internal"
    context, index = task.args
    loads = task.append_basic_block("context")
    b.position_at_end(task.append_basic_block("body"))
    body(index)
    b.ret_void()

    captured = _capture(task, caller)
    b.position_at_end(loads)
    _replace_uses(task, {id(value): b.load(b.gep(context, [i64(8 * slot)], source_etype=ir.IntType(8)), typ=value.type)
                         for slot, value in enumerate(captured)})
    b.branch(task.blocks[1])

    b.position_at_end(here)
    cells = _entry_alloca(b, ir.ArrayType(I64, max(1, len(captured))))
    for slot, value in enumerate(captured):
        b.store(value, b.gep(cells, [i64(8 * slot)], source_etype=ir.IntType(8)))
    if n_tasks == 1 and aot_emission() is not None:   # (the JIT's IR keeps its call of the pool)
        b.call(task, [cells, i64(0)])
        return
    parallel_for = native_function(b, PARALLEL_FOR_TYPE, PARALLEL_FOR, lambda: pool.parallel_for, pool_ir)
    b.call(parallel_for, [task, cells, i64(n_tasks)])


def pool_ir() -> str:
    """The pool's module for this process's target (an object file links it in)."""
    return str(_PoolIr(llvm.get_process_triple()).m)


TASK_TYPE = ir.FunctionType(VOID, [PTR, I64])
PARALLEL_FOR_TYPE = ir.FunctionType(VOID, [PTR, PTR, I64])


def _entry_alloca(b: ir.IRBuilder, ty: ir.Type) -> ir.Value:
    here = b.block
    b.position_at_start(b.function.entry_basic_block)
    cells = b.alloca(ty)
    cells.align = 8
    cells.type = PTR   # llvmlite types an alloca's address by its contents; these slots hold several types
    b.position_at_end(here)
    return cells


def _local_to(value, fn: ir.Function) -> bool:
    if isinstance(value, ir.Argument):
        return value.parent is fn
    return isinstance(value, ir.Instruction) and value.parent.parent is fn


def _operands(instr: ir.Instruction) -> list:
    """Every value an instruction uses (llvmlite keeps some outside `operands`)."""
    values = list(instr.operands)
    if isinstance(instr, ir.PhiInstr):
        values += [v for v, _ in instr.incomings]
    if isinstance(instr, ir.CallInstr) and hasattr(instr.callee, "pointer"):
        values.append(instr.callee.pointer)
    return values


def _capture(task: ir.Function, caller: ir.Function) -> list:
    """The values of `caller` that instructions of `task` use, each once, in first-use order."""
    seen: dict[int, ir.Value] = {}
    for block in task.blocks:
        for instr in block.instructions:
            for value in _operands(instr):
                if _local_to(value, caller):
                    if value.type.is_pointer or isinstance(value.type, (ir.IntType, ir.FloatType, ir.DoubleType)):
                        seen.setdefault(id(value), value)
                    else:
                        raise NotImplementedError(f"a parallel task cannot take a {value.type} from its kernel")
    return list(seen.values())


def _replace_uses(task: ir.Function, replacements: dict) -> None:
    """Make the instructions of `task` use replacements[id(v)] wherever they use a value v
    that has one (llvmlite keeps some operands outside `operands` too)."""
    def new(value):
        return replacements.get(id(value), value)

    for block in task.blocks:
        for instr in block.instructions:
            if not any(id(v) in replacements for v in _operands(instr)):
                continue   # most do not: rebuilding them would only cost emission time
            if isinstance(instr, ir.PhiInstr):
                instr.incomings = [(new(v), blk) for v, blk in instr.incomings]
            if isinstance(instr, ir.CallInstr) and id(getattr(instr.callee, "pointer", None)) in replacements:
                instr.operands = [FunctionPointer(new(instr.callee.pointer), instr.callee.function_type)] + \
                    list(instr.operands[1:])
            instr.operands = type(instr.operands)(new(v) for v in instr.operands)
            if isinstance(instr, ir.GEPInstr):
                instr.pointer, instr.indices = new(instr.pointer), [new(i) for i in instr.indices]
            elif isinstance(instr, (ir.ExtractValue, ir.InsertValue)):
                instr.aggregate = new(instr.aggregate)
                if isinstance(instr, ir.InsertValue):
                    instr.value = new(instr.value)
            instr._clear_string_cache()   # llvmlite caches an instruction's text; its operands changed
