"""The marks of padding rows no one reads (dynamic_rows) and the row bounds fusions get from
them after fusion (bounded_rows): which values are marked, which are not (the masks), which
fusions are bounded and by what."""
from __future__ import annotations

import numpy as np

from pyxla.compiler import compile_module
from pyxla.hlo import verify_module
from pyxla.hlo.builder import HloBuilder, scalar_computation
from pyxla.hlo.dims import DimExpr, Symbol
from pyxla.hlo.shape import ArrayShape
from pyxla.hlo.types import F32, S32
from pyxla.passes.dynamic_padder import bound_kernel_rows, pad_to_bounds

B = DimExpr.symbol(Symbol("b"))
S = DimExpr.symbol(Symbol("s"))


def arr(*dims, dtype=F32) -> ArrayShape:
    return ArrayShape(dtype, tuple(dims))


def _sum_rows_and_tanh():
    """tanh(x) (rows b) and the column sums of x (a reduction over b: masked)."""
    hb = HloBuilder("m")
    x = hb.parameter(arr(B, 8), "x")
    t = hb.op("tanh", x)
    s = hb.op("reduce", t, hb.constant(0.0, F32), dimensions=(0,), to_apply=scalar_computation("add", F32))
    return hb.module(hb.tuple(t, s))


def test_the_values_with_symbolic_rows_are_marked_and_the_masks_are_not():
    padded = pad_to_bounds(_sum_rows_and_tanh(), {"b": 16})
    verify_module(padded.module)
    entry = padded.module.entry
    marks = {i.opcode: i.attrs.get("dynamic_rows") for i in entry.instructions}
    assert marks["tanh"] == "0:b"
    selects = [i for i in entry.instructions if i.opcode == "select"]
    assert selects, "the reduction over b is masked"
    assert all("dynamic_rows" not in i.attrs for i in selects)
    assert all("dynamic_rows" not in i.attrs for i in entry.instructions if i.opcode in ("iota", "compare", "reduce"))
    assert padded.module.size_parameters == {"b": (1, 16)}


def test_selects_of_the_users_are_not_marked():
    """A select of the user's may be identical to a mask (CSE ignores annotations)."""
    hb = HloBuilder("m")
    x = hb.parameter(arr(B, 8), "x")
    positive = hb.op("compare", x, hb.op("broadcast", hb.constant(0.0, F32), shape=arr(B, 8), dimensions=()),
                     direction="GT")
    kept = hb.op("select", positive, x, hb.op("negate", x))
    module = hb.module(hb.op("exponential", kept))
    entry = pad_to_bounds(module, {"b": 16}).module.entry
    assert entry.root.attrs["dynamic_rows"] == "0:b"
    assert all("dynamic_rows" not in i.attrs for i in entry.instructions if i.opcode == "select")
    assert any(i.attrs.get("dynamic_rows") == "0:b" for i in entry.instructions if i.opcode == "compare")


def test_a_mask_is_marked_for_a_dimension_it_does_not_mask_and_values_for_their_outermost():
    """Softmax rows over a symbolic last dimension: (4, b, s) scores; the masks before the
    reductions over s define the padding along s only, so they are marked for b (dimension
    1, the outermost symbolic one); the other values are marked for b too."""
    hb = HloBuilder("m")
    x = hb.parameter(arr(4, B, S), "x")
    peak = hb.op("reduce", x, hb.constant(-np.inf, F32), dimensions=(2,), to_apply=scalar_computation("maximum", F32))
    e = hb.op("exponential", hb.op("subtract", x, hb.op("broadcast", peak, shape=arr(4, B, S), dimensions=(0, 1))))
    module = hb.module(e)
    padded = pad_to_bounds(module, {"b": 8, "s": 16})
    entry = padded.module.entry
    masks = [i for i in entry.instructions if i.opcode == "select"]
    assert masks and all(i.attrs.get("dynamic_rows") == "1:b" for i in masks)
    assert entry.root.attrs["dynamic_rows"] == "1:b"
    _, compiled = _compiled(module, {"b": 8, "s": 16})
    bounded = [i for i in compiled.entry.instructions if "bounded_rows" in i.attrs]
    assert bounded and all(i.attrs["bounded_rows"][1] == 1 for i in bounded)


def test_a_mask_of_its_only_symbolic_dimension_is_not_marked():
    hb = HloBuilder("m")
    x = hb.parameter(arr(4, S), "x")
    module = hb.module(hb.op("reduce", x, hb.constant(0.0, F32), dimensions=(1,), to_apply=scalar_computation("add", F32)))
    entry = pad_to_bounds(module, {"s": 16}).module.entry
    masks = [i for i in entry.instructions if i.opcode == "select"]
    assert masks and all("dynamic_rows" not in i.attrs for i in masks)


