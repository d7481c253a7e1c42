"""rng-bit-generator on the GPU: every 128-bit Philox block, or every Threefry encryption,
is independent, so a grid-stride loop spreads them over threads; thread 0 also writes the
new state. Bit-exact with the evaluator and the CPU backend (the block ciphers are the CPU
backend's, cpu/ops/rng.py; the evaluator's pyxla/hlo/ops/rng.py says how counters, keys
and words are laid out)."""
from __future__ import annotations

from math import prod

import llvmlite.ir as ir

from ...hlo.ops.rng import rng_algorithm, threefry_split_dim
from ...hlo.shape import ArrayShape, default_layout
from ..cpu.ops.rng import join_u32, philox4x32, split_u64, threefry2x32
from ..llvm.indices import delinearize
from ..llvm.ir_types import I64, i64
from .kernels import THREADS_PER_BLOCK, KernelArgs, KernelSpec, global_thread, grid_loop, refuse
from .simt import Launch, Phase, PhaseContext

MAX_BLOCKS = 4096


def launches(spec: KernelSpec) -> list[Launch] | None:
    root = spec.root
    if root.opcode != "rng-bit-generator":
        return None
    state_shape, bits_shape = spec.outputs
    width = bits_shape.dtype.bits
    if width not in (32, 64):
        raise refuse(root, f"{width}-bit {bits_shape.dtype} words (XLA's generators make 32- and 64-bit words)")
    philox = rng_algorithm(root.attrs) in ("rng_default", "rng_philox")
    dims = bits_shape.dims
    if philox:
        work = -(-prod(dims) // (128 // width))
    elif width == 64 or not dims:
        work = max(1, prod(dims))
    else:
        split = threefry_split_dim(dims)
        work = prod(dims[:split] + (-(-dims[split] // 2),) + dims[split + 1:])

    def emit(ctx: PhaseContext) -> None:
        args = KernelArgs(spec, ctx)
        e = args.elemental()
        b = ctx.b
        state = [e.value(root.operands[0], (i64(k),)) for k in range(state_shape.dims[0])]
        first, stride = global_thread(ctx)
        generate = _philox if philox else _threefry
        new_state = generate(b, args, state, bits_shape, width, first, stride)
        with b.if_then(b.icmp_unsigned("==", first, i64(0))):
            for k, word in enumerate(new_state):
                args.store(args.out_ptrs[0], state_shape, (i64(k),), word)

    blocks = max(1, min(MAX_BLOCKS, -(-work // THREADS_PER_BLOCK)))
    return [Launch(spec.name, blocks, THREADS_PER_BLOCK, [Phase(emit)], sim_blocks=min(blocks, 2))]


def _at_position(b: ir.IRBuilder, args: KernelArgs, shape: ArrayShape, position: ir.Value, word: ir.Value) -> None:
    """Store `word` at the row-major position of the bits array."""
    index = delinearize(b, position, shape.dims, default_layout(shape.rank)) if shape.rank else ()
    args.store(args.out_ptrs[1], shape, index, word)


def _philox(b, args, state, shape, width, first, stride) -> list:
    """Block i encrypts the 128-bit counter + i; its four words are the next 32-bit outputs,
    or two 64-bit ones."""
    key, low = state[0], state[1]
    high = state[2] if len(state) >= 3 else key   # u64[2]: the state reversed is the counter
    key_words = split_u64(b, key)
    count = prod(shape.dims)
    per_block = 128 // width
    blocks = -(-count // per_block)

    def block(i):
        lows = b.add(low, i)
        carry = b.zext(b.icmp_unsigned("<", lows, low), I64)
        words = philox4x32(b, [*split_u64(b, lows), *split_u64(b, b.add(high, carry))], key_words)
        if width == 64:
            words = [join_u32(b, words[0], words[1]), join_u32(b, words[2], words[3])]
        for j, word in enumerate(words):
            position = b.add(b.mul(i, i64(per_block)), i64(j))
            with b.if_then(b.icmp_unsigned("<", position, i64(count))):   # the last block's spare words
                _at_position(b, args, shape, position, word)

    grid_loop(b, first, stride, blocks, block)
    new_low = b.add(low, i64(blocks))
    if len(state) < 3:
        return [key, new_low]
    return [key, new_low, b.add(high, b.zext(b.icmp_unsigned("<", new_low, low), I64))]


def _threefry(b, args, state, shape, width, first, stride) -> list:
    """64-bit outputs encrypt counter + their linear index; 32-bit outputs take the two words
    of one encryption as neighbours along the split dimension."""
    key, counter = state[0], state[1]
    key_words = split_u64(b, key)
    dims = shape.dims
    if width == 64:
        def element(p):
            x0, x1 = threefry2x32(b, split_u64(b, b.add(counter, p)), key_words)
            _at_position(b, args, shape, p, join_u32(b, x0, x1))

        grid_loop(b, first, stride, prod(dims), element)
        return [key, b.add(counter, i64(prod(dims)))]
    if not dims:
        x0, _ = threefry2x32(b, split_u64(b, counter), key_words)
        with b.if_then(b.icmp_unsigned("==", first, i64(0))):
            args.store(args.out_ptrs[1], shape, (), x0)
        return [key, b.add(counter, i64(1))]
    split = threefry_split_dim(dims)
    half = dims[:split] + (-(-dims[split] // 2),) + dims[split + 1:]

    def pair(p):
        index = delinearize(b, p, half, default_layout(len(half)))
        words = threefry2x32(b, split_u64(b, b.add(counter, p)), key_words)
        for c, word in enumerate(words):
            at = b.add(b.mul(index[split], i64(2)), i64(c))
            target = index[:split] + (at,) + index[split + 1:]
            with b.if_then(b.icmp_unsigned("<", at, i64(dims[split]))):   # an odd dimension's last pair
                args.store(args.out_ptrs[1], shape, target, word)

    grid_loop(b, first, stride, prod(half), pair)
    return [key, b.add(counter, i64(prod(half)))]
