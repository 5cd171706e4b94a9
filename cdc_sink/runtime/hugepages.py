"""Whether numpy asks Linux for transparent huge pages for its large arrays.

On Linux, numpy calls ``madvise(MADV_HUGEPAGE)`` on every array of 4 MB or more (when
``/sys/kernel/mm/transparent_hugepage/enabled`` is ``madvise``), so the first touch of
such an array takes 2 MB pages from the kernel. Where that is cheap it saves TLB misses;
where it is not, every fresh array the apply, the replay and the cold reads allocate pays
for it (a virtual machine whose huge-page faults are slow: docs/benchmarks-history.md, "Reopen of
10M rows x 20 columns + 100 segments, and cold reads", "numpy's huge pages"). Databases
commonly advise turning transparent huge pages off for the same reason (latency spikes on
faults and compaction).

pyarrow's default pool on Linux, the mimalloc Arrow bundles, does the same for its
arenas: it reserves them 1 GiB at a time with ``madvise(MADV_HUGEPAGE)``, and then
returns freed parts of them with ``MADV_DONTNEED``, which splits the huge pages again;
``MIMALLOC_ALLOW_THP=0`` stops it asking, which shortens a large bulk load and a cold
read of zstd-compressed pages where huge-page faults are slow (docs/benchmarks-history.md, "The
larger workload: 10M rows, 500K-event micro-batches", "pyarrow's mimalloc and
transparent huge pages"). mimalloc reads that variable once, when pyarrow's library is
loaded, so it can only be set for processes started later (:data:`MIMALLOC_THP_ENV`).

numpy reads ``NUMPY_MADVISE_HUGEPAGE`` (``0`` or ``1``) once, at import; this module
sets the same switch at run time, for a process whose numpy is already imported (a Spark
driver). The streaming job (``streaming_jobs/cdc_to_tablets.py --numpy-hugepages``)
turns it off by default in its driver and, through ``spark.executorEnv``, in the Python
workers of its executors, where it also sets :data:`MIMALLOC_THP_ENV` to ``0`` (the
driver's own pool is jemalloc by default, :mod:`cdc_sink.runtime.arrow_pool`). The library
itself never changes either: the setting is the process's, not a table's.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from cdc_sink.errors import InvalidArgument

__all__ = ["HUGEPAGE_ENV", "MIMALLOC_THP_ENV", "numpy_hugepages", "set_numpy_hugepages"]

#: numpy's own environment variable, read when numpy is imported.
HUGEPAGE_ENV = "NUMPY_MADVISE_HUGEPAGE"

#: mimalloc's switch for transparent huge pages (``0``: never), read when pyarrow's
#: library is loaded: it applies to processes started with it in their environment.
MIMALLOC_THP_ENV = "MIMALLOC_ALLOW_THP"


def _switch() -> Callable[[bool], bool]:
    """numpy's run-time switch (``numpy._core.multiarray``, numpy >= 1.20): sets the
    setting and returns the previous one."""
    from numpy._core import multiarray

    switch: Callable[[bool], bool] = getattr(multiarray, "_set_madvise_hugepage")  # noqa: B009
    return switch


def set_numpy_hugepages(enabled: bool) -> bool:
    """Turns numpy's ``madvise(MADV_HUGEPAGE)`` of large arrays on or off for this process.

    Arrays allocated from now on follow the new setting; arrays that exist keep theirs.
    The environment variable :data:`HUGEPAGE_ENV` is set to match, so Python processes
    started from this one (and numpy imported later) agree.

    Args:
        enabled: True to let numpy ask for huge pages (numpy's default on Linux >= 4.6).

    Returns:
        The setting before the call.

    Raises:
        InvalidArgument: ``enabled`` is not a bool.
    """
    if not isinstance(enabled, bool):
        raise InvalidArgument(f"enabled must be a bool, got {enabled!r}")
    switch = _switch()
    previous = bool(switch(enabled))
    os.environ[HUGEPAGE_ENV] = "1" if enabled else "0"
    return previous


def numpy_hugepages() -> bool:
    """Whether numpy currently asks for huge pages for its large arrays."""
    switch = _switch()
    current = bool(switch(True))
    switch(current)
    return current
