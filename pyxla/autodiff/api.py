"""pyxla.grad, value_and_grad, vjp, jvp and linearize, with JAX's signatures.

Each traces the function into an HLO computation (staging.py) and builds its derivative
as more HLO, emitted into the current trace: inside `pyxla.jit` the derivative is part of
the compiled program; outside any trace each instruction runs at once on the reference
evaluator, as pyxla.numpy does eagerly. `grad` of a function made by `pyxla.jit` compiles
the whole derivative program instead (one compilation per signature, cached).

Arguments and results are pytrees of arrays. Floating-point leaves carry derivatives;
integer and bool leaves are constants: their cotangents are zeros of JAX's `float0` dtype,
and `grad` refuses them unless `allow_int=True`.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..frontend.jit import Jitted
from ..frontend.pytree import PyTreeDef, float0, tree_flatten, tree_unflatten
from ..frontend.tracing import Tracer, current_trace, shape_of
from .forward import jvp_staged, linearize_staged
from .rule_helpers import array_shape, zeros
from .staging import Staged, argument_value, stage
from .transpose import evaluate_program, transpose_program


def _name(fun: Callable) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "", getattr(fun, "__name__", "fn"))
    return name if name and not name[0].isdigit() else f"fn{name}"


def _is_float(x: Any) -> bool:
    return array_shape(shape_of(x)).dtype.is_float


def _float0_zeros(x: Any) -> np.ndarray:
    return np.zeros(array_shape(shape_of(x)).dims, float0)


def _arguments(what: str, args: Sequence[Any]) -> tuple[list[Any], list[bool], PyTreeDef]:
    leaves, tree = tree_flatten(tuple(args))
    values, weak = [], []
    for leaf in leaves:
        v, w = argument_value(what, leaf)
        values.append(v)
        weak.append(w)
    return values, weak, tree


def _split_outputs(what: str, staged: Staged, has_aux: bool) -> tuple[PyTreeDef, PyTreeDef | None, int]:
    """(the output's tree, the aux data's tree, the number of output leaves)."""
    tree = staged.out_tree
    if not has_aux:
        return tree, None, tree.num_leaves
    if tree.kind not in (tuple, list) or len(tree.children) != 2:
        raise TypeError(f"{what} with has_aux=True needs the function to return a pair (output, aux), "
                        f"got a value of structure {tree}")
    out_tree, aux_tree = tree.children
    return out_tree, aux_tree, out_tree.num_leaves


def _leaves_for(what: str, value: Any, tree: PyTreeDef, primals: Sequence[Any]) -> list[Any]:
    """The leaves of `value`, a pytree of tangents or cotangents for `primals` (the leaves of
    `tree`): None where the primal is an integer (whose float0 zeros are structure, not
    leaves, when given)."""
    leaves, value_tree = tree_flatten(value)
    if value_tree == tree:
        return [leaf if _is_float(p) else None for leaf, p in zip(leaves, primals)]
    marked = tree_unflatten(tree, [0.0 if _is_float(p) else _float0_zeros(p) for p in primals])
    if value_tree == tree_flatten(marked)[1]:
        it = iter(leaves)
        return [next(it) if _is_float(p) else None for p in primals]
    raise TypeError(f"{what}: got a pytree of structure {value_tree} for values of structure {tree}")


def _like_primal(what: str, value: Any, primal: Any) -> Any:
    """A tangent or cotangent given for `primal`: its shape and type (a Python number takes
    the primal's type)."""
    v, weak = argument_value(what, value)
    want = array_shape(shape_of(primal))
    have = array_shape(shape_of(v))
    if weak and not isinstance(v, Tracer):
        v = np.asarray(v, dtype=want.dtype.np_dtype)
        have = array_shape(shape_of(v))
    if have.dims != want.dims or have.dtype != want.dtype:
        raise ValueError(f"{what}: got a value of shape {have.to_text(False)} for a primal of shape "
                         f"{want.to_text(False)}; they must match")
    return v


def vjp(fun: Callable, *primals: Any, has_aux: bool = False):
    """(fun(*primals), vjp_fn) or, with has_aux, (output, vjp_fn, aux): vjp_fn(cotangent)
    returns a tuple with the cotangent of each primal."""
    name = _name(fun)
    values, weak, in_tree = _arguments("pyxla.vjp", primals)
    staged = stage(fun, values, weak, in_tree, name)
    out_tree, aux_tree, n_out = _split_outputs("pyxla.vjp", staged, has_aux)
    n_aux = len(staged.outputs) - n_out
    outs, program = linearize_staged(staged, values, [_is_float(v) for v in values],
                                     differentiated=[True] * n_out + [False] * n_aux, name=name)

    def vjp_fn(cotangent: Any) -> tuple:
        ct_leaves = _leaves_for("pyxla.vjp cotangent", cotangent, out_tree, outs[:n_out])
        cts = [None if ct is None else _like_primal("pyxla.vjp cotangent", ct, out)
               for ct, out in zip(ct_leaves, outs)]
        in_cts = transpose_program(program, cts + [None] * n_aux)
        results = [_float0_zeros(v) if not _is_float(v) else zeros(shape_of(v)) if ct is None else ct
                   for v, ct in zip(values, in_cts)]
        return tree_unflatten(in_tree, results)

    out = tree_unflatten(out_tree, outs[:n_out])
    if has_aux:
        assert aux_tree is not None
        return out, vjp_fn, tree_unflatten(aux_tree, outs[n_out:])
    return out, vjp_fn


def jvp(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool = False):
    """(fun(*primals), its tangent along `tangents`); with has_aux, (output, tangent, aux).
    Forward mode: the tangent instructions are emitted beside the primal ones."""
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("pyxla.jvp: primals and tangents must be tuples or lists, got "
                        f"{type(primals).__name__} and {type(tangents).__name__}")
    name = _name(fun)
    values, weak, in_tree = _arguments("pyxla.jvp", primals)
    t_leaves = _leaves_for("pyxla.jvp tangents", tuple(tangents), in_tree, values)
    tvalues = [None if t is None else _like_primal("pyxla.jvp tangent", t, v) for t, v in zip(t_leaves, values)]
    staged = stage(fun, values, weak, in_tree, name)
    out_tree, aux_tree, n_out = _split_outputs("pyxla.jvp", staged, has_aux)
    n_aux = len(staged.outputs) - n_out
    outs, touts = jvp_staged(staged, values, tvalues, differentiated=[True] * n_out + [False] * n_aux,
                             tangent_trace=None, scope=f"jvp({name})")
    touts = [_output_tangent(o, t) for o, t in zip(outs[:n_out], touts)]
    result = (tree_unflatten(out_tree, outs[:n_out]), tree_unflatten(out_tree, touts))
    if has_aux:
        assert aux_tree is not None
        return (*result, tree_unflatten(aux_tree, outs[n_out:]))
    return result


def _output_tangent(out: Any, t: Any) -> Any:
    if not _is_float(out):
        return _float0_zeros(out)
    return zeros(shape_of(out)) if t is None else t


def linearize(fun: Callable, *primals: Any, has_aux: bool = False):
    """(fun(*primals), f_jvp) or, with has_aux, (output, f_jvp, aux): f_jvp(*tangents) is the
    tangent of the output, a linear function evaluated without running `fun` again."""
    name = _name(fun)
    values, weak, in_tree = _arguments("pyxla.linearize", primals)
    staged = stage(fun, values, weak, in_tree, name)
    out_tree, aux_tree, n_out = _split_outputs("pyxla.linearize", staged, has_aux)
    n_aux = len(staged.outputs) - n_out
    differentiable = [_is_float(v) for v in values]
    outs, program = linearize_staged(staged, values, differentiable,
                                     differentiated=[True] * n_out + [False] * n_aux, name=name)

    def f_jvp(*tangents: Any) -> Any:
        t_leaves = _leaves_for("pyxla.linearize tangents", tuple(tangents), in_tree, values)
        tvalues = [None if t is None else _like_primal("pyxla.linearize tangent", t, v)
                   for t, v in zip(t_leaves, values)]
        touts = evaluate_program(program, tvalues)[:n_out]
        return tree_unflatten(out_tree, [_output_tangent(o, t) for o, t in zip(outs, touts)])

    out = tree_unflatten(out_tree, outs[:n_out])
    if has_aux:
        assert aux_tree is not None
        return out, f_jvp, tree_unflatten(aux_tree, outs[n_out:])
    return out, f_jvp


def _argnums(argnums: int | Sequence[int]) -> tuple[tuple[int, ...], bool]:
    if isinstance(argnums, int):
        return (argnums,), False
    nums = tuple(argnums)
    if not all(isinstance(i, int) for i in nums):
        raise TypeError(f"argnums must be an int or a tuple of ints, got {argnums!r}")
    return nums, True


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
                   allow_int: bool = False) -> Callable:
    """A function returning (fun(*args), the gradient of fun with respect to the arguments
    at `argnums`); with has_aux, ((output, aux), gradient). `fun` must return a float scalar."""
    nums, multiple = _argnums(argnums)
    compiled: dict[str, Jitted] = {}

    @functools.wraps(fun, updated=())
    def value_and_grad_fun(*args: Any, **kwargs: Any):
        if (isinstance(fun, Jitted) and current_trace() is None and not fun.static_argnums
                and not fun.static_argnames):
            # grad(jit(f)): compile the forward and backward passes as one program.
            if "program" not in compiled:
                compiled["program"] = Jitted(value_and_grad(fun.fn, argnums, has_aux, allow_int),
                                             backend=fun.backend)
            return compiled["program"](*args, **kwargs)
        return _value_and_grad(fun, nums, multiple, has_aux, allow_int, args, kwargs)

    return value_and_grad_fun


