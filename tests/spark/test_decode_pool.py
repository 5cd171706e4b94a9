"""Driver mode's decode worker processes (``sink(..., decode_processes=N)``): real spawned
workers decode every format exactly as the driver's own thread does, in submission
order; a worker that dies costs its batches a decode in the driver, not their events; a
decoder error names itself; and bad ``decode_processes`` values are typed errors. (The
same pool under Spark: tests/integration/test_arrow_stream.py.)"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_sink.errors import InvalidArgument, InvalidOption
from cdc_sink.formats import FORMATS, Decoded, FormatName, get_format
from cdc_sink.schema import TableSchema
from cdc_sink.spark import DecodeOptions, SinkOptions, sink
from cdc_sink.spark._decode_pool import DecodePool, decode_here
from tests.cleanup import stopped_after
from tests.fixtures import ID_A_B

SCHEMA = TableSchema.from_dict(ID_A_B)


def _values(fmt: FormatName, lo: int, hi: int) -> pa.Array:
    """Events ``lo..hi`` of ``fmt``; every 13th value is garbage (a reject)."""
    events = [
        {"op": "upsert", "key": {"id": k}, "set": {"a": k * 3, "b": None if k % 5 else f"s{k}"}}
        for k in range(lo, hi)
    ]
    encoded = get_format(fmt).encode(events, SCHEMA)
    return pa.array(
        [
            b"\x00garbage{" if k % 13 == 0 else v
            for k, v in zip(range(lo, hi), encoded, strict=True)
        ],
        pa.binary(),
    )


def _same(a: Decoded, b: Decoded) -> None:
    assert a.batch.to_arrow().equals(b.batch.to_arrow())
    assert a.rejects.positions.tolist() == b.rejects.positions.tolist()
    assert a.rejects.reasons == b.rejects.reasons
    assert (a.ts_ms is None) == (b.ts_ms is None)
    assert (a.skipped, a.messages) == (b.skipped, b.messages)


@pytest.fixture
def pools() -> Iterator[list[DecodePool]]:
    """Pools the test makes; every one is closed after it (its workers stopped)."""
    yield from stopped_after(DecodePool.close)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "debezium-avro"])
def test_workers_decode_exactly_as_the_driver_in_submission_order(
    fmt: FormatName, pools: list[DecodePool]
) -> None:
    pool = DecodePool(2, fmt, {})
    pools.append(pool)
    chunks = [_values(fmt, lo, lo + 300 + 17 * i) for i, lo in enumerate(range(0, 4000, 500))]
    pending = [pool.submit(SCHEMA, v, None) for v in chunks]
    assert pool.running
    for v, p in zip(chunks, pending, strict=True):
        got = p.result()
        _same(got, decode_here(fmt, {}, SCHEMA, v, None))
        assert len(got.rejects.positions) > 0 and len(got.batch) > 0


def test_a_dead_worker_costs_a_decode_in_the_driver_not_events(
    pools: list[DecodePool],
) -> None:
    pool = DecodePool(1, "json", {})
    pools.append(pool)
    first = _values("json", 0, 200)
    pool.submit(SCHEMA, first, None).result()  # the worker is up
    executor = pool._pool
    assert executor is not None
    for pid in list(executor._processes):  # type: ignore[attr-defined]
        os.kill(pid, signal.SIGKILL)
    values = [_values("json", lo, lo + 400) for lo in (1000, 2000, 3000)]
    pending = [pool.submit(SCHEMA, v, None) for v in values]
    for v, p in zip(values, pending, strict=True):
        _same(p.result(), decode_here("json", {}, SCHEMA, v, None))
    # the broken pool is gone; the next batch starts a new one, which works
    later = _values("json", 5000, 5100)
    _same(pool.submit(SCHEMA, later, None).result(), decode_here("json", {}, SCHEMA, later, None))
    assert pool._pool is not executor and pool.running


def test_a_decoder_error_in_a_worker_names_itself(pools: list[DecodePool]) -> None:
    pool = DecodePool(1, "debezium", {"no_such_option": 1})
    pools.append(pool)
    with pytest.raises(RuntimeError, match=r"worker process failed.*no_such_option"):
        pool.submit(SCHEMA, _values("debezium", 0, 10), None).result()


def test_close_stops_the_workers(pools: list[DecodePool]) -> None:
    pool = DecodePool(2, "json", {})
    pools.append(pool)
    pool.submit(SCHEMA, _values("json", 0, 50), None).result()
    executor = pool._pool
    assert executor is not None
    procs = list(executor._processes.values())  # type: ignore[attr-defined]
    pool.close()
    assert not pool.running
    for proc in procs:
        proc.join(10)
        assert not proc.is_alive()


SINK_SCHEMA: dict[str, Any] = SCHEMA.to_dict()


@pytest.mark.parametrize("bad", ["2", 2.0, True, None])
def test_decode_processes_of_another_type_is_a_type_error(tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidArgument, match="decode_processes must be an int"):
        sink(
            str(tmp_path / "t"),
            schema=SINK_SCHEMA,
            options=SinkOptions(decode=DecodeOptions(processes=bad)),
        )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        SinkOptions(decode=DecodeOptions(processes=-1)),
        SinkOptions(apply_mode="executors", decode=DecodeOptions(processes=2)),
        SinkOptions(decode=DecodeOptions(processes=2, json_decoder="jvm")),
    ],
)
def test_decode_processes_outside_driver_mode_python_decoders_is_refused(
    tmp_path: Path, options: SinkOptions
) -> None:
    with pytest.raises(InvalidOption, match="decode_processes") as e:
        sink(str(tmp_path / "t"), schema=SINK_SCHEMA, options=options)
    assert e.value.option == "decode_processes"
    assert not (tmp_path / "t").exists()  # checked before the table is created


def test_a_sink_with_decode_processes_starts_no_worker_before_its_first_batch(
    tmp_path: Path,
) -> None:
    fn = sink(
        str(tmp_path / "t"),
        schema=SINK_SCHEMA,
        options=SinkOptions(decode=DecodeOptions(processes=2)),
    )
    try:
        assert fn.decode_pool is not None and not fn.decode_pool.running
        assert fn.decode_pool.processes == 2
    finally:
        fn.close()
    assert sink(str(tmp_path / "u"), schema=SINK_SCHEMA).decode_pool is None
