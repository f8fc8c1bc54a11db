"""nvfp4_expanded_imatrix (R6.12) and fouroversix (R6.13) through the Python package,
and the data-free error of the imatrix observers (R6.12.3, D15). Numbers against the
reference: test_golden.py."""

import numpy as np
import pytest

from qobs import Observer, QuantizationArgs
from qobs.observer import NVFP4ExpandedIMatrixObserver, NVFP4ExpandedMSEObserver

NVFP4 = dict(num_bits=4, type="float", strategy="tensor_group", group_size=16, scale_dtype="float8_e4m3fn")


def _w(rows=8, cols=64, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)


def test_fouroversix_warns_and_is_nvfp4_expanded_mse():
    with pytest.warns(UserWarning, match="alias for 'nvfp4_expanded_mse'"):
        alias = Observer.load_from_registry("fouroversix", base_name="weight", args=QuantizationArgs(**NVFP4))
    assert isinstance(alias, NVFP4ExpandedMSEObserver)
    assert alias.name == "nvfp4_expanded_mse"
    ref = Observer.load_from_registry("nvfp4_expanded_mse", base_name="weight", args=QuantizationArgs(**NVFP4))
    a, b = alias(_w()).get_qparams(), ref(_w()).get_qparams()
    for k in ("scale", "zero_point", "global_scale"):
        assert np.array_equal(a[k], b[k]), k


def test_expanded_imatrix_defaults():
    o = Observer.load_from_registry("nvfp4_expanded_imatrix", base_name="weight", args=QuantizationArgs(**NVFP4))
    assert isinstance(o, NVFP4ExpandedIMatrixObserver)
    p = o.grid_candidates()
    assert len(p) == 112 and p[0] == 1.0 and p[-1] == 1 - 111 / 200


@pytest.mark.parametrize("name", ["imatrix_mse", "nvfp4_expanded_imatrix"])
@pytest.mark.parametrize("strict", [False, True])
def test_attached_without_input_raises(name, strict):
    o = Observer.load_from_registry(name, base_name="weight", args=QuantizationArgs(**NVFP4), strict=strict)
    o.attach(64)
    with pytest.raises(ValueError, match="no importance data"):
        o(_w())


@pytest.mark.parametrize("name", ["imatrix_mse", "nvfp4_expanded_imatrix"])
def test_input_after_attach_changes_the_choice(name):
    args = QuantizationArgs(**NVFP4)
    uniform = Observer.load_from_registry(name, base_name="weight", args=args)  # never attached: R6.8.7
    weighted = Observer.load_from_registry(name, base_name="weight", args=args, strict=True)
    weighted.attach(64)
    x = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
    x[:, :4] *= 30
    weighted.accumulate_input(x)
    a, b = uniform(_w()).get_qparams()["scale"], weighted(_w()).get_qparams()["scale"]
    assert a.shape == b.shape == (8, 4)
    assert not np.array_equal(a, b)


WEIGHT_ARGS = [dict(num_bits=4, strategy="group", group_size=16), dict(num_bits=8, strategy="channel"),
               dict(num_bits=4, strategy="group", group_size=16, symmetric=False), NVFP4]


@pytest.mark.parametrize("name", ["memoryless_minmax", "memoryless_mse", "nvfp4_expanded_mse", "lsq_mse"])
@pytest.mark.parametrize("args", WEIGHT_ARGS)
def test_update_statistics_from_observed_equals_observing_the_value(name, args):
    # R3.1: llm-compressor's update_statistics_from_observed takes the value flattened to
    # (num_observations, *qparam_shape, group_size); the statistics are those of forward
    from qobs import flatten_for_calibration

    if name == "nvfp4_expanded_mse" and args is not NVFP4:
        pytest.skip("nvfp4_expanded_mse is for NVFP4")
    w = _w(16, 64, seed=3)
    a = Observer.load_from_registry(name, base_name="weight", args=QuantizationArgs(**args))
    b = Observer.load_from_registry(name, base_name="weight", args=QuantizationArgs(**args))
    qa = a(w).get_qparams()
    b.update_statistics_from_observed(flatten_for_calibration(w, "weight", QuantizationArgs(**args)))
    qb = b.get_qparams()
    for k in ("scale", "zero_point", "global_scale"):
        if qa.get(k) is None:
            assert qb.get(k) is None
        else:
            np.testing.assert_array_equal(np.asarray(qa[k], dtype=np.float64), np.asarray(qb[k], dtype=np.float64))


def test_update_statistics_from_observed_refuses_a_value_that_is_not_flattened():
    obs = Observer.load_from_registry("memoryless_minmax", base_name="weight",
                                      args=QuantizationArgs(num_bits=4, strategy="group", group_size=16))
    with pytest.raises(ValueError, match="R3.1"):
        obs.update_statistics_from_observed(np.ones(64, dtype=np.float32))
    with pytest.raises(ValueError, match="group_size 16"):
        obs.update_statistics_from_observed(np.ones((1, 4, 2, 8), dtype=np.float32))
