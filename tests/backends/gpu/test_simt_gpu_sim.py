"""simt.py's emulation in gpu-sim: barriers order a block's threads, shared memory is the
block's, a shuffle down takes the value `offset` lanes above (a lane past the warp's end
keeps its own), loops repeat steps with barriers inside; and a missing barrier shows as it
would on a GPU. The same launches' PTX passes ptxas."""
import shutil
import subprocess

import llvmlite.ir as ir
import numpy as np
import pytest

from pyxla.backends.gpu.ptx import compile_ptx
from pyxla.backends.gpu.sim import GARBAGE, SimKernels
from pyxla.backends.gpu.simt import (
    Barrier,
    Launch,
    Loop,
    Phase,
    Shuffle,
    emit_host_launch,
    emit_phases,
    emit_ptx_kernel,
)
from pyxla.backends.llvm.ir_types import I32, i64

PTXAS = shutil.which("ptxas")
THREADS = 64


def _i32_at(b, ptr, i):
    return b.gep(ptr, [i], source_etype=I32)


def write_own_id(ctx):
    """shared[tid] = tid + 1000 * block."""
    b = ctx.b
    value = b.trunc(b.add(ctx.tid, b.mul(ctx.block, i64(1000))), I32)
    b.store(value, _i32_at(b, ctx.shared, ctx.tid))


def read_mirror(ctx):
    """out[block * ntid + tid] = shared[ntid - 1 - tid]."""
    b = ctx.b
    mirror = b.sub(b.sub(ctx.ntid, i64(1)), ctx.tid)
    value = b.load(_i32_at(b, ctx.shared, mirror), typ=I32)
    b.store(value, _i32_at(b, ctx.args[0], b.add(b.mul(ctx.block, ctx.ntid), ctx.tid)))


def run_sim(launch: Launch, out: np.ndarray) -> None:
    module = ir.Module(name="t")
    emit_phases(module, launch, 1, None)
    emit_host_launch(module, launch, 1)
    SimKernels(str(module), [launch.name]).launch(launch, [out.ctypes.data])


def ptx_of(launch: Launch) -> str:
    module = ir.Module(name="t")
    emit_phases(module, launch, 1, None)
    emit_ptx_kernel(module, launch, 1)
    return compile_ptx(str(module), "sm_90")


def mirror_launch(name: str, barrier: bool) -> Launch:
    steps = [Phase(write_own_id)] + ([Barrier()] if barrier else []) + [Phase(read_mirror)]
    return Launch(name, 3, THREADS, steps, shared_bytes=4 * THREADS)


def test_a_barrier_makes_every_threads_writes_visible_in_its_block():
    out = np.zeros(3 * THREADS, np.int32)
    run_sim(mirror_launch("mirror", True), out)
    want = np.concatenate([1000 * blk + np.arange(THREADS)[::-1] for blk in range(3)])
    np.testing.assert_array_equal(out, want)


def test_without_the_barrier_later_threads_writes_are_not_seen():
    out = np.zeros(3 * THREADS, np.int32)
    run_sim(mirror_launch("unsynced", False), out)
    garbage = np.frombuffer(bytes([GARBAGE] * 4), np.int32)[0]
    # thread t reads thread ntid-1-t's slot: written before it only when that thread came first
    first_block = out[:THREADS]
    assert (first_block[:THREADS // 2] == garbage).all()
    np.testing.assert_array_equal(first_block[THREADS // 2:], np.arange(THREADS)[::-1][THREADS // 2:])


@pytest.mark.parametrize("offset", [1, 5, 16])
def test_shuffle_down_within_warps(offset):
    def put(ctx):
        ctx.store_slot(0, ctx.b.trunc(ctx.b.add(ctx.tid, i64(7)), I32))

    def take(ctx):
        b = ctx.b
        b.store(ctx.load_slot(1, I32), _i32_at(b, ctx.args[0], b.add(b.mul(ctx.block, ctx.ntid), ctx.tid)))

    launch = Launch(f"shfl{offset}", 2, THREADS, [Phase(put), Shuffle(0, 1, offset), Phase(take)], local_slots=2)
    out = np.zeros(2 * THREADS, np.int32)
    run_sim(launch, out)
    lane = np.arange(THREADS) % 32
    tid = np.arange(THREADS)
    want = np.where(lane + offset < 32, tid + offset, tid) + 7
    np.testing.assert_array_equal(out, np.concatenate([want, want]))
    if PTXAS:
        assert "shfl.sync.down.b32" in ptx_of(launch)


def test_a_uniform_loop_with_barriers_sees_its_iteration():
    """Each iteration every thread adds shared[(tid + 1) % ntid] (written last iteration) to its sum."""
    def start(ctx):
        b = ctx.b
        ctx.store_slot(0, b.trunc(ctx.tid, I32))
        b.store(b.trunc(ctx.tid, I32), _i32_at(b, ctx.shared, ctx.tid))

    def step(ctx):
        b = ctx.b
        nxt = b.urem(b.add(ctx.tid, i64(1)), ctx.ntid)
        value = b.load(_i32_at(b, ctx.shared, nxt), typ=I32)
        ctx.store_slot(0, b.add(ctx.load_slot(0, I32), b.add(value, b.trunc(ctx.iteration, I32))))

    def publish(ctx):
        b = ctx.b
        b.store(ctx.load_slot(0, I32), _i32_at(b, ctx.shared, ctx.tid))

    def finish(ctx):
        b = ctx.b
        b.store(ctx.load_slot(0, I32), _i32_at(b, ctx.args[0], ctx.tid))

    launch = Launch("loop", 1, THREADS, [Phase(start), Barrier(),
                                          Loop(4, [Phase(step), Barrier(), Phase(publish), Barrier()]),
                                          Phase(finish)], shared_bytes=4 * THREADS, local_slots=1)
    out = np.zeros(THREADS, np.int32)
    run_sim(launch, out)
    s = np.arange(THREADS)
    for it in range(4):
        s = s + np.roll(s, -1) + it
    np.testing.assert_array_equal(out, s)


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on the PATH")
def test_launch_ptx_passes_ptxas(tmp_path):
    ptx = ptx_of(mirror_launch("mirror_ptx", True))
    assert "bar.sync" in ptx and ".shared" in ptx and ".maxntid 64" in ptx
    path = tmp_path / "k.ptx"
    path.write_text(ptx)
    done = subprocess.run([PTXAS, "-arch=sm_90", str(path), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
