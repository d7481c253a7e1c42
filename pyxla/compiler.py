"""The compiler driver: optimisation passes, fusion, scheduling and buffer assignment, in order.

    compiled = compile_module(module, policy=FusionPolicy())

returns the transformed module (fused, scheduled) with its buffer assignment and the time
each stage took. With PYXLA_DUMP=DIR every stage's module lands in DIR/<module>/ (see
pipeline.py), plus `fusion-decisions.txt` (every fusion decision with its reason) and
`buffer-assignment.txt`.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .fusion.attention import attention_fusion
from .fusion.buffer_assignment import BufferAssignment, assign_buffers, module_assignment_text
from .fusion.instruction_fusion import fusion_pass
from .fusion.multi_output import multi_output_fusion
from .fusion.policy import FusionPolicy
from .fusion.schedule import schedule_module
from .hlo.dynamic_dims import require_static_shapes
from .hlo.module import HloModule
from .passes.dynamic_padder import bound_kernel_rows
from .passes.hlo_pass import HloPass
from .passes.pipeline import default_pipeline, run_pipeline
from .passes.reshape_to_bitcast import reshape_to_bitcast


@dataclass
class CompiledModule:
    module: HloModule
    buffers: BufferAssignment
    stage_seconds: dict[str, float] = field(default_factory=dict)


def _schedule(module: HloModule) -> bool:
    schedule_module(module)
    return True


SCHEDULE = HloPass("schedule", _schedule, "Order instructions to keep peak memory low.")
BOUND_ROWS = HloPass("bound-kernel-rows", bound_kernel_rows,
                     "Give fusions of a padded module their run-time row count (dynamic_padder/bounded_rows.py).")


def compile_module(module: HloModule, *, policy: FusionPolicy | None = None, donated: tuple[int, ...] = (),
                   dump_dir: str | None = None, optimize: bool = True) -> CompiledModule:
    """Transform `module` in place through every target-independent stage."""
    require_static_shapes(module)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    stages = (default_pipeline() if optimize else []) + [attention_fusion, fusion_pass(policy), multi_output_fusion,
                                                         reshape_to_bitcast, BOUND_ROWS, SCHEDULE]
    run_pipeline(module, stages, dump_dir=dump_dir)
    seconds["passes, fusion, schedule"] = time.perf_counter() - start
    start = time.perf_counter()
    buffers = assign_buffers(module, donated=donated)
    seconds["buffer assignment"] = time.perf_counter() - start
    dump = dump_dir if dump_dir is not None else os.environ.get("PYXLA_DUMP")
    if dump:
        folder = Path(dump) / module.name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "fusion-decisions.txt").write_text("\n".join(getattr(module, "fusion_log", [])) + "\n")
        (folder / "buffer-assignment.txt").write_text(module_assignment_text(module, buffers) + "\n")
    return CompiledModule(module, buffers, seconds)
