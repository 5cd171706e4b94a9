"""A Prometheus histogram fed a numpy array at a time.

prometheus-client's ``Histogram.observe`` takes one value per call; the freshness of a
micro-batch is a sample of up to 20,000 latencies, so observing them one by one would be
a Python loop per event. :class:`BulkHistogram` keeps cumulative bucket counts per label
set in numpy arrays (``np.searchsorted`` + ``np.bincount`` per batch) and exposes them as
a normal histogram family (``_bucket{le=...}``, ``_sum``, ``_count``), so
``histogram_quantile`` works on it as on any other.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence

import numpy as np
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["BulkHistogram"]


class BulkHistogram(Collector):
    """A histogram observed with arrays (register it on a ``CollectorRegistry``).

    Args:
        name: Metric name (without ``_bucket``/``_sum``/``_count``).
        documentation: HELP text.
        labelnames: Label names.
        buckets: Finite upper bounds, increasing (``+Inf`` is added).
    """

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        bounds = np.asarray([float(b) for b in buckets if not math.isinf(b)], dtype=np.float64)
        if len(bounds) == 0 or np.any(np.diff(bounds) <= 0):
            raise ValueError("buckets must be finite and strictly increasing")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._bounds = bounds
        self._lock = threading.Lock()
        self._series: dict[tuple[str, ...], tuple[np.ndarray, list[float]]] = {}

    def labels(self, *values: str) -> None:
        """Creates the series of ``values`` (so it is exported, at zero, before any
        observation)."""
        self._state(values)

    def _state(self, values: Sequence[str]) -> tuple[np.ndarray, list[float]]:
        key = tuple(str(v) for v in values)
        if len(key) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {key}")
        with self._lock:
            st = self._series.get(key)
            if st is None:
                st = (np.zeros(len(self._bounds) + 1, dtype=np.int64), [0.0])
                self._series[key] = st
            return st

    def observe_many(self, values: np.ndarray, *labelvalues: str) -> None:
        """Observes every (finite) value of ``values`` for the label set ``labelvalues``."""
        v = np.asarray(values, dtype=np.float64).ravel()
        v = v[np.isfinite(v)]
        counts, total = self._state(labelvalues)
        if not len(v):
            return
        # Bucket i holds values <= bounds[i] (le is inclusive); the last is +Inf.
        idx = np.searchsorted(self._bounds, v, side="left")
        add = np.bincount(idx, minlength=len(counts))
        with self._lock:
            counts += add
            total[0] += float(v.sum())

    def describe(self) -> list[Metric]:
        """The family without samples (for the registry's name checks)."""
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        """The family with one histogram per label set."""
        fam = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            items = [(k, c.copy(), t[0]) for k, (c, t) in self._series.items()]
        les = [_le(b) for b in self._bounds] + ["+Inf"]
        for key, counts, total in items:
            cum = np.cumsum(counts).tolist()
            fam.add_metric(list(key), buckets=list(zip(les, cum, strict=True)), sum_value=total)
        yield fam


def _le(bound: float) -> str:
    """The ``le`` label of a bound, spelled as prometheus-client spells it."""
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]
