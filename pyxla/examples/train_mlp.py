"""Train an MLP classifier on a synthetic task, end to end in pyxla.

    python -m pyxla.examples.train_mlp [--steps 400] [--batch 128] [--hidden 256] [--lr 3e-3]

The data: inputs drawn from a standard normal (pyxla.random), each labelled by a fixed random
"teacher" network, argmax(tanh(x A) B) over 10 classes: a task a linear model cannot fit but
an MLP can. The student: two hidden tanh layers, Glorot-uniform weights, zero biases, mean
softmax cross-entropy, Adam. One `pyxla.jit` compiles the whole step (forward, backward
and the optimizer's update) into one program; the loop feeds it batches of the training
set and prints the loss every `--log-every` steps, the time per step, the step's memory
plan (`Compiled.memory_analysis()`) and the accuracy on held-out data at the end.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import pyxla
import pyxla.numpy as pnp
from pyxla import nn, optimizers, random
from pyxla.nn import initializers

CLASSES = 10


def make_teacher(key, features: int):
    """The fixed random network whose argmax labels the data."""
    k_a, k_b = random.split(key)
    return (np.asarray(random.normal(k_a, (features, 64)) * np.float32(2 / np.sqrt(features))),
            np.asarray(random.normal(k_b, (64, CLASSES))))


def make_dataset(teacher, key, n: int):
    """`n` standard normal inputs and the teacher's labels for them."""
    a, b = teacher
    x = np.asarray(random.normal(key, (n, a.shape[0])))
    labels = np.asarray(pnp.argmax(pnp.tanh(x @ a) @ b, axis=-1)).astype(np.int32)
    return x, labels


def init_params(key, sizes):
    """Glorot-uniform weights and zero biases for the layers sizes[0] -> sizes[1] -> ..."""
    keys = random.split(key, len(sizes) - 1)
    glorot = initializers.glorot_uniform()
    return [{"w": np.asarray(glorot(k, (m, n))), "b": np.asarray(initializers.zeros(k, (n,)))}
            for k, m, n in zip(keys, sizes[:-1], sizes[1:])]


def predict(params, x):
    """Logits: tanh hidden layers, a linear last layer."""
    for layer in params[:-1]:
        x = pnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, labels):
    return pnp.mean(nn.softmax_cross_entropy_with_integer_labels(predict(params, x), labels))


def make_step(optimizer):
    """The training step: the loss and its gradients, then the optimizer's update, one program."""
    _, opt_update, get_params = optimizer

    @pyxla.jit
    def step(i, opt_state, x, labels):
        loss, grads = pyxla.value_and_grad(loss_fn)(get_params(opt_state), x, labels)
        return loss, opt_update(i, grads, opt_state)
    return step


predict_jit = pyxla.jit(predict)


def accuracy(params, x, labels) -> float:
    return float(np.mean(np.argmax(predict_jit(params, x), -1) == labels))


def _memory_line(memory: dict) -> str:
    mib = {k: v / 2 ** 20 for k, v in memory.items()}
    return (f"memory of the step: arguments {mib['argument_size_in_bytes']:.2f} MiB, outputs "
            f"{mib['output_size_in_bytes']:.2f} MiB, temporaries {mib['temp_size_in_bytes']:.2f} MiB "
            f"({mib['temp_bytes_without_reuse']:.2f} MiB without buffer reuse)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pyxla.examples.train_mlp", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--train-size", type=int, default=8192)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    """Train; print progress; return the figures (the tests read them)."""
    args = parse_args(argv)
    k_teacher, k_train, k_test, k_init, k_shuffle = random.split(random.PRNGKey(args.seed), 5)
    teacher = make_teacher(k_teacher, args.features)
    x_train, y_train = make_dataset(teacher, k_train, args.train_size)
    x_test, y_test = make_dataset(teacher, k_test, 2048)   # held out: the same teacher, fresh inputs
    params = init_params(k_init, [args.features, args.hidden, args.hidden, CLASSES])
    optimizer = optimizers.adam(args.lr)
    opt_state = optimizer.init_fn(params)
    step = make_step(optimizer)

    batches = args.train_size // args.batch
    order = np.asarray(random.permutation(k_shuffle, args.train_size))
    first = order[:args.batch]
    start = time.perf_counter()
    compiled = step.lower(np.int32(0), opt_state, x_train[first], y_train[first]).compile()
    print(f"compiled the training step in {time.perf_counter() - start:.2f} s")
    memory = compiled.memory_analysis()
    print(_memory_line(memory))

    losses = []
    start = time.perf_counter()
    for i in range(args.steps):
        idx = order[(i % batches) * args.batch:(i % batches + 1) * args.batch]
        loss, opt_state = compiled(np.int32(i), opt_state, x_train[idx], y_train[idx])
        losses.append(float(loss))
        if i % args.log_every == 0 or i == args.steps - 1:
            print(f"step {i:5d}  loss {losses[-1]:.4f}")
    seconds = time.perf_counter() - start
    params = optimizer.params_fn(opt_state)
    result = {"losses": losses, "step_ms": 1e3 * seconds / max(args.steps, 1), "memory": memory,
              "train_accuracy": accuracy(params, x_train, y_train), "test_accuracy": accuracy(params, x_test, y_test)}
    print(f"{args.steps} steps in {seconds:.2f} s: {result['step_ms']:.3f} ms per step")
    print(f"accuracy: train {result['train_accuracy']:.3f}, held out {result['test_accuracy']:.3f} "
          f"(chance {1 / CLASSES:.2f})")
    return result


if __name__ == "__main__":
    main()
