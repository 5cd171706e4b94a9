"""A real Prometheus server for tests: Debian's ``prometheus`` binary, its config and
storage in a temporary directory, listening on 127.0.0.1 on a free port.

    with PrometheusServer(tmp, targets=["127.0.0.1:9108"], rule_files=[rules]) as prom:
        prom.query('cdc_sink_table_version')    # the HTTP API's result list
"""

from __future__ import annotations

import json
import math
import shutil
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from cdc_sink_testkit.process import ChildServer, StartStop

__all__ = ["PrometheusError", "PrometheusServer", "finite_series", "free_port"]


class PrometheusError(RuntimeError):
    """Prometheus did not start, or answered a query with an error."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def finite_series(result: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The series of a query result (instant or range) with at least one value that is a
    number (not NaN/Inf): what a panel draws."""
    out = []
    for series in result:
        values = series["values"] if "values" in series else [series["value"]]
        if any(math.isfinite(float(v)) for _, v in values):
            out.append(series)
    return out


class PrometheusServer(StartStop):
    """One Prometheus process scraping ``targets`` every ``scrape_interval``.

    Args:
        workdir: Directory for the config, the storage and the log.
        targets: ``host:port`` of the ``/metrics`` endpoints (job ``cdc_sink``).
        rule_files: Rule files to load (evaluated every ``scrape_interval``).
        scrape_interval: Scrape and rule evaluation interval.
    """

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str],
        *,
        rule_files: Sequence[Path] = (),
        scrape_interval: str = "1s",
    ) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise PrometheusError(
                "prometheus not found: run `make install` (apt-get install prometheus)"
            )
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = {
            "global": {
                "scrape_interval": scrape_interval,
                "evaluation_interval": scrape_interval,
                "scrape_timeout": scrape_interval,
            },
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [
                {"job_name": "cdc_sink", "static_configs": [{"targets": list(targets)}]}
            ],
        }
        self._child = ChildServer()

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 60.0) -> PrometheusServer:
        """Starts Prometheus and waits until it is ready."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config), encoding="utf-8")
        (self.workdir / "prometheus.log").unlink(missing_ok=True)
        self._child.launch(
            [
                self.binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--web.enable-lifecycle",
            ],
            cwd=self.workdir,
            log=self.workdir / "prometheus.log",
            grace=20.0,
            workdir=None,  # the test's directory: its fixture removes it
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self._child.exit_code()
            if code is not None:
                raise PrometheusError(f"prometheus exited with {code}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise PrometheusError(f"prometheus not ready after {timeout}s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stops Prometheus (SIGTERM to its group, SIGKILL after 20 s); idempotent."""
        self._child.stop(20.0)

    def log_tail(self, chars: int = 4000) -> str:
        """The end of Prometheus's log."""
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    # ------------------------------------------------------------------ HTTP API
    def api(self, path: str, params: dict[str, str] | None = None) -> Any:
        """``GET /api/v1/<path>``: the ``data`` of a successful answer."""
        query = "?" + urllib.parse.urlencode(params) if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
            raise PrometheusError(
                f"{path} {params}: HTTP {e.code}: {body.get('errorType')}: {body.get('error')}"
            ) from e
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query (``/api/v1/query``): its vector (a scalar as one series)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", params)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def query_range(
        self, expr: str, start: float, end: float, step: str = "1s"
    ) -> list[dict[str, Any]]:
        """A range query (``/api/v1/query_range``, what a Grafana time-series panel
        sends): its matrix, each series with its ``values``."""
        data = self.api(
            "query_range",
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step},
        )
        result: list[dict[str, Any]] = data["result"]
        return result

    def value(self, expr: str) -> float | None:
        """The value of a query returning at most one series (None when empty)."""
        result = self.query(expr)
        if not result:
            return None
        if len(result) > 1:
            raise PrometheusError(f"{expr}: {len(result)} series, expected one")
        return float(result[0]["value"][1])

    def targets_up(self) -> dict[str, str]:
        """``scrapeUrl -> health`` of the active targets."""
        data = self.api("targets", {"state": "active"})
        return {t["scrapeUrl"]: t["health"] for t in data["activeTargets"]}
