"""Arrays across the boundary: zero copy, dtypes in and out, strides."""

import numpy as np
import pytest

import qobs
from qobs import QuantizationArgs


def _minmax(args, base="weight"):
    return qobs.Observer.load_from_registry("memoryless_minmax", base_name=base, args=args)


def test_numpy_input_is_read_in_place():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert qobs._qobs.data_ptr(x) == x.ctypes.data
    col = x[:, 1]  # strided view: same memory, no copy
    assert qobs._qobs.data_ptr(col) == x.ctypes.data + 4


def test_bound_weight_is_read_in_place_when_observed_later():
    # fusion binds a partner's weight; the partner observes it only when the group
    # needs its statistics (R6.10.3). Mutating the array in between must be visible:
    # the core holds a view of the caller's memory, not a copy.
    args = QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16,
                            scale_dtype="float8_e4m3fn")
    w1 = np.full((4, 32), 0.5, dtype=np.float32)
    w2 = np.full((4, 32), 0.5, dtype=np.float32)
    o1, o2 = _minmax(args), _minmax(args)
    qobs.fuse_observers([o1, o2], weights=[w1, w2])
    w2[0, 0] = 23.0  # after binding, before observation
    o1(w1)  # eager fused observation observes w2 as bound
    assert o2.has_statistics
    assert o2.max_vals[0, 0] == 23.0
    g1 = o1.get_qparams()["global_scale"]
    g2 = o2.get_qparams()["global_scale"]
    assert g1[0] == g2[0] == np.float32(2688.0 / 23.0)


def test_numpy_results_are_numpy_with_documented_dtypes():
    a = QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16, scale_dtype="float8_e4m3fn")
    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
    q = _minmax(a)(x).get_qparams()
    assert isinstance(q["scale"], np.ndarray) and q["scale"].dtype == np.float32
    # fp8 zero points: numpy has no float8, values come back widened to float32
    assert q["zero_point"].dtype == np.float32 and not q["zero_point"].any()
    assert q["global_scale"].dtype == np.float32 and q["global_scale"].shape == (1,)
    raw = qobs._qobs.calculate_qparams(np.array([-1.0], np.float32), np.array([1.0], np.float32),
                                       QuantizationArgs(type="float")._core)[1]
    assert raw.dtype == "float8_e4m3fn"  # the raw result still names its dtype


def test_float16_numpy_input():
    x = (np.arange(16, dtype=np.float16) - 8).reshape(2, 8)
    q = _minmax(QuantizationArgs(strategy="channel"))(x).get_qparams()
    assert q["scale"].dtype == np.float16  # scales keep the observed dtype (R4.1)
    assert q["scale"][0, 0] == np.float16(8 / 127.5)


def test_noncontiguous_numpy_equals_contiguous():
    base = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    xt = base.T  # (64, 16), Fortran order
    args = QuantizationArgs(num_bits=4, group_size=8)
    a = _minmax(args)(xt).get_qparams()
    b = _minmax(args)(np.ascontiguousarray(xt)).get_qparams()
    np.testing.assert_array_equal(a["scale"], b["scale"])
    sl = base[::2, 1::2]  # every other row and column
    c = qobs.flatten_for_calibration(sl, "weight", QuantizationArgs(strategy="channel"))
    np.testing.assert_array_equal(c, np.ascontiguousarray(sl)[None, :, None, :])


def test_unsupported_array_types():
    with pytest.raises(TypeError):
        _minmax(QuantizationArgs())([1.0, 2.0])  # lists are not arrays
    with pytest.raises(TypeError):
        _minmax(QuantizationArgs())(np.array(["a", "b"]))


def test_torch_input_is_read_in_place_and_returns_torch(torch):
    x = torch.randn(8, 32)
    assert qobs._qobs.data_ptr(x) == x.data_ptr()
    xt = x.t()
    assert qobs._qobs.data_ptr(xt) == x.data_ptr()
    q = _minmax(QuantizationArgs(strategy="channel"))(x).get_qparams()
    assert isinstance(q["scale"], torch.Tensor) and q["scale"].dtype == torch.float32
    assert q["zero_point"].dtype == torch.int8 and q["scale"].shape == (8, 1)


