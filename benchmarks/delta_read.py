"""Spark snapshot reads of Delta 4.4 (Spark 4.2) against Parquet: the Delta row beside
``benchmarks/spark_read.py``'s.

Usage::

    .venv/bin/python benchmarks/delta_read.py [--rows 2000000] [--buckets 4]
        [--repeat 3] [--work DIR] [--json out.json] [--venvs .bench_venvs]

Builds the table and its Parquet copy exactly as ``spark_read.py`` does (same rows, same
seed, same files), then, in the ``spark_delta`` virtualenv of ``benchmarks/peers.py``
(pyspark 4.2.0 and delta-spark 4.4.0, created on first use; Delta's jars from Maven
Central), writes the Parquet rows as a Delta table and runs ``spark_read.py``'s queries on
Delta and on Parquet in one Spark 4.2 session (``peers/spark_delta_read_worker.py``),
warm-up then ``--repeat`` alternated rounds, medians. Delta needs its own Spark (its jars
stop at Spark 4.2) and cdc_sink's connector is built for Spark 4.3: the figures to put
side by side are each reader's speed against Parquet in its own session. The two
sessions' Parquet times are printed so the sessions can be compared too.

Not run by the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import peers  # noqa: E402
from spark_read import N_COLUMNS, _same, build  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--buckets", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--venvs", default=os.path.join(peers.ROOT, ".bench_venvs"))
    args = ap.parse_args()
    python = peers.venv_python("spark_delta", peers.SYSTEMS["spark_delta"][2], args.venvs)
    root = args.work or tempfile.mkdtemp(prefix="bench_delta_read_")
    os.makedirs(root, exist_ok=True)
    load_before = os.getloadavg()
    try:
        _, pq_path = build(root, args.rows, args.buckets)
        print(f"built {args.rows:,} rows x {N_COLUMNS} columns", flush=True)
        out = os.path.join(root, "delta_read.json")
        worker = os.path.join(HERE, "peers", "spark_delta_read_worker.py")
        delta_path = os.path.join(root, "delta")
        subprocess.run([python, worker, pq_path, delta_path, str(args.repeat), out], check=True)
        with open(out) as f:
            res = json.load(f)
        for qname, by in res["results"].items():
            pq_med = by["parquet"]["median_s"]
            assert _same(by["delta"]["answer"], by["parquet"]["answer"]), qname
            print(qname)
            for n, r in by.items():
                each = ", ".join(f"{w:.3f}" for w in r["wall_s"])
                print(
                    f"  {n:8s} median {r['median_s']:6.3f} s  (runs {each})"
                    f"  JVM CPU {r['jvm_cpu_median_s']:6.2f} s"
                    f"  vs Parquet {pq_med / r['median_s']:5.2f}x"
                )
        load_after = os.getloadavg()
        print(
            f"Spark {res['meta']['spark']}; Parquet -> Delta {res['meta']['convert_s']:.1f} s;"
            f" load average before {load_before[0]:.2f}, after {load_after[0]:.2f}"
        )
        if args.json:
            res["meta"].update(load_before=load_before, load_after=load_after)
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
    finally:
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
