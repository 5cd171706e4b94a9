"""The JVM decode of native JSON (``json_decoder="jvm"``) on events with two decimal columns.

Builds ``--events`` native JSON upserts (a bigint key, two decimals written as JSON
numbers with a point, an int and a string), caches them in a local Spark as Kafka-shaped
rows (``value``, ``topic``, ``partition``, ``offset``, ``timestamp``; ``--partitions``
partitions), then times :func:`cdc_sink.spark.decode.decode_native_json` over them:

* ``noop``: the decode alone (``write.format("noop")``, every output column computed);
* ``arrow``: the decode collected to the driver as Arrow (``toArrow()``), as driver
  apply mode collects it, then split into a change batch and rejects.

Each is run once to warm the JVM, then ``--runs`` times; the medians of the wall time and
of the CPU seconds of this process and its JVM (user + system: the local executors run in
the JVM) are printed, and every run with ``--json``. ``--decoder`` times the
``decode_native_json`` of another ``decode.py`` (an older checkout's: ``git show
<commit>:cdc_sink/spark/decode.py > /tmp/decode_before.py``), with this checkout for
everything else.

Run:  .venv/bin/python benchmarks/jvm_decode.py [--events 200000] [--runs 3]
      [--decoder /tmp/decode_before.py]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
from types import ModuleType
from typing import Any

from proc_cpu import cpu_between, tree_cpu_s  # benchmarks/ is sys.path[0] when run

from cdc_sink.schema import TableSchema

SCHEMA = TableSchema.from_dict(
    {
        "columns": [
            {"name": "id", "type": "int64"},
            {"name": "price", "type": "decimal128(12, 2)"},
            {"name": "rate", "type": "decimal128(18, 6)"},
            {"name": "qty", "type": "int32"},
            {"name": "note", "type": "string"},
        ],
        "primary_key": ["id"],
    }
)


def events(n: int) -> list[bytes]:
    """``n`` upserts; each decimal has a point (the values whose text the decoder reads)."""
    return [
        (
            f'{{"op":"upsert","key":{{"id":{i}}},"set":{{"price":{i % 100_000}.{i % 100:02d},'
            f'"rate":{i % 997}.{i % 1_000_000:06d},"qty":{i % 50},"note":"n{i % 1000}"}}}}'
        ).encode()
        for i in range(n)
    ]


def _timed(fn: Any) -> tuple[float, float]:
    """Wall seconds and CPU seconds (this process and its JVM) of ``fn()``."""
    cpu = tree_cpu_s([os.getpid()])
    t = time.perf_counter()
    fn()
    wall = time.perf_counter() - t
    return wall, cpu_between(cpu, tree_cpu_s([os.getpid()]))


def _decoder(path: str | None) -> ModuleType:
    """This checkout's :mod:`cdc_sink.spark.decode`, or the ``decode.py`` at ``path``."""
    if path is None:
        from cdc_sink.spark import decode

        return decode
    spec = importlib.util.spec_from_file_location("decode_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--decoder", help="the decode.py to time (default: this checkout's)")
    ap.add_argument("--json", help="write every run's seconds to this file")
    args = ap.parse_args()

    from cdc_sink.spark._batch import to_change_batch
    from cdc_sink.spark.session import local_spark

    decode = _decoder(args.decoder)
    spark = local_spark("cdc_sink-jvm-decode", with_kafka=False)
    ts = time.time()
    rows = [(m, "t", 0, i, None) for i, m in enumerate(events(args.events))]
    df = spark.createDataFrame(
        rows, "value binary, topic string, partition int, offset long, timestamp timestamp"
    )
    df = df.repartition(args.partitions).cache()
    df.count()
    print(f"decoder: {decode.__file__}; {args.events} events cached in {time.time() - ts:.1f} s")

    def noop() -> None:
        out = decode.decode_native_json(df, SCHEMA)
        out.write.format("noop").mode("overwrite").save()

    def arrow() -> None:
        batch, rejects, _ = to_change_batch(decode.decode_native_json(df, SCHEMA).toArrow(), SCHEMA)
        assert len(batch.positions) == args.events and not rejects.as_dict(), rejects.as_dict()

    runs: dict[str, list[tuple[float, float]]] = {}
    for name, fn in (("noop", noop), ("arrow", arrow)):
        _timed(fn)  # warm-up
        runs[name] = [_timed(fn) for _ in range(args.runs)]
        wall = statistics.median(w for w, _ in runs[name])
        cpu = statistics.median(c for _, c in runs[name])
        print(
            f"{name}: median {wall:.2f} s wall ({args.events / wall / 1e3:.0f}K events/s), "
            f"{cpu:.2f} CPU s; runs (wall/CPU) "
            + " ".join(f"{w:.2f}/{c:.2f}" for w, c in runs[name])
            + f"; load {os.getloadavg()[0]:.1f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"events": args.events, "load": os.getloadavg(), "runs": runs}, f)
    spark.stop()


if __name__ == "__main__":
    main()
