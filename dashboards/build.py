"""The cdc_sink Grafana dashboard, as code (grafana-foundation-sdk).

Regenerate the committed JSON after changing this file::

    .venv/bin/python dashboards/build.py            # rewrites cdc_sink_overview.json
    .venv/bin/python dashboards/build.py --check    # exit 1 when the JSON is stale

One overview dashboard for the streaming job (``streaming_jobs/cdc_to_tablets.py
--metrics-port``), a row per concern: throughput, freshness, Kafka, batches, rejects and
dead letters, versions, memory and deltas, storage, compaction and GC; a job writing many
tables (``cdc_sink.metrics.tables``) adds its per-table panels to the rows they belong to
(the busiest, slowest and most rejecting tables, stopped tables, open tables and their
bytes). Every query filters
on the template variables ``table`` and ``app_id`` (both multi-valued, ``All`` matches
everything) and reads from the Prometheus data source chosen in ``datasource``.
``dashboards/provisioning/`` loads the JSON into any Grafana as it is.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus as prom_b
from grafana_foundation_sdk.builders import stat as stat_b
from grafana_foundation_sdk.builders import timeseries as ts_b
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dash_m

__all__ = [
    "DASHBOARD_PATH",
    "DASHBOARD_UID",
    "RATE",
    "SELECTOR",
    "build_overview",
    "main",
    "render",
]

DASHBOARD_PATH = Path(__file__).resolve().with_name("cdc_sink_overview.json")
"""Where the generated JSON is committed."""

DASHBOARD_UID = "cdc-sink-overview"
"""Stable uid: links and provisioning survive regeneration."""

SELECTOR = 'table=~"$table", app_id=~"$app_id"'
"""Label matchers every query carries (the template variables)."""

RATE = "$__rate_interval"
"""Range of every ``rate()``: Grafana sizes it from the scrape interval and the zoom."""

DATASOURCE = dash_m.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Alert thresholds, kept equal to dashboards/alerts/cdc_sink_rules.yml so a red panel
# and a firing alert mean the same thing.
FRESHNESS_WARN_S = 5.0
FRESHNESS_CRIT_S = 30.0
LAST_COMMIT_WARN_S = 60.0
LAST_COMMIT_CRIT_S = 300.0
LAG_WARN_OFFSETS = 10_000.0
LAG_CRIT_OFFSETS = 100_000.0
DEAD_LETTER_WARN_PER_S = 0.1
DEAD_LETTER_CRIT_PER_S = 1.0
DELTAS_WARN = 20.0  # TableOptions.compact_every's default
DELTAS_CRIT = 100.0
TOP_TABLES = 10  # the tables a panel of a many-table job draws (topk)


def _sel(extra: str = "") -> str:
    return "{" + SELECTOR + (", " + extra if extra else "") + "}"


def _job_sel() -> str:
    """The matchers of a job-wide metric (it has no ``table`` label)."""
    return '{app_id=~"$app_id"}'


def _rate(metric: str, extra: str = "") -> str:
    return f"rate({metric}{_sel(extra)}[{RATE}])"


def _quantile(q: float, histogram: str, by: str = "table") -> str:
    return f"histogram_quantile({q}, sum by ({by}, le) ({_rate(histogram + '_bucket')}))"


def _p50_p99(histogram: str) -> tuple[_Query, _Query]:
    """The two per-table quantile queries of a p50 / p99 panel."""
    return (
        _Query(_quantile(0.5, histogram), "{{table}} p50"),
        _Query(_quantile(0.99, histogram), "{{table}} p99"),
    )


def _mean(histogram: str, by: str = "table") -> str:
    return (
        f"sum by ({by}) ({_rate(histogram + '_sum')}) / "
        f"sum by ({by}) ({_rate(histogram + '_count')})"
    )


@dataclass(frozen=True)
class _Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class _Thresholds:
    """Green below ``warn``, orange from ``warn``, red from ``crit``."""

    warn: float
    crit: float


@dataclass(frozen=True)
class _Spec:
    """One panel: what it shows and how."""

    title: str
    description: str
    unit: str
    queries: tuple[_Query, ...]
    kind: str = "timeseries"  # or "stat"
    width: int = 8
    height: int = 8
    stacked: bool = False
    thresholds: _Thresholds | None = None
    right_axis: tuple[str, str] | None = None
    """(refId, unit): that query's unit, drawn on a right-hand axis."""


