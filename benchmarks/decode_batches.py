"""The driver's decode work on the e2e workload, without Spark: decode + bucket split.

The events of ``benchmarks/e2e.py`` (``encode_events``: 90% partial updates of 2 of 10
columns, 10% inserts, each with ``ts_ms``) decoded by the format's decoder in Arrow
batches of ``--batch`` events (Spark's Arrow collect hands the driver batches of up to
``spark.sql.execution.arrow.maxRecordsPerBatch``, 10,000 by default), each decoded batch
split by bucket, exactly as driver apply mode does with each batch as it arrives
(``cdc_sink.spark._driver``), with numpy's buffers reused across batches as the sink does
(``cdc_sink.runtime.numpy_pool``; ``--no-numpy-pool``: numpy's own allocator) and flat JSON
events decoded in one compiled pass (``--no-flat``: every event the general way;
``--no-compiled``: neither C extension of the JSON decoders, as on an install without a
C compiler). With
``--task``, the body of a decode task instead (driver mode with ``decode_in="executors"``
and executors mode: ``cdc_sink.spark._tasks._decode_partition``): decode, then each
batch's events packed per bucket as Arrow IPC pieces with their Kafka coordinates. Prints
us per event, the median of ``--runs`` passes.

With ``--double-decimals``, another workload: Debezium events (no envelope) of a table
``(id int64, price decimal128(20, 2))`` in ``decimal.handling.mode=double``, whose prices
are at least 1e7 and so written with an exponent, as Java's ``Double.toString`` writes
them (``1.2345678912E9``); decoded by ``get_decoder("debezium",
decimal_handling="double")`` in batches of ``--batch``, and the decimal texts alone by
``cdc_sink.formats._decimaltext.decimal_text`` (all at once). The same command times any
commit that has both (``PYTHONPATH=<checkout>``).

Run::

    NUMPY_MADVISE_HUGEPAGE=0 .venv/bin/python benchmarks/decode_batches.py [--batch 10000]
    .venv/bin/python benchmarks/decode_batches.py --double-decimals --events 400000
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import numpy as np
import pyarrow as pa
from e2e import FORMATS, SCHEMA, encode_events  # benchmarks/ is sys.path[0] when run

from cdc_sink.formats import _jsonflat, _jsonscan, get_decoder
from cdc_sink.runtime import numpy_pool


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=10_000, help="events per Arrow batch")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--format", choices=FORMATS, default="json")
    ap.add_argument(
        "--flat",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="json: flat events in one compiled pass (--no-flat: all the general way)",
    )
    ap.add_argument(
        "--compiled",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="json: the C extensions of the JSON decoders (--no-compiled: the numpy path "
        "of an install without a C compiler; implies --no-flat)",
    )
    ap.add_argument(
        "--numpy-pool",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reuse numpy buffers across batches, as the sink's driver decode does",
    )
    ap.add_argument(
        "--task", action="store_true", help="a decode task's body: decode and pack per bucket"
    )
    ap.add_argument(
        "--double-decimals",
        action="store_true",
        help="Debezium events of decimals >= 1e7 in decimal.handling.mode=double",
    )
    args = ap.parse_args()
    if args.double_decimals:
        double_decimals(args.events, args.batch, args.runs)
        return
    if not args.flat or not args.compiled:
        _jsonflat._cflat = None  # type: ignore[assignment]
    if not args.compiled:
        _jsonscan._cscan = None  # type: ignore[assignment]
    rng = np.random.default_rng(1)
    msgs = encode_events(args.events, 100_000, 100_000, 1, rng, 1_718_000_000_000, args.format)
    values = pa.array([v for _, v in msgs], pa.binary())
    keys = pa.array([k for k, _ in msgs], pa.binary())
    decoder = get_decoder(args.format)

    def one_pass() -> None:
        with numpy_pool.reusing() if args.numpy_pool else contextlib.nullcontext():
            decode_task() if args.task else decode_all()

    def decode_task() -> None:  # the Kafka source's columns, as the decode task selects them
        from cdc_sink.spark._tasks import _decode_partition

        n = len(values)
        records = pa.RecordBatch.from_pydict(
            {
                **({"key": keys} if decoder.reads_keys else {}),
                "value": values,
                "topic": pa.array(["orders-driver-tasks-1764000000"] * n),
                "partition": pa.array(np.zeros(n, np.int32)),
                "offset": pa.array(np.arange(n, dtype=np.int64)),
                "ts_ms": pa.array(np.full(n, 1_718_000_000_000, np.int64)),
            }
        )
        batches = (records.slice(lo, args.batch) for lo in range(0, n, args.batch))
        for _ in _decode_partition(batches, fmt=args.format, schema_dict=SCHEMA.to_dict()):
            pass

    def decode_all() -> None:
        for lo in range(0, len(values), args.batch):
            v = values.slice(lo, args.batch)
            pos = np.arange(len(v), dtype=np.int64)
            dec = decoder.decode_with_meta(v, SCHEMA, position=pos, keys=keys.slice(lo, args.batch))
            assert not len(dec.rejects), dec.rejects.reasons[:3]
            dec.batch.split_by_bucket()

    one_pass()  # warm-up
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        one_pass()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(
        f"{args.format}: {args.events:,} events in batches of {args.batch:,}: "
        f"{med / args.events * 1e6:.2f} us/event (median of {args.runs}); numpy pool "
        f"{'on' if args.numpy_pool and numpy_pool.available() else 'off'}; flat JSON pass "
        f"{'on' if _jsonflat._cflat is not None else 'off'}; compiled scan "
        f"{'on' if _jsonscan._cscan is not None else 'off'}"
        f"{'; a decode task (decode and pack per bucket)' if args.task else ''}"
    )


def java_double(x: float) -> str:
    """``Double.toString(x)`` of Java for ``1e7 <= x < 1e21``: the shortest digits that
    read back as ``x``, as ``d.ddd...E<n>``."""
    text = repr(float(x))
    whole = text.split(".")[0]
    digits = text.replace(".", "").rstrip("0")
    return f"{digits[0]}.{digits[1:] or '0'}E{len(whole) - 1}"


def double_decimals(events: int, batch: int, runs: int) -> None:
    """Times the decode of Debezium events whose decimal is written with an exponent."""
    from cdc_sink.formats._decimaltext import decimal_text
    from cdc_sink.schema import TableSchema

    schema = TableSchema.from_dict(
        {
            "columns": [
                {"name": "id", "type": "int64"},
                {"name": "price", "type": "decimal128(20, 2)"},
            ],
            "primary_key": ["id"],
        }
    )
    rng = np.random.default_rng(1)
    cents = rng.integers(10**9, 10**14, events)
    values = pa.array(
        [
            f'{{"before":null,"after":{{"id":{i},"price":{java_double(c / 100)}}},'
            f'"op":"u","ts_ms":1718000000000}}'.encode()
            for i, c in enumerate(cents.tolist())
        ],
        pa.binary(),
    )
    texts = pa.array([java_double(c / 100) for c in cents.tolist()], pa.string())
    decoder = get_decoder("debezium", decimal_handling="double")

    def one_pass() -> None:
        for lo in range(0, events, batch):
            dec = decoder.decode_with_meta(values.slice(lo, batch), schema)
            assert not len(dec.rejects), dec.rejects.reasons[:3]

    def texts_alone() -> None:  # the decimal column's conversion alone, all at once
        decimal_text(texts, pa.decimal128(20, 2))

    for name, work in (("decode", one_pass), ("decimal_text alone", texts_alone)):
        work()  # warm-up
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            work()
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        how = f"in batches of {batch:,}" if work is one_pass else "at once"
        print(
            f"debezium, decimal.handling.mode=double, decimals >= 1e7 with an exponent "
            f"(e.g. {java_double(int(cents[0]) / 100)}), {name}: {events:,} events {how}: "
            f"{med:.3f} s, {med / events * 1e6:.2f} us/event (median of {runs})"
        )


if __name__ == "__main__":
    main()
