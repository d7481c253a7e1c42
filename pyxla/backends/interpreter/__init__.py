"""The interpreter backend: the reference evaluator behind the executable interface."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...compiler import CompiledModule
from ...hlo.evaluator import EvalContext, check_arguments, evaluate_computation, flatten_result
from ...hlo.module import HloModule
from ...hlo.verifier import verify_module


class InterpreterExecutable:
    def __init__(self, module: HloModule):
        self.module = module

    def __call__(self, *args: Any) -> Any:
        entry = self.module.entry
        return evaluate_computation(entry, check_arguments(entry, args), EvalContext(self.module))

    def run_flat(self, args: Sequence[Any]) -> list[np.ndarray]:
        return flatten_result(self(*args))

    def run_unchecked(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return flatten_result(evaluate_computation(self.module.entry, list(arrays), EvalContext(self.module)))

    def prepare_argument(self, number: int, array: np.ndarray) -> np.ndarray:
        """Parameter `number`'s argument as the executable takes it: the evaluator takes any."""
        return array


class InterpreterBackend:
    name = "interpreter"

    def prepare(self, module: HloModule) -> None:
        """Nothing to rewrite: the evaluator runs every opcode, expansions included."""

    def compile(self, module: HloModule, *, compiled: CompiledModule | None = None, donated: tuple[int, ...] = (),
                constant_parameters: tuple[int, ...] = ()) -> InterpreterExecutable:
        """The evaluator over `module` as given (optimised or not: it runs any module)."""
        verify_module(module)
        return InterpreterExecutable(module)


BACKEND = InterpreterBackend()