def _stat(
    title: str, description: str, unit: str, query: _Query, thresholds: _Thresholds | None = None
) -> _Spec:
    """A stat panel of the overview row: one query, 4 wide and 5 high."""
    return _Spec(
        title, description, unit, (query,), kind="stat", width=4, height=5, thresholds=thresholds
    )


@dataclass
class _Row:
    title: str
    panels: list[_Spec] = field(default_factory=list)


def _thresholds(t: _Thresholds | None) -> dash_b.ThresholdsConfig:
    steps = [dash_m.Threshold(value=None, color="green")]
    if t is not None:
        steps += [
            dash_m.Threshold(value=t.warn, color="orange"),
            dash_m.Threshold(value=t.crit, color="red"),
        ]
    return dash_b.ThresholdsConfig().mode(dash_m.ThresholdsMode.ABSOLUTE).steps(steps)


def _targets(spec: _Spec) -> list[prom_b.Dataquery]:
    return [
        prom_b.Dataquery()
        .expr(q.expr)
        .legend_format(q.legend)
        .range()
        .ref_id(chr(ord("A") + i))
        .datasource(DATASOURCE)
        for i, q in enumerate(spec.queries)
    ]


def _panel(spec: _Spec, panel_id: int) -> Any:
    if spec.kind == "stat":
        stat = (
            stat_b.Panel()
            .id(panel_id)
            .title(spec.title)
            .description(spec.description)
            .datasource(DATASOURCE)
            .unit(spec.unit)
            .span(spec.width)
            .height(spec.height)
            .thresholds(_thresholds(spec.thresholds))
            .graph_mode(common_m.BigValueGraphMode.AREA)
            .color_mode(common_m.BigValueColorMode.BACKGROUND)
            .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]))
        )
        for t in _targets(spec):
            stat = stat.with_target(t)
        return stat
    panel = (
        ts_b.Panel()
        .id(panel_id)
        .title(spec.title)
        .description(spec.description)
        .datasource(DATASOURCE)
        .unit(spec.unit)
        .span(spec.width)
        .height(spec.height)
        .min(0)
        .fill_opacity(40 if spec.stacked else 10)
        .line_width(1)
        .thresholds(_thresholds(spec.thresholds))
        .legend(
            common_b.VizLegendOptions()
            .show_legend(True)
            .display_mode(common_m.LegendDisplayMode.LIST)
            .placement(common_m.LegendPlacement.BOTTOM)
        )
        .tooltip(
            common_b.VizTooltipOptions()
            .mode(common_m.TooltipDisplayMode.MULTI)
            .sort(common_m.SortOrder.DESCENDING)
        )
    )
    if spec.stacked:
        panel = panel.stacking(common_b.StackingConfig().mode(common_m.StackingMode.NORMAL))
    if spec.thresholds is not None:
        panel = panel.thresholds_style(
            common_b.GraphThresholdsStyleConfig().mode(common_m.GraphThresholdsStyleMode.DASHED)
        )
    if spec.right_axis is not None:
        ref_id, unit = spec.right_axis
        panel = panel.override_by_query(
            ref_id,
            [
                dash_m.DynamicConfigValue(id_val="unit", value=unit),
                dash_m.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
            ],
        )
    for t in _targets(spec):
        panel = panel.with_target(t)
    return panel


