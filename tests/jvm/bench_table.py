"""Writes the JVM reader's benchmark table: ``--rows`` rows x 20 columns, compacted.

The ten column types of ``tests/integration/bench_spark_read.py`` twice (``<name>`` and
``<name>_2``; one int64 key), loaded in versions of 500,000 rows and compacted, as a table
at rest. Time the JVM reader on it with::

    .venv/bin/python -m tests.jvm.bench_table /tmp/jvm_bench --rows 2000000
    J=$(.venv/bin/python -c 'import pyspark,os;print(os.path.dirname(pyspark.__file__))')
    java --add-opens=java.base/java.nio=ALL-UNNAMED \\
      -cp "jvm/target/cdc-sink-spark.jar:$J/jars/*" io.cdcsink.format.ScanBench /tmp/jvm_bench/cdc 3

Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import numpy as np
import pyarrow as pa

import cdc_sink
from cdc_sink import TableOptions
from tests.integration.bench_spark_read import SCHEMA, make_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--buckets", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=500_000)
    ap.add_argument("--page-compression", default="zstd", choices=["zstd", "lz4"])
    args = ap.parse_args()
    path = os.path.join(args.dir, "cdc")
    shutil.rmtree(path, ignore_errors=True)
    values = SCHEMA["columns"][1:]
    schema = dict(
        SCHEMA,
        columns=[*SCHEMA["columns"], *[dict(c, name=c["name"] + "_2") for c in values]],
        num_buckets=args.buckets,
    )
    schema["columns"].append({"name": "extra", "type": "int64"})  # the 20th column
    rng = np.random.default_rng(42)
    t0 = time.perf_counter()
    table = cdc_sink.create_table(
        path,
        schema,
        options=TableOptions(snapshot_every=1000, page_compression=args.page_compression),
    )
    for start in range(0, args.rows, args.chunk):
        rows = make_rows(min(args.chunk, args.rows - start), start, rng)
        for c in values:
            rows = rows.append_column(c["name"] + "_2", rows.column(c["name"]))
        n = rows.num_rows
        rows = rows.append_column("extra", pa.array(np.arange(n, dtype=np.int64)))
        table.apply(rows)
    table.compact()
    took = time.perf_counter() - t0
    print(f"{args.rows:,} rows x {len(schema['columns'])} columns at {path} in {took:.1f} s")


if __name__ == "__main__":
    main()
