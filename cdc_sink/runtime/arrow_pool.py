"""Which allocator pyarrow uses for the buffers of this process.

pyarrow allocates every Arrow buffer (decoded batches, the WAL segments' IPC bodies,
``take``/``filter`` results) from its default memory pool, which it picks at the first
allocation: ``mimalloc`` in the Linux wheels, unless the environment variable
``ARROW_DEFAULT_MEMORY_POOL`` names another (``jemalloc``, ``mimalloc`` or ``system``).

With ``mimalloc`` a new process's first applies of a micro-batch are slower than its
later ones, and the sink's applies in a Kafka -> sink run slower than with ``jemalloc``,
which is as fast from the first batch on. mimalloc takes fewer page faults, not more: the
cost is inside the allocator, so the choice follows the timings, not the fault counts
(docs/benchmarks-history.md, "End to end", "Per format, and pyarrow's allocator": each allocator
under ``benchmarks/apply_batches.py`` and ``benchmarks/e2e_ceiling.py``).

The streaming job (``streaming_jobs/cdc_to_tablets.py --arrow-memory-pool``) picks
``jemalloc`` when pyarrow was built with it, in its driver and, through
``spark.executorEnv``, in its executors' Python workers. The library itself never
changes the pool: the setting is the process's, not a table's.
"""

from __future__ import annotations

import os
from typing import Literal

from cdc_sink.errors import InvalidArgument, InvalidOption

__all__ = [
    "ARROW_POOL_ENV",
    "POOLS",
    "PoolName",
    "arrow_memory_pool",
    "available_pools",
    "set_arrow_memory_pool",
    "use_arrow_memory_pool",
]

#: Arrow's own environment variable, read at the process's first allocation.
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"

PoolName = Literal["jemalloc", "mimalloc", "system"]

#: The pools pyarrow can be built with, in the job's order of preference.
POOLS: tuple[PoolName, ...] = ("jemalloc", "mimalloc", "system")


def _pool(name: str) -> object:
    """pyarrow's pool ``name``; NotImplementedError when this build lacks it."""
    import pyarrow as pa

    return getattr(pa, f"{name}_memory_pool")()


def available_pools() -> list[PoolName]:
    """The pools this pyarrow build has, in the order of :data:`POOLS`."""
    out: list[PoolName] = []
    for name in POOLS:
        try:
            _pool(name)
        except NotImplementedError:
            continue
        out.append(name)
    return out


def set_arrow_memory_pool(name: PoolName) -> str:
    """Makes pool ``name`` pyarrow's default for this process's new buffers.

    Buffers that exist stay in the pool that allocated them. The environment variable
    :data:`ARROW_POOL_ENV` is set to match, so Python processes started from this one
    (the decode workers of ``sink(..., decode_processes=N)``) use the same pool.

    Args:
        name: ``jemalloc``, ``mimalloc`` or ``system`` (the C library's malloc).

    Returns:
        The pool in use before the call (its ``backend_name``).

    Raises:
        InvalidArgument: ``name`` is not a str.
        InvalidOption: ``name`` is not one of :data:`POOLS`, or this pyarrow build has no
            pool ``name``.
    """
    import pyarrow as pa

    if not isinstance(name, str):
        raise InvalidArgument(f"memory pool must be a str, got {name!r}")
    if name not in POOLS:
        raise InvalidOption(
            f"memory pool must be one of {list(POOLS)}, got {name!r}", option="arrow_memory_pool"
        )
    try:
        pool = _pool(name)
    except NotImplementedError as e:
        raise InvalidOption(
            f"this pyarrow build has no {name} memory pool (it has {available_pools()})",
            option="arrow_memory_pool",
        ) from e
    previous = arrow_memory_pool()
    pa.set_memory_pool(pool)
    os.environ[ARROW_POOL_ENV] = name
    return previous


def arrow_memory_pool() -> str:
    """The ``backend_name`` of pyarrow's current default pool."""
    import pyarrow as pa

    return str(pa.default_memory_pool().backend_name)


def use_arrow_memory_pool(choice: str) -> dict[str, str]:
    """Applies a pool choice to this process (a Spark driver) and returns the Spark
    configuration that applies it to the executors' Python workers, whose pyarrow reads
    :data:`ARROW_POOL_ENV` at its first allocation.

    Args:
        choice: One of :data:`POOLS`; ``auto``: ``jemalloc`` when this pyarrow build has
            it, else nothing; ``pyarrow``: nothing (pyarrow's own choice).

    Returns:
        ``{"spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": name}``, or ``{}`` when nothing
        was changed.

    Raises:
        InvalidArgument, InvalidOption: As :func:`set_arrow_memory_pool`.
    """
    if choice == "auto":
        if "jemalloc" not in available_pools():
            return {}
        choice = "jemalloc"
    if choice == "pyarrow":
        return {}
    set_arrow_memory_pool(choice)  # type: ignore[arg-type]
    return {f"spark.executorEnv.{ARROW_POOL_ENV}": choice}
