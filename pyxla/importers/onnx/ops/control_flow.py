"""Control flow: If, Loop and Scan. Their bodies are ONNX graphs that the importer converts
(`ctx.importer.run_subgraph`) where they run: inline when the decision is known at import
time (If on a known condition, a Loop whose trip count and condition are known: unrolled
up to UNROLL_LIMIT iterations), else inside pyxla.lax.cond / while_loop / scan, whose
tracing captures the enclosing graph's values the bodies read by name.

Sequences and optionals are resolved at import time (see sequence.py), so an If whose
branches produce them needs its condition known, and a Loop that carries them its trip
count and condition (it is then unrolled whatever its length); an input that gives them is
compiled for by value.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .... import lax
from .... import numpy as pnp
from ..registry import NeedsKnownValue, NodeContext, converter, is_known, known
from .common import shape_of

UNROLL_LIMIT = 64       # a known-length Loop up to this many iterations is unrolled


def _graph_attr(ctx: NodeContext, name: str):
    graph = ctx.attr(name)
    if graph is None:
        raise ctx.error(f"attribute {name!r} (a graph) is required")
    return graph


def _run_body(ctx: NodeContext, graph, values: list[Any], what: str) -> list[Any]:
    names = [i.name for i in graph.input]
    if len(values) != len(names):
        raise ctx.error(f"{what} takes {len(names)} inputs, the node gives {len(values)}")
    return ctx.importer.run_subgraph(graph, dict(zip(names, values)), ctx.scope,
                                     where=f"node {ctx.name!r} ({ctx.op_type}) {what}")


def _scalar_bool(ctx: NodeContext, value: Any, what: str) -> Any:
    if int(np.prod(shape_of(value))) != 1:
        raise ctx.error(f"{what} must hold one element, got shape {list(shape_of(value))}")
    if is_known(value):
        return bool(np.asarray(value).reshape(-1)[0])
    flat = pnp.reshape(value, ())
    return flat if flat.dtype == np.bool_ else flat != 0


# --- If -----------------------------------------------------------------------------------------

@converter("If", since=1)
def if_(ctx: NodeContext, cond):
    then_graph, else_graph = _graph_attr(ctx, "then_branch"), _graph_attr(ctx, "else_branch")
    if _declares_sequences(then_graph) or _declares_sequences(else_graph):
        cond = known(ctx, cond, "the condition of an If whose branches produce sequences or optionals")
    pred = _scalar_bool(ctx, cond, "the condition")
    if isinstance(pred, bool):
        return tuple(_run_body(ctx, then_graph if pred else else_graph, [], "then_branch" if pred else "else_branch"))
    needs_cond = (ctx, cond, "the condition of an If whose branches produce sequences or optionals")
    out = lax.cond(pred, lambda: tuple(_as_arrays(_run_body(ctx, then_graph, [], "then_branch"), needs_cond)),
                   lambda: tuple(_as_arrays(_run_body(ctx, else_graph, [], "else_branch"), needs_cond)))
    return tuple(out)


def _declares_sequences(graph) -> bool:
    return any(o.type.WhichOneof("value") in ("sequence_type", "optional_type") for o in graph.output)


def _as_arrays(values: list[Any], needs_known: tuple | None = None) -> list[Any]:
    """The values, which must be arrays; a sequence or optional among them needs the
    decision known at import (`needs_known`: the context, traced value and what it is)."""
    for v in values:
        if v is None or isinstance(v, list):
            if needs_known is not None:
                ctx, value, what = needs_known
                raise NeedsKnownValue(str(ctx.unsupported(f"{what} computed from the model's inputs (it must be "
                                                          "known when the model is loaded)")), value)
            raise NotImplementedError("a branch or body producing a sequence or no value")
    return values


# --- Loop ---------------------------------------------------------------------------------------

@converter("Loop", since=1)
def loop(ctx: NodeContext, trip_count, cond, *initial):
    """Body inputs (iteration number, condition, carried...); outputs (condition,
    carried..., scan outputs...), the scan outputs stacked along a new first axis."""
    body = _graph_attr(ctx, "body")
    n_carried = len(initial)
    n_scan = len(body.output) - 1 - n_carried
    if n_scan < 0:
        raise ctx.error(f"the body has {len(body.output)} outputs for {n_carried} carried values")
    if trip_count is None and cond is None:
        raise ctx.unsupported("a Loop with neither trip count nor condition (it never ends)")
    carries_sequences = any(v is None or isinstance(v, list) for v in initial)
    if n_scan or carries_sequences:
        # stacked outputs and carried sequences need the iterations known when the model is loaded
        what = "a loop with scan outputs" if n_scan else "a loop carrying sequences or optionals"
        trip_count = None if trip_count is None else known(ctx, trip_count, f"the trip count of {what}")
        cond = None if cond is None else known(ctx, cond, f"the condition of {what}")
    limit = None if trip_count is None or not is_known(trip_count) else int(np.asarray(trip_count).reshape(-1)[0])
    going = True if cond is None else _scalar_bool(ctx, cond, "the condition")
    if limit is not None and (limit <= UNROLL_LIMIT or carries_sequences) and isinstance(going, bool):
        unrolled = _unrolled_loop(ctx, body, limit, going, list(initial), n_scan)
        if unrolled is not None:
            return unrolled
    if carries_sequences:
        raise ctx.unsupported("carried sequences or optionals in a loop without a trip count, or whose "
                              "condition depends on the model's inputs")
    return _while_loop(ctx, body, trip_count, cond, list(initial), n_scan, limit)


def _unrolled_loop(ctx, body, limit: int, going: bool, carried: list, n_scan: int):
    """The loop run at import time, one body per iteration; None when the body's condition
    turns out to depend on the model's inputs (then it becomes a while loop)."""
    scans: list[list[Any]] = [[] for _ in range(n_scan)]
    i = 0
    while going and i < limit:
        outs = _run_body(ctx, body, [np.array(i, np.int64), np.array(True), *carried], "body")
        cond_out, carried, new = outs[0], outs[1:1 + len(carried)], _as_arrays(outs[1 + len(carried):])
        for acc, v in zip(scans, new):
            acc.append(v)
        going = _scalar_bool(ctx, cond_out, "the body's condition")
        if not isinstance(going, bool):
            return None
        i += 1
    stacked = []
    for acc, graph_out in zip(scans, body.output[1 + len(carried):]):
        if not acc:
            raise ctx.unsupported(f"scan output {graph_out.name!r} of a loop that runs no iteration")
        xp = np if all(is_known(v) for v in acc) else pnp
        stacked.append(xp.stack(acc))
    return tuple(carried) + tuple(stacked)


