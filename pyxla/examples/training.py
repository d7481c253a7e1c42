"""What the training examples share: the jitted step and the loop that feeds it batches.

`make_step(loss_fn, optimizer)` is one program: the loss, its gradients and the optimizer's
update. `train(...)` compiles it once for the batch's signature, prints the step's memory
plan (`Compiled.memory_analysis()`), runs `--steps` steps over shuffled batches printing the
loss every `--log-every`, and reports the time per step and the accuracy on the training and
held-out sets.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import pyxla


def make_step(loss_fn: Callable, optimizer):
    """The training step: the loss and its gradients, then the optimizer's update, one program."""
    _, opt_update, get_params = optimizer

    @pyxla.jit
    def step(i, opt_state, inputs, labels):
        loss, grads = pyxla.value_and_grad(loss_fn)(get_params(opt_state), inputs, labels)
        return loss, opt_update(i, grads, opt_state)
    return step


def memory_line(memory: dict) -> str:
    mib = {k: v / 2 ** 20 for k, v in memory.items()}
    return (f"memory of the step: arguments {mib['argument_size_in_bytes']:.2f} MiB, outputs "
            f"{mib['output_size_in_bytes']:.2f} MiB, temporaries {mib['temp_size_in_bytes']:.2f} MiB "
            f"({mib['temp_bytes_without_reuse']:.2f} MiB without buffer reuse)")


def train(args, loss_fn: Callable, predict: Callable, params, train_set, test_set, order, classes: int) -> dict:
    """Adam from `params` over `train_set` in the batches `order` shuffles; the figures the
    tests read: losses, step_ms, memory, train_accuracy, test_accuracy."""
    from pyxla import optimizers

    optimizer = optimizers.adam(args.lr)
    opt_state = optimizer.init_fn(params)
    step = make_step(loss_fn, optimizer)
    x_train, y_train = train_set
    batches = args.train_size // args.batch
    first = order[:args.batch]
    start = time.perf_counter()
    compiled = step.lower(np.int32(0), opt_state, x_train[first], y_train[first]).compile()
    print(f"compiled the training step in {time.perf_counter() - start:.2f} s")
    memory = compiled.memory_analysis()
    print(memory_line(memory))

    losses = []
    start = time.perf_counter()
    for i in range(args.steps):
        idx = order[(i % batches) * args.batch:(i % batches + 1) * args.batch]
        loss, opt_state = compiled(np.int32(i), opt_state, x_train[idx], y_train[idx])
        losses.append(float(loss))
        if i % args.log_every == 0 or i == args.steps - 1:
            print(f"step {i:5d}  loss {losses[-1]:.4f}")
    seconds = time.perf_counter() - start
    final = optimizer.params_fn(opt_state)
    predict_jit = pyxla.jit(predict)

    def accuracy(x, labels) -> float:
        return float(np.mean(np.argmax(predict_jit(final, x), -1) == labels))

    result = {"losses": losses, "step_ms": 1e3 * seconds / max(args.steps, 1), "memory": memory,
              "train_accuracy": accuracy(*train_set), "test_accuracy": accuracy(*test_set)}
    print(f"{args.steps} steps in {seconds:.2f} s: {result['step_ms']:.3f} ms per step")
    print(f"accuracy: train {result['train_accuracy']:.3f}, held out {result['test_accuracy']:.3f} "
          f"(chance {1 / classes:.2f})")
    return result
