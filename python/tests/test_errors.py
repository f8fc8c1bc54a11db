"""Core error kinds arrive as the Python exception types the reference raises (R0.5)."""

import pickle

import numpy as np
import pytest

import qobs
from qobs import Observer, QuantizationArgs


def test_invalid_argument_is_value_error():
    with pytest.raises(ValueError, match="group_size"):
        QuantizationArgs(strategy="group")


def test_shape_error_is_value_error():
    # R3.2: 40 columns do not split into groups of 16
    with pytest.raises(ValueError):
        qobs.flatten_for_calibration(np.ones((4, 40), np.float32), "weight", QuantizationArgs(group_size=16))
    with pytest.raises(ValueError, match="divisible|divisble|group"):
        qobs.fake_quantize(np.ones((4, 40), np.float32), np.ones((4, 3), np.float32), None,
                           QuantizationArgs(group_size=16))


def test_dequantize_without_args_is_value_error():
    # R5.6.1: the reference (compressed-tensors 0.19) no longer infers the strategy from
    # the scale's shape; qobs refuses the same way, for every shape the old rule guessed.
    x_q = np.ones((4, 32), np.int8)
    for scale in (np.float32(0.5), np.ones(1, np.float32), np.ones((4, 1), np.float32),
                  np.ones((4, 2), np.float32), np.ones((2, 2), np.float32)):
        with pytest.raises(ValueError, match="R5.6.1"):
            qobs.dequantize(x_q, scale)
    args = QuantizationArgs(group_size=16)
    y = qobs.dequantize(x_q, np.full((4, 2), 0.5, np.float32), None, args)
    assert np.array_equal(np.asarray(y), np.full((4, 32), 0.5, np.float32))


def test_not_implemented_error():
    with pytest.raises(NotImplementedError):  # no storage dtype for 5-bit floats
        QuantizationArgs(num_bits=5, type="float")
    fp4_asym = QuantizationArgs(num_bits=4, type="float", symmetric=False, zp_dtype="float8_e4m3fn")
    with pytest.raises(NotImplementedError):  # R4.1 step 3: asymmetric FP4
        qobs.calculate_qparams(np.array([-1.0], np.float32), np.array([1.0], np.float32), fp4_asym)


def test_precondition_error_is_assertion_error():
    o = Observer.load_from_registry("minmax", base_name="input", args=QuantizationArgs())
    with pytest.raises(AssertionError, match="No statistics"):
        o.get_qparams()
    with pytest.raises(AssertionError, match="No statistics"):
        o.get_statistics()
    assert not hasattr(o, "min_vals")  # statistics exist only after an observation


def test_unknown_name_is_key_error():
    with pytest.raises(KeyError, match="no_such"):
        Observer.load_from_registry("no_such_observer", base_name="weight", args=QuantizationArgs())
    with pytest.raises(KeyError):
        qobs.preset_name_to_scheme("W9A9", ["Linear"])


def test_observer_name_normalization():
    for name in ("static_minmax", "Static-MinMax", "static minmax"):  # R6.2.1
        assert Observer.load_from_registry(name, base_name="input", args=QuantizationArgs()).name == "static_minmax"


def test_type_error():
    o = Observer.load_from_registry("memoryless_mse", base_name="weight", args=QuantizationArgs())
    with pytest.raises(TypeError, match="int8"):
        o(np.ones((2, 2), np.int8))  # MSE observers read float tensors (min-max ones take integers too)
    with pytest.raises(TypeError):
        Observer(base_name="weight", args=QuantizationArgs())  # abstract base: use a concrete class


def test_io_error_is_os_error():
    with pytest.raises(OSError):
        qobs.Statistics.deserialize(b"not statistics")
    good = Observer.load_from_registry("static_minmax", base_name="input", args=QuantizationArgs())
    blob = good(np.ones((2, 3), np.float32)).export_statistics().serialize()
    with pytest.raises(OSError):
        qobs.Statistics.deserialize(blob[: len(blob) // 2])  # truncated


def test_value_errors_from_observer_inputs():
    o = Observer.load_from_registry("memoryless_minmax", base_name="input", args=QuantizationArgs())
    with pytest.raises(ValueError, match="non-finite"):
        o(np.array([[1.0, np.nan]], np.float32))
    with pytest.raises(ValueError):
        Observer.load_from_registry("minmax", base_name="bias", args=QuantizationArgs())  # R3.1 base names
    with pytest.raises(ValueError):
        qobs.flatten_for_calibration(np.ones((2, 2), np.float32), "weight",
                                     QuantizationArgs(strategy="token", dynamic=True))


def test_args_pickle():
    a = QuantizationArgs(num_bits=4, group_size=64, symmetric=False)
    assert pickle.loads(pickle.dumps(a)) == a
