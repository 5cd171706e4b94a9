"""The sink function pickles (``pickle`` and ``cloudpickle``, as Spark Connect's
``foreachBatch`` does) without its process state, which the receiving process makes on
first use."""

from __future__ import annotations

import multiprocessing
import pickle
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle  # the one Spark Connect pickles foreachBatch functions with

from cdc_sink import open_table
from cdc_sink.schema import TableSchema
from cdc_sink.spark import DecodeOptions, SinkFunction, SinkOptions, sink
from cdc_sink.spark._driver import DriverApply
from cdc_sink.spark._executors import ExecutorsApply

SCHEMA = TableSchema.from_dict(
    {
        "columns": [{"name": "id", "type": "int64"}, {"name": "v", "type": "string"}],
        "primary_key": ["id"],
        "num_buckets": 2,
    }
)

DUMPS = {"pickle": pickle.dumps, "cloudpickle": cloudpickle.dumps}


@pytest.mark.parametrize("dumps", sorted(DUMPS))
@pytest.mark.parametrize("apply_mode", ["driver", "executors"])
def test_a_used_sink_pickles_without_its_process_state(
    tmp_path: Path, dumps: str, apply_mode: str
) -> None:
    fn = sink(
        tmp_path / "t",
        schema=SCHEMA,
        options=SinkOptions(apply_mode=apply_mode, app_id="w", decode=DecodeOptions(processes=0)),
    )
    fn.table.apply([{"op": "insert", "key": {"id": 1}, "set": {"v": "a"}}])  # tablets loaded
    _ = fn.mode  # the apply mode made, with its locks and caches
    fn.on_batch = lambda st: None  # a closure of this process
    fn.dead_letters = 3

    copy = pickle.loads(DUMPS[dumps](fn))

    assert isinstance(copy, SinkFunction)
    assert (copy.path, copy.options, copy.app_id) == (fn.path, fn.options, fn.app_id)
    assert copy.writer._table is None and copy.writer._mode is None  # made on first use
    assert copy.on_batch is None and len(copy.stats) == 0 and copy.dead_letters == 0
    assert copy.table is not fn.table and copy.table.version == fn.table.version
    assert isinstance(copy.mode, ExecutorsApply if apply_mode == "executors" else DriverApply)


def test_decode_workers_are_not_pickled(tmp_path: Path) -> None:
    fn = sink(tmp_path / "t", schema=SCHEMA, options=SinkOptions(decode=DecodeOptions(processes=2)))
    assert fn.decode_pool is not None
    fn.decode_pool.start()  # two live worker processes
    try:
        copy = pickle.loads(cloudpickle.dumps(fn))
        assert copy.decode_pool is not None and copy.decode_pool is not fn.decode_pool
        assert copy.decode_pool.processes == 2 and not copy.decode_pool.running
    finally:
        fn.close()


def _open_in_child(blob: bytes, out: Any) -> None:
    fn = pickle.loads(blob)
    out.put((fn.table.version, fn.table.read().to_pylist()))


def test_an_unpickled_sink_opens_the_table_in_its_own_process(tmp_path: Path) -> None:
    fn = sink(tmp_path / "t", schema=SCHEMA, options=SinkOptions(app_id="w"))
    fn.table.apply([{"op": "insert", "key": {"id": 7}, "set": {"v": "x"}}])
    ctx = multiprocessing.get_context("spawn")  # nothing of this process inherited
    out = ctx.Queue()
    child = ctx.Process(target=_open_in_child, args=(cloudpickle.dumps(fn), out))
    child.start()
    version, rows = out.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    here = open_table(tmp_path / "t")
    assert version == here.version
    assert rows == here.read().to_pylist()
