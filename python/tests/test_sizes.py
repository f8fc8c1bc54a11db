"""Sizes computed from user-given shapes, group_size and block_structure never wrap:
an overflowing size is a ValueError naming the option and the int64 limit, never a
crash (formerly block_structure=[2**31, 2**31] padded a small weight into a buffer
whose byte count wrapped to 0, and the padding copy wrote far past it)."""

import numpy as np
import pytest

import qobs
from qobs import Observer, QuantizationArgs

INT64_MAX = "9223372036854775807"


def test_block_structure_2_31_observer_raises_value_error():
    args = QuantizationArgs(strategy="block", block_structure=[2**31, 2**31])
    obs = Observer.load_from_registry("memoryless_minmax", base_name="weight", args=args)
    w = np.arange(24, dtype=np.float32).reshape(4, 6)
    with pytest.raises(ValueError, match=r"block_structure \[2147483648, 2147483648\].*" + INT64_MAX):
        obs(w)
    assert not obs.has_statistics


def test_block_structure_2_31_flatten_raises_value_error():
    args = QuantizationArgs(strategy="block", block_structure=[2**31, 2**31])
    w = np.arange(24, dtype=np.float32).reshape(4, 6)
    with pytest.raises(ValueError, match=r"block padding of shape \(4, 6\)"):
        qobs.flatten_for_calibration(w, "weight", args)


def test_block_structure_beyond_int64_raises_value_error():
    with pytest.raises(ValueError, match="block_structure element 9223372036854775808 is out of the int64 range"):
        QuantizationArgs(strategy="block", block_structure=[2**63, 1])


def test_huge_group_size_raises_value_error():
    w = np.ones((4, 8), np.float32)
    args = QuantizationArgs(strategy="group", group_size=2**63 - 1)
    obs = Observer.load_from_registry("memoryless_minmax", base_name="weight", args=args)
    with pytest.raises(ValueError, match="group_size 9223372036854775807 does not divide 8"):
        obs(w)
    with pytest.raises(ValueError, match="group_size 9223372036854775808 is out of the int64 range"):
        QuantizationArgs(strategy="group", group_size=2**63)
    with pytest.raises(ValueError, match="num_bits"):
        QuantizationArgs(num_bits=2**40)


def test_shape_product_overflowing_int64_raises_value_error():
    with pytest.raises(ValueError, match=r"element count of shape \(2147483648, 2147483648, 2147483648\).*" + INT64_MAX):
        qobs.Tensor.from_bytes("float32", [2**31, 2**31, 2**31], b"")
    # 2**62 elements fit, their 2**64 bytes do not
    with pytest.raises(ValueError, match=r"bytes of a float32 tensor of shape \(2147483648, 2147483648\)"):
        qobs.Tensor.from_bytes("float32", [2**31, 2**31], b"")
