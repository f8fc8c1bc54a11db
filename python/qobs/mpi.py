"""Observer statistics reduced across MPI ranks with mpi4py (RULES R6.11).

``reduce_statistics(observer, comm)`` is the Python twin of the C++
``qobs::mpi::reduce_statistics`` (docs/CLI.md "MPI mode"): every rank's exported
statistics are gathered to every rank and combined in rank order by
``qobs.reduce_statistics``, so the result is bit for bit the single-process reduction of
the ranks' statistics in rank order, for the inexact float SUM / AVG as well as for
MIN / MAX. mpi4py is needed only for the communicator the caller passes in.
"""

from __future__ import annotations

from typing import Any

from ._qobs import Statistics
from ._qobs import reduce_statistics as _reduce_ranks

__all__ = ["reduce_statistics"]


def reduce_statistics(observer: Any, comm: Any) -> Statistics:
    """Replaces ``observer``'s statistics with their reduction over ``comm`` (an
    mpi4py communicator) and returns the reduced statistics."""
    local = observer.export_statistics()
    gathered = comm.allgather(local.serialize())
    merged = _reduce_ranks([Statistics.deserialize(b) for b in gathered])
    observer.import_statistics(merged)
    return merged