def _while_loop(ctx, body, trip_count, cond, carried: list, n_scan: int, limit: int | None):
    if n_scan:
        raise ctx.unsupported("scan outputs of a loop that is not unrolled (its trip count or condition "
                              f"depends on the model's inputs, or it runs more than {UNROLL_LIMIT} iterations)")
    max_trips = None if trip_count is None else pnp.reshape(pnp.asarray(trip_count), ()).astype(np.int64)
    going = np.array(True) if cond is None else pnp.reshape(pnp.asarray(cond), ()).astype(np.bool_)
    n = len(carried)

    def keep_going(state):
        i, c = state[0], state[1]
        return c if max_trips is None else pnp.logical_and(c, i < max_trips)

    def step(state):
        i, c, values = state[0], state[1], list(state[2:])
        outs = _as_arrays(_run_body(ctx, body, [i, c, *values], "body"))
        new_cond = pnp.reshape(pnp.asarray(outs[0]), ()).astype(np.bool_)
        new_values = [pnp.asarray(v).astype(old.dtype) for v, old in zip(outs[1:1 + n], values)]
        return (i + np.int64(1), new_cond, *new_values)

    state = lax.while_loop(keep_going, step, (pnp.asarray(np.int64(0)), pnp.asarray(going),
                                               *[pnp.asarray(v) for v in carried]))
    return tuple(state[2:])


