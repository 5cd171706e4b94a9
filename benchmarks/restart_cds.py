"""What a class-data-sharing (AppCDS) archive saves on a restart of the streaming job.

Every restart of ``streaming_jobs/cdc_to_tablets.py`` starts the spark-submit launcher JVM
and the driver JVM, which load and verify some 15,000 classes before the first batch.
Java 17 can dump the classes a run loaded into an archive
(``-XX:ArchiveClassesAtExit``) and map it at the next start (``-XX:SharedArchiveFile``),
skipping their parsing and verification. This script builds such an archive with one
available-now run of the job, then runs the job (available-now, on a topic of
``--records`` orders records, 3 partitions, a local broker) alternately with and without
the archive, and reports CPU seconds (the job's whole process tree) and wall seconds per
run, and their medians.

Run:  .venv/bin/python benchmarks/restart_cds.py [--pairs 3] [--records 1000]
      [--archive /tmp/cdc_sink_spark.jsa]

Use it in a job: ``spark-submit --driver-java-options
"-XX:SharedArchiveFile=/path/spark.jsa" ...`` (the archive is only valid for the same
JVM and the same classpath: rebuild it when either changes; a mismatch is ignored by the
JVM with a warning).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cdc_sink.kafka.producer import CdcProducer
from cdc_sink_testkit.demo import generate_orders, orders_schema
from cdc_sink_testkit.demo.stream import produce_records
from cdc_sink_testkit.kafka import create_topic, start_kafka
from tests.chaos.harness import ChaosConfig, job_command, job_env


def run_job(bootstrap: str, workdir: Path, records: int, java_options: str) -> tuple[float, float]:
    """One available-now run of the job on a fresh topic; (CPU s, wall s).

    Raises:
        RuntimeError: The job failed.
    """
    topic = f"cds-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 3)
    with CdcProducer(bootstrap, topic, orders_schema()) as p:
        produce_records(p, generate_orders(records, seed=3))
        p.flush()
    w = workdir / topic
    w.mkdir(parents=True)
    cfg = ChaosConfig(bootstrap=bootstrap, topic=topic, workdir=w, driver_java_options=java_options)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    with open(w / "job.log", "wb") as log:
        done = subprocess.run(
            job_command(cfg, available_now=True),
            env=job_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"the job exited {done.returncode} (see {w / 'job.log'})")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> int:
    """Builds the archive, runs the pairs, prints the medians."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--archive", default=None, help="kept when given (built if missing)")
    args = ap.parse_args()
    broker = start_kafka(num_partitions=1, kind="local")
    try:
        with tempfile.TemporaryDirectory(prefix="cdc_cds_") as tmp:
            archive = Path(args.archive) if args.archive else Path(tmp) / "spark.jsa"
            if not archive.exists():
                cpu, wall = run_job(
                    broker.bootstrap_servers,
                    Path(tmp),
                    args.records,
                    f"-XX:ArchiveClassesAtExit={archive}",
                )
                print(
                    f"archive {archive}: {archive.stat().st_size / 2**20:.0f} MiB, built "
                    f"in {wall:.1f}s ({cpu:.1f} CPU s)",
                    flush=True,
                )
            runs: dict[str, list[tuple[float, float]]] = {"without": [], "with": []}
            for i in range(args.pairs):
                for name in ("with", "without") if i % 2 else ("without", "with"):
                    opts = f"-XX:SharedArchiveFile={archive}" if name == "with" else ""
                    cpu, wall = run_job(broker.bootstrap_servers, Path(tmp), args.records, opts)
                    runs[name].append((cpu, wall))
                    print(
                        f"pair {i}: {name:7s} the archive: {cpu:5.1f} CPU s, {wall:6.1f} s wall",
                        flush=True,
                    )
    finally:
        broker.stop()
    med = {
        k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
        for k, v in runs.items()
    }
    print(
        f"median CPU s: without {med['without'][0]:.1f}, with {med['with'][0]:.1f} "
        f"({med['with'][0] / med['without'][0] - 1:+.0%}); median wall s: without "
        f"{med['without'][1]:.1f}, with {med['with'][1]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