def test_a_merged_dimension_is_marked_with_its_expression():
    hb = HloBuilder("m")
    x = hb.parameter(arr(B, 2, 4), "x")
    module = hb.module(hb.op("exponential", hb.op("reshape", x, shape=arr(2 * B, 4))))
    padded = pad_to_bounds(module, {"b": 8})
    assert padded.module.entry.root.attrs["dynamic_rows"] == "0:2*b"


def _compiled(module, bounds):
    padded = pad_to_bounds(module, bounds)
    return padded, compile_module(padded.module).module


def test_fusions_whose_outputs_are_marked_get_the_size_parameter_as_their_bound():
    padded, module = _compiled(_sum_rows_and_tanh(), {"b": 16})
    entry = module.entry
    size = entry.parameters[-1]
    bounded = [i for i in entry.instructions if "bounded_rows" in i.attrs]
    assert bounded, module.to_text()
    for fusion in bounded:
        assert fusion.opcode == "fusion"
        number, dimension = fusion.attrs["bounded_rows"]
        assert fusion.operands[number] is size and dimension == 0
        root = fusion.attrs["calls"].root
        for out in (root.operands if root.opcode == "tuple" else [root]):
            assert out.attrs["dynamic_rows"] == "0:b"
    # the column sums (rows 8, static) come from a fusion that computes everything
    sums = [i for i in entry.instructions if i.opcode == "fusion" and i.shape == arr(8)]
    assert all("bounded_rows" not in i.attrs for i in sums)
    verify_module(module)


def test_a_mask_that_a_kernel_outputs_is_computed_whole():
    """x^T y contracts over b: both operands are masked to 0 there; a fusion whose root is
    such a mask (the dot reads its padding) must not be bounded."""
    hb = HloBuilder("m")
    x = hb.parameter(arr(B, 64), "x")
    y = hb.parameter(arr(B, 48), "y")
    dot = hb.op("dot", hb.op("exponential", x), hb.op("exponential", y), lhs_contracting_dims=(0,),
                rhs_contracting_dims=(0,))
    padded, module = _compiled(hb.module(dot), {"b": 32})
    fusions = [i for i in module.entry.instructions if i.opcode == "fusion"]
    masks = [f for f in fusions if f.attrs["calls"].root.opcode == "select"]
    assert masks, module.to_text()
    for f in fusions:
        root = f.attrs["calls"].root
        if "bounded_rows" in f.attrs:
            assert root.opcode != "select" and root.attrs.get("dynamic_rows") == "0:b"
    assert all("bounded_rows" not in f.attrs for f in masks)


def test_a_row_count_other_than_a_symbol_is_computed_once_in_entry():
    hb = HloBuilder("m")
    x = hb.parameter(arr(B, 2, 4), "x")
    r = hb.op("reshape", x, shape=arr(2 * B, 4))
    out = hb.tuple(hb.op("exponential", r), hb.op("tanh", hb.op("negate", r)))
    padded, module = _compiled(hb.module(out), {"b": 8})
    entry = module.entry
    bounded = [i for i in entry.instructions if "bounded_rows" in i.attrs]
    assert bounded
    sizes = {id(f.operands[f.attrs["bounded_rows"][0]]) for f in bounded}
    assert len(sizes) == 1
    size = bounded[0].operands[bounded[0].attrs["bounded_rows"][0]]
    assert size.opcode == "multiply" and size.shape == arr(dtype=S32)
    assert {o.opcode for o in size.operands} == {"parameter", "constant"}
    assert [int(np.asarray(o.literal)) for o in size.operands if o.opcode == "constant"] == [2]


def test_lone_dots_with_marked_rows_are_wrapped_and_bounded():
    hb = HloBuilder("m")
    x = hb.parameter(arr(B, 64), "x")
    w = hb.parameter(arr(64, 32), "w")
    dot = hb.op("dot", x, w, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    padded, module = _compiled(hb.module(dot), {"b": 16})
    root = module.entry.root
    assert root.opcode == "fusion" and root.attrs["kind"] == "kOutput" and "bounded_rows" in root.attrs
    assert root.attrs["calls"].root.opcode == "dot"


def test_static_modules_are_left_alone():
    hb = HloBuilder("m")
    x = hb.parameter(arr(16, 8), "x")
    module = compile_module(hb.module(hb.op("tanh", hb.op("exponential", x)))).module
    assert not bound_kernel_rows(module)
    text = module.to_text()
    assert "bounded_rows" not in text and "dynamic_rows" not in text
