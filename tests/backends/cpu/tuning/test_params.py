"""Parameters: their JSON form, the cost model's defaults, the tolerance per route."""
import pytest

from pyxla.backends.cpu.tuning.params import (
    ConvParams,
    GemmParams,
    conv_slice_bytes,
    from_json,
    gemm_defaults,
    to_json,
    tolerance,
)


def test_json_round_trip():
    for p in (GemmParams(mr=4, kc=256, mc=96, nc=2048, blocks_per_thread=1), GemmParams(),
              ConvParams(route="tiles", positions=5, prefetch_rows=0), ConvParams(route="winograd", winograd_tile=2)):
        assert from_json(to_json(p)) == p


@pytest.mark.parametrize("bad", [None, [], {"kind": "tpu"}, {"kind": "gemm", "kc": "big"},
                                 {"kind": "gemm", "kc": -1}, {"kind": "gemm", "kc": True},
                                 {"kind": "conv", "unroll_everything": 1}, {"kind": "conv", "route": 3}])
def test_malformed_parameters_are_refused(bad):
    with pytest.raises(ValueError):
        from_json(bad)


def test_gemm_defaults_are_the_measured_tables_on_the_measured_caches():
    # Zen 3 (AVX2): 32 KiB L1, 512 KiB L2, 32 MiB L3; the Xeon (AVX-512): 48 KiB, 2 MiB, 32 MiB
    zen3 = {"L1": 32 << 10, "L2": 512 << 10, "L3": 32 << 20}
    xeon = {"L1": 48 << 10, "L2": 2 << 20, "L3": 32 << 20}
    assert gemm_defaults(32, 4, zen3) == GemmParams(6, 512, 72, 1024, 2)
    assert gemm_defaults(32, 8, zen3) == GemmParams(6, 512, 36, 1024, 2)
    assert gemm_defaults(64, 4, xeon) == GemmParams(8, 256, 128, 1024, 2)
    assert gemm_defaults(64, 8, xeon) == GemmParams(8, 256, 64, 1024, 2)
    assert gemm_defaults(32, 4, {}) == GemmParams(6, 512, 72, 1024, 2)   # caches unknown: the table


def test_gemm_defaults_shrink_on_smaller_caches():
    small = gemm_defaults(32, 4, {"L1": 16 << 10, "L2": 128 << 10, "L3": 1 << 20})
    # an NR-wide panel KC deep in L1, MC x KC in half of L2, KC x NC in half of L3
    assert small.kc * 16 * 4 <= 16 << 10
    assert small.mc * small.kc * 4 <= 64 << 10 and small.mc % small.mr == 0
    assert small.nc * small.kc * 4 <= 512 << 10 and small.nc % 16 == 0


def test_conv_slices_keep_their_sizes_on_the_measured_l1_and_shrink_below():
    assert conv_slice_bytes(1 << 15, {"L1": 32 << 10}, 1) == 1 << 15
    assert conv_slice_bytes(1 << 14, {"L1": 48 << 10}, 2) == 1 << 14
    assert conv_slice_bytes(1 << 15, {"L1": 16 << 10}, 1) == 1 << 14
    assert conv_slice_bytes(1 << 15, {}, 1) == 1 << 15


def test_tolerance_is_exact_on_the_same_route_and_both_errors_across_routes():
    assert tolerance("gemm", "gemm", False) == 0.0
    assert tolerance("winograd4", "winograd4", False) == 0.0
    across = tolerance("winograd4", "tiles", False)
    assert 0 < across < 1e-4
    assert tolerance("winograd4", "tiles", True) < across * 1e-6