@dataclass(frozen=True)
class _TablePanels:
    """The panels of a job writing many tables (``cdc_sink.metrics.tables``), one set per
    row they belong to. Only the worst tables have series of their own; the others are
    summed under ``table="_other"``. The job-wide series carry no ``table`` label: the
    ``table`` variable's ``All`` shows them."""

    fresh: _Thresholds
    commit_age: _Thresholds
    top: int = TOP_TABLES

    def events(self) -> _Spec:
        """Throughput: the busiest tables."""
        rate = _rate("cdc_sink_table_events_total")
        return _Spec(
            "Events by table",
            f"Events per second of the {self.top} busiest tables (a job writing many tables; "
            '"_other": the tables without series of their own).',
            "ops",
            (_Query(f"topk({self.top}, sum by (table) ({rate}))", "{{table}}"),),
            width=24,
        )

    def freshness(self) -> list[_Spec]:
        """Freshness: the slowest tables and the ones that committed longest ago."""
        p99 = f"max by (table) (cdc_sink_table_freshness_p99_seconds{_sel()})"
        last = f"max by (table) (cdc_sink_table_last_commit_timestamp_seconds{_sel()})"
        return [
            _Spec(
                "Worst tables by freshness",
                f"The {self.top} tables with the highest freshness p99 of their last batch "
                "(a job writing many tables).",
                "s",
                (_Query(f"topk({self.top}, {p99})", "{{table}}"),),
                width=12,
                thresholds=self.fresh,
            ),
            _Spec(
                "Tables by time since last commit",
                f"The {self.top} tables that committed longest ago (an idle source table "
                "commits nothing; see the Kafka lag).",
                "s",
                (_Query(f"topk({self.top}, time() - {last})", "{{table}}"),),
                width=12,
                thresholds=self.commit_age,
            ),
        ]

    def rejects(self) -> list[_Spec]:
        """Rejects: by table, skipped events, stopped tables."""
        rejects = _rate("cdc_sink_table_rejects_total")
        skipped = f"rate(cdc_sink_tables_skipped_events_total{_job_sel()}[{RATE}])"
        return [
            _Spec(
                "Rejects by table",
                f"Rejected events per second of the {self.top} tables rejecting most.",
                "ops",
                (_Query(f"topk({self.top}, sum by (table) ({rejects}))", "{{table}}"),),
            ),
            _Spec(
                "Skipped events by reason",
                "Events of tables the job cannot write (e.g. no primary key), per second.",
                "ops",
                (_Query(f"sum by (reason) ({skipped})", "{{reason}}"),),
                stacked=True,
            ),
            _Spec(
                "Stopped tables",
                "Tables stopped by a schema change they cannot take (their events go to the "
                'dead letters): how many, and which ("_other": how many without a label '
                "of their own).",
                "short",
                (
                    _Query(
                        f"max by (app_id) (cdc_sink_tables_stopped{_job_sel()})", "stopped tables"
                    ),
                    _Query(f"max by (table) (cdc_sink_table_stopped{_sel()})", "{{table}}"),
                ),
            ),
        ]

    def open(self) -> _Spec:
        """Memory: the tables held in memory and their bytes."""
        created = f"increase(cdc_sink_tables_created_total{_job_sel()}[{RATE}])"
        return _Spec(
            "Tables open / memory",
            "Tables known to the job and held in memory (the budget of open tables), "
            "tables created, and the bytes the open tables hold (right axis).",
            "short",
            (
                _Query(f"max by (app_id) (cdc_sink_tables_known{_job_sel()})", "known"),
                _Query(f"max by (app_id) (cdc_sink_tables_open{_job_sel()})", "open"),
                _Query(f"sum by (app_id) ({created})", "created"),
                _Query(f"max by (app_id) (cdc_sink_tables_open_bytes{_job_sel()})", "open bytes"),
            ),
            width=24,
            right_axis=("D", "bytes"),
        )


