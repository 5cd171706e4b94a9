"""The dead letters of a whole-database sink are forwarded exactly once per table: every
table numbers its versions from 1 under the job's one app id, and a restarted job (a
new process, a new sink) must neither write a table's rejects again nor take another
table's forwarded versions for its own."""

from __future__ import annotations

import json
from pathlib import Path

from cdc_sink.kafka.deadletter import ParquetDeadLetter
from cdc_sink.spark import SinkOptions
from cdc_sink.spark.database import DatabaseOptions, DatabaseSink
from tests.spark.test_database_router import CUSTOMERS, batch, customer, message

NO_SOURCE = (None, json.dumps({"payload": {"op": "c", "after": {"id": 9}}}).encode())
RETYPED = [("id", "int32", False), ("first_name", "int64", False), *CUSTOMERS[2:]]


def sink(tmp_path: Path) -> DatabaseSink:
    return DatabaseSink(
        DatabaseOptions(str(tmp_path / "root"), num_buckets=1),
        options=SinkOptions(format="debezium", app_id="job"),
        dead_letter=ParquetDeadLetter(tmp_path / "dlq"),
    )


def offsets(tmp_path: Path) -> list[int]:
    letters = ParquetDeadLetter(tmp_path / "dlq").read(deduplicate=False)
    return sorted(letters.column("offset").to_pylist())


def test_each_tables_dead_letters_are_forwarded_once_across_restarts(tmp_path: Path) -> None:
    s = sink(tmp_path)
    for b in range(4):  # customers is at version 4 before _unrouted has one
        s.write_rows(batch([message("customers", CUSTOMERS, "c", customer(b))], b * 10), b)
    s.write_rows(batch([NO_SOURCE], 100), 4)
    s.close()
    assert offsets(tmp_path) == [100]
    s = sink(tmp_path)  # the job restarted
    s.write_rows(
        batch([message("customers", RETYPED, "c", {**customer(5), "first_name": 1})], 200), 5
    )
    s.write_rows(batch([NO_SOURCE], 300), 6)
    s.close()
    assert offsets(tmp_path) == [100, 200, 300]
