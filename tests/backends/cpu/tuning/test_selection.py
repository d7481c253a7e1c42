"""What a compile uses: the database's choice reaches the kernels, the executable reports it,
the executable cache key changes with it, and results stay within the route's rounding."""
import numpy as np
import pytest

from pyxla.backends.cpu.runtime.parallel import thread_count
from pyxla.backends.cpu.tuning import database, machine, selection
from pyxla.backends.cpu.tuning.database import Database, Record
from pyxla.backends.cpu.tuning.params import ConvParams, GemmParams
from pyxla.backends.cpu.tuning.selection import Selection, conv_key, kernel_keys, parameters_of, pinned
from pyxla.runtime import disk_cache

from .programs import (
    CONV,
    DOT,
    PLANES,
    compile_text,
    conv_inputs,
    conv_reference,
    dot_inputs,
    planes_inputs,
    planes_reference,
)


def _conv_key():
    exe = compile_text(CONV)
    (key,) = [k for k, kind in kernel_keys(exe.module).items() if kind == "conv"]
    return key


def _store(kernels: dict):
    db = Database(machine.identity())
    for key, params in kernels.items():
        db.kernels[key] = Record(params, "", None, None, "test")
    database.store(db)


def _executables() -> int:
    return disk_cache.info()["kinds"].get("executable", {}).get("entries", 0)


def test_the_next_compile_reads_the_database_and_reports_it():
    key = _conv_key()
    assert parameters_of(compile_text(CONV)) == {}
    _store({key: ConvParams(route="tiles", positions=5)})
    exe = compile_text(CONV)
    assert parameters_of(exe) == {key: {"kind": "conv", "route": "tiles", "positions": 5}}
    x, w = conv_inputs(np.random.default_rng(1))
    want = conv_reference(x, w)
    got = exe.run_flat([x, w])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_cache_key_changes_when_the_tuning_changes():
    key = _conv_key()
    before = _executables()
    compile_text(CONV)
    assert _executables() == before           # the same selection (none): a hit
    _store({key: ConvParams(route="tiles")})
    compile_text(CONV)
    assert _executables() == before + 1       # another selection: a miss, a new entry
    _store({key: ConvParams(route="tiles", prefetch_rows=8)})
    compile_text(CONV)
    assert _executables() == before + 2
    _store({key: ConvParams(route="tiles")})
    exe = compile_text(CONV)
    assert _executables() == before + 2       # back to an earlier selection: its entry again
    assert parameters_of(exe) == {key: {"kind": "conv", "route": "tiles"}}


def test_entries_of_other_kernels_do_not_change_the_key():
    compile_text(CONV)
    before = _executables()
    _store({"convolution of another program": ConvParams(route="tiles")})
    compile_text(CONV)
    assert _executables() == before


@pytest.mark.parametrize("params", [ConvParams(route="tiles"), ConvParams(route="winograd", winograd_tile=4),
                                    ConvParams(route="winograd", winograd_tile=2, positions=4, tasks_per_thread=1),
                                    ConvParams(route="tiles", positions=4, block_bytes=1 << 16, slice_bytes=1 << 13,
                                               prefetch_rows=0, tasks_per_thread=8),
                                    ConvParams(route="tiles", unroll=4, positions=7)])
def test_every_route_and_plan_computes_the_convolution(params):
    key = _conv_key()
    x, w = conv_inputs(np.random.default_rng(2))
    want = conv_reference(x, w)
    with pinned(Selection({key: params})):
        exe = compile_text(CONV)
    got = exe.run_flat([x, w])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
    assert parameters_of(exe) == {key: selection.to_json(params)}


def test_a_tuned_route_gets_its_own_kernel_form():
    """A constant kernel is reordered for the route the database chose, not the default's."""
    from pyxla.backends.cpu import BACKEND
    from pyxla.backends.cpu.conv.tile_plan import KernelPanels
    from pyxla.backends.cpu.conv.winograd import WinogradKernel
    from pyxla.hlo.stablehlo import parse_program
    key = _conv_key()
    x, w = conv_inputs(np.random.default_rng(3))
    want = conv_reference(x, w)
    for params, form in ((ConvParams(), WinogradKernel), (ConvParams(route="tiles"), KernelPanels)):
        _store({key: params})
        exe = BACKEND.compile(parse_program(CONV), constant_parameters=(1,))
        assert isinstance(exe.parameter_forms[1], form)
        got = exe.run_unchecked([x, exe.prepare_argument(1, w)])[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


@pytest.mark.skipif(thread_count() < 2, reason="the tuned blocks per thread need the pool")
def test_tuned_gemm_blocking_is_bit_identical_and_loads_from_the_cache():
    exe = compile_text(DOT)
    (key,) = kernel_keys(exe.module)
    a, b = dot_inputs(np.random.default_rng(4))
    default = exe.run_flat([a, b])[0]
    np.testing.assert_allclose(default, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    tuned = GemmParams(mr=4, kc=64, mc=32, nc=48, blocks_per_thread=4)
    _store({key: tuned})
    first = compile_text(DOT)
    entries = _executables()
    again = compile_text(DOT)                 # from the cache: its kernel found again by symbol
    assert _executables() == entries
    for e in (first, again):
        assert parameters_of(e) == {key: selection.to_json(tuned)}
        assert np.array_equal(e.run_flat([a, b])[0], default)   # the same sums, in the same order


def test_tuning_can_be_turned_off(monkeypatch):
    key = _conv_key()
    _store({key: ConvParams(route="tiles")})
    monkeypatch.setenv("PYXLA_TUNING", "off")
    assert parameters_of(compile_text(CONV)) == {}


def test_conv_key_names_shapes_layouts_and_attributes():
    from pyxla.hlo.stablehlo import parse_program
    conv = parse_program(CONV).entry.root
    key = conv_key(conv)
    assert "f32[2,16,16,16]{3,2,1,0}" in key and "dim_labels=b01f_01io->b01f" in key and "size=3x3" in key
    other = parse_program(CONV.replace("pad=1_1x1_1", "pad=1_1x1_1 rhs_reversal=1x1"))
    assert conv_key(other.entry.root) != key


@pytest.mark.parametrize("params", [ConvParams(route="planes", tasks_per_thread=1, prefetch_rows=0, slice_bytes=1 << 13),
                                    ConvParams(route="planes", tasks_per_thread=8, prefetch_rows=64),
                                    ConvParams(route="tiles")])
@pytest.mark.parametrize("constant_kernel", [False, True])
def test_planes_and_tiles_compute_a_1x1_nchw_convolution(params, constant_kernel):
    from pyxla.backends.cpu import BACKEND
    from pyxla.backends.cpu.conv.tiles import routes
    from pyxla.hlo.stablehlo import parse_program
    conv = parse_program(PLANES).entry.root
    assert routes(conv)[0] == "planes" and "tiles" in routes(conv)
    x, w = planes_inputs(np.random.default_rng(9))
    want = planes_reference(x, w)
    with pinned(Selection({conv_key(conv): params})):
        exe = BACKEND.compile(parse_program(PLANES), constant_parameters=(1,) if constant_kernel else ())
    got = exe.run_unchecked([x, exe.prepare_argument(1, w) if constant_kernel else w])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
