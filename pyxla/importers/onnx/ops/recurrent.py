"""Recurrent layers: RNN, GRU and LSTM.

Shapes (layout 0; layout 1 swaps the first two axes of X, Y, initial and final states):
X (seq, batch, input); W (directions, gates * hidden, input); R (directions, gates * hidden,
hidden); B (directions, 2 * gates * hidden), W's biases then R's; Y (seq, directions,
batch, hidden); Y_h and Y_c (directions, batch, hidden). Gate order in W, R and B: RNN
one gate; GRU z, r, h; LSTM i, o, f, c (and peepholes P in the order i, o, f).

Each direction runs on its own: the input projection X W^T + Wb for every step is one
matrix product before the recurrence; each step then multiplies the hidden state by R^T.
A sequence of up to UNROLL_LIMIT steps is unrolled into straight-line HLO, a longer one
becomes an HLO while loop (lax.scan). The loop compiles in about the same time whatever the
length, the unrolled steps in time that grows with it: measured on an LSTM and a GRU
(hidden 32, batch 4), the two are even at 2 to 3 steps and unrolling 16 steps compiles
5-8x slower than the loop, for run times within 20% of each other.

`sequence_lens` gives each batch entry its own length: past it the state stops changing
and Y is zero, and the reverse direction starts from the entry's last valid step (as
onnxruntime does; ONNX's reference implementation ignores sequence_lens).
`clip` bounds every activation's input to [-clip, clip]. `activations` names the functions
(f, g[, h]) per direction; `activation_alpha` and `activation_beta` are consumed in order by
the functions that take them, the rest keep their defaults.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .... import lax
from .... import numpy as pnp
from ..registry import NodeContext, converter, is_known
from .common import as_dtype, shape_of, xp_of

UNROLL_LIMIT = 2         # sequences up to this many steps are unrolled

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}


# --- activation functions ---------------------------------------------------------------------

# name (lowercase) -> (function of (x, alpha, beta), default alpha, default beta); None: the
# function takes no such parameter; a parameter without a default must be given.
_MISSING = object()
_ACTIVATIONS: dict[str, tuple[Callable, Any, Any]] = {
    "relu": (lambda x, a, b: pnp.maximum(x, np.zeros((), x.dtype)), None, None),
    "tanh": (lambda x, a, b: pnp.tanh(x), None, None),
    "sigmoid": (lambda x, a, b: lax.logistic(x), None, None),
    "affine": (lambda x, a, b: x * np.asarray(a, x.dtype) + np.asarray(b, x.dtype), _MISSING, _MISSING),
    "leakyrelu": (lambda x, a, b: pnp.where(x < 0, x * np.asarray(a, x.dtype), x), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: pnp.where(x > np.asarray(a, x.dtype), x, np.zeros((), x.dtype)), 1.0, None),
    "scaledtanh": (lambda x, a, b: np.asarray(a, x.dtype) * pnp.tanh(x * np.asarray(b, x.dtype)),
                   _MISSING, _MISSING),
    "hardsigmoid": (lambda x, a, b: pnp.clip(x * np.asarray(a, x.dtype) + np.asarray(b, x.dtype), 0, 1), 0.2, 0.5),
    "elu": (lambda x, a, b: pnp.where(x < 0, pnp.expm1(x) * np.asarray(a, x.dtype), x), 1.0, None),
    "softsign": (lambda x, a, b: x / (pnp.abs(x) + np.ones((), x.dtype)), None, None),
    "softplus": (lambda x, a, b: pnp.logaddexp(x, np.zeros((), x.dtype)), None, None),
}


def _activations(ctx: NodeContext, kind: str, directions: int) -> list[list[Callable]]:
    """The activation functions of each direction, bound to their alpha and beta."""
    per_direction = len(DEFAULT_ACTIVATIONS[kind])
    names = ctx.attr("activations")
    names = list(DEFAULT_ACTIVATIONS[kind]) * directions if names is None else list(names)
    if len(names) == per_direction and directions == 2:
        names = names * 2
    if len(names) != per_direction * directions:
        raise ctx.error(f"attribute 'activations'={names} needs {per_direction} functions per direction "
                        f"({directions} directions)")
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    bound = []
    for name in names:
        entry = _ACTIVATIONS.get(name.lower())
        if entry is None:
            raise ctx.unsupported(f"activation function {name!r}")
        fn, alpha, beta = entry
        if alpha is not None:
            alpha = alphas.pop(0) if alphas else alpha
        if beta is not None:
            beta = betas.pop(0) if betas else beta
        if alpha is _MISSING or beta is _MISSING:
            raise ctx.error(f"activation function {name!r} needs its alpha and beta in attributes "
                            "'activation_alpha' and 'activation_beta'")
        bound.append(lambda x, fn=fn, a=alpha, b=beta: fn(x, a, b))
    return [bound[d * per_direction:(d + 1) * per_direction] for d in range(directions)]


# --- cells ------------------------------------------------------------------------------------

@dataclass
class Direction:
    """One direction's weights, as the step needs them: R^T (hidden, gates * hidden) and R's
    bias; peepholes (LSTM); its activation functions; the clip bound."""
    rt: Any
    rb: Any
    peep: Any
    acts: list[Callable]
    clip: float | None
    linear_before_reset: bool = False
    input_forget: bool = False

    def clipped(self, x):
        if self.clip is None:
            return x
        return pnp.clip(x, np.asarray(-self.clip, x.dtype), np.asarray(self.clip, x.dtype))


def _rnn_step(d: Direction, xw, h, c):
    (f,) = d.acts
    return f(d.clipped(xw + pnp.matmul(h, d.rt) + d.rb)), None


def _gru_step(d: Direction, xw, h, c):
    f, g = d.acts
    hidden = shape_of(h)[-1]
    if d.linear_before_reset:
        hr = pnp.matmul(h, d.rt) + d.rb
        z = f(d.clipped(xw[..., :hidden] + hr[..., :hidden]))
        r = f(d.clipped(xw[..., hidden:2 * hidden] + hr[..., hidden:2 * hidden]))
        candidate = g(d.clipped(xw[..., 2 * hidden:] + r * hr[..., 2 * hidden:]))
    else:
        zr = pnp.matmul(h, d.rt[:, :2 * hidden]) + d.rb[:2 * hidden]
        z = f(d.clipped(xw[..., :hidden] + zr[..., :hidden]))
        r = f(d.clipped(xw[..., hidden:2 * hidden] + zr[..., hidden:]))
        candidate = g(d.clipped(xw[..., 2 * hidden:] + pnp.matmul(r * h, d.rt[:, 2 * hidden:])
                                + d.rb[2 * hidden:]))
    return (np.ones((), h.dtype) - z) * candidate + z * h, None


def _lstm_step(d: Direction, xw, h, c):
    f, g, act_h = d.acts
    hidden = shape_of(h)[-1]
    gates = xw + pnp.matmul(h, d.rt) + d.rb
    gi, go, gf, gc = (gates[..., k * hidden:(k + 1) * hidden] for k in range(4))
    pi, po, pf = (d.peep[k * hidden:(k + 1) * hidden] for k in range(3)) if d.peep is not None else (None,) * 3
    i = f(d.clipped(gi if pi is None else gi + pi * c))
    if d.input_forget:
        forget = np.ones((), h.dtype) - i
    else:
        forget = f(d.clipped(gf if pf is None else gf + pf * c))
    new_c = forget * c + i * g(d.clipped(gc))
    o = f(d.clipped(go if po is None else go + po * new_c))
    return o * act_h(new_c), new_c


_STEPS = {"RNN": _rnn_step, "GRU": _gru_step, "LSTM": _lstm_step}


# --- the layer --------------------------------------------------------------------------------

def _per_direction(ctx: NodeContext, value, d: int, dtype) -> Any:
    """One direction's slice of a weight, in the input's dtype."""
    return as_dtype(xp_of(ctx, value), value[d], dtype)


def _lengths(ctx: NodeContext, sequence_lens, seq: int, batch: int):
    """The per-entry lengths, or None when every entry runs the whole sequence."""
    if sequence_lens is None:
        return None
    if shape_of(sequence_lens) != (batch,):
        raise ctx.error(f"sequence_lens of shape {list(shape_of(sequence_lens))} needs one length per batch "
                        f"entry ({batch})")
    if is_known(sequence_lens):
        lens = np.asarray(sequence_lens).astype(np.int64)
        if np.any(lens < 0) or np.any(lens > seq):
            raise ctx.error(f"sequence_lens {lens.tolist()} must lie between 0 and the sequence length {seq}")
        return None if np.all(lens == seq) else lens
    return sequence_lens.astype(np.int64)


def _reverse_within(xp, values, lens, seq: int):
    """values (seq, batch, ...) with each entry's first lens[b] steps reversed; the steps
    past its length stay where they are. Its own inverse."""
    if lens is None:
        return xp.flip(values, 0)
    t = np.arange(seq)[:, None]
    index = xp.where(t < lens[None, :], lens[None, :] - 1 - t, t)
    index = xp.reshape(index, shape_of(index) + (1,) * (len(shape_of(values)) - 2))
    return xp.take_along_axis(values, index, axis=0)


def _run_direction(kind: str, d: Direction, xw, h0, c0, valid):
    """The recurrence over xw (seq, batch, gates * hidden): Y (seq, batch, hidden), the final
    hidden and cell states. `valid` (seq, batch, 1) masks steps past an entry's length."""
    step = _STEPS[kind]
    seq = shape_of(xw)[0]

    def advance(h, c, x_t, valid_t):
        new_h, new_c = step(d, x_t, h, c)
        if valid_t is None:
            return new_h, new_c, new_h
        zero = np.zeros((), new_h.dtype)
        kept_c = None if new_c is None else pnp.where(valid_t, new_c, c)
        return pnp.where(valid_t, new_h, h), kept_c, pnp.where(valid_t, new_h, zero)

    if seq <= UNROLL_LIMIT:
        h, c, ys = h0, c0, []
        for t in range(seq):
            h, c, y = advance(h, c, xw[t], None if valid is None else valid[t])
            ys.append(y)
        return pnp.stack(ys), h, c

    def body(carry, xs):
        h, c = carry
        x_t, valid_t = xs if valid is not None else (xs, None)
        h, c, y = advance(h, c, x_t, valid_t)
        return (h, c if c is not None else c0), y

    xs = (xw, valid) if valid is not None else xw
    (h, c), ys = lax.scan(body, (pnp.asarray(h0), None if c0 is None else pnp.asarray(c0)), xs)
    return ys, h, c


