"""RNN, GRU and LSTM against onnx's reference evaluator on fresh random weights and inputs:
both directions, short sequences (unrolled) and long ones (an HLO while loop), the initial
state given or not, and batch-major layout."""
import numpy as np
import pytest

from .single_node import check

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
OUTPUTS = {"RNN": ("y", "y_h"), "GRU": ("y", "y_h"), "LSTM": ("y", "y_h", "y_c")}


def inputs_for(rng, op, seq, batch, size, hidden, directions, initial_state, layout=0):
    g = GATES[op]
    x_shape = (seq, batch, size) if layout == 0 else (batch, seq, size)
    state = (directions, batch, hidden) if layout == 0 else (batch, directions, hidden)
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)   # noqa: E731
    inputs = {"x": f(*x_shape), "w": f(directions, g * hidden, size), "r": f(directions, g * hidden, hidden),
              "b": f(directions, 2 * g * hidden)}
    if initial_state:
        inputs |= {"seq_lens": None, "h0": f(*state)}
        if op == "LSTM":
            inputs["c0"] = f(*state)
    return inputs


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction,seq", [("forward", 2), ("reverse", 7), ("bidirectional", 9)])
def test_recurrent_layer(rng, op, direction, seq):
    directions = 2 if direction == "bidirectional" else 1
    inputs = inputs_for(rng, op, seq, batch=3, size=5, hidden=4, directions=directions,
                        initial_state=seq != 2)
    check(op, inputs, {"hidden_size": 4, "direction": direction}, opset=14, outputs=OUTPUTS[op],
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_recurrent_layer_batch_major(rng, op):
    inputs = inputs_for(rng, op, seq=6, batch=2, size=3, hidden=5, directions=1, initial_state=True, layout=1)
    check(op, inputs, {"hidden_size": 5, "layout": 1}, opset=14, outputs=OUTPUTS[op], rtol=1e-4, atol=1e-5)


def test_gru_linear_before_reset(rng):
    inputs = inputs_for(rng, "GRU", seq=5, batch=2, size=3, hidden=4, directions=1, initial_state=False)
    check("GRU", inputs, {"hidden_size": 4, "linear_before_reset": 1}, opset=14, outputs=("y", "y_h"),
          rtol=1e-4, atol=1e-5)
