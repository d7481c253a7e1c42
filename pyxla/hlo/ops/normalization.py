"""Batch normalisation: batch-norm-inference, batch-norm-training and batch-norm-grad.

Composite ops with XLA's semantics (`feature_index` names the feature dimension, statistics
run over every other dimension, variance is the biased one). Backends never see them: the
batch-norm expander pass rewrites them into elementwise ops and reductions. Their
evaluation here is the reference that expansion is tested against.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..shape import ArrayShape, TupleShape
from .numeric import narrow
from .registry import OpDef, register

# A negative variance gives NaN, as the expanded arithmetic would: no warning.
_quiet = np.errstate(invalid="ignore", divide="ignore")

ATTRS = ("epsilon", "feature_index")


def _check(opcode: str, shapes, attrs, vector_roles: list[str]) -> tuple[ArrayShape, ArrayShape]:
    operand = shapes[0]
    if not isinstance(operand, ArrayShape) or not operand.dtype.is_float:
        raise ShapeError(f"{opcode}: the operand must be a floating-point array, got {operand.to_text(False)}")
    f = attrs.get("feature_index")
    if not isinstance(f, int) or not 0 <= f < operand.rank:
        raise ShapeError(f"{opcode}: feature_index={f} is not a dimension of {operand.to_text(False)}")
    if not isinstance(attrs.get("epsilon"), float):
        raise ShapeError(f"{opcode} needs a floating-point epsilon=")
    vector = ArrayShape(operand.dtype, (operand.dims[f],))
    for role, s in zip(vector_roles, shapes[1:]):
        if role == "grad_output":
            if not s.compatible(operand):
                raise ShapeError(f"{opcode}: grad_output is {s.to_text(False)}, expected {operand.to_text(False)}")
        elif not s.compatible(vector):
            raise ShapeError(f"{opcode}: {role} is {s.to_text(False)}, expected {vector.to_text(False)} "
                             f"(one value per feature)")
    return operand, vector


def _stats_axes(x: np.ndarray, f: int) -> tuple[int, ...]:
    return tuple(d for d in range(x.ndim) if d != f)


def _along(v: np.ndarray, x: np.ndarray, f: int) -> np.ndarray:
    shape = [1] * x.ndim
    shape[f] = -1
    return v.reshape(shape)


def _inference_shape(shapes, attrs, declared):
    return _check("batch-norm-inference", shapes, attrs, ["scale", "offset", "mean", "variance"])[0]


@_quiet
def _inference_evaluate(instr, operands, ctx):
    x, scale, offset, mean, var = (np.asarray(o, np.float64) for o in operands)
    f, eps = instr.attrs["feature_index"], instr.attrs["epsilon"]
    y = (x - _along(mean, x, f)) * _along(scale / np.sqrt(var + eps), x, f) + _along(offset, x, f)
    return narrow(y, instr.shape.dtype)


def _training_shape(shapes, attrs, declared):
    operand, vector = _check("batch-norm-training", shapes, attrs, ["scale", "offset"])
    return TupleShape((operand, vector, vector))


@_quiet
def _training_evaluate(instr, operands, ctx):
    x, scale, offset = (np.asarray(o, np.float64) for o in operands)
    f, eps = instr.attrs["feature_index"], instr.attrs["epsilon"]
    axes = _stats_axes(x, f)
    mean = x.mean(axis=axes)
    var = ((x - _along(mean, x, f)) ** 2).mean(axis=axes)
    y = (x - _along(mean, x, f)) * _along(scale / np.sqrt(var + eps), x, f) + _along(offset, x, f)
    dt = instr.shape.elements[0].dtype
    return narrow(y, dt), narrow(mean, dt), narrow(var, dt)


def _grad_shape(shapes, attrs, declared):
    operand, vector = _check("batch-norm-grad", shapes, attrs, ["scale", "mean", "variance", "grad_output"])
    return TupleShape((operand, vector, vector))


@_quiet
def _grad_evaluate(instr, operands, ctx):
    x, scale, mean, var, dy = (np.asarray(o, np.float64) for o in operands)
    f, eps = instr.attrs["feature_index"], instr.attrs["epsilon"]
    axes = _stats_axes(x, f)
    n = x.size // x.shape[f] if x.size else 1
    inv_std = 1.0 / np.sqrt(var + eps)
    centered = x - _along(mean, x, f)
    grad_offset = dy.sum(axis=axes)
    grad_scale = (dy * centered * _along(inv_std, x, f)).sum(axis=axes)
    grad_x = _along(scale * inv_std / n, x, f) * (
        n * dy - _along(grad_offset, x, f) - centered * _along(inv_std * grad_scale, x, f))
    dt = instr.shape.elements[0].dtype
    return narrow(grad_x, dt), narrow(grad_scale, dt), narrow(grad_offset, dt)


register(OpDef("batch-norm-inference", "opaque", _inference_shape, _inference_evaluate, arity=5,
               required_attrs=ATTRS, doc="(x - mean) * scale / sqrt(variance + epsilon) + offset, per feature."))
register(OpDef("batch-norm-training", "opaque", _training_shape, _training_evaluate, arity=3,
               required_attrs=ATTRS, doc="Normalise by the batch's own mean and biased variance; returns "
                                         "(output, mean, variance)."))
register(OpDef("batch-norm-grad", "opaque", _grad_shape, _grad_evaluate, arity=5, required_attrs=ATTRS,
               doc="Gradients of batch-norm-training: (grad operand, grad scale, grad offset)."))
