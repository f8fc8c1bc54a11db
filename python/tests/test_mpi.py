"""qobs.mpi.reduce_statistics over mpi4py (skipped without mpi4py). Run alone it is one
rank; under `mpirun -n 3 python -m pytest python/tests/test_mpi.py` every rank checks
the reduction against the single-process reduce_statistics of all ranks' slices."""

import numpy as np
import pytest

import qobs

MPI = pytest.importorskip("mpi4py.MPI")


def _slice(rank: int) -> np.ndarray:
    rng = np.random.default_rng(100 + rank)
    return (rng.standard_normal((8, 16)) * (rank + 1) / 3).astype(np.float32)


@pytest.mark.parametrize("name", ["minmax", "static_minmax", "mse"])
def test_reduce_over_comm_is_single_process_reduction(name):
    from qobs.mpi import reduce_statistics

    comm = MPI.COMM_WORLD
    args = qobs.QuantizationArgs(num_bits=8, strategy="channel")
    load = qobs.Observer.load_from_registry
    expected_ranks = []
    for r in range(comm.Get_size()):
        o = load(name, base_name="weight", args=args)
        o(_slice(r))
        expected_ranks.append(o.export_statistics())
    expected = qobs.reduce_statistics(expected_ranks)
    mine = load(name, base_name="weight", args=args)
    mine(_slice(comm.Get_rank()))
    got = reduce_statistics(mine, comm)
    assert got.serialize() == expected.serialize()
    assert mine.export_statistics().serialize() == expected.serialize()
