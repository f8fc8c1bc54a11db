"""Mergeable statistics (export / serialize / merge) and observer fusion (R6.10)."""

import pickle

import numpy as np
import pytest

import qobs
from qobs import Observer, QuantizationArgs

RNG = np.random.default_rng(7)


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_export_serialize_import_round_trip():
    args = QuantizationArgs(num_bits=8, strategy="tensor")
    a = Observer.load_from_registry("static_minmax", base_name="input", args=args)
    a(_x(4, 16))
    stats = a.export_statistics()
    assert stats.observer == "static_minmax"
    names = {n: op for n, _, op in stats.items}
    assert names == {"min_vals": "min", "max_vals": "max"}  # R6.11.1
    blob = stats.serialize()
    assert isinstance(blob, bytes)
    back = qobs.Statistics.deserialize(blob)
    b = Observer.load_from_registry("static_minmax", base_name="input", args=args)
    b.import_statistics(back)
    qa, qb = a.get_qparams(), b.get_qparams()
    np.testing.assert_array_equal(qa["scale"], qb["scale"])
    assert pickle.loads(pickle.dumps(back)).serialize() == blob


def test_merge_static_minmax_equals_observing_everything():
    args = QuantizationArgs(num_bits=8, strategy="tensor")
    x1, x2 = _x(3, 8), _x(5, 8) * 3
    r1 = Observer.load_from_registry("static_minmax", base_name="input", args=args)(x1)
    r2 = Observer.load_from_registry("static_minmax", base_name="input", args=args)(x2)
    both = Observer.load_from_registry("static_minmax", base_name="input", args=args)(x1)(x2)
    r1.merge_statistics(r2)
    np.testing.assert_array_equal(r1.min_vals, both.min_vals)
    np.testing.assert_array_equal(r1.max_vals, both.max_vals)
    reduced = qobs.reduce_statistics([r2.export_statistics(), both.export_statistics()])
    np.testing.assert_array_equal(reduced.find("max_vals").numpy(), both.max_vals)


def test_merge_moving_average_is_the_mean():
    args = QuantizationArgs(num_bits=8, strategy="tensor")
    a = Observer.load_from_registry("minmax", base_name="input", args=args)(np.array([[-1.0, 2.0]], np.float32))
    b = Observer.load_from_registry("minmax", base_name="input", args=args)(np.array([[-3.0, 4.0]], np.float32))
    a.merge_statistics(b)  # AVG (R6.11.1)
    assert (a.min_vals[0], a.max_vals[0]) == (-2.0, 3.0)
    assert a.export_statistics().contributions == 2


def test_statistics_built_from_arrays():
    s = qobs.Statistics("static_minmax", [("min_vals", np.array([-2.0], np.float32), "min"),
                                          ("max_vals", np.array([6.0], np.float32), "max")])
    o = Observer.load_from_registry("static_minmax", base_name="input", args=QuantizationArgs())
    o.import_statistics(s)
    assert o.get_qparams()["scale"][0] == np.float32(6.0 / 127.5)
    with pytest.raises(ValueError):
        Observer.load_from_registry("mse", base_name="input", args=QuantizationArgs()).import_statistics(s)


def test_memoryless_observers_do_not_sync():
    o = Observer.load_from_registry("memoryless_minmax", base_name="input", args=QuantizationArgs())
    assert o.sync_table() == []
    assert dict(Observer.load_from_registry("imatrix_mse", base_name="weight",
                                            args=QuantizationArgs(group_size=8)).sync_table()) == \
        {"importance_sum": "sum", "importance_count": "sum"}


NVFP4 = dict(num_bits=4, type="float", strategy="tensor_group", group_size=16, scale_dtype="float8_e4m3fn")


def test_fused_group_shares_global_scale_and_deletes_cooperatively():
    args = QuantizationArgs(**NVFP4)
    weights = [_x(4, 32), _x(8, 32) * 5, _x(4, 32)]
    obs = [Observer.load_from_registry("memoryless_minmax", base_name="weight", args=args) for _ in weights]
    qobs.fuse_observers(obs, weights=weights)
    obs[0](weights[0])  # partners observe their bound weights (R6.10.3)
    assert all(o.has_statistics for o in obs)
    absmax = max(float(np.abs(w).max()) for w in weights)
    q = [obs[0].get_qparams(), obs[1].get_qparams()]
    assert obs[0].has_statistics and obs[2].has_statistics  # R6.10.4: not yet deleted
    q.append(obs[2].get_qparams())
    assert not any(o.has_statistics for o in obs)  # the last member deletes all
    g = [qq["global_scale"][0] for qq in q]
    assert g[0] == g[1] == g[2] == np.float32(2688.0 / np.float32(absmax))
    # the group repeats: a new observation cycle works the same way
    obs[1](weights[1])
    assert all(o.has_statistics for o in obs)


def test_fusing_mixed_strategies_is_an_assertion():
    tg = Observer.load_from_registry("memoryless_minmax", base_name="weight", args=QuantizationArgs(**NVFP4))
    ch = Observer.load_from_registry("memoryless_minmax", base_name="weight", args=QuantizationArgs(strategy="channel"))
    with pytest.raises(AssertionError, match="TENSOR_GROUP"):
        qobs.fuse_observers([tg, ch])
    qobs.fuse_observers([ch, None])  # no tensor_group member: nothing happens


def test_weight_observers_observe_once_until_consumed():
    o = Observer.load_from_registry("static_minmax", base_name="weight", args=QuantizationArgs())
    o(np.ones((2, 2), np.float32))
    o(np.full((2, 2), 9.0, np.float32))  # ignored (Q27)
    assert o.max_vals[0] == 1.0
    o.get_qparams()
    o(np.full((2, 2), 9.0, np.float32))
    assert o.max_vals[0] == 9.0


def test_observer_copies_carry_statistics():
    import copy

    args = QuantizationArgs(num_bits=8, strategy="tensor")
    o = Observer.load_from_registry("minmax", base_name="input", args=args, averaging_constant=0.5)
    o(np.array([[-1.0, 2.0]], np.float32))
    for c in (copy.deepcopy(o), pickle.loads(pickle.dumps(o))):
        assert type(c) is type(o) and c.args == o.args
        c(np.array([[-3.0, 4.0]], np.float32))
        assert (c.min_vals[0], c.max_vals[0]) == (-2.0, 3.0)  # EMA continued from the copy
    assert o.max_vals[0] == 2.0  # the original is unchanged
    fresh = copy.deepcopy(Observer.load_from_registry("static_minmax", base_name="input", args=args))
    assert not fresh.has_statistics
