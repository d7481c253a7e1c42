"""Real XLA as a reference: run HLO text that pyxla printed on XLA's own CPU compiler.

jaxlib carries XLA's HLO parser (`hlo_module_from_text`) and its CPU client. Text that
pyxla prints is parsed there, converted to StableHLO, compiled and run by XLA, so a test
can check both that XLA accepts pyxla's HLO and that XLA computes the same numbers from
it. Tests skip where JAX is not installed (it is in the `[bench]` extra), or where this
jaxlib's private entry points have moved.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest


def _xla():
    pytest.importorskip("jax")
    try:
        from jax._src import xla_bridge
        from jax._src.lib import _jax
        from jax._src.lib import xla_client as xc
        from jaxlib import _hlo
    except ImportError as e:   # the entry points are private to jaxlib and may move
        pytest.skip(f"this jaxlib has no HLO text entry point: {e}")
    return xla_bridge, _jax, xc, _hlo


def parse_on_xla(text: str):
    """XLA's HloModule for `text`; raises XLA's parse error if XLA rejects it."""
    _, _, _, hlo = _xla()
    return hlo.hlo_module_from_text(text)


def run_on_xla(text: str, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The outputs (a tuple root's elements) of the HLO module `text` run by XLA on `args`."""
    xla_bridge, jax_lib, xc, _ = _xla()
    import jax

    module = parse_on_xla(text)
    stablehlo = jax_lib.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    client = xla_bridge.get_backend("cpu")
    device = client.local_devices()[0]
    executable = client.compile_and_load(stablehlo, xc.DeviceList((device,)), xc.CompileOptions())
    with jax.enable_x64(True):   # float64 arguments stay float64
        buffers = [jax.device_put(np.asarray(a), device) for a in args]
    results = executable.execute_sharded(buffers).disassemble_into_single_device_arrays()
    return [np.asarray(r[0]) for r in results]
