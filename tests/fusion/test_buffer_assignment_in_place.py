"""Buffer assignment writes update ops (dynamic-update-slice, scatter, fusions whose root is
one) over the array they rewrite, and while bodies update a carried array in the loop state
itself, only where that is legal: each program here is a legal case or a counter-case where
the rewritten array is still read afterwards. The CPU tests (tests/backends/cpu/test_in_place.py)
run the same programs against the evaluator."""
import pytest

from pyxla.fusion.buffer_assignment import assign_buffers, module_assignment_text
from pyxla.fusion.schedule import schedule_module
from pyxla.hlo import parse_module, verify_module

ADD = """
add {
  add_a = f32[] parameter(0)
  add_b = f32[] parameter(1)
  ROOT add_sum = f32[] add(add_a, add_b)
}
"""

# --- entry computations: an update over a temp -----------------------------------------------------

def dus_over(operand: str, root: str) -> str:
    """A dynamic-update-slice of `operand` (x, or e = exp(x)), then `root`."""
    return f"""HloModule d
ENTRY main {{
  x = f32[64,32] parameter(0)
  u = f32[3,32] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  e = f32[64,32] exponential(x)
  d = f32[64,32] dynamic-update-slice({operand}, u, i, j)
  ROOT {root}
}}
"""


DUS_OVER_DEAD_TEMP = dus_over("e", "n = f32[64,32] negate(d)")

# the update is a slice of the operand itself, computed by a kernel of its own first
DUS_OF_OWN_SLICE = """HloModule d
ENTRY main {
  x = f32[40,16] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  e = f32[40,16] exponential(x)
  s = f32[5,16] slice(e), slice={[2:7], [0:16]}
  d = f32[40,16] dynamic-update-slice(e, s, i, j)
  ROOT n = f32[40,16] negate(d)
}
"""

# counter-case: the operand is read after the update
DUS_OPERAND_READ_LATER = dus_over("e", "r = f32[64,32] subtract(d, e)")

# counter-case: the operand is a parameter (the caller's memory)
DUS_OF_PARAMETER = dus_over("x", "n = f32[64,32] negate(d)")

def fused_dus(update: str) -> str:
    """A loop fusion whose root updates its operand (a dot's result) with `update` lines
    computing u from p0 and p1, then a negate."""
    return f"""HloModule d
fused {{
  p0 = f32[64,32] parameter(0)
  p1 = f32[3,32] parameter(1)
  p2 = s32[] parameter(2)
  zero = s32[] constant(0)
{update}
  ROOT d = f32[64,32] dynamic-update-slice(p0, u, p2, zero)
}}
ENTRY main {{
  x = f32[64,32] parameter(0)
  v = f32[3,32] parameter(1)
  i = s32[] parameter(2)
  y = f32[32,32] parameter(3)
  e = f32[64,32] dot(x, y), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  f = f32[64,32] fusion(e, v, i), kind=kLoop, calls=fused
  ROOT n = f32[64,32] negate(f)
}}
"""


# (the operand is a dot: a fusion pass would fuse an elementwise producer into the update)
FUSED_DUS = fused_dus("""  two = f32[] constant(2)
  twos = f32[3,32] broadcast(two), dimensions={}
  u = f32[3,32] multiply(p1, twos)""")

# counter-case: the fusion also reads the operand to compute the update
FUSED_DUS_READS_OPERAND = fused_dus("""  s = f32[3,32] slice(p0), slice={[1:4], [0:32]}
  u = f32[3,32] add(p1, s)""")

def scatter_over_temp(root: str) -> str:
    """Rows of e = exp(x) scatter-added, then `root`."""
    return f"""HloModule s
{ADD}
ENTRY main {{
  x = f32[20,6] parameter(0)
  idx = s32[9] parameter(1)
  upd = f32[9,6] parameter(2)
  e = f32[20,6] exponential(x)
  s = f32[20,6] scatter(e, idx, upd), update_window_dims={{1}}, inserted_window_dims={{0}}, \
scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add
  ROOT {root}
}}
"""


