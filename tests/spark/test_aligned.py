"""Executors mode on a bucket-partitioned topic, without Spark: a task that decodes and
prepares the buckets it reads (``_decode_prepare_partition``) commits the same table,
rejects and counts as the shuffle path (decode tasks, pieces, one task per bucket) for
the same records; and ``bucket_partitioned`` is refused outside executors mode. (The
same path through real Kafka and Spark, and the fall-back when a batch is split:
tests/integration/test_sink.py and test_input_matrix.py.)"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from cdc_sink import create_table, open_table
from cdc_sink.errors import InvalidOption
from cdc_sink.schema import TableSchema
from cdc_sink.spark import SinkOptions, sink
from cdc_sink.spark._executors import (
    _MESSAGE,
    _collect,
    _decode_prepare_partition,
    _prepare_partition,
)
from cdc_sink.spark._tasks import _decode_partition
from tests.fixtures import ID_A_B
from tests.model import table_to_rows
from tests.spark.test_pieces import _decoded_records, decoder_options
from tests.spark.test_task_decode import _partition


def _prepared(
    path: str, schema: TableSchema, fmt: str, batches: list[pa.RecordBatch], aligned: bool
) -> pa.Table:
    """The message rows of version 1 prepared from ``batches`` (one Kafka partition)."""
    common = {"path": path, "version": 1, "schema_dict": schema.to_dict(), "options": None}
    if aligned:
        msgs = _decode_prepare_partition(
            iter(batches),
            fmt=fmt,  # type: ignore[arg-type]
            jvm=False,
            decoder_options=decoder_options(fmt),
            **common,  # type: ignore[arg-type]
        )
        return pa.Table.from_batches(list(msgs), schema=_MESSAGE)
    pieces = list(
        _decode_partition(
            iter(batches),
            fmt=fmt,  # type: ignore[arg-type]
            schema_dict=schema.to_dict(),
            options=decoder_options(fmt),
        )
    )
    by_bucket: dict[int, list[pa.RecordBatch]] = {}  # the shuffle: pieces to their bucket
    for rb in pieces:
        for i, b in enumerate(rb.column("bucket").to_pylist()):
            by_bucket.setdefault(b, []).append(rb.slice(i, 1))
    msgs = [m for b in sorted(by_bucket) for m in _prepare_partition(iter(by_bucket[b]), **common)]  # type: ignore[arg-type]
    return pa.Table.from_batches(msgs, schema=_MESSAGE)


def _committed(tmp: Path, name: str, schema: TableSchema, fmt: str, values: Any) -> Any:
    path = str(tmp / name)
    create_table(path, schema)
    rb = _partition(values, 0)
    batches = [rb.slice(i, 7) for i in range(0, rb.num_rows, 7)]
    got = _collect(_prepared(path, schema, fmt, batches, name == "aligned"), 1)
    table = open_table(path)
    if got.prepared:
        txn = table.transaction()
        txn.add_prepared(got.prepared)
        txn.commit()
    rejects = sorted((r["offset"], r["reason"]) for r in got.rejected)
    return table_to_rows(open_table(path).read(), schema.primary_key), rejects, got


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_decoded_records())
def test_a_task_that_prepares_what_it_reads_commits_what_the_shuffle_commits(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[TableSchema, str, list[bytes | None]]
) -> None:
    """Every format, every op, rejects, tombstones, truncates, with and without a
    sequence column."""
    schema, fmt, values = case
    tmp = tmp_path_factory.mktemp("aligned")
    rows_a, rejects_a, got_a = _committed(tmp, "aligned", schema, fmt, values)
    rows_s, rejects_s, got_s = _committed(tmp, "shuffled", schema, fmt, values)
    assert rows_a == rows_s
    assert rejects_a == rejects_s
    assert got_a.events == got_s.events == len(values)
    assert got_a.ops == got_s.ops
    assert got_a.offsets == got_s.offsets
    assert Counter(p.bucket for p in got_a.prepared) == Counter(p.bucket for p in got_s.prepared)
    assert all(n == 1 for n in Counter(p.bucket for p in got_a.prepared).values())


def test_a_bucket_of_rejects_only_is_not_prepared(tmp_path: Path) -> None:
    """Rejected records travel in bucket 0; a task that read no event of bucket 0 does
    not prepare it (nor report its figures): it may not hold the bucket."""
    schema = TableSchema.from_dict(ID_A_B)
    rows, rejects, got = _committed(tmp_path, "aligned", schema, "json", [b"{", b"[1"])
    assert rows == {} and got.prepared == [] and got.figures == {}
    assert [o for o, _ in rejects] == [0, 1]


@pytest.mark.parametrize("apply_mode", ["driver"])
def test_bucket_partitioned_is_refused_outside_executors_mode(
    tmp_path: Path, apply_mode: str
) -> None:
    with pytest.raises(InvalidOption, match="bucket_partitioned") as e:
        sink(
            str(tmp_path / "t"),
            schema=ID_A_B,
            options=SinkOptions(apply_mode=apply_mode, bucket_partitioned=True),
        )  # type: ignore[arg-type]
    assert e.value.option == "bucket_partitioned"
    assert not (tmp_path / "t").exists()
