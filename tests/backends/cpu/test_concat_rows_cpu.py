"""Loop kernels over a concatenate of buffers, row by row (ops/concat_rows.py): the rows of each
operand (or, along the minor-most dimension, each pixel's run of each operand) with the
elementwise ops after the concatenate, against the interpreter on fresh
random inputs; and the kernels that keep the elemental concatenate."""
import pytest

from pyxla.backends.cpu import codegen

from .differential import assert_cpu_matches_interpreter


def _taken(monkeypatch):
    """Whether each loop kernel compiled took the row route, as a list that fills."""
    seen = []
    find = codegen.concatenate_of
    monkeypatch.setattr(codegen, "concatenate_of", lambda ke, root: seen.append(find(ke, root)) or seen[-1])
    return seen


def _module(dims_list, axis, out_layout="", first=""):
    """concatenate of parameters along `axis`, then x * scale + shift and a ReLU (batch norm's
    inference form, as DenseNet applies it to the concatenated features)."""
    total = list(dims_list[0])
    total[axis] = sum(d[axis] for d in dims_list)
    t = ",".join(map(str, total))
    params = "\n".join(f"  p{k} = f32[{','.join(map(str, d))}] parameter({k})" for k, d in enumerate(dims_list))
    n = len(dims_list)
    names = ", ".join(f"p{k}" for k in range(n))
    if first:   # the first operand computed in the kernel rather than read from a buffer
        names = names.replace("p0", "q0", 1)
    return f"""HloModule cat
ENTRY e {{
{params}
  s = f32[{total[axis]}] parameter({n})
  h = f32[{total[axis]}] parameter({n + 1})
{first}
  c = f32[{t}] concatenate({names}), dimensions={{{axis}}}
  sb = f32[{t}] broadcast(s), dimensions={{{axis}}}
  hb = f32[{t}] broadcast(h), dimensions={{{axis}}}
  m = f32[{t}] multiply(c, sb)
  a = f32[{t}] add(m, hb)
  z = f32[] constant(0)
  zb = f32[{t}] broadcast(z), dimensions={{}}
  ROOT r = f32[{t}]{out_layout} maximum(a, zb)
}}
"""


@pytest.mark.parametrize("dims_list,axis", [
    ([(1, 5, 7, 9), (1, 3, 7, 9), (1, 8, 7, 9)], 1),            # NCHW features, batch of one
    ([(2, 4, 6, 5), (2, 1, 6, 5), (2, 6, 6, 5), (2, 2, 6, 5)], 1),   # a batch of two: rows of each image
    ([(3, 5, 17), (3, 0, 17), (3, 2, 17)], 1),                  # an empty operand
    ([(4, 33), (2, 33)], 0),                                    # the outermost dimension
    ([(1, 5, 7, 9), (1, 5, 7, 4), (1, 5, 7, 4), (1, 5, 7, 4), (1, 5, 7, 20)], 3),   # NHWC: three runs of 4 in one loop
    ([(2, 3, 17), (2, 3, 0), (2, 3, 16), (2, 3, 1)], 2),        # minor-most, with an empty operand
], ids=["nchw", "batch", "empty-operand", "outermost", "nhwc", "minor-empty-operand"])
def test_rows_of_each_operand(dims_list, axis, rng, monkeypatch):
    taken = _taken(monkeypatch)
    assert_cpu_matches_interpreter(_module(dims_list, axis), rng, rtol=1e-6, atol=1e-6)
    assert any(c is not None for c in taken)


def test_a_few_computed_operands_get_a_loop_each(rng, monkeypatch):
    """(A negate is fused into the concatenating kernel; an exponential, costly, would be
    computed by a kernel of its own and read as a buffer.)"""
    taken = _taken(monkeypatch)
    text = _module([(2, 4, 6, 6), (2, 3, 6, 6), (2, 5, 6, 6)], 1, first="  q0 = f32[2,4,6,6] negate(p0)")
    assert_cpu_matches_interpreter(text, rng, rtol=1e-6, atol=1e-6)
    assert any(c is not None for c in taken)


def test_computed_operands_along_the_minor_dimension(rng, monkeypatch):
    taken = _taken(monkeypatch)
    text = _module([(2, 6, 6, 4), (2, 6, 6, 3), (2, 6, 6, 5)], 3, first="  q0 = f32[2,6,6,4] negate(p0)")
    assert_cpu_matches_interpreter(text, rng, rtol=1e-6, atol=1e-6)
    assert any(c is not None for c in taken)


@pytest.mark.parametrize("case", ["many operands, one computed", "result in another layout"])
def test_other_concatenates_stay_elemental(case, rng, monkeypatch):
    taken = _taken(monkeypatch)
    if case == "many operands, one computed":
        text = _module([(1, 2, 6, 6)] * 10, 1, first="  q0 = f32[1,2,6,6] negate(p0)")
    else:
        text = _module([(1, 4, 6, 6), (1, 2, 6, 6)], 1, out_layout="{1,3,2,0}")
    assert_cpu_matches_interpreter(text, rng, rtol=1e-6, atol=1e-6)
    assert taken and all(c is None for c in taken)
