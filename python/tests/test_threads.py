"""One observer shared by several Python threads: the binding releases the GIL around
the core's work, so each observer's calls are serialized by its own lock (formerly
concurrent observe / get_qparams corrupted the heap: "double free or corruption")."""

import threading

import numpy as np

from qobs import Observer, QuantizationArgs, fuse_observers

THREADS = 8
ROUNDS = 200


def _batches(seed, n):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((16, 64)).astype(np.float32) * (1 + i % 5) for i in range(n)]


def _run_threads(work):
    errors = []
    barrier = threading.Barrier(THREADS)

    def body(t):
        try:
            barrier.wait()
            work(t)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


def test_shared_static_minmax_observer_from_8_threads_matches_single_thread():
    # static_minmax keeps the running min / max: the result does not depend on the
    # order in which the threads' observations arrive.
    batches = [_batches(t, ROUNDS) for t in range(THREADS)]
    shared = Observer.load_from_registry("static_minmax", base_name="input", args=QuantizationArgs(
        num_bits=8, symmetric=False, strategy="tensor"))

    def work(t):
        for i, b in enumerate(batches[t]):
            shared(b)
            if i % 7 == 0:
                shared.get_statistics()
                shared.export_statistics()
                shared.has_statistics

    _run_threads(work)
    single = Observer.load_from_registry("static_minmax", base_name="input", args=QuantizationArgs(
        num_bits=8, symmetric=False, strategy="tensor"))
    for t in range(THREADS):
        for b in batches[t]:
            single(b)
    got, want = shared.get_qparams(), single.get_qparams()
    np.testing.assert_array_equal(np.asarray(got["scale"]), np.asarray(want["scale"]))
    np.testing.assert_array_equal(np.asarray(got["zero_point"]), np.asarray(want["zero_point"]))


def test_shared_weight_observer_observe_and_get_qparams_from_8_threads():
    # A memoryless weight observer: each observe + get_qparams pair races with the
    # other threads' pairs; every get_qparams returns the qparams of some complete
    # observation of the one weight (all identical) or finds no statistics.
    w = np.random.default_rng(0).standard_normal((32, 128)).astype(np.float32)
    args = QuantizationArgs(num_bits=4, symmetric=True, strategy="group", group_size=32)
    ref = Observer.load_from_registry("memoryless_mse", base_name="weight", args=args)
    ref(w)
    want = ref.get_qparams()
    shared = Observer.load_from_registry("memoryless_mse", base_name="weight", args=args)
    results = []

    def work(t):
        for _ in range(ROUNDS // 6):
            shared(w)
            try:
                q = shared.get_qparams()
            except AssertionError:  # another thread consumed the statistics first
                continue
            results.append(q)
            shared.delete_statistics()

    _run_threads(work)
    assert results
    for q in results:
        np.testing.assert_array_equal(np.asarray(q["scale"]), np.asarray(want["scale"]))
        np.testing.assert_array_equal(np.asarray(q["zero_point"]), np.asarray(want["zero_point"]))


def test_fused_observers_from_threads():
    # Fused tensor_group partners read each other's statistics: they share one lock.
    args = QuantizationArgs(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16,
                            scale_dtype="float8_e4m3fn", zp_dtype="float8_e4m3fn")
    ws = [np.random.default_rng(i).standard_normal((16, 64)).astype(np.float32) for i in range(3)]
    obs = [Observer.load_from_registry("memoryless_minmax", base_name="weight", args=args) for _ in ws]
    fuse_observers(obs)
    for o, w in zip(obs, ws):
        o.bind_weight(w)

    def work(t):
        o, w = obs[t % 3], ws[t % 3]
        for _ in range(ROUNDS // 6):
            o(w)
            o.get_global_scale()
            o.export_statistics()

    _run_threads(work)
