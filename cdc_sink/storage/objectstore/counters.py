"""Requests and bytes per call kind of one object store, for metrics and benchmarks.

Every :class:`~cdc_sink.storage.objectstore.ObjectStore` keeps a :class:`StoreCounters`
and adds to it on each call: one request per ``get``, ``get_range``, ``put``,
``put_if_absent``, ``delete`` and ``head`` (whether it succeeded or not), the bytes a
``GET`` returned and a ``PUT`` sent, and for ``list`` and ``delete_many`` the requests the
backend needed (an object store lists 1,000 keys and deletes 1,000 keys per request).
Retries inside a client are not seen: the counts are of calls as the storage layer made
them, the floor of what the store bills.

A caller measures one operation as the difference of two :meth:`StoreCounters.snapshot`
values (:meth:`Counts.minus`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = ["CALL_KINDS", "CallKind", "Counts", "StoreCounters"]

CallKind = Literal["GET", "PUT", "LIST", "DELETE", "HEAD"]
"""The kinds of request an object store bills separately."""

CALL_KINDS: tuple[CallKind, ...] = get_args(CallKind)
"""Every :data:`CallKind`, in a fixed order."""


@dataclass(frozen=True)
class Counts:
    """Requests and bytes per call kind, at one instant (or between two)."""

    requests: dict[CallKind, int]
    """Requests per kind (every kind present)."""
    bytes: dict[CallKind, int]
    """Bytes per kind: received for ``GET``, sent for ``PUT``, 0 for the others."""

    def minus(self, earlier: Counts) -> Counts:
        """What was counted since ``earlier`` (a snapshot of the same counters)."""
        return Counts(
            {k: self.requests[k] - earlier.requests[k] for k in CALL_KINDS},
            {k: self.bytes[k] - earlier.bytes[k] for k in CALL_KINDS},
        )

    @property
    def total_requests(self) -> int:
        """Requests of every kind."""
        return sum(self.requests.values())


class StoreCounters:
    """Thread-safe running totals of requests and bytes per :data:`CallKind`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests = dict.fromkeys(CALL_KINDS, 0)
        self._bytes = dict.fromkeys(CALL_KINDS, 0)

    def add(self, kind: CallKind, nbytes: int, *, requests: int = 1) -> None:
        """Counts ``requests`` requests of ``kind`` moving ``nbytes`` bytes.

        Raises:
            ValueError: ``kind`` is not a call kind.
        """
        if kind not in self._requests:
            raise ValueError(f"unknown call kind {kind!r}; expected one of {CALL_KINDS}")
        with self._lock:
            self._requests[kind] += requests
            self._bytes[kind] += nbytes

    def snapshot(self) -> Counts:
        """The totals now (a copy)."""
        with self._lock:
            return Counts(dict(self._requests), dict(self._bytes))

    def reset(self) -> None:
        """Sets every total back to 0."""
        with self._lock:
            self._requests = dict.fromkeys(CALL_KINDS, 0)
            self._bytes = dict.fromkeys(CALL_KINDS, 0)
