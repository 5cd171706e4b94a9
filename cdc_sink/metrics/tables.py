"""Per-table metrics of a job that routes one database's topics into many tables.

One :class:`TableMetrics` per job (beside its :class:`~cdc_sink.metrics.sink.SinkMetrics`,
on the same registry or on one of its own: no family name is shared). The router calls
its hooks: :meth:`~TableMetrics.observe` after each table's batch,
:meth:`~TableMetrics.table_created`, :meth:`~TableMetrics.table_stopped` (a schema change
the table cannot take: its events go to the dead letters),
:meth:`~TableMetrics.table_skipped` (events of a table that cannot be written, e.g. one
without a primary key) and :meth:`~TableMetrics.tables_open` (the tables held in memory).

Per table, labels ``table`` and ``app_id``:

- ``cdc_sink_table_events_total`` (counter): events of the table's committed batches;
- ``cdc_sink_table_rejects_total`` (counter): of them, rejected (dead letters);
- ``cdc_sink_table_last_commit_timestamp_seconds`` (gauge): Unix time of its last commit;
- ``cdc_sink_table_freshness_p99_seconds`` (gauge): p99 of the produce-to-visible
  latencies of its last committed batch (the batch's sample);
- ``cdc_sink_table_stopped`` (gauge): 1 when the table is stopped, else 0.

For the job, label ``app_id``: ``cdc_sink_tables_known`` (tables any hook named),
``cdc_sink_tables_open`` and ``cdc_sink_tables_open_bytes`` (held in memory),
``cdc_sink_tables_created_total``, ``cdc_sink_tables_stopped`` (stopped tables, labelled
or not), ``cdc_sink_tables_skipped_events_total{reason}`` and
``cdc_sink_tables_metrics_errors_total`` (hooks that failed; logged, never raised).

**Bounded labels.** At most ``max_tables`` tables have series of their own; every other
table is counted under ``table="_other"``. The labelled tables are the worst ones, by
the order *stopped before running, then more rejects (over the job's life), then a higher
freshness p99 of the last batch*. A table enters the labelled set when it is seen while
the set has room, or when it is worse than the best (least bad) labelled table, which
then leaves the set. A table that improves keeps its series until a worse one takes its
place, so series do not come and go with every batch.

What ``_other`` holds: the counters of every table while it is not labelled, so the
samples of ``cdc_sink_table_events_total`` (and of the rejects) add up to every event
counted. A table that enters the set starts its series at zero (what it counted before
stays in ``_other``); one that leaves it has its series removed and its counts added to
``_other``'s (a step in ``_other``'s rate). ``_other``'s last commit time is the newest
of its tables', its ``stopped`` gauge the number of stopped tables without a label of
their own (when more than ``max_tables`` are stopped); it has no freshness gauge.

A label value is the table's name; a name that is empty, longer than
:data:`MAX_NAME_CHARS`, holds a ``/``, ``\\``, ``://``, ``@``, a control character or a
space, or is ``_other`` itself is never a label value: such a table is counted under
``_other`` only. A skip reason becomes a label value only as a short ``[a-z0-9_]`` slug,
and at most :data:`MAX_SKIP_REASONS` distinct ones (then ``other``).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge

from cdc_sink.errors import InvalidOption
from cdc_sink.metrics.sink import BatchFigures, _never_raises, batch_result

__all__ = ["MAX_NAME_CHARS", "MAX_SKIP_REASONS", "OTHER", "TableMetrics"]

logger = logging.getLogger(__name__)

OTHER = "_other"
"""The ``table`` label value of the tables without series of their own."""

MAX_NAME_CHARS = 200
"""Longest table name used as a label value."""

MAX_SKIP_REASONS = 16
"""Distinct ``reason`` label values of the skipped events (then ``other``)."""

_UNSAFE_NAME = re.compile(r"[\x00-\x20\x7f/\\@]|://")
_NOT_SLUG = re.compile(r"[^a-z0-9]+")
_SLUG_CHARS = 40


@dataclass
class _Table:
    """What the metrics know of one table."""

    labelled: bool = False
    usable: bool = True  # its name may be a label value
    stopped: bool = False
    rejects: int = 0
    freshness_s: float = 0.0
    last_commit_s: float | None = None
    # what its series counted since it was labelled (folded into _other when it leaves)
    events_here: int = 0
    rejects_here: int = 0

    def badness(self) -> tuple[bool, int, float]:
        """The order of the label rule: stopped, then rejects, then freshness."""
        return (self.stopped, self.rejects, self.freshness_s)


def _slug(reason: object) -> str:
    """A reason as a short label value: lower case, ``[a-z0-9_]``; ``other`` if empty or
    if it looks like a URL or holds credentials (``://``, ``@``)."""
    text = str(reason)
    if "://" in text or "@" in text:
        return "other"
    s = _NOT_SLUG.sub("_", text.lower()).strip("_")[:_SLUG_CHARS].rstrip("_")
    return s or "other"


def _usable_name(name: str) -> bool:
    """Whether ``name`` may be a ``table`` label value (see the module docstring)."""
    return 0 < len(name) <= MAX_NAME_CHARS and name != OTHER and _UNSAFE_NAME.search(name) is None


class TableMetrics:
    """The per-table metrics of a many-table job (see the module docstring).

    Its hooks never raise: a failure is logged and counted in
    ``cdc_sink_tables_metrics_errors_total``.

    Args:
        registry: Registry to register on (default: a new one, :attr:`registry`).
        max_tables: Most tables with series of their own (the others: ``_other``).
        app_id: Value of the ``app_id`` label (the job's writer id).

    Raises:
        InvalidOption: ``max_tables`` is below 1.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        max_tables: int = 50,
        app_id: str = "",
    ) -> None:
        if isinstance(max_tables, bool) or not isinstance(max_tables, int) or max_tables < 1:
            raise InvalidOption(
                f"max_tables must be an integer of at least 1, not {max_tables!r}",
                option="max_tables",
            )
        self.registry = registry if registry is not None else CollectorRegistry()
        self.max_tables = max_tables
        self.app_id = app_id
        self._base = {"app_id": app_id}
        self._errors = 0
        self._lock = threading.RLock()
        self._tables: dict[str, _Table] = {}
        self._labelled: dict[str, _Table] = {}
        self._reasons: set[str] = set()
        self._other_commit_s: float | None = None
        self._declare()
        self._init_series()

    def _declare(self) -> None:
        """The metric families (per table: ``table``, ``app_id``; the job's: ``app_id``)."""
        r = self.registry
        per = ("table", "app_id")
        job = ("app_id",)
        self._m_errors = Counter(
            "cdc_sink_tables_metrics_errors_total",
            "Per-table metrics updates that failed (logged; the stream went on).",
            job,
            registry=r,
        )
        self._events = Counter(
            "cdc_sink_table_events_total",
            'Events of a table\'s committed batches; table="_other": the tables without '
            "series of their own (the worst max_tables tables have one).",
            per,
            registry=r,
        )
        self._rejects = Counter(
            "cdc_sink_table_rejects_total",
            "Rejected events (dead letters) of a table's committed batches (as "
            "cdc_sink_table_events_total, _other included).",
            per,
            registry=r,
        )
        self._last_commit = Gauge(
            "cdc_sink_table_last_commit_timestamp_seconds",
            "Unix time of the table's last committed batch (_other: the newest of its tables).",
            per,
            registry=r,
        )
        self._freshness = Gauge(
            "cdc_sink_table_freshness_p99_seconds",
            "p99 of the produce-to-visible latencies of the table's last committed batch.",
            per,
            registry=r,
        )
        self._stopped = Gauge(
            "cdc_sink_table_stopped",
            "1 when the table is stopped (a schema change it cannot take; its events go to "
            "the dead letters), else 0; _other: its stopped tables.",
            per,
            registry=r,
        )
        self._known = Gauge(
            "cdc_sink_tables_known", "Tables the job has seen (any state).", job, registry=r
        )
        self._open = Gauge(
            "cdc_sink_tables_open",
            "Tables held in memory (the LRU of open tables).",
            job,
            registry=r,
        )
        self._open_bytes = Gauge(
            "cdc_sink_tables_open_bytes", "Bytes held by the tables in memory.", job, registry=r
        )
        self._created = Counter(
            "cdc_sink_tables_created_total", "Tables the job created.", job, registry=r
        )
        self._stopped_n = Gauge(
            "cdc_sink_tables_stopped", "Tables stopped (labelled or not).", job, registry=r
        )
        self._skipped = Counter(
            "cdc_sink_tables_skipped_events_total",
            "Events of tables the job cannot write (e.g. no primary key), by reason.",
            (*job, "reason"),
            registry=r,
        )

    def _init_series(self) -> None:
        """The job's series and ``_other``'s counters, at zero."""
        b = self._base
        for m in (self._m_errors, self._known, self._open, self._open_bytes, self._created):
            m.labels(**b)
        self._stopped_n.labels(**b)
        for m in (self._events, self._rejects, self._stopped):
            m.labels(table=OTHER, **b)
        self._skipped.labels(**b, reason="no_primary_key")  # the router's reason
        self._reasons.add("no_primary_key")

    # ------------------------------------------------------------------ hooks
    @_never_raises
    def observe(self, table: str, st: BatchFigures) -> None:
        """Counts one batch of ``table`` (a committed one: events, rejects, last commit,
        freshness; a skipped or failed one only makes the table known)."""
        committed = batch_result(st) == "committed"
        events = max(0, int(st.events)) if committed else 0
        rejects = max(0, int(st.rejected)) if committed else 0
        p99: float | None = None
        commit_s: float | None = None
        if committed:
            fresh = np.asarray(st.freshness_ms(), dtype=np.float64)
            fresh = fresh[np.isfinite(fresh)]
            if len(fresh):
                p99 = max(0.0, float(np.percentile(fresh, 99)) / 1000.0)
            if st.committed_ms:
                commit_s = int(st.committed_ms) / 1000.0
        with self._lock:
            t = self._table(table)
            t.rejects += rejects
            if p99 is not None:
                t.freshness_s = p99
            if commit_s is not None:
                t.last_commit_s = commit_s
            self._place(table, t)
            self._count(table, t, events, rejects)

    @_never_raises
    def table_stopped(self, table: str, reason: str) -> None:
        """Marks ``table`` stopped (kept labelled while fewer than ``max_tables`` tables
        are stopped). ``reason`` is logged, never a label value."""
        with self._lock:
            t = self._table(table)
            if t.stopped:
                return
            t.stopped = True
            self._stopped_n.labels(**self._base).inc()
            if t.labelled:
                self._stopped.labels(table=table, **self._base).set(1)
            else:  # counted under _other until the rule labels it (now, if it does)
                self._stopped.labels(table=OTHER, **self._base).inc()
                self._place(table, t)
        logger.warning("table %s stopped: %s", _shown(table), reason)

    @_never_raises
    def table_skipped(self, table: str, reason: str, events: int) -> None:
        """Counts ``events`` of ``table`` skipped for ``reason`` (e.g. no primary key)."""
        n = max(0, int(events))
        slug = _slug(reason)
        with self._lock:
            self._table(table)
            if slug not in self._reasons:
                if len(self._reasons) >= MAX_SKIP_REASONS:
                    slug = "other"
                self._reasons.add(slug)
        self._skipped.labels(**self._base, reason=slug).inc(n)

    @_never_raises
    def table_created(self, table: str) -> None:
        """Counts a table the job created."""
        with self._lock:
            self._table(table)
        self._created.labels(**self._base).inc()

    @_never_raises
    def tables_open(self, n: int, bytes_: int) -> None:
        """Sets the tables held in memory and their bytes."""
        self._open.labels(**self._base).set(max(0, int(n)))
        self._open_bytes.labels(**self._base).set(max(0, int(bytes_)))

    # ------------------------------------------------------------------ the label rule
    def _table(self, name: Any) -> _Table:
        """The state of table ``name`` (created, and counted as known, on first sight)."""
        usable = isinstance(name, str) and _usable_name(name)
        # a name that is no str keeps a key of its own (a control character: no table's)
        key = name if isinstance(name, str) else f"\x00{type(name).__name__}:{name!r}"
        t = self._tables.get(key)
        if t is None:
            t = _Table(usable=usable)
            self._tables[key] = t
            self._known.labels(**self._base).set(len(self._tables))
        return t

    def _place(self, name: str, t: _Table) -> None:
        """Labels ``t`` if the rule says so (see the module docstring), making room by
        unlabelling the best labelled table."""
        if t.labelled or not t.usable:
            return
        if len(self._labelled) >= self.max_tables:
            best_name, best = min(self._labelled.items(), key=lambda kv: kv[1].badness())
            if t.badness() <= best.badness():
                return
            self._unlabel(best_name, best)
        self._label(name, t)

    def _label(self, name: str, t: _Table) -> None:
        b = self._base
        t.labelled = True
        self._labelled[name] = t
        t.events_here = t.rejects_here = 0
        self._events.labels(table=name, **b)
        self._rejects.labels(table=name, **b)
        self._freshness.labels(table=name, **b).set(t.freshness_s)
        if t.last_commit_s is not None:
            self._last_commit.labels(table=name, **b).set(t.last_commit_s)
        self._stopped.labels(table=name, **b).set(1 if t.stopped else 0)
        if t.stopped:  # it was counted under _other until now
            self._stopped.labels(table=OTHER, **b).dec()

    def _unlabel(self, name: str, t: _Table) -> None:
        b = self._base
        t.labelled = False
        del self._labelled[name]
        for family in (self._events, self._rejects, self._freshness, self._stopped):
            family.remove(name, self.app_id)
        if t.last_commit_s is not None:
            self._last_commit.remove(name, self.app_id)
            self._set_other_commit(t.last_commit_s)
        self._events.labels(table=OTHER, **b).inc(t.events_here)
        self._rejects.labels(table=OTHER, **b).inc(t.rejects_here)
        if t.stopped:
            self._stopped.labels(table=OTHER, **b).inc()

    def _count(self, name: str, t: _Table, events: int, rejects: int) -> None:
        """Adds a batch's figures to ``t``'s series, or to ``_other``'s."""
        b = self._base
        if t.labelled:
            t.events_here += events
            t.rejects_here += rejects
            self._events.labels(table=name, **b).inc(events)
            self._rejects.labels(table=name, **b).inc(rejects)
            self._freshness.labels(table=name, **b).set(t.freshness_s)
            if t.last_commit_s is not None:
                self._last_commit.labels(table=name, **b).set(t.last_commit_s)
            return
        self._events.labels(table=OTHER, **b).inc(events)
        self._rejects.labels(table=OTHER, **b).inc(rejects)
        if t.last_commit_s is not None:
            self._set_other_commit(t.last_commit_s)

    def _set_other_commit(self, seconds: float) -> None:
        if self._other_commit_s is None or seconds > self._other_commit_s:
            self._other_commit_s = seconds
            self._last_commit.labels(table=OTHER, **self._base).set(seconds)

    # ------------------------------------------------------------------ reading
    def labelled(self) -> list[str]:
        """The tables with series of their own, sorted."""
        with self._lock:
            return sorted(self._labelled)

    def value(self, name: str, **labels: str) -> float | None:
        """One sample's value (``app_id`` is filled in), or ``None``."""
        v = self.registry.get_sample_value(name, {**self._base, **labels})
        return None if v is None else float(v)


def _shown(name: object) -> str:
    """A table name for a log line: its usable form, else a placeholder (a name that is
    not usable as a label may be anything, a URL with credentials included)."""
    return name if isinstance(name, str) and _usable_name(name) else "<unnamed table>"
