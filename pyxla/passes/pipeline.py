"""The pass pipeline: which passes run, in which order, and the instruments around them.

Instruments (environment variables):
  PYXLA_VERIFY=1          run the verifier after every pass; a failure names the pass
                          (always on under pytest)
  PYXLA_DUMP=DIR          write the module after each pass to DIR/<module>/NNN.<pass>.hlo
  PYXLA_DEBUG=passes      print each pass's time and whether it changed the module
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import VerifierError
from ..hlo.module import HloModule
from ..hlo.verifier import verify_module
from .hlo_pass import FixedPoint, HloPass, PipelineItem


def default_pipeline() -> list[PipelineItem]:
    """Target-independent optimisation, in order."""
    from .algebraic_simplifier import algebraic_simplifier
    from .call_inliner import call_inliner
    from .constant_folding import constant_folding
    from .convolution_layout import convolution_layout
    from .cse import common_subexpression_elimination
    from .dce import dead_code_elimination
    from .dot_canonicalizer import dot_canonicalizer
    from .expanders import batch_norm_expander
    from .reshape_mover import reshape_mover
    from .tuple_simplifier import tuple_simplifier
    from .while_loop_simplifier import while_loop_simplifier
    from .zero_sized import zero_sized_elimination

    return [
        call_inliner,
        batch_norm_expander,
        zero_sized_elimination,
        FixedPoint("simplify", (
            algebraic_simplifier,
            tuple_simplifier,
            constant_folding,
            common_subexpression_elimination,
            while_loop_simplifier,
            reshape_mover,
            dead_code_elimination,
        )),
        convolution_layout,
        dot_canonicalizer,
        FixedPoint("cleanup", (algebraic_simplifier, common_subexpression_elimination, dead_code_elimination)),
    ]


def optional_passes() -> list[HloPass]:
    """Passes a backend asks for; not in the default pipeline."""
    from .expanders import logistic_expander, rng_bit_generator_expander
    return [logistic_expander, rng_bit_generator_expander]


def all_passes() -> dict[str, HloPass]:
    """Every pass by name, for `pyxla opt --passes`."""
    found: dict[str, HloPass] = {p.name: p for p in optional_passes()}

    def collect(items: Iterable[PipelineItem]) -> None:
        for item in items:
            if isinstance(item, FixedPoint):
                collect(item.passes)
            else:
                found[item.name] = item

    collect(default_pipeline())
    return found


def describe_pipeline(items: Sequence[PipelineItem] | None = None, indent: str = "") -> str:
    lines = []
    for item in items if items is not None else default_pipeline():
        if isinstance(item, FixedPoint):
            lines.append(f"{indent}{item.name}: repeat until nothing changes (at most {item.max_iterations} times)")
            lines.append(describe_pipeline(item.passes, indent + "  "))
        else:
            lines.append(f"{indent}{item.name}" + (f"  -- {item.doc}" if item.doc else ""))
    return "\n".join(lines)


class _Instruments:
    def __init__(self, module: HloModule, verify: bool | None, dump_dir: str | None, debug: bool | None):
        self.verify = verify if verify is not None else bool(os.environ.get("PYXLA_VERIFY")
                                                           or "PYTEST_CURRENT_TEST" in os.environ)
        dump = dump_dir if dump_dir is not None else os.environ.get("PYXLA_DUMP")
        self.dump_dir = Path(dump) / module.name if dump else None
        self.debug = debug if debug is not None else "passes" in os.environ.get("PYXLA_DEBUG", "").split(",")
        self.step = 0
        if self.verify:
            try:
                verify_module(module)
            except VerifierError as e:
                raise VerifierError(f"before the first pass: {e}") from None
        if self.dump_dir:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            self._dump(module, "input")

    def _dump(self, module: HloModule, name: str) -> None:
        from ..hlo.printer import print_module
        assert self.dump_dir is not None
        (self.dump_dir / f"{self.step:03d}.{name}.hlo").write_text(print_module(module))
        self.step += 1

    def after(self, p: HloPass, module: HloModule, changed: bool, seconds: float) -> None:
        if self.debug:
            print(f"pyxla pass {p.name:<24} {seconds * 1e3:8.2f} ms  {'changed' if changed else 'no change'}",
                  file=sys.stderr)
        if self.verify and changed:   # (a pass that changed nothing leaves a verified module)
            try:
                verify_module(module)
            except VerifierError as e:
                raise VerifierError(f"after pass {p.name}: {e}") from None
        if self.dump_dir and changed:
            self._dump(module, p.name)


def run_pipeline(module: HloModule, items: Sequence[PipelineItem] | None = None, *,
                 verify: bool | None = None, dump_dir: str | None = None, debug: bool | None = None) -> bool:
    """Run `items` (default: the default pipeline) over `module` in place; True if anything changed."""
    instruments = _Instruments(module, verify, dump_dir, debug)
    return _run(items if items is not None else default_pipeline(), module, instruments)


def _run(items: Sequence[PipelineItem], module: HloModule, instruments: _Instruments) -> bool:
    changed = False
    for item in items:
        if isinstance(item, FixedPoint):
            for _ in range(item.max_iterations):
                if not _run(item.passes, module, instruments):
                    break
                changed = True
            continue
        start = time.perf_counter()
        did = item(module)
        instruments.after(item, module, did, time.perf_counter() - start)
        changed |= did
    return changed
