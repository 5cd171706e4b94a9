"""Freshness of the streaming job with its table on S3 behind injected latency, against
the same run with the table in a local directory (issue 50).

A real local KRaft broker, local Spark (``local[2]``) and the SeaweedFS S3 server of the
test kit, reached through the test kit's :class:`~cdc_sink_testkit.s3.LatencyProxy`,
which delays every chunk by ``--latency-ms`` in each direction (a round trip costs twice
that). Each repeat runs :func:`e2e.run_mode` (driver mode: a backlog drained, then a live
producer for ``--duration`` seconds, freshness = commit time of the version that made an
event visible minus its produce time) twice, the order alternating between repeats:

* the table on S3 through the proxy: its backlog throughput is its maximum rate; the
  live producer sends 80% of it (rounded down to a thousand), unless ``--rate`` is given
  (the first repeat's rate for every repeat; a warm-up run first, not measured, so that
  the rate is not a cold JVM's);
* the table in a local directory, at the same live rate.

Reported per repeat and as medians: the live rate, freshness p50/p99 of both runs, and
the ratio of the p99s (the issue's target: S3 p99 within 1.5x of the local p99).

Run:  .venv/bin/python benchmarks/s3_freshness.py [--latency-ms 20] [--repeat 3]
      [--events 300000] [--duration 30] [--rate auto] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import e2e

from cdc_sink_testkit.kafka import start_kafka


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    e2e.add_workload_args(ap, events=300_000, max_per_trigger=100_000, duration=30)
    ap.set_defaults(rate="auto")
    e2e.add_pool_arg(ap)
    ap.add_argument("--latency-ms", type=float, default=20.0, help="added per direction")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the results here")
    return ap


def _one(
    spark: Any, kafka: Any, args: argparse.Namespace, rate: str, where: str, **table: Any
) -> dict[str, Any]:
    """One run of the job in driver mode at live ``rate`` (``auto``: 80% of its backlog
    rate), the table in a local directory or ``table``."""
    res: dict[str, Any] = e2e.run_mode(
        spark, kafka, "driver", argparse.Namespace(**{**vars(args), "rate": rate}), **table
    )
    res["where"] = where
    print(
        f"  {where}: backlog {res['throughput']:,.0f} events/s, live {res['rate']:,} "
        f"events/s: freshness p50 {res['p50_ms']:,.0f} / p99 {res['p99_ms']:,.0f} ms",
        flush=True,
    )
    return res


def run_repeat(
    spark: Any, kafka: Any, server: Any, proxy: Any, args: argparse.Namespace, rate: str
) -> dict[str, Any]:
    """One repeat: the S3 run (at ``rate``; ``auto``: 80% of its own backlog rate), and
    the local run at the rate the S3 run used; local first when the rate is known and
    the repeat is odd, so that neither side always runs on a warmer JVM."""
    s3_table = {
        "table": server.url(f"fresh-{uuid.uuid4().hex[:10]}"),
        "storage_options": server.storage_options(endpoint=proxy.endpoint),
    }
    if rate != "auto" and args.repeat_index % 2:
        local = _one(spark, kafka, args, rate, "local")
        s3 = _one(spark, kafka, args, rate, "s3", **s3_table)
    else:
        s3 = _one(spark, kafka, args, rate, "s3", **s3_table)
        local = _one(spark, kafka, args, str(s3["rate"]), "local")
    return {"s3": s3, "local": local, "p99_ratio": s3["p99_ms"] / local["p99_ms"]}


def main() -> None:
    args = parser().parse_args()
    from cdc_sink.spark.session import local_spark
    from cdc_sink_testkit.s3 import LatencyProxy, SeaweedS3

    kafka = start_kafka(num_partitions=args.partitions)
    server = SeaweedS3().start()
    spark = local_spark(
        "cdc_sink-s3-freshness",
        master="local[2]",
        extra_conf={"spark.driver.memory": "6g", **e2e.use_pool(args)},
    )
    runs: list[dict[str, Any]] = []
    rate = args.rate
    try:
        with LatencyProxy(server.host, server.ports["s3"], args.latency_ms) as proxy:
            print("warm-up (not measured): one S3 run", flush=True)  # the JVM's first run
            args.repeat_index = 0
            run_repeat(spark, kafka, server, proxy, args, "1000")
            for r in range(args.repeat):
                print(f"repeat {r + 1}, load {os.getloadavg()[0]:.1f}", flush=True)
                args.repeat_index = r
                runs.append(run_repeat(spark, kafka, server, proxy, args, rate))
                rate = str(runs[0]["s3"]["rate"])  # every repeat at the first one's rate
    finally:
        spark.stop()
        server.stop()
        kafka.stop()
    med = {
        f"{w}_{k}": statistics.median(run[w][k] for run in runs)
        for w in ("s3", "local")
        for k in ("p50_ms", "p99_ms", "throughput", "rate")
    }
    med["p99_ratio"] = statistics.median(run["p99_ratio"] for run in runs)
    print(
        f"medians of {len(runs)}: S3 at {args.latency_ms:g} ms per direction p50 "
        f"{med['s3_p50_ms']:,.0f} / p99 {med['s3_p99_ms']:,.0f} ms; local p50 "
        f"{med['local_p50_ms']:,.0f} / p99 {med['local_p99_ms']:,.0f} ms; p99 ratio "
        f"{med['p99_ratio']:.2f} (target <= 1.5)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs, "median": med}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