def test_bfloat16_torch_input_gives_bfloat16_scales(torch):
    w = torch.arange(24, dtype=torch.bfloat16).reshape(4, 6)
    q = _minmax(QuantizationArgs(strategy="channel"))(w).get_qparams()
    assert q["scale"].dtype == torch.bfloat16
    expect = (torch.tensor([5.0, 11.0, 17.0, 23.0], dtype=torch.bfloat16) / 127.5).reshape(4, 1)
    assert torch.equal(q["scale"], expect)
    # NVFP4: fp8 zero points come back as torch.float8_e4m3fn, the global scale as f32
    a = QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=3,
                         scale_dtype=torch.float8_e4m3fn)
    q = _minmax(a)(w).get_qparams()
    assert q["zero_point"].dtype == torch.float8_e4m3fn
    assert q["global_scale"].dtype == torch.float32 and q["global_scale"].item() == 117.0  # Q9
    assert q["scale"].tolist() == [[40, 96], [160, 208], [288, 320], [384, 448]]  # R4.4 example 3


def test_noncontiguous_torch_equals_contiguous(torch):
    w = torch.randn(64, 32, dtype=torch.bfloat16)
    wt = w.t()  # (32, 64), strides (1, 32)
    assert not wt.is_contiguous()
    args = QuantizationArgs(num_bits=4, group_size=16)
    a = qobs.Observer.load_from_registry("memoryless_mse", base_name="weight", args=args)(wt).get_qparams()
    b = qobs.Observer.load_from_registry("memoryless_mse", base_name="weight", args=args)(wt.contiguous()).get_qparams()
    assert torch.equal(a["scale"], b["scale"]) and torch.equal(a["zero_point"], b["zero_point"])
    sliced = w[1::3, ::2]
    f = qobs.flatten_for_calibration(sliced, "weight", QuantizationArgs(num_bits=4, group_size=8))
    assert torch.equal(f, sliced.contiguous().unflatten(-1, (-1, 8)).unsqueeze(0))


def test_torch_results_share_memory_with_the_core_result(torch):
    t = qobs._qobs.Tensor.copy_of(np.arange(6, dtype=np.float32))
    tt = t.torch()
    arr = np.asarray(t)
    arr[0] = 42.0
    assert tt[0].item() == 42.0


def test_torch_non_cpu_and_sparse_are_rejected(torch):
    with pytest.raises(TypeError):
        _minmax(QuantizationArgs())(torch.eye(4).to_sparse())
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="cpu"):
            _minmax(QuantizationArgs())(torch.ones(4, device="cuda"))


def test_mixed_kinds_return_torch(torch):
    s, z = qobs.calculate_qparams(np.array([-3.0], np.float32), torch.tensor([1.0]), QuantizationArgs())
    assert isinstance(s, torch.Tensor) and s.item() == pytest.approx(3 / 127.5)


def test_float16_torch_input_gives_float16_scales(torch):
    w = (torch.arange(16, dtype=torch.float16) - 8).reshape(2, 8)
    q = _minmax(QuantizationArgs(strategy="channel"))(w).get_qparams()
    assert q["scale"].dtype == torch.float16
    assert q["scale"][0, 0].item() == torch.tensor(8 / 127.5, dtype=torch.float16).item()


def test_bound_torch_weight_is_read_in_place(torch):
    args = QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16,
                            scale_dtype=torch.float8_e4m3fn)
    w1 = torch.full((4, 32), 0.5, dtype=torch.bfloat16)
    w2 = torch.full((8, 64), 0.5, dtype=torch.bfloat16)[:, ::2]  # non-contiguous view
    o1, o2 = _minmax(args), _minmax(args)
    qobs.fuse_observers([o1, o2], weights=[w1, w2])
    w2[3, 5] = -11.0  # writes through the view into the bound memory
    o1(w1)
    assert o2.min_vals[3, 0].item() == -11.0
    assert o1.get_qparams()["global_scale"].item() == 244.0  # bf16 absmax 11 (R4.2 example)