def _rows() -> list[_Row]:
    fresh = _Thresholds(FRESHNESS_WARN_S, FRESHNESS_CRIT_S)
    lag = _Thresholds(LAG_WARN_OFFSETS, LAG_CRIT_OFFSETS)
    commit_age = _Thresholds(LAST_COMMIT_WARN_S, LAST_COMMIT_CRIT_S)
    dlq = _Thresholds(DEAD_LETTER_WARN_PER_S, DEAD_LETTER_CRIT_PER_S)
    received = _rate("cdc_sink_events_total", 'outcome="received"')
    committed = _rate("cdc_sink_batches_total", 'result="committed"')
    since_commit = f"time() - max by (table) (cdc_sink_last_commit_timestamp_seconds{_sel()})"
    tables = _TablePanels(fresh, commit_age)
    return [
        _Row(
            "Overview",
            [
                _stat(
                    "Table version",
                    "Latest committed version of the table.",
                    "none",
                    _Query(f"max by (table) (cdc_sink_table_version{_sel()})", "{{table}}"),
                ),
                _stat(
                    "Since last commit",
                    "Seconds since the job last committed a version.",
                    "s",
                    _Query(since_commit, "{{table}}"),
                    thresholds=commit_age,
                ),
                _stat(
                    "Freshness p99",
                    "Kafka record timestamp to version visible, p99.",
                    "s",
                    _Query(_quantile(0.99, "cdc_sink_freshness_seconds"), "{{table}}"),
                    thresholds=fresh,
                ),
                _stat(
                    "Offsets behind latest",
                    "Kafka offsets behind latest (max partition).",
                    "short",
                    _Query(
                        f"max by (table) (cdc_sink_kafka_max_offsets_behind_latest{_sel()})",
                        "{{table}}",
                    ),
                    thresholds=lag,
                ),
                _stat(
                    "Events received",
                    "Events read from Kafka per second, all ops.",
                    "ops",
                    _Query(f"sum by (table) ({received})", "{{table}}"),
                ),
                _stat(
                    "Dead letters",
                    "Records sent to the dead-letter sink per second.",
                    "ops",
                    _Query(f"sum by (table) ({_rate('cdc_sink_dead_letters_total')})", "{{table}}"),
                    thresholds=dlq,
                ),
            ],
        ),
        _Row(
            "Throughput",
            [
                _Spec(
                    "Events received by op",
                    "Events read per second, by operation.",
                    "ops",
                    (_Query(f"sum by (table, op) ({received})", "{{table}} {{op}}"),),
                    stacked=True,
                ),
                _Spec(
                    "Events by outcome",
                    "What became of the events: applied, stale (older than the row), "
                    "ignored (no-op), rejected (dead letters).",
                    "ops",
                    (
                        _Query(
                            "sum by (table, outcome) ("
                            + _rate(
                                "cdc_sink_events_total",
                                'op="all", outcome=~"applied|stale|ignored|rejected"',
                            )
                            + ")",
                            "{{table}} {{outcome}}",
                        ),
                    ),
                    stacked=True,
                ),
                _Spec(
                    "Events per batch",
                    "Events per micro-batch, p50 and p99.",
                    "short",
                    (*_p50_p99("cdc_sink_batch_events"),),
                ),
                tables.events(),
            ],
        ),
        _Row(
            "Freshness",
            [
                _Spec(
                    "Freshness p50 / p99",
                    "Kafka record timestamp to the version that holds it being visible.",
                    "s",
                    (*_p50_p99("cdc_sink_freshness_seconds"),),
                    width=12,
                    thresholds=fresh,
                ),
                _Spec(
                    "Seconds since last commit",
                    "Grows while the job commits nothing (idle topic or a stuck job: see "
                    "the Kafka lag).",
                    "s",
                    (_Query(since_commit, "{{table}}"),),
                    width=12,
                    thresholds=commit_age,
                ),
                *tables.freshness(),
            ],
        ),
        _Row(
            "Kafka",
            [
                _Spec(
                    "Offsets behind latest",
                    "From Spark's progress of the Kafka source: max and mean over partitions.",
                    "short",
                    (
                        _Query(
                            f"max by (table) (cdc_sink_kafka_max_offsets_behind_latest{_sel()})",
                            "{{table}} max",
                        ),
                        _Query(
                            f"max by (table) (cdc_sink_kafka_avg_offsets_behind_latest{_sel()})",
                            "{{table}} avg",
                        ),
                    ),
                    width=12,
                    thresholds=lag,
                ),
                _Spec(
                    "Input vs processed rows/s",
                    "Spark's inputRowsPerSecond and processedRowsPerSecond: processed below "
                    "input means the job falls behind.",
                    "ops",
                    (
                        _Query(
                            f"max by (table) (cdc_sink_kafka_input_rows_per_second{_sel()})",
                            "{{table}} input",
                        ),
                        _Query(
                            f"max by (table) (cdc_sink_kafka_processed_rows_per_second{_sel()})",
                            "{{table}} processed",
                        ),
                    ),
                    width=12,
                ),
            ],
        ),
        _Row(
            "Batches",
            [
                _Spec(
                    "Batch duration by phase",
                    "Mean seconds per micro-batch in each phase (stacked: the top is the mean "
                    "batch duration).",
                    "s",
                    (
                        _Query(
                            _mean("cdc_sink_batch_phase_seconds", "table, phase"),
                            "{{table}} {{phase}}",
                        ),
                    ),
                    stacked=True,
                ),
                _Spec(
                    "Batch duration p50 / p99",
                    "Whole micro-batch, read to commit.",
                    "s",
                    (*_p50_p99("cdc_sink_batch_duration_seconds"),),
                ),
                _Spec(
                    "Batches by result",
                    "Micro-batches per second: committed, skipped (a replay already "
                    "committed), failed.",
                    "ops",
                    (
                        _Query(
                            f"sum by (table, result) ({_rate('cdc_sink_batches_total')})",
                            "{{table}} {{result}}",
                        ),
                    ),
                ),
            ],
        ),
        _Row(
            "Rejects and dead letters",
            [
                _Spec(
                    "Rejected, stale and ignored events",
                    "Events not applied, per second.",
                    "ops",
                    (
                        _Query(
                            "sum by (table, outcome) ("
                            + _rate(
                                "cdc_sink_events_total",
                                'op="all", outcome=~"rejected|stale|ignored"',
                            )
                            + ")",
                            "{{table}} {{outcome}}",
                        ),
                    ),
                    width=12,
                ),
                _Spec(
                    "Dead letters by reason",
                    "Records sent to the dead-letter sink, by reason.",
                    "ops",
                    (
                        _Query(
                            f"sum by (table, reason) ({_rate('cdc_sink_dead_letters_total')})",
                            "{{table}} {{reason}}",
                        ),
                    ),
                    width=12,
                    stacked=True,
                    thresholds=dlq,
                ),
                *tables.rejects(),
            ],
        ),
        _Row(
            "Versions",
            [
                _Spec(
                    "Version rate",
                    "Versions committed per second.",
                    "ops",
                    (
                        _Query(f"sum by (table) ({committed})", "{{table}} committed batches"),
                        _Query(
                            f"max by (table) (deriv(cdc_sink_table_version{_sel()}[{RATE}]))",
                            "{{table}} version growth",
                        ),
                    ),
                ),
                _Spec(
                    "Current and oldest readable version",
                    "Versions between the two can be read (time travel).",
                    "none",
                    (
                        _Query(
                            f"max by (table) (cdc_sink_table_version{_sel()})", "{{table}} current"
                        ),
                        _Query(
                            f"max by (table) (cdc_sink_table_oldest_version{_sel()})",
                            "{{table}} oldest",
                        ),
                    ),
                ),
                _Spec(
                    "Live rows",
                    "Rows in the latest version.",
                    "short",
                    (_Query(f"max by (table) (cdc_sink_table_live_rows{_sel()})", "{{table}}"),),
                ),
            ],
        ),
        _Row(
            "Memory and deltas",
            [
                _Spec(
                    "Tablet memory",
                    "Bytes held by the loaded tablets.",
                    "bytes",
                    (_Query(f"max by (table) (cdc_sink_table_memory_bytes{_sel()})", "{{table}}"),),
                    width=12,
                ),
                _Spec(
                    "Outstanding delta versions",
                    "Delta versions not yet compacted, max over buckets (compaction brings it "
                    "back down).",
                    "short",
                    (
                        _Query(
                            f"max by (table) (cdc_sink_table_outstanding_delta_versions{_sel()})",
                            "{{table}}",
                        ),
                    ),
                    width=12,
                    thresholds=_Thresholds(DELTAS_WARN, DELTAS_CRIT),
                ),
                tables.open(),
            ],
        ),
        _Row(
            "Storage",
            [
                _Spec(
                    "WAL and snapshot bytes",
                    "Bytes on disk: write-ahead log and snapshots.",
                    "bytes",
                    (
                        _Query(
                            f"max by (table) (cdc_sink_table_wal_bytes{_sel()})", "{{table}} WAL"
                        ),
                        _Query(
                            f"max by (table) (cdc_sink_table_snapshot_bytes{_sel()})",
                            "{{table}} snapshots",
                        ),
                    ),
                    width=24,
                    stacked=True,
                ),
            ],
        ),
        _Row(
            "Compaction and GC",
            [
                _Spec(
                    "Compactions",
                    "Compactions per second.",
                    "ops",
                    (
                        _Query(
                            f"sum by (table) ({_rate('cdc_sink_compactions_total')})", "{{table}}"
                        ),
                    ),
                ),
                _Spec(
                    "Compaction duration",
                    "Mean and p99 seconds per compaction.",
                    "s",
                    (
                        _Query(_mean("cdc_sink_compaction_duration_seconds"), "{{table}} mean"),
                        _Query(
                            _quantile(0.99, "cdc_sink_compaction_duration_seconds"), "{{table}} p99"
                        ),
                    ),
                ),
                _Spec(
                    "GC runs by result",
                    "Garbage-collection runs per second, ok or failed.",
                    "ops",
                    (
                        _Query(
                            f"sum by (table, result) ({_rate('cdc_sink_gc_runs_total')})",
                            "{{table}} {{result}}",
                        ),
                    ),
                ),
                _Spec(
                    "GC duration",
                    "Mean and p99 seconds per GC run.",
                    "s",
                    (
                        _Query(_mean("cdc_sink_gc_duration_seconds"), "{{table}} mean"),
                        _Query(_quantile(0.99, "cdc_sink_gc_duration_seconds"), "{{table}} p99"),
                    ),
                ),
                _Spec(
                    "GC removed files",
                    "Files deleted by GC per second.",
                    "ops",
                    (
                        _Query(
                            f"sum by (table) ({_rate('cdc_sink_gc_removed_files_total')})",
                            "{{table}}",
                        ),
                    ),
                ),
                _Spec(
                    "GC removed bytes",
                    "Bytes deleted by GC per second.",
                    "Bps",
                    (
                        _Query(
                            f"sum by (table) ({_rate('cdc_sink_gc_removed_bytes_total')})",
                            "{{table}}",
                        ),
                    ),
                ),
            ],
        ),
    ]


