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

import numpy as np

import pyxla.numpy as pnp
from pyxla import nn, random
from pyxla.nn import initializers

from . import training

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
    """The training step of this MLP: one program (examples/training.py)."""
    return training.make_step(loss_fn, optimizer)


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
    train_set = make_dataset(teacher, k_train, args.train_size)
    test_set = make_dataset(teacher, k_test, 2048)   # held out: the same teacher, fresh inputs
    params = init_params(k_init, [args.features, args.hidden, args.hidden, CLASSES])
    order = np.asarray(random.permutation(k_shuffle, args.train_size))
    return training.train(args, loss_fn, predict, params, train_set, test_set, order, CLASSES)


if __name__ == "__main__":
    main()
