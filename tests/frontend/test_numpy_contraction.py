"""matmul (`@`), dot, vdot, inner, outer, tensordot and einsum against NumPy, eagerly and
under jit: broadcasting batch dims, 1-D operands, dtype promotion, einsum's forms."""
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyxla.numpy as pnp
from pyxla.errors import TraceError

from .pnp_testing import REDUCTION_TOL, check_against_numpy, jit

SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def make(rng, shape, dtype=np.float32):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-5, 6, shape).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    return rng.standard_normal(shape).astype(dtype)


def close(pnp_call, np_call, *args):
    check_against_numpy(pnp_call, np_call, *args, tol=REDUCTION_TOL)


@SETTINGS
@given(batch=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3),
       mkn=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
       vectors=st.sampled_from(["", "a", "b", "ab"]),
       dtypes=st.sampled_from([(np.float32, np.float32), (np.float32, np.float64), (np.int32, np.int8),
                               (np.float16, np.float16), (np.int64, np.float32)]))
def test_matmul_broadcasts_batches_and_promotes(batch, mkn, vectors, dtypes, rng):
    m, k, n = mkn
    sa = (k,) if "a" in vectors else batch.input_shapes[0] + (m, k)
    sb = (k,) if "b" in vectors else batch.input_shapes[1] + (k, n)
    a, b = make(rng, sa, dtypes[0]), make(rng, sb, dtypes[1])
    close(pnp.matmul, np.matmul, a, b)
    close(lambda x, y: pnp.asarray(x) @ y, lambda x, y: x @ y, a, b)


@pytest.mark.parametrize("sa, sb", [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)),
                                    ((2, 2, 3), (5, 3, 4)), ((4, 3), ()), ((), (2,))])
def test_dot_inner_outer_vdot(sa, sb, rng):
    a, b = make(rng, sa), make(rng, sb, np.float64)
    close(pnp.dot, np.dot, a, b)
    if sa and sb and sa[-1:] == sb[-1:]:
        close(pnp.inner, np.inner, a, b)
    close(pnp.outer, np.outer, a, b)
    if a.size == b.size:
        close(pnp.vdot, np.vdot, a, b)


@pytest.mark.parametrize("axes, sa, sb", [(2, (2, 3, 4), (3, 4, 5)), (0, (2, 3), (4,)), (1, (2, 3), (3, 2)),
                                          (([0, 2], [1, 0]), (3, 2, 4), (4, 3, 5)), ((1, 0), (2, 3), (3, 5))])
def test_tensordot(axes, sa, sb, rng):
    a, b = make(rng, sa), make(rng, sb)
    close(lambda x, y: pnp.tensordot(x, y, axes), lambda x, y: np.tensordot(x, y, axes), a, b)


EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("iij->j", [(3, 3, 2)]),
    ("ij->", [(3, 4)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("i...->...", [(3, 2, 4)]),
    ("ijk,kl,lm->im", [(2, 3, 4), (4, 5), (5, 2)]),
    ("ab,bc,ca->", [(3, 4), (4, 5), (5, 3)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("i,jk->ijk", [(2,), (3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ijk->kij", [(2, 3, 4)]),
    ("ij,kj->", [(1, 4), (3, 4)]),
]


@pytest.mark.parametrize("subscripts, shapes", EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum(subscripts, shapes, rng):
    args = [make(rng, s) for s in shapes]
    close(lambda *xs: pnp.einsum(subscripts, *xs), lambda *xs: np.einsum(subscripts, *xs), *args)


def test_einsum_promotes_dtypes(rng):
    a, b = make(rng, (3, 4), np.int32), make(rng, (4,), np.float64)
    close(lambda x, y: pnp.einsum("ij,j->i", x, y), lambda x, y: np.einsum("ij,j->i", x, y), a, b)
    p, q = make(rng, (3, 4), np.int8), make(rng, (4, 2), np.int16)
    close(lambda x, y: pnp.einsum("ij,jk->ik", x, y), lambda x, y: np.einsum("ij,jk->ik", x, y), p, q)


def test_contraction_errors_name_function_and_shapes(rng):
    with pytest.raises(TraceError, match=r"matmul.*\(2, 3\).*\(4, 5\).*test_numpy_contraction\.py"):
        pnp.matmul(make(rng, (2, 3)), make(rng, (4, 5)))
    with pytest.raises(TraceError, match=r"matmul.*\(2, 2, 3\).*\(3, 3, 4\)"):
        jit(pnp.matmul)(make(rng, (2, 2, 3)), make(rng, (3, 3, 4)))
    with pytest.raises(TraceError, match=r"dot.*\(2, 3\).*\(2,\)"):
        pnp.dot(make(rng, (2, 3)), make(rng, (2,)))
    with pytest.raises(ValueError, match="subscripts"):
        pnp.einsum("ij,j->i", make(rng, (2, 3)))
    with pytest.raises(ValueError, match="0-d"):
        pnp.matmul(np.float32(2), make(rng, (2,)))