SCATTER_OVER_DEAD_TEMP = scatter_over_temp("n = f32[20,6] negate(s)")
# counter-case: the operand is also read after the scatter
SCATTER_OPERAND_READ_LATER = scatter_over_temp("r = f32[20,6] multiply(s, e)")

# counter-case: a loop fusion that reads its operand at another index (a square transpose)
TRANSPOSING_LOOP_FUSION = """HloModule t
fused {
  p = f32[24,24] parameter(0)
  n = f32[24,24] negate(p)
  ROOT t = f32[24,24] transpose(n), dimensions={1,0}
}
ENTRY main {
  x = f32[24,24] parameter(0)
  y = f32[24,24] parameter(1)
  e = f32[24,24] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  f = f32[24,24] fusion(e), kind=kLoop, calls=fused
  ROOT r = f32[24,24] dot(f, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

ELEMENTWISE_LOOP_FUSION = """HloModule t
fused {
  p = f32[24,24] parameter(0)
  n = f32[24,24] negate(p)
  ROOT m = f32[24,24] multiply(n, p)
}
ENTRY main {
  x = f32[24,24] parameter(0)
  y = f32[24,24] parameter(1)
  e = f32[24,24] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  f = f32[24,24] fusion(e), kind=kLoop, calls=fused
  ROOT r = f32[24,24] dot(f, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

# counter-case: an elementwise op whose result has another layout than its operand
ELEMENTWISE_CHANGING_LAYOUT = """HloModule t
ENTRY main {
  x = f32[24,16] parameter(0)
  y = f32[16,16] parameter(1)
  e = f32[24,16]{1,0} dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  n = f32[24,16]{0,1} negate(e)
  ROOT r = f32[24,16] dot(n, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

# --- while bodies: an update of a carried array ------------------------------------------------------

CONDITION = """
cond {
  cs = (s32[], f32[16,8], f32[8]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  cn = s32[] constant(16)
  ROOT clt = pred[] compare(ci, cn), direction=LT
}
"""

LOOP_ENTRY = """
ENTRY main {
  b0 = f32[16,8] parameter(0)
  h0 = f32[8] parameter(1)
  z = s32[] constant(0)
  init = (s32[], f32[16,8], f32[8]) tuple(z, b0, h0)
  w = (s32[], f32[16,8], f32[8]) while(init), condition=cond, body=body
  final_rows = f32[16,8] get-tuple-element(w), index=1
  final_h = f32[8] get-tuple-element(w), index=2
  ROOT r = (f32[16,8], f32[8]) tuple(final_rows, final_h)
}
"""


def loop(body: str, extra: str = "") -> str:
    """A 16-step loop carrying (step, rows f32[16,8], h f32[8]) whose body is `body`."""
    return f"HloModule loop\n{ADD}{extra}{CONDITION}\nbody {{\n{body}\n}}\n{LOOP_ENTRY}"


BODY_HEAD = """  s = (s32[], f32[16,8], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  buf = f32[16,8] get-tuple-element(s), index=1
  h = f32[8] get-tuple-element(s), index=2
  half = f32[] constant(0.5)
  halves = f32[8] broadcast(half), dimensions={}
  h2 = f32[8] multiply(h, halves)
  h3 = f32[8] add(h2, halves)
  row = f32[1,8] reshape(h3)
  zero = s32[] constant(0)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)"""

# the scan case: row i of the carried buffer is written each step
LOOP_DUS = loop(BODY_HEAD + """
  d = f32[16,8] dynamic-update-slice(buf, row, i, zero)
  ROOT bt = (s32[], f32[16,8], f32[8]) tuple(i2, d, h3)""")

LOOP_SCATTER = loop(BODY_HEAD + """
  sq = f32[1,8] multiply(row, row)
  d = f32[16,8] scatter(buf, i, sq), update_window_dims={0,1}, inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=0, to_apply=add
  ROOT bt = (s32[], f32[16,8], f32[8]) tuple(i2, d, h3)""")

LOOP_FUSED_DUS = loop(BODY_HEAD + """
  d = f32[16,8] fusion(buf, h, i), kind=kLoop, calls=fused_update
  ROOT bt = (s32[], f32[16,8], f32[8]) tuple(i2, d, h3)""", extra="""
fused_update {
  fp0 = f32[16,8] parameter(0)
  fp1 = f32[8] parameter(1)
  fp2 = s32[] parameter(2)
  ft = f32[8] tanh(fp1)
  fr = f32[1,8] reshape(ft)
  fz = s32[] constant(0)
  ROOT fd = f32[16,8] dynamic-update-slice(fp0, fr, fp2, fz)
}
""")

# counter-case: the old rows are read after the update (the schedule cannot order it first)
LOOP_DUS_READ_AFTER = loop(BODY_HEAD + """
  d = f32[16,8] dynamic-update-slice(buf, row, i, zero)
  both = f32[16,8] add(d, buf)
  first = f32[1,8] slice(both), slice={[0:1], [0:8]}
  h4 = f32[8] reshape(first)
  ROOT bt = (s32[], f32[16,8], f32[8]) tuple(i2, d, h4)""")

# counter-case: the update is no result, the old rows pass through (writing the state would change them)
LOOP_DUS_RESULT_ELSEWHERE = loop(BODY_HEAD + """
  d = f32[16,8] dynamic-update-slice(buf, row, i, zero)
  dsum = f32[8] reduce(d, half), dimensions={0}, to_apply=add
  ROOT bt = (s32[], f32[16,8], f32[8]) tuple(i2, buf, dsum)""")


def loop4(body: str) -> str:
    """A loop whose state carries the rows twice: (step, rows, h, old rows)."""
    state = "(s32[], f32[16,8], f32[8], f32[16,8])"
    return f"""HloModule loop4
cond {{
  cs = {state} parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  cn = s32[] constant(16)
  ROOT clt = pred[] compare(ci, cn), direction=LT
}}
body {{
{body.replace("(s32[], f32[16,8], f32[8])", state)}
}}
ENTRY main {{
  b0 = f32[16,8] parameter(0)
  h0 = f32[8] parameter(1)
  z = s32[] constant(0)
  init = {state} tuple(z, b0, h0, b0)
  w = {state} while(init), condition=cond, body=body
  final_rows = f32[16,8] get-tuple-element(w), index=1
  final_old = f32[16,8] get-tuple-element(w), index=3
  ROOT r = (f32[16,8], f32[16,8]) tuple(final_rows, final_old)
}}
"""


# counter-case: the old rows are carried on as another element (read when results are copied)
LOOP_DUS_AND_OLD_ROWS = loop4(BODY_HEAD + """
  d = f32[16,8] dynamic-update-slice(buf, row, i, zero)
  ROOT bt = (s32[], f32[16,8], f32[8]) tuple(i2, d, h3, buf)""")

# counter-case: the updated rows are carried twice (copied from the state to the other slot)
LOOP_DUS_TWICE_IN_RESULT = loop4(BODY_HEAD + """
  d = f32[16,8] dynamic-update-slice(buf, row, i, zero)
  ROOT bt = (s32[], f32[16,8], f32[8]) tuple(i2, d, h3, d)""")

# counter-case: the body is also run as a branch of a conditional, whose parameter is the
# caller's memory (a call would be inlined before buffer assignment; a branch is not)
LOOP_BODY_ALSO_A_BRANCH = LOOP_DUS.replace(
    "  ROOT r = (f32[16,8], f32[8]) tuple(final_rows, final_h)",
    "  flag = pred[] parameter(2)\n"
    "  c = (s32[], f32[16,8], f32[8]) conditional(flag, init, init), true_computation=body, "
    "false_computation=body\n"
    "  branch_rows = f32[16,8] get-tuple-element(c), index=1\n"
    "  both_rows = f32[16,8] add(final_rows, branch_rows)\n"
    "  ROOT r = (f32[16,8], f32[8], f32[16,8]) tuple(final_rows, final_h, both_rows)")

# an update over a temp of the body itself
LOOP_DUS_OVER_BODY_TEMP = loop(BODY_HEAD + """
  e = f32[16,8] exponential(buf)
  d = f32[16,8] dynamic-update-slice(e, row, i, zero)
  n = f32[16,8] negate(d)
  ROOT bt = (s32[], f32[16,8], f32[8]) tuple(i2, n, h3)""")


def scheduled(text: str):
    module = parse_module(text)
    verify_module(module)
    schedule_module(module)
    verify_module(module)
    return module


def instruction(module, name: str, computation: str | None = None):
    comp = module.computation(computation) if computation else module.entry
    return next(i for i in comp.instructions if i.name == name)


def shares_operand_buffer(text: str, name: str) -> bool:
    module = scheduled(text)
    a = assign_buffers(module)
    instr = instruction(module, name)
    return a.of(instr) is a.of(instr.operands[0])


@pytest.mark.parametrize("text,name", [
    (DUS_OVER_DEAD_TEMP, "d"), (DUS_OF_OWN_SLICE, "d"), (FUSED_DUS, "f"), (SCATTER_OVER_DEAD_TEMP, "s"),
    (ELEMENTWISE_LOOP_FUSION, "f"),
])
def test_update_writes_over_its_dead_operand(text, name):
    assert shares_operand_buffer(text, name)


@pytest.mark.parametrize("text,name", [
    (DUS_OPERAND_READ_LATER, "d"), (DUS_OF_PARAMETER, "d"), (FUSED_DUS_READS_OPERAND, "f"),
    (SCATTER_OPERAND_READ_LATER, "s"), (TRANSPOSING_LOOP_FUSION, "f"), (ELEMENTWISE_CHANGING_LAYOUT, "n"),
])
def test_no_in_place_write_over_an_operand_read_otherwise(text, name):
    assert not shares_operand_buffer(text, name)


def body_assignment(text: str):
    module = scheduled(text)
    body = module.computation("body")
    return module, assign_buffers(module, body), instruction(module, "d", "body")


@pytest.mark.parametrize("text", [LOOP_DUS, LOOP_SCATTER, LOOP_FUSED_DUS])
def test_while_body_updates_the_carried_array_in_the_loop_state(text):
    module, a, d = body_assignment(text)
    buf = a.of(d)
    assert buf.in_parameter == 1 and buf.kind == "parameter" and buf.values == [d]
    # the rest of the body does not change: the step and h are results copied back as before
    assert a.of(instruction(module, "i2", "body")).kind == "output"
    assert "in parameter leaf 1" in a.to_text()
    assert "in parameter leaf 1" in module_assignment_text(module, assign_buffers(module))


@pytest.mark.parametrize("text", [LOOP_DUS_READ_AFTER, LOOP_DUS_RESULT_ELSEWHERE, LOOP_DUS_AND_OLD_ROWS,
                                  LOOP_DUS_TWICE_IN_RESULT, LOOP_BODY_ALSO_A_BRANCH])
def test_while_body_keeps_the_state_when_the_old_array_is_still_read(text):
    module, a, d = body_assignment(text)
    assert all(b.in_parameter is None for b in a.buffers)
    assert a.of(d).kind in ("temp", "output")


def test_update_over_a_temp_of_the_loop_body():
    module, a, d = body_assignment(LOOP_DUS_OVER_BODY_TEMP)
    assert a.of(d) is a.of(instruction(module, "e", "body")) and a.of(d).kind == "temp"
    assert all(b.in_parameter is None for b in a.buffers)


def test_entry_and_condition_never_update_their_parameters():
    module = scheduled(LOOP_DUS)
    for comp in (module.entry, module.computation("cond")):
        assert all(b.in_parameter is None for b in assign_buffers(module, comp).buffers)
