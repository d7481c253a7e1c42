"""Random programs on the CPU backend against the evaluator: DAGs of elementwise ops (unary
and binary over f32, f64 and s32, compare + select, convert), broadcasts, transposes,
reshapes, slices, pads, concatenates, reverses, iotas, dynamic-slices and reductions (over
rows, columns, everything), on shapes with odd sizes (vector tails), size-1 and zero-size
dimensions. The CPU fuses them into loop and reduction kernels; every result must equal the
evaluator's on fresh random inputs.

Comparisons are exact where the CPU and the evaluator compute with the same correctly
rounded operations. Transcendentals (polynomial approximations) and sums (reassociated)
are compared with a tolerance, so the generator tracks, per value, whether it is still
bit-exact and a bound on its magnitude: ops whose result jumps (floor, compare, convert to
integer) read only bit-exact values, and domains stay safe (log of |x|+1, division by
|y|+1, large values squashed by tanh), so no NaN or overflow is ever the thing compared.

Each test builds one module holding several independent random programs (one compile for
all of them); a failure names the program's output and prints the module text, which the
session seed (PYXLA_TEST_SEED) reproduces.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from pyxla.backends import get_backend
from pyxla.compiler import compile_module
from pyxla.hlo import HloBuilder, PadDim, SliceDim, evaluate_module, flatten_result, parse_module, scalar_computation
from pyxla.hlo.shape import ArrayShape
from pyxla.hlo.types import F32, F64, S8, S32, U32
from pyxla.hlo.verifier import verify_module

SIZES = (0, 1, 1, 2, 2, 3, 4, 5, 7, 7, 8, 9, 13, 16, 17, 33)   # odd sizes leave vector tails
MAX_ELEMENTS = 3000
SQUASH_ABOVE = 1e4          # a float value that may exceed this goes through tanh
INT_TYPES = (S32, S8, U32)  # integer arithmetic wraps the same way on both sides: always exact
FLOAT_TYPES = (F32, F64)
PROGRAMS_PER_MODULE = 6
MODULES = 50                # 300 programs


@dataclass
class Value:
    instr: object
    bound: float            # |every element| <= bound
    exact: bool             # the CPU computes it bit for bit as the evaluator does

    @property
    def shape(self) -> ArrayShape:
        return self.instr.shape

    @property
    def dims(self) -> tuple:
        return self.shape.dims

    @property
    def dtype(self):
        return self.shape.dtype


class RandomProgram:
    """Adds random instructions to a builder; `inputs` makes the arguments of the parameters."""

    def __init__(self, b: HloBuilder, rng: np.random.Generator, inputs: list):
        self.b = b
        self.rng = rng
        self.inputs = inputs      # (parameter number, maker(rng)) for the whole module
        self.values: list[Value] = []

    # --- leaves ---------------------------------------------------------------------------------
    def random_dims(self, rank: int | None = None) -> tuple:
        rank = int(self.rng.integers(0, 4)) if rank is None else rank
        while True:
            dims = tuple(int(self.rng.choice(SIZES)) for _ in range(rank))
            if np.prod(dims, dtype=np.int64) <= MAX_ELEMENTS:
                return dims

    def parameter(self, dims: tuple, dtype) -> Value:
        number = len(self.inputs)
        instr = self.b.parameter(ArrayShape(dtype, dims), f"p{number}", number=number)
        np_type = dtype.np_dtype
        if dtype in INT_TYPES:
            low = 0 if dtype.name.startswith("u") else -50
            self.inputs.append(lambda r: r.integers(low, 51, dims).astype(np_type))
            return Value(instr, 50, True)
        self.inputs.append(lambda r: r.uniform(-3, 3, dims).astype(np_type))
        return Value(instr, 3, True)

    def constant(self, x: float, dtype) -> Value:
        return Value(self.b.constant(x, dtype), abs(x), True)

    def scalar_like(self, x: float, v: Value) -> Value:
        """A constant broadcast to v's shape."""
        c = self.b.constant(x, v.dtype)
        return Value(self.b.op("broadcast", c, shape=ArrayShape(v.dtype, v.dims), dimensions=()), abs(x), True)

    def op(self, opcode: str, *operands: Value, bound: float, exact: bool | None = None, **attrs) -> Value:
        exact = all(o.exact for o in operands) if exact is None else exact
        return Value(self.b.op(opcode, *(o.instr for o in operands), **attrs), bound, exact)

    # --- elementwise ----------------------------------------------------------------------------
    def unary(self, x: Value) -> Value:
        if x.dtype in INT_TYPES:
            kinds = ["negate", "not", "popcnt", "convert-float", "convert-int"] + (
                ["abs", "sign"] if x.dtype.name.startswith("s") else [])
            kind = str(self.rng.choice(kinds))
            if kind.startswith("convert"):
                types = FLOAT_TYPES if kind == "convert-float" else INT_TYPES
                to = types[int(self.rng.integers(len(types)))]
                return self.op("convert", x, shape=ArrayShape(to, x.dims), bound=self.int_bound(x.bound, to))
            return self.op(kind, x, bound=self.int_bound(x.bound + 1, x.dtype))
        kinds = ["negate", "abs", "tanh", "sine", "cosine", "logistic", "exp-tanh", "log1abs", "sqrt1abs",
                 "convert-other-float"]
        if x.exact:
            kinds += ["floor", "ceil", "round-nearest-even", "sign", "convert-int"]
        kind = str(self.rng.choice(kinds))
        if kind in ("negate", "abs", "floor", "ceil", "round-nearest-even"):
            return self.op(kind, x, bound=x.bound + 1)
        if kind == "sign":
            return self.op("sign", x, bound=1)
        if kind in ("tanh", "sine", "cosine", "logistic"):
            return self.op(kind, x, bound=1, exact=False)
        if kind == "exp-tanh":
            return self.op("exponential", self.op("tanh", x, bound=1, exact=False), bound=3, exact=False)
        if kind == "log1abs":
            a = self.op("add", self.op("abs", x, bound=x.bound), self.scalar_like(1.0, x), bound=x.bound + 1)
            return self.op("log", a, bound=np.log(x.bound + 1) + 1, exact=False)
        if kind == "sqrt1abs":
            a = self.op("add", self.op("abs", x, bound=x.bound), self.scalar_like(1.0, x), bound=x.bound + 1)
            return self.op("sqrt", a, bound=np.sqrt(x.bound + 1), exact=False)
        if kind == "convert-other-float":
            other = F64 if x.dtype == F32 else F32
            # f32 -> f64 is exact; f64 -> f32 rounds the same way on both sides
            return self.op("convert", x, shape=ArrayShape(other, x.dims), bound=x.bound)
        # to a signed integer the value fits in: truncation toward zero (out of range is undefined)
        to = S8 if x.bound < 127 and self.rng.random() < 0.3 else S32
        return self.op("convert", x, shape=ArrayShape(to, x.dims), bound=x.bound)

    @staticmethod
    def int_bound(bound: float, dtype) -> float:
        """The bound of a value of `dtype`: at most the type's range (arithmetic wraps)."""
        if dtype not in INT_TYPES:
            return bound
        info = np.iinfo(dtype.np_dtype)
        return min(bound, float(max(info.max, -int(info.min))))

    def literal(self, x: float, dtype) -> float:
        """x as a constant of `dtype`: unsigned types take |x|."""
        return abs(x) if dtype.name.startswith("u") else x

    def partner(self, x: Value) -> Value:
        """A second operand of x's shape and type: an existing value, a new parameter, or a
        broadcast constant."""
        same = [v for v in self.values if v.dims == x.dims and v.dtype == x.dtype]
        pick = self.rng.random()
        if same and pick < 0.6:
            return same[int(self.rng.integers(len(same)))]
        if pick < 0.85:
            return self.parameter(x.dims, x.dtype)
        return self.scalar_like(self.literal(float(self.rng.integers(-3, 4)) or 1.5, x.dtype), x)

    def binary(self, x: Value) -> Value:
        y = self.partner(x)
        if x.dtype in INT_TYPES:
            kind = str(self.rng.choice(["add", "subtract", "multiply", "maximum", "minimum", "and", "or", "xor",
                                        "shift-left", "shift-right-arithmetic", "shift-right-logical"]))
            bound = {"add": x.bound + y.bound, "subtract": x.bound + y.bound, "multiply": x.bound * y.bound,
                     "maximum": max(x.bound, y.bound), "minimum": max(x.bound, y.bound)}.get(kind, np.inf)
            return self.op(kind, x, y, bound=self.int_bound(bound, x.dtype))
        kind = str(self.rng.choice(["add", "subtract", "multiply", "maximum", "minimum", "divide", "select"]))
        if kind == "divide":   # by |y| + 1
            d = self.op("add", self.op("abs", y, bound=y.bound), self.scalar_like(1.0, y), bound=y.bound + 1)
            return self.op("divide", x, d, bound=x.bound)
        if kind == "select":
            if not (x.exact and y.exact):   # a compare of values the two sides round differently could flip
                kind = "maximum"
            else:
                direction = str(self.rng.choice(["LT", "LE", "GT", "GE", "EQ", "NE"]))
                pred = self.b.op("compare", x.instr, y.instr, direction=direction)
                z = self.partner(x)
                return Value(self.b.op("select", pred, x.instr, z.instr), max(x.bound, z.bound), x.exact and z.exact)
        bound = {"add": x.bound + y.bound, "subtract": x.bound + y.bound, "multiply": x.bound * y.bound}.get(
            kind, max(x.bound, y.bound))
        return self.op(kind, x, y, bound=bound)

    # --- data movement --------------------------------------------------------------------------
    def broadcast(self, x: Value) -> Value | None:
        out_rank = min(4, x.shape.rank + int(self.rng.integers(1, 3)))
        kept = sorted(self.rng.choice(out_rank, x.shape.rank, replace=False).tolist())
        dims = list(self.random_dims(out_rank))
        for d, n in zip(kept, x.dims):
            dims[d] = n
        if np.prod(dims, dtype=np.int64) > MAX_ELEMENTS:
            return None
        return self.op("broadcast", x, shape=ArrayShape(x.dtype, tuple(dims)), dimensions=tuple(kept),
                       bound=x.bound)

    def transpose(self, x: Value) -> Value | None:
        if x.shape.rank < 2:
            return None
        perm = tuple(int(d) for d in self.rng.permutation(x.shape.rank))
        return self.op("transpose", x, dimensions=perm, bound=x.bound)

    def reshape(self, x: Value) -> Value | None:
        dims = list(x.dims)
        kind = self.rng.integers(3)
        if kind == 0 and len(dims) >= 2:          # merge two neighbours
            d = int(self.rng.integers(len(dims) - 1))
            dims[d:d + 2] = [dims[d] * dims[d + 1]]
        elif kind == 1 and dims:                   # split one
            d = int(self.rng.integers(len(dims)))
            n = dims[d]
            factors = [f for f in range(1, n + 1) if n % f == 0] if n else [1, 2, 3]
            f = int(self.rng.choice(factors))
            dims[d:d + 1] = [f, n // f] if n else [f, 0]
        else:                                      # a size-1 dimension in or out
            if 1 in dims and self.rng.random() < 0.5:
                dims.remove(1)
            elif len(dims) < 4:
                dims.insert(int(self.rng.integers(len(dims) + 1)), 1)
        if len(dims) > 4:
            return None
        return self.op("reshape", x, shape=ArrayShape(x.dtype, tuple(dims)), bound=x.bound)

    def slice(self, x: Value) -> Value | None:
        spec = []
        for n in x.dims:
            start = int(self.rng.integers(0, n + 1))
            limit = int(self.rng.integers(start, n + 1))
            spec.append(SliceDim(start, limit, int(self.rng.choice([1, 1, 2, 3]))))
        return self.op("slice", x, slice=tuple(spec), bound=x.bound)

    def pad(self, x: Value) -> Value | None:
        spec = []
        for n in x.dims:
            interior = int(self.rng.choice([0, 0, 1, 2])) if n > 1 else 0
            grown = n + max(n - 1, 0) * interior
            low = int(self.rng.integers(-min(grown, 2), 4))
            high = int(self.rng.integers(-min(grown + low, 2), 4)) if grown + low > 0 else int(self.rng.integers(0, 3))
            spec.append(PadDim(low, high, interior))
        out = [n + max(n - 1, 0) * p.interior + p.low + p.high for n, p in zip(x.dims, spec)]
        if min(out, default=0) < 0 or np.prod(out, dtype=np.int64) > MAX_ELEMENTS:
            return None
        value = self.constant(self.literal(float(self.rng.integers(-2, 3)), x.dtype), x.dtype)
        return self.op("pad", x, value, padding=tuple(spec), bound=max(x.bound, value.bound))

    def concatenate(self, x: Value) -> Value | None:
        if not x.shape.rank:
            return None
        d = int(self.rng.integers(x.shape.rank))
        dims = list(x.dims)
        dims[d] = int(self.rng.choice(SIZES))
        if np.prod(dims, dtype=np.int64) + x.shape.size > MAX_ELEMENTS:
            return None
        other = self.parameter(tuple(dims), x.dtype)
        parts = [x, other] if self.rng.random() < 0.5 else [other, x, x]
        return self.op("concatenate", *parts, dimensions=(d,), bound=max(x.bound, other.bound))

    def reverse(self, x: Value) -> Value | None:
        if not x.shape.rank:
            return None
        dims = tuple(sorted(int(d) for d in self.rng.choice(x.shape.rank, int(self.rng.integers(1, x.shape.rank + 1)),
                                                            replace=False)))
        return self.op("reverse", x, dimensions=dims, bound=x.bound)

    def iota(self, x: Value) -> Value | None:
        if not x.shape.rank:
            return None
        d = int(self.rng.integers(x.shape.rank))
        iota = Value(self.b.op("iota", shape=ArrayShape(x.dtype, x.dims), iota_dimension=d), x.dims[d], True)
        return self.op("add", x, iota, bound=x.bound + x.dims[d])

    def dynamic_slice(self, x: Value) -> Value | None:
        if not x.shape.rank:
            return None
        sizes = tuple(int(self.rng.integers(0, n + 1)) for n in x.dims)
        starts = []
        for n in x.dims:
            if self.rng.random() < 0.5:
                starts.append(self.b.constant(int(self.rng.integers(-2, n + 3)), S32))
            else:   # a start parameter, past either end at times (it clamps)
                number = len(self.inputs)
                starts.append(self.b.parameter(ArrayShape(S32, ()), f"p{number}", number=number))
                self.inputs.append(lambda r, n=n: np.asarray(r.integers(-3, n + 4), np.int32))
        return Value(self.b.op("dynamic-slice", x.instr, *starts, dynamic_slice_sizes=sizes), x.bound, x.exact)

    # --- reductions -----------------------------------------------------------------------------
    def reduce(self, x: Value) -> Value | None:
        rank = x.shape.rank
        if not rank:
            return None
        kind = self.rng.integers(4)
        dims = ((rank - 1,) if kind == 0 else (0,) if kind == 1 else tuple(range(rank)) if kind == 2 else
                tuple(sorted(int(d) for d in self.rng.choice(rank, int(self.rng.integers(1, rank + 1)),
                                                             replace=False))))
        count = int(np.prod([x.dims[d] for d in dims]))
        integral = x.dtype in INT_TYPES
        if self.rng.random() < 0.5:   # max is exact whatever the order; a finite init keeps empty rows finite
            init = self.constant(0 if x.dtype == U32 else -100, x.dtype)
            return self.op("reduce", x, init, dimensions=dims, to_apply=scalar_computation("maximum", x.dtype),
                           bound=max(x.bound, 100))
        zero = self.constant(0, x.dtype)
        # an integer sum wraps, so its order does not matter; a float sum's does
        total = self.op("reduce", x, zero, dimensions=dims, to_apply=scalar_computation("add", x.dtype),
                        bound=self.int_bound(x.bound * max(count, 1), x.dtype), exact=x.exact and integral)
        if integral:
            return total
        mean = self.scalar_like(1.0 / max(count, 1), total)
        return self.op("multiply", total, mean, bound=x.bound + 1, exact=False)

    # --- the program ------------------------------------------------------------------------------
    def step(self) -> None:
        x = self.values[int(self.rng.integers(max(0, len(self.values) - 4), len(self.values)))] \
            if self.rng.random() < 0.7 else self.values[int(self.rng.integers(len(self.values)))]
        make = self.rng.choice([self.unary, self.unary, self.binary, self.binary, self.binary, self.broadcast,
                                self.transpose, self.reshape, self.slice, self.pad, self.concatenate, self.reverse,
                                self.iota, self.dynamic_slice, self.reduce])
        v = make(x)
        if v is None:
            return
        if v.dtype in FLOAT_TYPES and v.bound > SQUASH_ABOVE:
            v = self.op("tanh", v, bound=1, exact=False)
        self.values.append(v)

    def build(self, steps: int) -> list[Value]:
        others = INT_TYPES + (F64,)
        dtype = F32 if self.rng.random() < 0.7 else others[int(self.rng.integers(len(others)))]
        self.values.append(self.parameter(self.random_dims(), dtype))
        for _ in range(steps):
            self.step()
        tail = self.values[-3:]
        return [tail[-1]] + [v for v in tail[:-1] if self.rng.random() < 0.4]


def random_module(rng: np.random.Generator):
    """A module of PROGRAMS_PER_MODULE independent random programs; returns its text, the
    argument makers and, per output, the number of the program it belongs to."""
    b = HloBuilder("random")
    inputs: list = []
    outputs, owners = [], []
    for n in range(PROGRAMS_PER_MODULE):
        program = RandomProgram(b, rng, inputs)
        for v in program.build(int(rng.integers(3, 14))):
            outputs.append(v)
            owners.append(n)
    module = b.module(b.tuple(*(v.instr for v in outputs)))
    return module.to_text(), inputs, outputs, owners


def _largest_fusion(module) -> int:
    """The number of instructions in the largest fusion of `module` (0 without fusions)."""
    return max((len(i.attrs["calls"].instructions) for c in module.computations for i in c.instructions
                if i.opcode == "fusion"), default=0)


@pytest.mark.parametrize("batch", range(MODULES))
def test_random_programs_match_the_evaluator(batch, rng):
    # A draw whose values are mostly zero-sized simplifies to almost nothing; such a module
    # tests little, so draw again (a few times at most) until fusions of several ops form.
    for _ in range(5):
        text, inputs, outputs, owners = random_module(rng)
        module = parse_module(text)
        verify_module(module)
        compiled = compile_module(parse_module(text))
        if _largest_fusion(compiled.module) >= 3:
            break
    assert _largest_fusion(compiled.module) >= 3, f"no fusion of several ops was formed in 5 draws:\n{text}"
    executable = get_backend("cpu").compile(compiled.module, compiled=compiled)
    for _ in range(2):   # two sets of fresh inputs
        args = [make(rng) for make in inputs]
        want = flatten_result(evaluate_module(module, args))
        got = executable.run_flat(args)
        assert len(got) == len(want) == len(outputs)
        for k, (g, w, v, owner) in enumerate(zip(got, want, outputs, owners)):
            where = f"output {k} (program {owner}, {v.instr.name} = {v.shape}) of\n{text}"
            assert g.shape == w.shape and g.dtype == w.dtype, where
            if v.exact or w.dtype.kind in "iub":
                np.testing.assert_array_equal(g, w, err_msg=where)
            else:
                # f32's tolerance for f64 results too: an f64 value may come from an f32 one
                np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * max(1.0, v.bound), err_msg=where)
