"""The reference evaluator: runs any HLO module with NumPy.

It is the oracle of every test, the engine of constant folding and the `interpreter`
backend. Each opcode's meaning lives in its registry record (ops/); this file only walks
computations in dependency order, binds parameters and calls those records.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from ..errors import ArgumentError, EvaluationError, PyxlaError
from .computation import HloComputation, control_predecessors, operands_first
from .instruction import HloInstruction
from .module import HloModule
from .ops import op_def
from .shape import ArrayShape, Shape, TupleShape


class EvalContext:
    """What an op's evaluate function may ask of the evaluator."""

    def __init__(self, module: HloModule | None = None):
        self.module = module

    def call(self, computation: HloComputation, args: Sequence[Any]) -> Any:
        return evaluate_computation(computation, args, self)


def evaluate_computation(comp: HloComputation, args: Sequence[Any], ctx: EvalContext | None = None) -> Any:
    ctx = ctx or EvalContext()
    params = comp.parameters
    if len(args) != len(params):
        raise EvaluationError(f"computation {comp.name} takes {len(params)} arguments, got {len(args)}")
    values: dict[int, Any] = {}
    for instr in _needed(comp):
        if instr.opcode == "parameter":
            values[id(instr)] = args[cast(int, instr.parameter_number)]
            continue
        if _holds_nothing(instr):
            values[id(instr)] = np.zeros(instr.array_shape.dims, instr.array_shape.dtype.np_dtype)   # no bytes
            continue
        operands = [values[id(op)] for op in instr.operands]
        try:
            values[id(instr)] = op_def(instr.opcode).evaluate(instr, operands, ctx)
        except PyxlaError:
            raise
        except NotImplementedError as e:
            raise NotImplementedError(f"{instr.describe()}: {e}") from e
        except Exception as e:  # a bug or an unsupported case inside an op's rule
            raise EvaluationError(f"evaluating {instr.describe()} failed: {type(e).__name__}: {e}") from e
    return values[id(comp.root)]


def _needed(comp: HloComputation) -> list[HloInstruction]:
    """The instructions ROOT depends on and those with side effects, operands first: dead code
    without effects cannot change the result, and need not run (a dead infinite loop)."""
    from .ops import has_side_effects
    starts = ([comp.root] if comp.root is not None else []) + [i for i in comp.instructions if has_side_effects(i)]
    return operands_first(starts, lambda node: ([] if _holds_nothing(node) else list(node.operands))
                          + control_predecessors(node))


# Their results are not all they do: they run computations that may loop or have effects.
_RUNS_COMPUTATIONS = frozenset({"parameter", "while", "call", "conditional", "custom-call"})


def _holds_nothing(instr: HloInstruction) -> bool:
    """An array result with no elements (f32[1000000000000,0]): its value is known from its
    shape alone, so neither it nor what only it reads is computed, and it takes no memory."""
    from .ops import has_side_effects
    shape = instr.shape
    return (isinstance(shape, ArrayShape) and shape.size == 0 and instr.opcode not in _RUNS_COMPUTATIONS
            and not has_side_effects(instr))


def evaluate_module(module: HloModule, args: Sequence[Any]) -> Any:
    """Run the ENTRY computation on `args` (bound by parameter number).

    Arguments are checked against the parameter shapes and converted to the storage
    dtype; the result is an array or a (nested) tuple of arrays, as ROOT's shape says.
    """
    entry = module.entry
    assert entry is not None, f"module {module.name} has no ENTRY computation"
    checked = check_arguments(entry, args)
    return evaluate_computation(entry, checked, EvalContext(module))


def check_arguments(comp: HloComputation, args: Sequence[Any]) -> list[Any]:
    """Each argument as the parameter's storage array; a mismatch names the parameter."""
    params = comp.parameters
    if len(args) != len(params):
        raise ArgumentError(f"{comp.name} takes {len(params)} arguments "
                            f"({', '.join(p.name for p in params)}), got {len(args)}")
    return [_check_value(p.name, p.shape, a) for p, a in zip(params, args)]


def check_argument(param: HloInstruction, value: Any) -> Any:
    """One argument as parameter `param`'s storage array; a mismatch names the parameter."""
    return _check_value(param.name, param.shape, value)


def _check_value(name: str, shape: Shape, value: Any) -> Any:
    if isinstance(shape, TupleShape):
        if not isinstance(value, (tuple, list)) or len(value) != len(shape.elements):
            raise ArgumentError(f"parameter {name}: expected a tuple {shape.to_text(False)}, "
                                f"got {type(value).__name__}")
        return tuple(_check_value(f"{name}[{i}]", s, v) for i, (s, v) in enumerate(zip(shape.elements, value)))
    if not isinstance(shape, ArrayShape):
        return value
    arr = np.asarray(value)
    if arr.shape != shape.dims:
        raise ArgumentError(f"parameter {name}: expected shape {shape.to_text(False)}, "
                            f"got an array of shape {list(arr.shape)} ({arr.dtype})")
    want = shape.dtype.np_dtype
    if arr.dtype != want:
        if arr.dtype.kind != want.kind and not (arr.dtype.kind in "iu" and want.kind in "iu"):
            raise ArgumentError(f"parameter {name}: expected element type {shape.dtype.name}, "
                                f"got {arr.dtype}")
        converted = arr.astype(want)
        if not np.array_equal(converted.astype(arr.dtype), arr, equal_nan=True):
            raise ArgumentError(f"parameter {name}: values of {arr.dtype} do not fit {shape.dtype.name}")
        arr = converted
    return arr


def flatten_result(value: Any) -> list[np.ndarray]:
    """A result as a flat list of arrays, nested tuples flattened depth first."""
    if isinstance(value, tuple):
        out = []
        for v in value:
            out.extend(flatten_result(v))
        return out
    return [value]
