"""What a pass is: a named function over a module that says whether it changed anything.

    @hlo_pass("dce")
    def dead_code_elimination(module: HloModule) -> bool: ...

A `FixedPoint` group repeats its passes until none changes the module (or the cap).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..hlo.module import HloModule


@dataclass(frozen=True)
class HloPass:
    name: str
    run: Callable[[HloModule], bool]
    doc: str = ""

    def __call__(self, module: HloModule) -> bool:
        return bool(self.run(module))


def hlo_pass(name: str) -> Callable[[Callable[[HloModule], bool]], HloPass]:
    """Turn `fn(module) -> bool` into an HloPass called `name`."""
    def wrap(fn: Callable[[HloModule], bool]) -> HloPass:
        return HloPass(name, fn, (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "")
    return wrap


@dataclass(frozen=True)
class FixedPoint:
    name: str
    passes: tuple[PipelineItem, ...]
    max_iterations: int = 10


PipelineItem = HloPass | FixedPoint
