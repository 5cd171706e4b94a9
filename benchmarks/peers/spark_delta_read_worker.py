"""Spark read worker of ``benchmarks/delta_read.py``: Delta 4.4 against Parquet on Spark 4.2.

Run in the ``spark_delta`` virtualenv (pyspark 4.2.0, delta-spark 4.4.0; Delta's jars from
Maven Central through ``spark.jars.packages``)::

    python spark_delta_read_worker.py PARQUET_DIR DELTA_DIR REPEAT OUT_JSON

Writes the Parquet rows as a Delta table (Spark's own write: one file per input file, with
Delta's per-file statistics), then runs the queries of ``benchmarks/spark_read.py`` on
both, each once as a warm-up (answers checked equal) and ``REPEAT`` rounds alternating
the two readers; per query and reader the wall times and the JVM's CPU seconds (from
/proc) go to ``OUT_JSON``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from functools import partial
from typing import Any

from delta import configure_spark_with_delta_pip

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from read_queries import alternated, process_cpu_s, queries, summary
from spark_delta_worker import delta_builder


def main(pq_path: str, delta_path: str, repeat: int, out: str) -> None:
    spark = configure_spark_with_delta_pip(delta_builder("delta-read")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pid = int(spark._jvm.ProcessHandle.current().pid())
    t0 = time.perf_counter()
    spark.read.parquet(pq_path).write.format("delta").save(delta_path)
    convert_s = time.perf_counter() - t0
    rows = spark.read.format("delta").load(delta_path).count()
    frames = {
        "delta": lambda: spark.read.format("delta").load(delta_path),
        "parquet": lambda: spark.read.parquet(pq_path),
    }
    results: dict[str, Any] = {}
    for qname, sql in queries(rows).items():

        def run(name: str, sql: str = sql) -> list[Any]:
            frames[name]().createOrReplaceTempView("t")
            return [tuple(r) for r in spark.sql(sql).collect()]

        answers = {n: run(n) for n in frames}
        runs = {n: partial(run, n) for n in frames}
        timed = alternated(runs, repeat, {"jvm_cpu": lambda: process_cpu_s(pid)})
        results[qname] = summary(timed)
        for n in frames:
            results[qname][n]["answer"] = [list(r) for r in answers[n]]
    meta = {"rows": rows, "spark": spark.version, "convert_s": convert_s}
    spark.stop()
    with open(out, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