def recurrent_layer(ctx: NodeContext, kind: str, x, w, r, b, sequence_lens, initial_h, initial_c=None,
                    peepholes=None):
    gates = GATES[kind]
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.unsupported(f"attribute 'direction'={direction!r}")
    directions = 2 if direction == "bidirectional" else 1
    layout = int(ctx.attr("layout", 0))
    if layout not in (0, 1):
        raise ctx.unsupported(f"attribute 'layout'={layout}")
    clip = ctx.attr("clip")
    clip = None if clip is None else float(clip)
    acts = _activations(ctx, kind, directions)
    if ctx.opset < 7:
        ctx.attr("output_sequence")       # opset 1: whether Y is computed; Y is always available
    linear_before_reset = bool(int(ctx.attr("linear_before_reset", 0))) if kind == "GRU" else False
    input_forget = bool(int(ctx.attr("input_forget", 0))) if kind == "LSTM" else False

    if len(shape_of(x)) != 3:
        raise ctx.error(f"input X of shape {list(shape_of(x))} needs rank 3")
    if layout:
        x = xp_of(ctx, x).swapaxes(x, 0, 1)
        initial_h = None if initial_h is None else xp_of(ctx, initial_h).swapaxes(initial_h, 0, 1)
        initial_c = None if initial_c is None else xp_of(ctx, initial_c).swapaxes(initial_c, 0, 1)
    seq, batch, input_size = shape_of(x)
    hidden = shape_of(r)[-1]
    given = ctx.attr("hidden_size")
    dtype = np.dtype(x.dtype)
    expected = {"W": (w, (directions, gates * hidden, input_size)), "R": (r, (directions, gates * hidden, hidden)),
                "B": (b, (directions, 2 * gates * hidden)), "initial_h": (initial_h, (directions, batch, hidden)),
                "initial_c": (initial_c, (directions, batch, hidden)), "P": (peepholes, (directions, 3 * hidden))}
    if given is not None and int(given) != hidden:
        raise ctx.error(f"hidden_size={given} does not match R of shape {list(shape_of(r))}")
    for name, (value, want) in expected.items():
        if value is not None and shape_of(value) != want:
            what = f"{name} of shape {list(shape_of(value))}"
            raise ctx.error(f"{what} does not fit {direction} {kind} with hidden size {hidden}: expected {list(want)}")
    lens = _lengths(ctx, sequence_lens, seq, batch)
    valid = None
    if lens is not None:
        valid = (np.arange(seq)[:, None] < lens[None, :])[..., None] if is_known(lens) else \
            pnp.expand_dims(pnp.less(np.arange(seq)[:, None], pnp.reshape(lens, (1, batch))), -1)

    zeros = np.zeros((batch, hidden), dtype)
    ys, hs, cs = [], [], []
    for d in range(directions):
        wt = _per_direction(ctx, w, d, dtype)
        wt = np.ascontiguousarray(wt.T) if is_known(wt) else pnp.transpose(wt)
        rt = _per_direction(ctx, r, d, dtype)
        rt = np.ascontiguousarray(rt.T) if is_known(rt) else pnp.transpose(rt)
        if b is None:
            wb = rb = np.zeros((gates * hidden,), dtype)
        else:
            bias = _per_direction(ctx, b, d, dtype)
            wb, rb = bias[:gates * hidden], bias[gates * hidden:]
        cell = Direction(rt, rb, None if peepholes is None else _per_direction(ctx, peepholes, d, dtype), acts[d],
                         clip, linear_before_reset, input_forget)
        h0 = zeros if initial_h is None else _per_direction(ctx, initial_h, d, dtype)
        c0 = None if kind != "LSTM" else zeros if initial_c is None else _per_direction(ctx, initial_c, d, dtype)
        xw = pnp.matmul(x, wt) + wb
        backwards = direction == "reverse" or d == 1
        if backwards:
            xw = _reverse_within(pnp, xw, lens, seq)
        y, h, c = _run_direction(kind, cell, xw, h0, c0, valid)
        if backwards:
            y = _reverse_within(pnp, y, lens, seq)
        ys.append(y)
        hs.append(h)
        cs.append(c)
    y = pnp.stack(ys, axis=1)                     # (seq, directions, batch, hidden)
    y_h = pnp.stack(hs)
    outputs = [y, y_h] if kind != "LSTM" else [y, y_h, pnp.stack(cs)]
    if layout:
        outputs = [pnp.transpose(outputs[0], (2, 0, 1, 3))] + [pnp.swapaxes(s, 0, 1) for s in outputs[1:]]
    return tuple(outputs)


@converter("RNN", since=1)
def rnn(ctx: NodeContext, x, w, r, b=None, sequence_lens=None, initial_h=None):
    return recurrent_layer(ctx, "RNN", x, w, r, b, sequence_lens, initial_h)


@converter("GRU", since=1)
def gru(ctx: NodeContext, x, w, r, b=None, sequence_lens=None, initial_h=None):
    return recurrent_layer(ctx, "GRU", x, w, r, b, sequence_lens, initial_h)


@converter("LSTM", since=1)
def lstm(ctx: NodeContext, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
    return recurrent_layer(ctx, "LSTM", x, w, r, b, sequence_lens, initial_h, initial_c, p)