def _query_variable(name: str, label: str, query: str) -> Any:
    """A multi-value variable (with "All") whose values a Prometheus query lists."""
    return (
        dash_b.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dash_m.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def _variables() -> list[Any]:
    ds = (
        dash_b.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .current(dash_m.VariableOption(selected=True, text="Prometheus", value="Prometheus"))
    )
    table = _query_variable("table", "Table", "label_values(cdc_sink_table_version, table)")
    app_id = _query_variable(
        "app_id", "App id", 'label_values(cdc_sink_table_version{table=~"$table"}, app_id)'
    )
    return [ds, table, app_id]


def build_overview() -> dash_m.Dashboard:
    """The overview dashboard of the cdc_sink streaming job (the SDK's model)."""
    builder = (
        dash_b.Dashboard("cdc_sink overview")
        .uid(DASHBOARD_UID)
        .description(
            "The cdc_sink streaming job: Kafka CDC events to a realtime-updatable columnar table."
        )
        .tags(["cdc_sink", "kafka", "spark"])
        .editable()
        .timezone("browser")
        .refresh("10s")
        .time("now-30m", "now")
        .tooltip(dash_m.DashboardCursorSync.CROSSHAIR)
        .variables(_variables())
    )
    panel_id = 0
    for row in _rows():
        panel_id += 1
        builder = builder.with_row(dash_b.Row(row.title).id(panel_id))
        for spec in row.panels:
            panel_id += 1
            builder = builder.with_panel(_panel(spec, panel_id))
    return builder.build()


def render() -> str:
    """The dashboard's JSON text, exactly as committed (stable: same input, same bytes)."""
    payload = json.loads(json.dumps(build_overview(), cls=JSONEncoder))
    return json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Writes the dashboard JSON (or, with ``--check``, tells whether it is stale)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if the committed JSON differs from what this file generates",
    )
    p.add_argument("--output", type=Path, default=DASHBOARD_PATH, help="where to write")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run python dashboards/build.py", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
