"""rng-bit-generator on the CPU backend: a kernel computing Philox4x32-10 or Threefry2x32-20
blocks in registers, bit-exact with the evaluator (pyxla/hlo/ops/rng.py, which follows XLA's
expansion word for word; its docstring says how counters, keys and words are laid out).

The kernel writes the new state (tuple element 0) and the bits (element 1). Words are
produced in the bits array's logical row-major order and stored through its layout.
"""
from __future__ import annotations

from math import prod

import llvmlite.ir as ir

from ....hlo.ops.rng import (
    PHILOX_MULTIPLIERS,
    PHILOX_WEYL,
    THREEFRY_PARITY,
    THREEFRY_ROTATIONS,
    rng_algorithm,
    threefry_split_dim,
)
from ....hlo.shape import ArrayShape, default_layout
from ...llvm.elemental import Unsupported
from ...llvm.indices import delinearize, linear_index
from ...llvm.ir_types import I32, I64, i64, storage_type
from ...llvm.loops import for_range
from ..codegen import KERNELS, kernel_root, output_pointers


def _u32(v: int) -> ir.Constant:
    v &= 0xFFFFFFFF
    return ir.Constant(I32, v - (1 << 32) if v >> 31 else v)


def split_u64(b: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(low, high) u32 words of an i64."""
    return b.trunc(x, I32), b.trunc(b.lshr(x, i64(32)), I32)


def join_u32(b: ir.IRBuilder, low: ir.Value, high: ir.Value) -> ir.Value:
    return b.or_(b.zext(low, I64), b.shl(b.zext(high, I64), i64(32)))


# --- the block ciphers -------------------------------------------------------------------------

def philox4x32(b: ir.IRBuilder, counter: list[ir.Value], key: tuple[ir.Value, ir.Value],
               rounds: int = 10) -> list[ir.Value]:
    """Philox4x32 on four u32 counter words with a (k0, k1) key."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    m0, m1 = (i64(m) for m in PHILOX_MULTIPLIERS)
    for _ in range(rounds):
        lo0, hi0 = split_u64(b, b.mul(b.zext(c0, I64), m0))
        lo1, hi1 = split_u64(b, b.mul(b.zext(c2, I64), m1))
        c0, c1, c2, c3 = b.xor(b.xor(hi1, c1), k0), lo1, b.xor(b.xor(hi0, c3), k1), lo0
        k0, k1 = b.add(k0, _u32(PHILOX_WEYL[0])), b.add(k1, _u32(PHILOX_WEYL[1]))
    return [c0, c1, c2, c3]


def _rotate_left(b: ir.IRBuilder, x: ir.Value, distance: int) -> ir.Value:
    return b.or_(b.shl(x, _u32(distance)), b.lshr(x, _u32(32 - distance)))


def threefry2x32(b: ir.IRBuilder, counter: tuple[ir.Value, ir.Value], key: tuple[ir.Value, ir.Value]):
    """Threefry2x32 with 20 rounds on two u32 counter words."""
    ks = (key[0], key[1], b.xor(b.xor(key[0], key[1]), _u32(THREEFRY_PARITY)))
    x0 = b.add(counter[0], ks[0])
    x1 = b.add(counter[1], ks[1])
    for block in range(5):
        for distance in THREEFRY_ROTATIONS[block % 2]:
            x0 = b.add(x0, x1)
            x1 = b.xor(_rotate_left(b, x1, distance), x0)
        # Key injection after every four rounds.
        x0 = b.add(x0, ks[(block + 1) % 3])
        x1 = b.add(b.add(x1, ks[(block + 2) % 3]), _u32(block + 1))
    return x0, x1


# --- the kernel -----------------------------------------------------------------------------------

class _Writer:
    """Stores into the bits array by logical row-major position or by index."""

    def __init__(self, ke, ptr: ir.Value, shape: ArrayShape):
        self.ke, self.ptr, self.shape = ke, ptr, shape
        self.row_major = default_layout(shape.rank)

    def at_position(self, position: ir.Value, word: ir.Value) -> None:
        b = self.ke.b
        if self.shape.minor_to_major == self.row_major:
            b.store(word, b.gep(self.ptr, [position], source_etype=storage_type(self.shape.dtype)))
        else:
            self.at_index(delinearize(b, position, self.shape.dims, self.row_major), word)

    def at_index(self, index: tuple, word: ir.Value) -> None:
        self.ke.store(self.ptr, self.shape, index, word)


def emit_rng_bit_generator(ke) -> None:
    root = kernel_root(ke)
    state_ptr, bits_ptr = output_pointers(ke)
    state_shape, bits_shape = ke.instr.shape.elements
    width = bits_shape.dtype.bits
    name = rng_algorithm(root.attrs)
    if width not in (32, 64):
        raise Unsupported(f"the CPU backend cannot emit rng-bit-generator algorithm={name} producing "
                          f"{width}-bit {bits_shape.dtype} (XLA's generators make 32- and 64-bit words)")
    b, e = ke.b, ke.e
    state = [e.value(root.operands[0], (i64(k),)) for k in range(state_shape.dims[0])]
    writer = _Writer(ke, bits_ptr, bits_shape)
    generate = _philox if name in ("rng_default", "rng_philox") else _threefry
    new_state = generate(b, state, bits_shape.dims, width, writer)
    for k, word in enumerate(new_state):
        ke.store(state_ptr, state_shape, (i64(k),), word)


def _philox(b: ir.IRBuilder, state: list, dims: tuple, width: int, writer: _Writer) -> list:
    """Block i encrypts the 128-bit counter + i; its four words are the next 32-bit outputs,
    or two 64-bit ones. Returns the new state."""
    key = state[0]
    low = state[1]
    high = state[2] if len(state) >= 3 else key   # u64[2]: the state reversed is the counter
    key_words = split_u64(b, key)
    count = prod(dims)
    per_block = 128 // width
    blocks = -(-count // per_block)

    def block(i):
        lows = b.add(low, i[0])
        carry = b.zext(b.icmp_unsigned("<", lows, low), I64)
        words = philox4x32(b, [*split_u64(b, lows), *split_u64(b, b.add(high, carry))], key_words)
        if width == 64:
            words = [join_u32(b, words[0], words[1]), join_u32(b, words[2], words[3])]
        for j, word in enumerate(words):
            position = b.add(b.mul(i[0], i64(per_block)), i64(j))
            if count % per_block:   # the last block's words past the end are dropped
                with b.if_then(b.icmp_unsigned("<", position, i64(count))):
                    writer.at_position(position, word)
            else:
                writer.at_position(position, word)

    for_range(b, [blocks], block)
    new_low = b.add(low, i64(blocks))
    if len(state) < 3:
        return [key, new_low]
    return [key, new_low, b.add(high, b.zext(b.icmp_unsigned("<", new_low, low), I64))]


def _threefry(b: ir.IRBuilder, state: list, dims: tuple, width: int, writer: _Writer) -> list:
    """64-bit outputs encrypt counter + their linear index; 32-bit outputs take the two words
    of one encryption as neighbours along the split dimension. Returns the new state."""
    key, counter = state[0], state[1]
    key_words = split_u64(b, key)
    if width == 64:
        def element(index):
            position = _row_major_position(b, index, dims)
            x0, x1 = threefry2x32(b, split_u64(b, b.add(counter, position)), key_words)
            writer.at_index(index, join_u32(b, x0, x1))

        for_range(b, dims, element)
        return [key, b.add(counter, i64(prod(dims)))]
    if not dims:
        x0, _ = threefry2x32(b, split_u64(b, counter), key_words)
        writer.at_index((), x0)
        return [key, b.add(counter, i64(1))]
    split = threefry_split_dim(dims)
    half = dims[:split] + (-(-dims[split] // 2),) + dims[split + 1:]

    def pair(index):
        position = _row_major_position(b, index, half)
        words = threefry2x32(b, split_u64(b, b.add(counter, position)), key_words)
        for c, word in enumerate(words):
            at = b.add(b.mul(index[split], i64(2)), i64(c))
            target = index[:split] + (at,) + index[split + 1:]
            if c == 1 and dims[split] % 2:   # an odd dimension drops the last pair's second word
                with b.if_then(b.icmp_unsigned("<", at, i64(dims[split]))):
                    writer.at_index(target, word)
            else:
                writer.at_index(target, word)

    for_range(b, half, pair)
    return [key, b.add(counter, i64(prod(half)))]


def _row_major_position(b: ir.IRBuilder, index: tuple, dims: tuple) -> ir.Value:
    return linear_index(b, index, dims, default_layout(len(dims)))


KERNELS["rng-bit-generator"] = emit_rng_bit_generator
