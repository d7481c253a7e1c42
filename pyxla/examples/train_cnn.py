"""Train a small convolutional network on synthetic images, end to end in pyxla.

    python -m pyxla.examples.train_cnn [--steps 150] [--batch 64] [--lr 3e-3]

The data: 16x16 one-channel images of stripes, the class being their orientation (horizontal,
vertical, and the two diagonals), each image with a random stripe period and phase and
Gaussian noise; the draws come from pyxla.random. The network, NHWC: two 3x3 convolutions
(`pyxla.lax.conv_general_dilated`, He-normal kernels) with ReLU, each followed by a 2x2 max
pool (`pyxla.lax.reduce_window`), then a dense layer to the four classes; mean softmax
cross-entropy and Adam, the whole step one `pyxla.jit` program.
"""
from __future__ import annotations

import argparse

import numpy as np

import pyxla.numpy as pnp
from pyxla import lax, nn, random
from pyxla.nn import initializers

from . import training

SIZE = 16
DIRECTIONS = np.array([(1, 0), (0, 1), (1, 1), (1, -1)], np.float32)   # the classes: stripe orientations
CLASSES = len(DIRECTIONS)


def make_dataset(key, n: int, noise: float = 0.7):
    """`n` images (n, 16, 16, 1) of noisy stripes and their orientation classes."""
    k_label, k_period, k_phase, k_noise = random.split(key, 4)
    labels = np.asarray(random.randint(k_label, (n,), 0, CLASSES))
    period = np.asarray(random.uniform(k_period, (n, 1, 1), minval=3.0, maxval=6.0))
    phase = np.asarray(random.uniform(k_phase, (n, 1, 1), maxval=2 * np.pi))
    rows, cols = np.meshgrid(np.arange(SIZE, dtype=np.float32), np.arange(SIZE, dtype=np.float32), indexing="ij")
    d = DIRECTIONS[labels][:, :, None, None]
    along = (d[:, 0] * rows + d[:, 1] * cols) / np.linalg.norm(d, axis=1)
    images = np.cos(2 * np.pi * along / period + phase)
    images = images + noise * np.asarray(random.normal(k_noise, images.shape))
    return images[..., None].astype(np.float32), labels.astype(np.int32)


def init_params(key, channels=(8, 16)):
    """He-normal HWIO kernels, zero biases, a Glorot-uniform dense head."""
    k1, k2, k3 = random.split(key, 3)
    he = initializers.he_normal()
    flat = (SIZE // 4) ** 2 * channels[1]
    c1, c2 = channels
    return {"conv1": {"w": np.asarray(he(k1, (3, 3, 1, c1))), "b": np.zeros(c1, np.float32)},
            "conv2": {"w": np.asarray(he(k2, (3, 3, c1, c2))), "b": np.zeros(c2, np.float32)},
            "dense": {"w": np.asarray(initializers.glorot_uniform()(k3, (flat, CLASSES))),
                      "b": np.zeros(CLASSES, np.float32)}}


def _conv_relu_pool(x, layer):
    y = lax.conv_general_dilated(x, layer["w"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = nn.relu(y + layer["b"])
    return lax.reduce_window(y, -np.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def predict(params, images):
    x = _conv_relu_pool(images, params["conv1"])
    x = _conv_relu_pool(x, params["conv2"])
    x = pnp.reshape(x, (x.shape[0], -1))
    return x @ params["dense"]["w"] + params["dense"]["b"]


def loss_fn(params, images, labels):
    return pnp.mean(nn.softmax_cross_entropy_with_integer_labels(predict(params, images), labels))


def make_step(optimizer):
    """The training step of this CNN: one program (examples/training.py)."""
    return training.make_step(loss_fn, optimizer)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pyxla.examples.train_cnn", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--train-size", type=int, default=4096)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    """Train; print progress; return the figures (the tests read them)."""
    args = parse_args(argv)
    k_train, k_test, k_init, k_shuffle = random.split(random.PRNGKey(args.seed), 4)
    train_set = make_dataset(k_train, args.train_size)
    test_set = make_dataset(k_test, 1024)
    order = np.asarray(random.permutation(k_shuffle, args.train_size))
    return training.train(args, loss_fn, predict, init_params(k_init), train_set, test_set, order, CLASSES)


if __name__ == "__main__":
    main()