def _value_and_grad(fun: Callable, nums: tuple[int, ...], multiple: bool, has_aux: bool, allow_int: bool,
                    args: tuple, kwargs: dict):
    name = _name(fun)
    if any(i >= len(args) or i < -len(args) for i in nums):
        raise TypeError(f"differentiating with respect to argnums={nums if multiple else nums[0]} needs at "
                        f"least {max(nums) + 1} positional arguments, got {len(args)}")
    nums = tuple(i % len(args) for i in nums)
    diff_args = tuple(args[i] for i in nums)
    for leaf in tree_flatten(diff_args)[0]:
        value, _ = argument_value("pyxla.grad", leaf)
        if not _is_float(value) and not allow_int:
            raise TypeError(f"pyxla.grad of {name}: the arguments differentiated must have floating-point "
                            f"types, got {array_shape(shape_of(value)).dtype}. Use pyxla.vjp, or "
                            "allow_int=True, for integer and bool arguments (their cotangents are float0 zeros).")

    def with_arguments(*diff: Any) -> Any:
        full = list(args)
        for i, value in zip(nums, diff):
            full[i] = value
        return fun(*full, **kwargs)

    with_arguments.__name__ = name
    if has_aux:
        out, vjp_fn, aux = vjp(with_arguments, *diff_args, has_aux=True)
    else:
        out, vjp_fn = vjp(with_arguments, *diff_args)
    if not isinstance(out, (Tracer, np.ndarray, np.generic, float, int)):
        raise TypeError(f"pyxla.grad of {name}: the function must return a scalar, got a {type(out).__name__}")
    shape = array_shape(shape_of(out))
    if shape.dims:
        raise TypeError(f"pyxla.grad of {name}: gradients are defined for functions with a scalar output; "
                        f"the output has shape {shape.to_text(False)}. Use pyxla.vjp for other outputs.")
    if not shape.dtype.is_float:
        raise TypeError(f"pyxla.grad of {name}: the output must be floating-point, got {shape.dtype}")
    grads = vjp_fn(np.ones((), shape.dtype.np_dtype))
    grads = grads if multiple else grads[0]
    return ((out, aux), grads) if has_aux else (out, grads)


def grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
         allow_int: bool = False) -> Callable:
    """A function returning the gradient of `fun` (which returns a float scalar) with respect
    to the arguments at `argnums` (a tuple of them for a tuple); with has_aux, (gradient, aux)."""
    value_and_grad_fun = value_and_grad(fun, argnums, has_aux, allow_int)

    @functools.wraps(fun, updated=())
    def grad_fun(*args: Any, **kwargs: Any):
        value, grads = value_and_grad_fun(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return grad_fun


__all__ = ["float0", "grad", "jvp", "linearize", "value_and_grad", "vjp"]
