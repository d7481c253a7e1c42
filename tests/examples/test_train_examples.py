"""The training examples train: the loss falls by a clear factor and held-out accuracy beats
chance; and the memory plan of a training step reuses buffers across forward and backward."""
import subprocess
import sys

import numpy as np

import pyxla
from pyxla import optimizers, random
from pyxla.examples import train_cnn, train_mlp


def _fell(losses, factor):
    start, end = losses[0], float(np.mean(losses[-10:]))
    assert end < start / factor, f"loss {start:.3f} -> {end:.3f} (mean of the last 10): not a {factor}x fall"


def test_train_mlp_learns(capsys):
    result = train_mlp.main(["--steps", "150", "--train-size", "2048", "--log-every", "50", "--seed", "3"])
    _fell(result["losses"], 2)
    assert result["test_accuracy"] > 0.4, result["test_accuracy"]   # 10 classes: chance is 0.1
    out = capsys.readouterr().out
    assert "memory of the step" in out and "step   100  loss" in out and "ms per step" in out


def test_train_cnn_learns():
    result = train_cnn.main(["--steps", "60", "--train-size", "1024", "--batch", "32", "--seed", "5"])
    _fell(result["losses"], 3)
    assert result["test_accuracy"] > 0.7, result["test_accuracy"]   # 4 classes: chance is 0.25


def test_examples_run_as_modules():
    proc = subprocess.run([sys.executable, "-m", "pyxla.examples.train_mlp", "--steps", "3", "--train-size", "512"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "accuracy: train" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "pyxla.examples.train_cnn", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "--steps" in proc.stdout


# A deep tanh MLP: four hidden layers of 512, batch 256, so that the activations the backward
# pass needs (the four tanh outputs, 0.5 MiB each) dominate the temporaries.
BATCH, FEATURES, WIDTH, DEPTH, CLASSES = 256, 64, 512, 4, 10
F32 = 4


def _deep_mlp():
    params = train_mlp.init_params(random.PRNGKey(0), [FEATURES] + [WIDTH] * DEPTH + [CLASSES])
    return params, np.zeros((BATCH, FEATURES), np.float32), np.zeros(BATCH, np.int32)


def test_gradient_memory_is_the_saved_activations_and_one_temporary():
    """value_and_grad: the arena holds what the backward pass keeps (each hidden layer's
    tanh output, the logits) plus the largest temporary (one activation's gradient), as the
    buffers of the forward pass are freed and reused by the backward pass."""
    params, x, y = _deep_mlp()
    memory = pyxla.jit(pyxla.value_and_grad(train_mlp.loss_fn)).lower(params, x, y).compile().memory_analysis()
    saved = DEPTH * BATCH * WIDTH * F32 + BATCH * CLASSES * F32
    largest = BATCH * WIDTH * F32
    slack = 64 * 1024   # row sums, scalars, alignment
    assert memory["temp_size_in_bytes"] <= saved + largest + slack, memory
    assert memory["temp_size_in_bytes"] < 0.7 * memory["temp_bytes_without_reuse"], memory


def test_training_step_memory_is_bounded():
    """The whole Adam step: on top of the saved activations, the weight gradients of the
    hidden layers are live together at the peak (the updates run after the backward pass),
    with one activation's gradient. Still well under one buffer per value."""
    params, x, y = _deep_mlp()
    optimizer = optimizers.adam(1e-3)
    opt_state = optimizer.init_fn(params)
    memory = train_mlp.make_step(optimizer).lower(np.int32(0), opt_state, x, y).compile().memory_analysis()
    saved = DEPTH * BATCH * WIDTH * F32 + BATCH * CLASSES * F32
    weight_grads = (DEPTH - 1) * WIDTH * WIDTH * F32
    largest = BATCH * WIDTH * F32
    assert memory["temp_size_in_bytes"] <= saved + weight_grads + largest + 64 * 1024, memory
    assert memory["temp_size_in_bytes"] < 0.7 * memory["temp_bytes_without_reuse"], memory


def test_cnn_gradients_on_cpu_match_the_interpreter():
    images, labels = train_cnn.make_dataset(random.PRNGKey(1), 64)
    params = train_cnn.init_params(random.PRNGKey(2))
    on_cpu = pyxla.jit(pyxla.grad(train_cnn.loss_fn), backend="cpu")(params, images, labels)
    reference = pyxla.jit(pyxla.grad(train_cnn.loss_fn), backend="interpreter")(params, images, labels)
    for layer in reference:
        for name in reference[layer]:
            np.testing.assert_allclose(on_cpu[layer][name], reference[layer][name], rtol=1e-4,
                                       atol=1e-5 * np.abs(reference[layer][name]).max(), err_msg=f"{layer} {name}")
