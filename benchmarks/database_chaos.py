"""The whole-database job SIGKILLed at random during a many-table stream (issue 48).

Usage::

    .venv/bin/python benchmarks/database_chaos.py [--roots local,s3] [--tables 50]
        [--kills 10] [--events 20000] [--malformed 20] [--seed 48] [--workdir DIR]
        [--json results.json]

For each table root (a local directory, a prefix on a SeaweedFS S3 server started for
the run), one run of tests/chaos/database_harness.py: ``cdc-sink run --table-root``
subscribed by pattern to one topic per table on a local Kafka broker (or the cluster
``$CDC_SINK_KAFKA_BOOTSTRAP`` names), Debezium JSON change events of ``--tables``
tables produced while the job runs, records naming no table among them, a Parquet
dead-letter directory; ``--kills`` runs of the job SIGKILLed (process group and all) at
random moments, then one ``available-now`` run. Checked afterwards: every table equals
its model, no table's log holds a batch id twice, the records naming no table are dead
letters exactly once. Prints one line per killed run, then a table of the results and
a JSON summary; exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chaos import report_results, stop_servers  # benchmarks/ is sys.path[0] when run

from cdc_sink_testkit.kafka import BOOTSTRAP_ENV, start_kafka
from tests.chaos.database_harness import DatabaseChaosConfig, run_database_chaos

COLUMNS = (
    ("root", "root"),
    ("tables", "tables"),
    ("events", "events"),
    ("kills", "SIGKILLs"),
    ("start_kills", "of them at start"),
    ("aimed_kills", "aimed at a batch"),
    ("fault_point_deaths", "fault-point deaths"),
    ("tables_ahead_at_kills", "runs ended between tables' commits"),
    ("batches", "batches"),
    ("versions", "table versions"),
    ("rows", "rows"),
    ("wrong_tables", "wrong tables"),
    ("duplicated_batches", "batches applied twice"),
    ("dead_letters", "dead letters"),
    ("dead_letters_expected", "expected"),
    ("final_seconds", "final run s"),
    ("wall_seconds", "wall s"),
)


def _cell(key: str, value: object) -> str:
    """One cell: a count for a list (for ``tables_ahead_at_kills``, the kills that fell
    after some table had committed the run's next batch: its replay skips them)."""
    if key == "tables_ahead_at_kills":
        assert isinstance(value, list)
        return str(sum(1 for n in value if n > 0))
    return str(len(value)) if isinstance(value, list) else str(value)


def table(results: dict[str, dict[str, object]]) -> str:
    """The results as a Markdown table, one row per root."""
    lines = [
        "| " + " | ".join(h for _, h in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for root, res in results.items():
        cells = [root] + [_cell(k, res[k]) for k, _ in COLUMNS[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Runs one chaos run per root; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--roots", default="local,s3", help="local, s3 or both")
    p.add_argument("--tables", type=int, default=50)
    p.add_argument(
        "--kills",
        type=int,
        default=10,
        help="killed runs per root (SIGKILLs and fault-point deaths)",
    )
    p.add_argument("--events", type=int, default=20000, help="change events per root")
    p.add_argument("--malformed", type=int, default=20, help="records naming no table")
    p.add_argument("--max-offsets", type=int, default=1000, help="records per micro-batch")
    p.add_argument("--chunk", type=int, default=200, help="records produced every --pace s")
    p.add_argument("--pace", type=float, default=0.5)
    p.add_argument(
        "--start-kill-share",
        type=float,
        default=0.2,
        help="share of the kills that fall in the job's start, before its first batch",
    )
    p.add_argument(
        "--aimed-kill-share",
        type=float,
        default=0.4,
        help="share of the kills aimed at the run's first batch while it commits its tables",
    )
    p.add_argument(
        "--fault-point-share",
        type=float,
        default=0.0,
        help="share of the runs left to die at a random storage fault point "
        "(CDC_SINK_CRASH_RANDOM), mostly while a batch commits its tables",
    )
    p.add_argument("--fault-probability", type=float, default=0.005)
    p.add_argument(
        "--kill-after",
        default="0,10",
        help="the other kills fall uniformly in this many seconds after the run's first "
        "batch (the next batch's read, routing and tables' commits)",
    )
    p.add_argument("--seed", type=int, default=48)
    p.add_argument("--workdir", default=None, help="kept afterwards when given")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    kind = "external" if os.environ.get(BOOTSTRAP_ENV) else "local"
    roots = args.roots.split(",")
    broker = start_kafka(num_partitions=1, kind=kind)  # type: ignore[arg-type]
    base = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="db_chaos_"))
    s3 = None
    if "s3" in roots:
        from cdc_sink_testkit.s3 import SeaweedS3

        s3 = SeaweedS3().start()
    results: dict[str, dict[str, object]] = {}
    ok = True
    try:
        for root in roots:
            name = f"dbchaos{uuid.uuid4().hex[:8]}"
            cfg = DatabaseChaosConfig(
                bootstrap=broker.bootstrap_servers,
                workdir=base / root,
                prefix=name,
                tables=args.tables,
                events=args.events,
                malformed=args.malformed,
                kills=args.kills,
                seed=args.seed,
                max_offsets=args.max_offsets,
                chunk=args.chunk,
                pace=args.pace,
                start_kill_share=args.start_kill_share,
                aimed_kill_share=args.aimed_kill_share,
                fault_point_share=args.fault_point_share,
                fault_probability=args.fault_probability,
                kill_after=tuple(float(x) for x in args.kill_after.split(",")),  # type: ignore[arg-type]
                table_root="" if root == "local" else s3.url(f"{name}/root"),  # type: ignore[union-attr]
                storage_options={} if root == "local" else s3.storage_options(),  # type: ignore[union-attr]
            )
            res = run_database_chaos(
                cfg,
                log=lambda m, root=root: print(
                    f"[{time.strftime('%H:%M:%S')}] {root}: {m}", flush=True
                ),
            )
            results[root] = json.loads(res.to_json())
            for failure in res.failures:
                print(f"{root}: FAILED: {failure}", flush=True)
            ok = ok and not res.failures
    finally:
        stop_servers(broker, s3, base if not args.workdir else None)
    print(table(results))
    report_results(results, args.json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