# --- Scan ---------------------------------------------------------------------------------------

@converter("Scan", since=9)
def scan(ctx: NodeContext, *inputs):
    """Body inputs (states..., one slice of each scan input); outputs (states..., one slice
    of each scan output), the slices stacked along each scan output's axis."""
    body = _graph_attr(ctx, "body")
    n_scan_in = int(ctx.attr("num_scan_inputs"))
    states, xs = list(inputs[:len(inputs) - n_scan_in]), list(inputs[len(inputs) - n_scan_in:])
    return _scan(ctx, body, states, xs)


@converter("Scan", since=8)
def scan_8(ctx: NodeContext, sequence_lens, *inputs):
    """Opset 8: every input has a leading batch axis; each batch element is scanned on its own."""
    body = _graph_attr(ctx, "body")
    n_scan_in = int(ctx.attr("num_scan_inputs"))
    directions = ctx.attr("directions")
    states, xs = list(inputs[:len(inputs) - n_scan_in]), list(inputs[len(inputs) - n_scan_in:])
    if sequence_lens is not None:
        lengths = np.asarray(sequence_lens) if is_known(sequence_lens) else None
        if lengths is None or np.any(lengths != shape_of(xs[0])[1]):
            raise ctx.unsupported("sequence_lens shorter than the scan inputs")
    batch = shape_of((states + xs)[0])[0]
    per_batch = [_scan(ctx, body, [s[b] for s in states], [x[b] for x in xs], directions)
                 for b in range(batch)]
    return tuple((np if all(is_known(r[k]) for r in per_batch) else pnp).stack([r[k] for r in per_batch])
                 for k in range(len(per_batch[0])))


def _scan(ctx: NodeContext, body, states: list, xs: list, input_directions=None):
    n_state, n_in = len(states), len(xs)
    n_out = len(body.output) - n_state
    in_axes = [int(a) for a in ctx.attr("scan_input_axes", [0] * n_in)]
    in_dirs = [int(d) for d in (input_directions or ctx.attr("scan_input_directions", [0] * n_in))]
    out_axes = [int(a) for a in ctx.attr("scan_output_axes", [0] * n_out)]
    out_dirs = [int(d) for d in ctx.attr("scan_output_directions", [0] * n_out)]
    if not xs:
        raise ctx.unsupported("a Scan without scan inputs")
    moved = []
    for x, axis, direction in zip(xs, in_axes, in_dirs):
        xp = np if is_known(x) else pnp
        x = xp.moveaxis(x, axis % len(shape_of(x)), 0)
        moved.append(xp.flip(x, 0) if direction else x)
    length = shape_of(moved[0])[0]

    def step(carry, slices):
        outs = _as_arrays(_run_body(ctx, body, [*carry, *slices], "body"))
        new_states = [pnp.asarray(v).astype(old.dtype) if not is_known(v) or not is_known(old) else v
                      for v, old in zip(outs[:n_state], carry)]
        return tuple(new_states), tuple(outs[n_state:])

    if all(is_known(v) for v in states + moved):
        carry, ys = tuple(states), [[] for _ in range(n_out)]
        for t in range(length):
            carry, outs = step(carry, [x[t] for x in moved])
            for acc, y in zip(ys, outs):
                acc.append(y)
        xp = np if all(is_known(y) for acc in ys for y in acc) else pnp
        stacked = [xp.stack(acc) for acc in ys]
    else:
        carry, stacked = lax.scan(lambda c, s: step(list(c), list(s)), tuple(pnp.asarray(s) for s in states),
                                  tuple(moved))
        stacked = list(stacked)
    results = []
    for y, axis, direction in zip(stacked, out_axes, out_dirs):
        xp = np if is_known(y) else pnp
        y = xp.flip(y, 0) if direction else y
        results.append(xp.moveaxis(y, 0, axis % len(shape_of(y))))
    return tuple(carry) + tuple(results)
