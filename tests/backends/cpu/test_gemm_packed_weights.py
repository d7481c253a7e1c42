"""A dot's constant B in GEMM panels (dot/plan.py GemmPanels, a form of
runtime/parameter_forms.py): the panels' layout against a loop that builds it, which dots'
weights get the form and which keep their layout, and that the prepacked GEMM gives exactly
the bits the GEMM that packs B on every call gives (f32 and f64, n not a multiple of NR, k
not a multiple of KC, transposed B, a batch of products, products cut into column blocks on
the pool, a tuned blocking, an epilogue fusion, the bounded rows of a padded module), on
fresh random inputs, and that both agree with NumPy float64."""
from __future__ import annotations

import numpy as np
import pytest

import pyxla
from pyxla.backends import get_backend
from pyxla.backends.cpu import codegen
from pyxla.backends.cpu.dot import gemm as gemm_kernel
from pyxla.backends.cpu.dot import tasks as dot_tasks
from pyxla.backends.cpu.dot.plan import GemmPanels
from pyxla.backends.cpu.runtime.executable import FormedArgument
from pyxla.backends.cpu.tuning.params import GemmParams
from pyxla.backends.cpu.tuning.selection import Selection, gemm_key, pinned
from pyxla.hlo import parse_module
from pyxla.runtime.memory import ALIGNMENT

DTYPES = {"f32": np.float32, "f64": np.float64}


def _reference_panels(b: np.ndarray, kc: int, nr: int) -> np.ndarray:
    """B [k, n] in panels, element by element: slice by slice of kc depths, panel by panel of
    nr columns, depth by depth, column by column; zero past the last column."""
    k, n = b.shape
    out = []
    for pc in range(0, k, kc):
        for jr in range(0, n, nr):
            for p in range(pc, min(pc + kc, k)):
                out.extend(b[p, j] if j < n else 0.0 for j in range(jr, jr + nr))
    return np.array(out, b.dtype)


@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
@pytest.mark.parametrize("k,n,kc,nr,transposed,batch", [(7, 5, 4, 4, False, 1), (13, 9, 5, 4, True, 1),
                                                         (8, 8, 8, 8, False, 3), (11, 17, 3, 8, True, 2)])
def test_panels_lie_as_the_kernel_reads_them(rng, dtype_name, k, n, kc, nr, transposed, batch):
    dt = DTYPES[dtype_name]
    form = GemmPanels(dtype_name, batch, k, n, transposed, nr, GemmParams(6, kc, 72, 1024))
    value = rng.standard_normal((batch, n, k) if transposed else (batch, k, n)).astype(dt)
    packed = form.pack(value)
    assert packed.dtype == dt and packed.flags.c_contiguous and packed.ctypes.data % ALIGNMENT == 0
    assert packed.size == batch * k * form.padded_n
    for p in range(batch):
        b = value[p].T if transposed else value[p]
        want = _reference_panels(b, kc, nr)
        assert np.array_equal(packed[p * k * form.padded_n:(p + 1) * k * form.padded_n], want)


def _module(t: str, m: int, k: int, n: int, transposed: bool = False, batch: tuple = (), epilogue: bool = False,
            weight_also: str = "") -> str:
    nb = len(batch)
    lead = "".join(f"{d}," for d in batch)
    dims = ",".join(map(str, range(nb)))
    batch_dims = f"lhs_batch_dims={{{dims}}}, rhs_batch_dims={{{dims}}}, " if nb else ""
    rhs = f"{lead}{n},{k}" if transposed else f"{lead}{k},{n}"
    rc = nb + 1 if transposed else nb
    root = "" if epilogue or weight_also else "ROOT "
    tail = ""
    if epilogue:
        tail = f"""  c = {t}[{n}] parameter(2)
  cb = {t}[{lead}{m},{n}] broadcast(c), dimensions={{{nb + 1}}}
  s = {t}[{lead}{m},{n}] add(d, cb)
  ROOT r = {t}[{lead}{m},{n}] tanh(s)
"""
    elif weight_also:
        tail = weight_also
    return f"""HloModule packed
ENTRY main {{
  a = {t}[{lead}{m},{k}] parameter(0)
  w = {t}[{rhs}] parameter(1)
  {root}d = {t}[{lead}{m},{n}] dot(a, w), {batch_dims}lhs_contracting_dims={{{nb + 1}}}, rhs_contracting_dims={{{rc}}}
{tail}}}
"""


