"""Long chaos run of the streaming job: many random SIGKILLs, both apply modes.

Usage::

    .venv/bin/python benchmarks/chaos.py [--kills 100] [--events 20000]
        [--modes driver,executors] [--fault-point-runs 10] [--seed 1] [--workdir DIR]
        [--broker-bounces 2] [--enospc-runs 1] [--eio-runs 1] [--s3] [--json results.json]

For each apply mode, one chaos run (tests/chaos/harness.py): the real
``streaming_jobs/cdc_to_tablets.py`` under spark-submit on a local Kafka broker (or the
cluster ``$CDC_SINK_KAFKA_BOOTSTRAP`` names), a producer spreading ``--events`` orders
events (2% malformed) over the run, a Parquet dead-letter sink, compaction and GC every
few batches, a reader process throughout, and ``--kills`` restarts: most end in a
SIGKILL of the job's process group at a random moment after it committed, and
``--fault-point-runs`` of them are left to die at random storage fault points. Then a
final available-now run, and the checks of ``harness.verify`` against a reference model
fed from the topic. Prints one line per run and a JSON summary; exits 1 when a check
failed.

Environmental faults, after the killed runs (see ``ChaosConfig``): ``--broker-bounces``
SIGKILLs the local broker and restarts it (same data directory and port) that many
times during one run of the job; ``--enospc-runs`` puts the table on its own tmpfs
(root only) and fills it up during that many runs, growing it afterwards;
``--eio-runs`` preloads ``tests/chaos/fsync_eio.so`` (built with ``cc``) into that many
runs so that one fsync under the table path fails with EIO and loses its file's
unsynced data. ``--s3`` puts the table on a SeaweedFS S3 server started for the run
(the job reaches it by URL with ``--storage-option`` flags and ``AWS_*`` keys). Each
fault's outcome (rode through, or failed with the job's one-line reason) and the time
the job took to commit again are in the results' ``faults``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cdc_sink_testkit.kafka import BOOTSTRAP_ENV, start_kafka
from tests.chaos.harness import ChaosConfig, run_chaos

JOB_UNREACHABLE_POINTS = ("log.repair_removing",)
"""Fault points a running job cannot reach by itself: the log's repair removes only a
torn newest entry (a power cut's) or temporary files older than an hour, so its crash is
tested in-process (tests/durability/test_crash_points.py, test_power_loss.py)."""


def fault_points() -> tuple[str, ...]:
    """Every registered storage fault point a running job reaches."""
    import cdc_sink.table  # noqa: F401 -- registers the table's points and its modules'
    from cdc_sink.storage.faults import KNOWN_POINTS

    return tuple(p for p in KNOWN_POINTS if p not in JOB_UNREACHABLE_POINTS)


def main(argv: list[str] | None = None) -> int:
    """Runs the chaos runs; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=100, help="job restarts per apply mode")
    p.add_argument("--events", type=int, default=20000, help="records per apply mode")
    p.add_argument("--modes", default="driver,executors")
    p.add_argument(
        "--fault-point-runs",
        type=int,
        default=10,
        help="of the restarts, how many die at random storage fault points",
    )
    p.add_argument(
        "--produce-seconds",
        type=float,
        default=None,
        help="spread producing over this long (default: 4 s per kill)",
    )
    p.add_argument(
        "--broker-bounces",
        type=int,
        default=0,
        help="kill and restart the (local) broker this many times in one run",
    )
    p.add_argument(
        "--enospc-runs",
        type=int,
        default=0,
        help="runs during which the table's tmpfs fills up (root only)",
    )
    p.add_argument("--table-fs-mb", type=int, default=64, help="the table's tmpfs size")
    p.add_argument(
        "--eio-runs",
        type=int,
        default=0,
        help="runs in which one fsync under the table path fails with EIO",
    )
    p.add_argument(
        "--eio-at",
        default="10,60",
        help="the failing fsync is the N-th of a process, N uniform in this range",
    )
    p.add_argument(
        "--eio-workers",
        action="store_true",
        help="fail an fsync of the Python workers (executors mode) only",
    )
    p.add_argument(
        "--dead-letter",
        choices=("parquet", "kafka"),
        default="parquet",
        help="the job's dead-letter sink (kafka: a topic, written transactionally)",
    )
    p.add_argument("--json-decoder", choices=("python", "jvm"), default="python")
    p.add_argument(
        "--every-fault-point",
        action="store_true",
        help="after the killed runs, one run per storage fault point that dies "
        "there on purpose (CDC_SINK_CRASH_AT)",
    )
    p.add_argument(
        "--produce-rate",
        type=float,
        default=None,
        help="records/s produced while a job runs (paused between runs) instead "
        "of spreading --events over --produce-seconds",
    )
    p.add_argument(
        "--driver-java-options", default="", help="extra JVM options of the job's Spark driver"
    )
    p.add_argument(
        "--cds",
        action="store_true",
        help="give the job's driver JVM a class-data-sharing archive (built by "
        "a first run) so that restarts cost less CPU",
    )
    p.add_argument(
        "--final-max-offsets",
        type=int,
        default=5000,
        help="records per micro-batch of the final run that drains the topic",
    )
    p.add_argument(
        "--kills-minutes",
        type=float,
        default=None,
        help="start no killed run after this many minutes of a mode's run",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--s3",
        action="store_true",
        help="the table on a SeaweedFS S3 server started for the run (not with "
        "--enospc-runs or --eio-runs)",
    )
    p.add_argument("--workdir", default=None, help="kept afterwards when given")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    kind = "external" if os.environ.get(BOOTSTRAP_ENV) else "local"
    if args.broker_bounces and kind != "local":
        p.error(f"--broker-bounces needs the local broker (unset ${BOOTSTRAP_ENV})")
    if args.s3 and (args.enospc_runs or args.eio_runs):
        p.error("--s3 takes no --enospc-runs or --eio-runs (they fault the local disk)")
    broker = start_kafka(num_partitions=1, kind=kind)  # type: ignore[arg-type]
    base = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="chaos_"))
    results = {}
    ok = True
    s3 = None
    if args.s3:
        from cdc_sink_testkit.s3 import SeaweedS3

        s3 = SeaweedS3().start()
    try:
        for mode in args.modes.split(","):
            t0 = time.monotonic()
            cfg = ChaosConfig(
                bootstrap=broker.bootstrap_servers,
                topic=f"chaos-{mode}-{uuid.uuid4().hex[:6]}",
                workdir=base / mode,
                apply_mode=mode,
                events=args.events,
                kills=args.kills,
                fault_point_runs=args.fault_point_runs,
                seed=args.seed,
                produce_seconds=args.produce_seconds
                or 4.0 * args.kills
                + 40.0 * (args.broker_bounces + args.enospc_runs + args.eio_runs),
                broker=broker if args.broker_bounces else None,
                broker_bounces=args.broker_bounces,
                enospc_runs=args.enospc_runs,
                table_fs_mb=args.table_fs_mb,
                eio_runs=args.eio_runs,
                eio_at=tuple(int(x) for x in args.eio_at.split(",")),  # type: ignore[arg-type]
                eio_cmdline="pyspark.daemon" if args.eio_workers else "",
                dead_letter=args.dead_letter,
                json_decoder=args.json_decoder,
                fault_points=fault_points() if args.every_fault_point else (),
                produce_rate=args.produce_rate,
                driver_java_options=args.driver_java_options,
                kills_seconds=None if args.kills_minutes is None else args.kills_minutes * 60,
                cds_archive=str(base / "spark.jsa") if args.cds else "",
                final_max_offsets=args.final_max_offsets,
                table_url="" if s3 is None else s3.url(f"chaos-{mode}-{uuid.uuid4().hex[:6]}"),
                storage_options={} if s3 is None else s3.storage_options(),
            )
            res = run_chaos(
                cfg,
                log=lambda m, mode=mode: print(
                    f"[{time.strftime('%H:%M:%S')}] {mode}: {m}", flush=True
                ),
            )
            results[mode] = json.loads(res.to_json())
            print(f"{mode}: {res.to_json()} ({time.monotonic() - t0:.0f}s)", flush=True)
            ok = ok and not res.failures
    finally:
        stop_servers(broker, s3, base if not args.workdir else None)
    report_results(results, args.json)
    return 0 if ok else 1


def stop_servers(broker: Any, s3: Any, workdir: Path | None) -> None:
    """Stops the runs' broker and S3 server (None: none) and removes their work
    directory (None: kept, the user named it)."""
    broker.stop()
    if s3 is not None:
        s3.stop()
    if workdir is not None:
        shutil.rmtree(workdir, ignore_errors=True)


def report_results(results: dict[str, Any], json_path: str | None) -> None:
    """Prints the runs' results as JSON, with the command that made them, and writes them
    to ``json_path`` when given."""
    summary = json.dumps(
        {"command": " ".join([sys.executable, *sys.argv]), "results": results},
        indent=1,
        sort_keys=True,
    )
    print(summary)
    if json_path:
        Path(json_path).write_text(summary)


if __name__ == "__main__":
    sys.exit(main())
