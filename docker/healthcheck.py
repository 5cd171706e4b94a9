"""The job image's HEALTHCHECK: the job's /metrics endpoint answers (HTTP 200).

Where the job runs without a metrics endpoint (``CDC_SINK_METRICS_PORT`` empty, or a
job without ``--metrics-port``), it checks the job's liveness instead: a process runs
``cdc_to_tablets.py``. Exit 0 when healthy, 1 otherwise.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

JOB = Path("/opt/cdc_sink/streaming_jobs/cdc_to_tablets.py")


def metrics_ok(host: str, port: str) -> bool:
    """True when http(s)://host:port/metrics answers 200, or 401 (basic auth on: the
    endpoint is up). HTTPS is tried when HTTP gets no answer; its certificate is not
    verified, as this only checks that the job's endpoint is alive."""
    for scheme, ctx in (("http", None), ("https", ssl._create_unverified_context())):
        try:
            with urllib.request.urlopen(
                f"{scheme}://{host}:{port}/metrics", timeout=4, context=ctx
            ) as resp:
                return int(resp.status) == 200
        except urllib.error.HTTPError as exc:
            return exc.code == 401
        except OSError:
            continue
    return False


def job_alive() -> bool:
    """True when some process has ``cdc_to_tablets.py`` on its command line."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"cdc_to_tablets.py" in cmdline.read_bytes():
                return True
        except OSError:
            continue
    return False


def main() -> int:
    """0 when healthy, else 1."""
    port = os.environ.get("CDC_SINK_METRICS_PORT", "")
    host = os.environ.get("CDC_SINK_METRICS_HOST", "127.0.0.1") or "127.0.0.1"
    if host == "0.0.0.0":
        host = "127.0.0.1"
    if port and JOB.is_file() and b"--metrics-port" in JOB.read_bytes():
        return 0 if metrics_ok(host, port) else 1
    return 0 if job_alive() else 1


if __name__ == "__main__":
    sys.exit(main())
