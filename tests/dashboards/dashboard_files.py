"""What the dashboard tests share: the files of ``dashboards/``, the generator module,
and the PromQL queries of the committed dashboard with Grafana's variables substituted."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "dashboards"
DASHBOARD_JSON = DASHBOARDS / "cdc_sink_overview.json"
RULES = DASHBOARDS / "alerts" / "cdc_sink_rules.yml"
RULES_TEST = DASHBOARDS / "alerts" / "cdc_sink_rules_test.yml"
PROVISIONING = DASHBOARDS / "provisioning"

# The metric names of issue 9 (what cdc_sink.metrics exports), written out here so the
# dashboard and the rules are checked against the contract, not against themselves.
METRICS = {
    "cdc_sink_events_total": "counter",
    "cdc_sink_dead_letters_total": "counter",
    "cdc_sink_batches_total": "counter",
    "cdc_sink_batch_phase_seconds": "histogram",
    "cdc_sink_batch_duration_seconds": "histogram",
    "cdc_sink_batch_events": "histogram",
    "cdc_sink_freshness_seconds": "histogram",
    "cdc_sink_last_commit_timestamp_seconds": "gauge",
    "cdc_sink_kafka_input_rows_per_second": "gauge",
    "cdc_sink_kafka_processed_rows_per_second": "gauge",
    "cdc_sink_kafka_avg_offsets_behind_latest": "gauge",
    "cdc_sink_kafka_max_offsets_behind_latest": "gauge",
    "cdc_sink_table_version": "gauge",
    "cdc_sink_table_oldest_version": "gauge",
    "cdc_sink_table_live_rows": "gauge",
    "cdc_sink_table_memory_bytes": "gauge",
    "cdc_sink_table_outstanding_delta_versions": "gauge",
    "cdc_sink_table_wal_bytes": "gauge",
    "cdc_sink_table_snapshot_bytes": "gauge",
    "cdc_sink_compactions_total": "counter",
    "cdc_sink_compaction_duration_seconds": "histogram",
    "cdc_sink_gc_runs_total": "counter",
    "cdc_sink_gc_duration_seconds": "histogram",
    "cdc_sink_gc_removed_files_total": "counter",
    "cdc_sink_gc_removed_bytes_total": "counter",
    # a job writing many tables (cdc_sink.metrics.tables)
    "cdc_sink_table_events_total": "counter",
    "cdc_sink_table_rejects_total": "counter",
    "cdc_sink_table_last_commit_timestamp_seconds": "gauge",
    "cdc_sink_table_freshness_p99_seconds": "gauge",
    "cdc_sink_table_stopped": "gauge",
    "cdc_sink_tables_known": "gauge",
    "cdc_sink_tables_open": "gauge",
    "cdc_sink_tables_open_bytes": "gauge",
    "cdc_sink_tables_created_total": "counter",
    "cdc_sink_tables_stopped": "gauge",
    "cdc_sink_tables_skipped_events_total": "counter",
}

_METRIC_RE = re.compile(r"\bcdc_sink_[a-z0-9_]+")


def exposed_names(metric: str) -> set[str]:
    """The sample names Prometheus stores for ``metric`` (histograms have three)."""
    if METRICS[metric] == "histogram":
        return {f"{metric}_bucket", f"{metric}_sum", f"{metric}_count"}
    return {metric}


def metric_names(expr: str) -> set[str]:
    """The ``cdc_sink_*`` sample names an expression reads."""
    return set(_METRIC_RE.findall(expr))


def load_builder() -> ModuleType:
    """``dashboards/build.py`` as a module (it is a script, not a package)."""
    name = "cdc_sink_dashboards_build"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DASHBOARDS / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def committed_dashboard() -> dict[str, Any]:
    """The committed dashboard JSON."""
    with open(DASHBOARD_JSON, encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


@dataclass(frozen=True)
class PanelQuery:
    """One query of one panel."""

    panel: str
    ref_id: str
    expr: str

    @property
    def name(self) -> str:
        """``panel title [refId]``, for messages."""
        return f"{self.panel} [{self.ref_id}]"


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel that is not a row (rows nest their panels only when collapsed)."""
    out: list[dict[str, Any]] = []
    for p in dashboard["panels"]:
        if p["type"] == "row":
            out += p.get("panels", [])
        else:
            out.append(p)
    return out


def panel_queries(dashboard: dict[str, Any]) -> list[PanelQuery]:
    """Every (panel, query) of the dashboard, in order."""
    return [
        PanelQuery(p["title"], t["refId"], t["expr"])
        for p in panels(dashboard)
        for t in p.get("targets", [])
    ]


def re2_escape(value: str) -> str:
    """``value`` as a literal in a Prometheus (RE2) regex, as Grafana formats a
    single-valued variable used with ``=~``."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", value)


def substitute(expr: str, *, table: str, app_id: str, rate_interval: str) -> str:
    """``expr`` with Grafana's variables replaced as Grafana would for one table and one
    app id (regex-escaped, they sit in ``=~`` matchers inside a PromQL string)."""

    def lit(v: str) -> str:
        return re2_escape(v).replace("\\", "\\\\")

    out = (
        expr.replace("$__rate_interval", rate_interval)
        .replace("$table", lit(table))
        .replace("$app_id", lit(app_id))
    )
    assert "$" not in out, f"unsubstituted variable in {out}"
    return out


def promtool() -> str:
    """Path of ``promtool`` (Debian's ``prometheus`` package; ``make install`` installs it)."""
    path = shutil.which("promtool")
    assert path is not None, "promtool not found: run `make install` (apt-get install prometheus)"
    return path