def _compile(text: str, monkeypatch, constant: bool, min_work: int = 0, prepacked: list | None = None):
    monkeypatch.setattr(codegen, "OWN_GEMM_MIN_WORK", min_work)
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")   # code generation runs (the spy sees it)
    emit = dot_tasks.emit_own_gemm

    def spy(*args, **kwargs):
        if prepacked is not None:
            prepacked.append(kwargs.get("prepacked_b", False))
        return emit(*args, **kwargs)

    monkeypatch.setattr(dot_tasks, "emit_own_gemm", spy)
    return get_backend("cpu").compile(parse_module(text), constant_parameters=(1,) if constant else ())


def _both(text, monkeypatch, args, **kwargs):
    """(packed on every call, prepacked once, prepacked per call) results of the module."""
    plain = _compile(text, monkeypatch, False, **kwargs)
    seen: list = []
    formed = _compile(text, monkeypatch, True, prepacked=seen, **kwargs)
    assert isinstance(formed.parameter_forms.get(1), GemmPanels) and seen and all(seen)
    once = formed.prepare_argument(1, args[1])
    assert isinstance(once, FormedArgument)
    rest = list(args[2:])
    return (plain.run_unchecked(list(args))[0], formed.run_unchecked([args[0], once, *rest])[0],
            formed.run_unchecked(list(args))[0])


def _check(results, want, dtype_name):
    plain, once, per_call = results
    assert np.array_equal(plain, once) and np.array_equal(plain, per_call)
    tolerance = 1e-4 if dtype_name == "f32" else 1e-12
    np.testing.assert_allclose(plain, want, rtol=tolerance, atol=tolerance)


# m, k, n: n not a multiple of NR (16 / 32 for f32), k past KC (512 / 256), a single panel of
# B (n <= NR: A read in place), products cut into column blocks on the pool
SHAPES = [(37, 100, 45), (50, 600, 77), (129, 513, 33), (23, 70, 9), (96, 64, 300), (300, 40, 1000)]


@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("transposed", [False, True])
def test_prepacked_weights_give_the_same_bits(rng, monkeypatch, pool, dtype_name, m, k, n, transposed):
    dt = DTYPES[dtype_name]
    a = rng.standard_normal((m, k)).astype(dt)
    w = rng.standard_normal((n, k) if transposed else (k, n)).astype(dt)
    results = _both(_module(dtype_name, m, k, n, transposed), monkeypatch, [a, w])
    _check(results, a.astype(np.float64) @ (w.T if transposed else w).astype(np.float64), dtype_name)


@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
@pytest.mark.parametrize("pooled", [True, False])
def test_batch_of_products(rng, monkeypatch, pool, dtype_name, pooled):
    dt = DTYPES[dtype_name]
    batch, m, k, n = (2, 3), 19, 45, 37
    a = rng.standard_normal((*batch, m, k)).astype(dt)
    w = rng.standard_normal((*batch, n, k)).astype(dt)
    results = _both(_module(dtype_name, m, k, n, True, batch), monkeypatch, [a, w],
                    min_work=0 if pooled else 10 ** 12)
    _check(results, a.astype(np.float64) @ np.swapaxes(w, -1, -2).astype(np.float64), dtype_name)


@pytest.mark.parametrize("dtype_name", ["f32", "f64"])
def test_epilogue_fusion(rng, monkeypatch, pool, dtype_name):
    """The weight as a parameter of the fusion around the dot (bias + tanh on each block)."""
    dt = DTYPES[dtype_name]
    m, k, n = 70, 130, 90
    a, w = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
    c = rng.standard_normal(n).astype(dt)
    results = _both(_module(dtype_name, m, k, n, epilogue=True), monkeypatch, [a, w, c])
    _check(results, np.tanh(a.astype(np.float64) @ w + c), dtype_name)


