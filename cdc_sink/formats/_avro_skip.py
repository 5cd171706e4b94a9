"""Skipping many Avro array items at once, by jump tables over the bytes (private).

The decoders keep no value of an array (:mod:`._avro_read`); they need only where it
ends. Items of a fixed width are skipped a block at once; this module skips items whose
size depends on their bytes but which hold no length-prefixed data: ``int``, ``long``,
``enum``, ``boolean``, fixed-width types, unions of them (Debezium's ``int[]`` is an
``array<["null", "long"]>``) and records of them. For such an item type T:

- :func:`item_sizes` gives, for *every* byte position p of the span the records' arrays
  lie in, the bytes an item of T starting at p would take (0: the bytes there are not a
  T), evaluated a chunk of positions at a time (varint lengths from the continuation
  bits, union branches from one-byte indices, records composed field by field);
- :class:`Jumps` composes that table with itself into the bytes of J items in a row
  (D_2J[p] = D_J[p] + D_J[p + D_J[p]]), J as large as the table's integer width allows;
- :meth:`Jumps.skip` then moves every record over its block's items, J at a time, then
  one at a time: one numpy step for J items of every record, instead of a walk of T's
  types per item.

Memory is a few bytes per byte of the span (the tables are ``uint8`` or ``uint16``;
positions are computed in chunks). An item whose bytes are not a T (a varint of more
than 10 bytes, a branch out of range, a boolean byte other than 0 or 1) makes its record
bad, as does an item that runs past the record's end.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cdc_sink.formats._avro_schema import Node

__all__ = ["MAX_ITEM_BYTES", "Jumps", "item_bytes"]

MAX_ITEM_BYTES = 4096
"""Largest item (in bytes) skipped with jump tables; larger item types go item by item."""
_CHUNK = 1 << 16
_MAX_BRANCHES = 64  # branch indices of one byte
_MAX_JUMP = 64

Step = Callable[[np.ndarray], np.ndarray]
"""Where an item starting at each position ends (-1: not an item there)."""


def item_bytes(node: Node) -> int:
    """The most bytes an item of ``node`` takes, or -1 when ``node`` is not a type
    this module skips (a string, bytes, an array or map, a wide union or enum)."""
    kind = node.kind
    if node.width >= 0:
        return node.width
    if kind in ("int", "long"):
        return 10
    if kind == "enum":
        return 1 if len(node.symbols) <= _MAX_BRANCHES else -1
    if kind == "union":
        if len(node.branches) > _MAX_BRANCHES:
            return -1
        sizes = [item_bytes(b) for b in node.branches]
        return -1 if -1 in sizes else 1 + max(sizes)
    if kind == "record":
        sizes = [item_bytes(t) for _, t in node.fields]
        return -1 if -1 in sizes else sum(sizes)
    return -1


class _Span:
    """The bytes ``data[lo:hi]`` with the length of the varint at each (chunk by chunk,
    in one byte each: 11 means longer than 10 bytes)."""

    def __init__(self, data: np.ndarray, lo: int, hi: int, extra: int) -> None:
        self.lo = lo
        n = hi - lo + extra
        d = data[lo : lo + n + 10]  # a view where the buffer's padding is enough
        if len(d) < n + 10:
            d = np.concatenate([d, np.zeros(n + 10 - len(d), np.uint8)])
        self.data = d
        self.vlen = np.ones(n, np.uint8)
        for a in range(0, n, _CHUNK):
            b = min(a + _CHUNK, n)
            cont = d[a : b + 10] >= 0x80
            run = cont[: b - a].copy()
            for k in range(1, 10):
                self.vlen[a:b] += run
                run &= cont[k : k + b - a]
            self.vlen[a:b] += run

    def small(self, q: np.ndarray) -> np.ndarray:
        """The value of the one-byte varints at ``q`` (-1 where longer)."""
        b = self.data[q].astype(np.int64)
        return np.where(self.vlen[q] == 1, (b >> 1) ^ -(b & 1), -1)

    def step(self, node: Node) -> Step:
        """The item step of ``node`` on positions relative to :attr:`lo`."""
        kind = node.kind
        if node.width >= 0:
            w = node.width
            if kind == "boolean":
                return lambda q: np.where(self.data[q] <= 1, q + 1, -1)
            return lambda q: q + w
        if kind in ("int", "long"):
            return lambda q: np.where(self.vlen[q] <= 10, q + self.vlen[q], -1)
        if kind == "enum":
            k = len(node.symbols)
            return lambda q: np.where((self.small(q) >= 0) & (self.small(q) < k), q + 1, -1)
        if kind == "union":
            return self._union([self.step(b) for b in node.branches])
        return self._record([self.step(t) for _, t in node.fields])

    def _union(self, branches: list[Step]) -> Step:
        def step(q: np.ndarray) -> np.ndarray:
            idx = self.small(q)
            out = np.full(len(q), -1, dtype=np.int64)
            for i, f in enumerate(branches):
                at = np.flatnonzero(idx == i)
                if len(at):
                    out[at] = f(q[at] + 1)
            return out

        return step

    @staticmethod
    def _record(fields: list[Step]) -> Step:
        def step(q: np.ndarray) -> np.ndarray:
            x = q.astype(np.int64)
            for f in fields:
                ok = np.flatnonzero(x >= 0)
                x[ok] = f(x[ok])
            return x

        return step


class Jumps:
    """Item sizes at every position of a span and their J-item compositions.

    Args:
        data: The padded message buffer.
        lo: The first byte of the span (the records' current offsets, at least).
        hi: One past its last byte (the records' ends, at most).
        item: The item type (:func:`item_bytes` is not -1).
    """

    def __init__(self, data: np.ndarray, lo: int, hi: int, item: Node) -> None:
        size = max(item_bytes(item), 1)
        self.lo, self.n = lo, hi - lo + 1
        dtype = np.uint8 if size * 2 <= 255 else np.uint16
        top = np.iinfo(dtype).max
        span = _Span(data, lo, hi, size + 1)
        step = span.step(item)
        d = np.zeros(self.n, dtype)
        for a in range(0, self.n, _CHUNK):
            q = np.arange(a, min(a + _CHUNK, self.n), dtype=np.int64)
            nxt = step(q)
            d[a : a + len(q)] = np.where(nxt > q, nxt - q, 0).astype(dtype)
        del span
        self.one = d
        self.j, dj = 1, d
        while self.j * 2 <= _MAX_JUMP and size * self.j * 2 <= top:
            dj = self._double(dj)
            self.j *= 2
        self.many = dj

    def _double(self, d: np.ndarray) -> np.ndarray:
        out = np.zeros_like(d)
        for a in range(0, self.n, _CHUNK):
            q = np.arange(a, min(a + _CHUNK, self.n), dtype=np.int64)
            first = d[q].astype(np.int64)
            second = d[np.minimum(q + first, self.n - 1)].astype(np.int64)
            ok = (first > 0) & (second > 0) & (q + first < self.n)
            out[q] = np.where(ok, first + second, 0).astype(d.dtype)
        return out

    def skip(self, pos: np.ndarray, count: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Where ``count`` items from each ``pos`` end (-1: an item is not valid, or
        runs past ``end``)."""
        x = pos - self.lo
        stop = end - self.lo
        rem = count.copy()
        live = np.flatnonzero(rem > 0)
        for table, j in ((self.many, self.j), (self.one, 1)):
            while len(live):
                go = live[rem[live] >= j]
                if not len(go):
                    break
                d = table[np.minimum(x[go], self.n - 1)].astype(np.int64)
                x[go] = np.where(d > 0, x[go] + d, -1)
                rem[go] -= j
                dead = go[(d == 0) | (x[go] > stop[go])]
                x[dead] = -1
                rem[dead] = 0
                live = live[rem[live] > 0]
            live = np.flatnonzero(rem > 0)
        return np.where(x >= 0, x + self.lo, -1)
