"""spark-submit entry point of ``benchmarks/recovery.py``: the real streaming job
(``streaming_jobs/cdc_to_tablets.py``, its own ``main``) with timestamped phase marks.

Each mark is one line on stderr::

    RECOVERY_MARK <name> wall=<epoch s> py_cpu=<s> jvm_cpu=<s> [key=value ...]

``py_cpu`` is this Python driver's CPU time, ``jvm_cpu`` the CPU time of its parent, the
spark-submit JVM that runs the SparkContext (user + system, from ``/proc``). Nothing of
the job is changed: the marks wrap ``SparkSession.Builder.getOrCreate``,
``cdc_sink.spark.sink`` (the table open), ``DataStreamWriter.start``, the sink's
``__call__`` (one micro-batch) and ``TableCore.load_bucket`` (a tablet load), and a
progress listener prints each trigger's ``durationMs``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / _TICK


def mark(name: str, **extra: Any) -> None:
    """Prints one mark line (see the module docstring)."""
    tail = "".join(f" {k}={v}" for k, v in extra.items())
    print(
        f"RECOVERY_MARK {name} wall={time.time():.3f} py_cpu={time.process_time():.3f} "
        f"jvm_cpu={_cpu_of(os.getppid()):.3f}{tail}",
        file=sys.stderr,
        flush=True,
    )


def _install() -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import DataStreamWriter
    from pyspark.sql.streaming.listener import StreamingQueryListener

    import cdc_sink.spark
    from cdc_sink.engine import TableCore
    from cdc_sink.spark.writer import SinkFunction

    get_or_create = SparkSession.Builder.getOrCreate

    class _Progress(StreamingQueryListener):  # type: ignore[misc]
        def onQueryStarted(self, event: Any) -> None:
            mark("query_started")

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            mark(
                "progress",
                batch=p.batchId,
                trigger_ts=json.dumps(p.timestamp),
                duration_ms=json.dumps(dict(p.durationMs), separators=(",", ":")),
                rows=p.numInputRows,
            )

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            mark("query_terminated")

    def session(self: Any) -> Any:
        mark("session_begin")
        s = get_or_create(self)
        mark("session_up")
        s.streams.addListener(_Progress())
        return s

    SparkSession.Builder.getOrCreate = session  # type: ignore[method-assign]

    make_sink = cdc_sink.spark.sink

    def sink(*args: Any, **kwargs: Any) -> Any:
        mark("sink_open_begin")
        fn = make_sink(*args, **kwargs)
        mark("sink_open_end", version=fn.table.version)
        return fn

    cdc_sink.spark.sink = sink  # type: ignore[assignment]

    start = DataStreamWriter.start

    def start_query(self: Any, *args: Any, **kwargs: Any) -> Any:
        mark("query_start_begin")
        q = start(self, *args, **kwargs)
        mark("query_start_end")
        return q

    DataStreamWriter.start = start_query  # type: ignore[method-assign]

    call = SinkFunction.__call__

    def batch(self: Any, df: Any, batch_id: int) -> None:
        mark("batch_begin", batch=batch_id)
        try:
            call(self, df, batch_id)
        finally:
            st = self.stats[-1] if self.stats else None
            ok = st is not None and st.batch_id == batch_id
            mark(
                "batch_end",
                batch=batch_id,
                result=(st.result if ok and st is not None else "unknown"),
                version=(st.version if ok and st is not None else None),
                events=(st.events if ok and st is not None else 0),
                phases=json.dumps(
                    {
                        k: round(float(v), 4)
                        for k, v in (st.phases.items() if ok and st is not None else [])
                    },
                    separators=(",", ":"),
                ),
            )

    SinkFunction.__call__ = batch  # type: ignore[method-assign]

    load = TableCore.load_bucket

    def load_bucket(self: Any, bucket: int, version: int) -> Any:
        t0, c0 = time.perf_counter(), time.process_time()
        t = load(self, bucket, version)
        mark(
            "load_bucket",
            bucket=bucket,
            version=version,
            wall_s=f"{time.perf_counter() - t0:.4f}",
            cpu_s=f"{time.process_time() - c0:.4f}",
        )
        return t

    TableCore.load_bucket = load_bucket  # type: ignore[method-assign]


def main() -> int:
    mark("python_start", pid=os.getpid())
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(repo, "streaming_jobs"))
    _install()
    import cdc_to_tablets

    mark("imports_done")
    rc = int(cdc_to_tablets.main(sys.argv[1:]))
    mark("main_returned", rc=rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
