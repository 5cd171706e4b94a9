"""Bucket ids: ``bucket = pmod(xxhash64(key columns), num_buckets)``, as Spark computes it.

A table has ``num_buckets`` tablets fixed at creation, and a row's bucket is Spark SQL's
``pmod(xxhash64(key columns), num_buckets)`` computed bit for bit by
:func:`cdc_sink.xxhash64.spark_xxhash64` (its module lists the semantics per type), so
that a Spark job can route rows without Python and Python agrees
(tests/integration/test_bucketing_spark.py checks both against a live Spark).

``pmod(h, n)`` is the non-negative remainder (``((h % n) + n) % n`` in Java); Spark types
it ``bigint``, :func:`bucket_ids` returns ``int32``. A topic partitioned by bucket maps
bucket ``b`` to Kafka partition ``b % partitions`` (:func:`bucket_partitions`).

The hash itself (:func:`spark_xxhash64`, :func:`check_hashable`,
:data:`SUPPORTED_TYPES`) is re-exported here, where the callers of this module's
earlier versions found it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from cdc_sink.xxhash64 import SUPPORTED_TYPES, check_hashable, spark_xxhash64

__all__ = [
    "SUPPORTED_TYPES",
    "bucket_ids",
    "bucket_partitions",
    "check_hashable",
    "spark_xxhash64",
]

_INT32_MAX: Final = 2**31 - 1


def bucket_ids(
    columns: Sequence[pa.Array | pa.ChunkedArray], num_buckets: int
) -> npt.NDArray[np.int32]:
    """Compute Spark's ``pmod(xxhash64(columns...), num_buckets)`` for every row.

    Args:
        columns: The key columns, as for :func:`spark_xxhash64`.
        num_buckets: The number of buckets, ``1 <= num_buckets <= 2**31 - 1``.

    Returns:
        An ``int32`` array with one bucket id in ``[0, num_buckets)`` per row.

    Raises:
        TypeError: If ``num_buckets`` is not an int, or a column is not hashable.
        ValueError: If ``num_buckets`` is out of range, or as :func:`spark_xxhash64`.
    """
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, (int, np.integer)):
        raise TypeError(f"num_buckets must be an int, got {type(num_buckets).__name__}")
    if not 1 <= int(num_buckets) <= _INT32_MAX:
        raise ValueError(f"num_buckets must be in [1, {_INT32_MAX}], got {num_buckets}")
    hashes = spark_xxhash64(columns)
    # numpy's remainder takes the sign of the divisor, which is Spark's pmod for n > 0.
    return np.remainder(hashes, np.int64(num_buckets)).astype(np.int32)


def bucket_partitions(
    columns: Sequence[pa.Array | pa.ChunkedArray], num_buckets: int, num_partitions: int
) -> npt.NDArray[np.int32]:
    """``bucket_ids(columns, num_buckets) % num_partitions``: the Kafka partition of each
    row when a topic is partitioned by bucket, so that each partition holds whole buckets
    (docs/design-notes.md, "Bucket-partitioned topics").

    Raises:
        TypeError: As :func:`bucket_ids`, or ``num_partitions`` is not an int.
        ValueError: As :func:`bucket_ids`, or ``num_partitions`` is below 1.
    """
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, (int, np.integer)):
        raise TypeError(f"num_partitions must be an int, got {type(num_partitions).__name__}")
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return (bucket_ids(columns, num_buckets) % np.int32(num_partitions)).astype(np.int32)
