"""The conformance corpus on the native CPU backend.

A case either matches XLA's outputs within its tolerances, or is refused at compile time
with NotImplementedError naming the opcode. REFUSED lists the cases refused today: a case
refused but not listed fails (a regression), and a listed case that now compiles fails too,
so the list shrinks as the backend grows and never hides a wrong answer.
"""
import pytest

from pyxla.backends import get_backend
from pyxla.conformance import corpus_case_dirs, load_case, run_case
from pyxla.hlo import parse_module

CASES = corpus_case_dirs()

REFUSED = {
    ("cond_pred", "module"), ("cond_pred", "optimized"),
    ("conv2d_nchw_dilated_padded", "module"), ("conv2d_nchw_dilated_padded", "optimized"),
    ("conv2d_nhwc_stride_same", "module"), ("conv2d_nhwc_stride_same", "optimized"),
    ("conv_depthwise_groups", "module"), ("conv_depthwise_groups", "optimized"),
    ("conv_grad_input_and_kernel", "module"), ("conv_grad_input_and_kernel", "optimized"),
    ("conv_transpose_and_1d", "module"), ("conv_transpose_and_1d", "optimized"),
    ("cumulative_ops", "module"), ("cumulative_ops", "optimized"),
    ("misc_opt_barrier_remat", "module"),
    ("model_cnn_batchnorm", "module"), ("model_cnn_batchnorm", "optimized"),
    ("model_rnn_scan", "module"), ("model_rnn_scan", "optimized"),
    ("model_transformer_block", "optimized"),
    ("reduce_sum_mean_axes", "optimized"),
    ("reduce_window_pooling", "module"), ("reduce_window_pooling", "optimized"),
    ("rng_bit_generator_rbg", "module"), ("rng_bit_generator_rbg", "optimized"),
    ("rng_threefry_uniform_normal", "module"), ("rng_threefry_uniform_normal", "optimized"),
    ("scan_running_stats", "module"), ("scan_running_stats", "optimized"),
    ("select_and_scatter_maxpool_grad", "module"), ("select_and_scatter_maxpool_grad", "optimized"),
    ("sort_argsort_stable", "module"), ("sort_argsort_stable", "optimized"),
    ("sort_multi_operand", "module"), ("sort_multi_operand", "optimized"),
    ("sort_top_k", "module"), ("sort_top_k", "optimized"),
    ("sort_values_nan_zero", "module"), ("sort_values_nan_zero", "optimized"),
    ("switch_index", "module"), ("switch_index", "optimized"),
    ("while_fori_loop", "module"), ("while_fori_loop", "optimized"),
    ("while_loop_dynamic", "module"), ("while_loop_dynamic", "optimized"),
}


@pytest.mark.parametrize("level", ["module", "optimized"])
@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_case_on_cpu(case_dir, level):
    case = load_case(case_dir)
    backend = get_backend("cpu")

    def run(text, inputs):
        return backend.compile(parse_module(text)).run_flat(inputs)

    try:
        problems = run_case(case, level, run)
    except NotImplementedError as e:
        assert (case.name, level) in REFUSED, f"newly refused: {e}"
        assert "the CPU backend cannot" in str(e)
        return
    assert (case.name, level) not in REFUSED, "compiles now: remove it from REFUSED"
    assert not problems, "\n".join(problems)
