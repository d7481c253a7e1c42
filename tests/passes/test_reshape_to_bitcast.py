import numpy as np

import pyxla
import pyxla.numpy as pnp
from pyxla import lax
from pyxla.compiler import compile_module
from pyxla.hlo import parse_module
from pyxla.hlo.shape import ArrayShape
from pyxla.hlo.types import F32, S32
from pyxla.passes.reshape_to_bitcast import is_bitcast, reshape_to_bitcast

from .hlo_checks import entry_opcodes, run_pass


def shape(dims, minor_to_major=None, dtype=F32):
    return ArrayShape(dtype, tuple(dims), tuple(minor_to_major) if minor_to_major is not None else None)


def test_row_major_reshapes_keep_every_offset():
    assert is_bitcast(shape((6, 4)), shape((24,)))
    assert is_bitcast(shape((2, 3, 4)), shape((6, 1, 4)))
    assert is_bitcast(shape((1, 5), (0, 1)), shape((5,)))      # a size-1 dimension may sit anywhere
    assert not is_bitcast(shape((6, 4), (0, 1)), shape((24,)))  # column-major: the elements move
    assert not is_bitcast(shape((6, 4)), shape((4, 6), (0, 1)))
    assert not is_bitcast(shape((6, 4)), shape((24,), dtype=S32))


MODULE = """
HloModule views
ENTRY main {
  x = f32[6,4] parameter(0)
  flat = f32[24] reshape(x)
  e = f32[24] exponential(flat)
  back = f32[6,4] reshape(e)
  t = f32[4,6]{0,1} parameter(1)
  moved = f32[24] reshape(t)
  ROOT out = (f32[6,4], f32[24]) tuple(back, moved)
}
"""


def test_only_reshapes_that_move_nothing_become_bitcasts(rng):
    after = run_pass(reshape_to_bitcast, MODULE, rng)
    ops = entry_opcodes(after)
    assert ops["bitcast"] == 2 and ops["reshape"] == 1
    assert after.entry.instruction("moved").opcode == "reshape"   # a column-major operand: a real copy


FUSED = """
HloModule fused
ENTRY main {
  x = f32[6,4] parameter(0)
  y = f32[24] parameter(1)
  flat = f32[24] reshape(x)
  s = f32[24] add(flat, y)
  ROOT e = f32[24] exponential(s)
}
"""


def test_reshapes_inside_fusions_stay_index_arithmetic():
    compiled = compile_module(parse_module(FUSED))
    (fusion,) = [i for i in compiled.module.entry.instructions if i.opcode == "fusion"]
    assert "reshape" in {i.opcode for i in fusion.attrs["calls"].instructions}
    assert not reshape_to_bitcast(compiled.module)


def test_a_row_update_in_a_loop_writes_in_place(rng):
    """`acc.at[i].set(row)` traces to reshapes around a scatter; as bitcasts they let the
    scatter update the loop state's buffer instead of copying the matrix twice per step."""
    def f(xs):
        def body(i, acc):
            return acc.at[i].set(pnp.tanh(xs[i]) * 2.0)
        return lax.fori_loop(0, xs.shape[0], body, pnp.zeros_like(xs))

    xs = rng.standard_normal((300, 17)).astype(np.float32)
    jf = pyxla.jit(f)
    np.testing.assert_allclose(jf(xs), np.tanh(xs.astype(np.float64)) * 2, rtol=1e-5, atol=1e-6)
    text = jf.lower(xs).compile().as_text()
    body = text[text.index("while_body"):]
    body = body[:body.index("\n}\n")]
    assert " reshape(" not in body and " bitcast(" in body
