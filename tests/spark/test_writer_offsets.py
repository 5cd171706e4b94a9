"""Each version's log entry says where the stream stood on every partition the writer has
read, not only on those with records in the batch (SinkFunction, spark/writer.py)."""

from __future__ import annotations

from pathlib import Path

from cdc_sink.spark.writer import SinkFunction, SinkOptions
from cdc_sink.table import TableOptions, create_table

SCHEMA = {
    "columns": [{"name": "id", "type": "int64", "nullable": False}],
    "primary_key": ["id"],
    "num_buckets": 1,
}


def _sink(path: Path, app_id: str) -> SinkFunction:
    return SinkFunction(str(path), options=SinkOptions(app_id=app_id))


def test_partitions_without_records_carry_their_offsets_forward(tmp_path: Path) -> None:
    t = create_table(tmp_path / "t", SCHEMA, options=TableOptions.for_tests())
    t.apply(
        [{"op": "insert", "key": {"id": 1}}],
        app_id="job",
        batch_id=0,
        source_offsets={"orders": {"0": 5, "1": 7}},
    )
    t.apply(
        [{"op": "insert", "key": {"id": 2}}],
        app_id="other",
        batch_id=0,
        source_offsets={"elsewhere": {"0": 99}},
    )
    t.compact()  # a maintenance entry in between: not a data entry of "job"
    fn = _sink(tmp_path / "t", "job")  # a restarted writer: it finds its last entry
    assert fn.writer._all_offsets({"orders": {"1": 9}}) == {"orders": {"0": 5, "1": 9}}
    assert fn.writer._all_offsets({"orders": {"2": 1}}) == {"orders": {"0": 5, "1": 7, "2": 1}}
    fresh = _sink(tmp_path / "t", "newcomer")
    assert fresh.writer._all_offsets({"orders": {"0": 1}}) == {"orders": {"0": 1}}