@pytest.mark.parametrize("transposed", [False, True])
def test_tuned_blocking(rng, monkeypatch, pool, transposed):
    """A tuning database's blocking (KC 64, NC 64, MC 24) makes the panels and the kernel
    reading them: several slices of K and several column blocks of NC inside each block."""
    m, k, n = 90, 200, 150
    tuned = GemmParams(mr=4, kc=64, mc=24, nc=64, blocks_per_thread=2)
    selection = Selection({gemm_key("f32", 1, m, n, k, False, transposed): tuned})
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
    with pinned(selection):
        results = _both(_module("f32", m, k, n, transposed), monkeypatch, [a, w])
        form = _compile(_module("f32", m, k, n, transposed), monkeypatch, True).parameter_forms[1]
    assert (form.params.mr, form.params.kc, form.params.mc, form.params.nc) == (4, 64, 24, 64)
    _check(results, a.astype(np.float64) @ (w.T if transposed else w).astype(np.float64), "f32")


def test_tuned_blocking_without_whole_panels_keeps_the_layout(monkeypatch):
    """An NC that is not a whole number of panels: B keeps its layout (a column block's panels
    would not start at a panel)."""
    m, k, n = 40, 50, 100
    selection = Selection({gemm_key("f32", 1, m, n, k, False, False): GemmParams(nc=gemm_kernel.tiling("f32").nr + 1)})
    with pinned(selection):
        assert _compile(_module("f32", m, k, n), monkeypatch, True).parameter_forms == {}


@pytest.mark.parametrize("other_use", [
    "  ROOT t = (f32[40,60], f32[50,60]) tuple(d, w)\n",                        # an output
    "  e = f32[40,60] dot(w, w), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
    "  ROOT t = (f32[40,60], f32[40,60]) tuple(d, e)\n",                           # another dot's A
])
def test_other_uses_keep_the_layout(monkeypatch, other_use):
    text = _module("f32", 40, 50, 60, weight_also=other_use).replace("f32[40,60] dot(w, w)", "f32[60,60] dot(w, w)") \
        .replace("(f32[40,60], f32[40,60]) tuple(d, e)", "(f32[40,60], f32[60,60]) tuple(d, e)")
    assert _compile(text, monkeypatch, True).parameter_forms == {}


def test_matrix_vector_products_keep_the_layout(monkeypatch):
    """m of 1: the matrix-vector kernels read B where it lies."""
    assert _compile(_module("f32", 1, 50, 60), monkeypatch, True).parameter_forms == {}


def test_bounded_rows_of_a_padded_module(rng, monkeypatch, pool):
    """A padded module's dot stops at the run-time row count; its weight in panels gives the
    same bits in the valid rows."""
    import pyxla.numpy as pnp
    monkeypatch.setattr(codegen, "OWN_GEMM_MIN_WORK", 0)
    bound, k, n = 64, 48, 100
    w = rng.standard_normal((k, n)).astype(np.float32)
    f = pyxla.jit(lambda x, w: pnp.tanh(x @ w), polymorphic_shapes=("b, _", None),
                  shape_constraints=(f"b <= {bound}",), size_buckets={"b": (bound,)})
    bucket = f.bucket_executable(rng.standard_normal((bound, k)).astype(np.float32), w)
    assert "bounded_rows=" in bucket.compiled.as_text()
    module = bucket.compiled.module
    weight = next(p.parameter_number for p in module.entry.parameters if p.shape.dims == (k, n))
    backend = get_backend("cpu")
    monkeypatch.setenv("PYXLA_CACHE_DIR", "")
    plain = backend.compile(module)
    formed = backend.compile(module, constant_parameters=(weight,))
    assert isinstance(formed.parameter_forms.get(weight), GemmPanels)
    for size in (1, 7, bound - 1):
        x = np.full((bound, k), np.nan, np.float32)
        x[:size] = rng.standard_normal((size, k))
        args = [x if p.shape.dims == (bound, k) else w if p.parameter_number == weight else np.array(size, np.int32)
                for p in module.entry.parameters]
        want = plain.run_flat(args)[0][:size]
        args[weight] = formed.prepare_argument(weight, w)
        got = formed.run_unchecked(args)[0][:size]
        assert np.isfinite(got).all() and np.array_equal(got, want), size
        np.testing.assert_allclose(got, np.tanh(x[:size].astype(np.float64) @ w), rtol=2e-5, atol=2e-5)
