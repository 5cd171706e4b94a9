"""Skipping many Avro array items and map entries at once, by jump tables (private).

The decoders keep no value of an array or a map (:mod:`._avro_read`); they need only
where it ends. Items of a fixed width are skipped a block at once; this module skips the
items whose size depends on their bytes: ``int``, ``long``, ``enum``, ``boolean``,
``string``, ``bytes``, fixed-width types, unions of them (Debezium's ``int[]`` is an
``array<["null", "long"]>``) and records of them, and map entries (a key and a value).
For such an item type T (:func:`item_bytes` is not -1; an array or map inside an item
is not such a type, and goes item by item):

- :class:`Jumps` gives, for *every* byte position p of the span the records' items lie
  in, the bytes an item of T starting at p would take (0: the bytes there are not a T),
  evaluated a chunk of positions at a time (varint lengths from the continuation bits,
  union branches from one-byte indices, lengths decoded, records composed field by
  field); an item larger than the table's integers hold is marked so;
- it composes that table with itself into the bytes of J items in a row
  (D_2J[p] = D_J[p] + D_J[p + D_J[p]]), J as large as the table's integer width allows;
- :meth:`Jumps.skip` then moves every record over its block's items, J at a time where
  J are left, else one (a marked item stepped by its type: there are few, as each is
  large): one numpy step for J items of every record, instead of a walk of T's types
  per item.

Memory is a few bytes per byte of the span (the tables are ``uint8`` or ``uint16``;
positions are computed in chunks). An item whose bytes are not a T (a varint of more
than 10 bytes, a branch out of range, a boolean byte other than 0 or 1, a negative
length) makes its record bad, as does an item that runs past the record's end.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cdc_sink.formats._avro_schema import Node

__all__ = ["UNBOUNDED", "Jumps", "item_bytes", "map_entry"]

UNBOUNDED = 1 << 30
"""The size :func:`item_bytes` gives an item with a string or bytes in it: its size is
read from its bytes (an item too large for the tables is stepped by its type)."""
_CHUNK = 1 << 14
_MAX_BRANCHES = 64  # branch indices of one byte
_MAX_JUMP = 64
_K = np.arange(10, dtype=np.int64)

Step = Callable[[np.ndarray], np.ndarray]
"""Where an item starting at each position ends (-1: not an item there)."""


def item_bytes(node: Node) -> int:
    """The most bytes an item of ``node`` takes (:data:`UNBOUNDED` with a string or
    bytes in it), or -1 when ``node`` is not a type this module skips (an array or map,
    a wide union or enum)."""
    kind = node.kind
    if node.width >= 0:
        return node.width
    if kind in ("int", "long"):
        return 10
    if kind in ("string", "bytes"):
        return UNBOUNDED
    if kind == "enum":
        return 1 if len(node.symbols) <= _MAX_BRANCHES else -1
    if kind == "union":
        if len(node.branches) > _MAX_BRANCHES:
            return -1
        sizes = [item_bytes(b) for b in node.branches]
        return -1 if -1 in sizes else min(1 + max(sizes), UNBOUNDED)
    if kind == "record":
        sizes = [item_bytes(t) for _, t in node.fields]
        return -1 if -1 in sizes else min(sum(sizes), UNBOUNDED)
    return -1


def map_entry(values: Node) -> Node:
    """A map's entry as the record of its key and value (skipped like an array item)."""
    return Node("record", fields=[("key", Node("string")), ("value", values)])


class _Span:
    """The bytes ``data[lo:hi]`` with the length of the varint at each (chunk by chunk,
    in one byte each: 11 means longer than 10 bytes)."""

    def __init__(self, data: np.ndarray, lo: int, hi: int, extra: int) -> None:
        self.lo, self.limit = lo, hi - lo  # no item ends past the records' ends
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
        if kind in ("string", "bytes"):
            return self._blob
        if kind == "enum":
            k = len(node.symbols)
            return lambda q: np.where((self.small(q) >= 0) & (self.small(q) < k), q + 1, -1)
        if kind == "union":
            return self._union([self.step(b) for b in node.branches])
        return self._record([self.step(t) for _, t in node.fields])

    def _blob(self, q: np.ndarray) -> np.ndarray:
        """A length (a varint) and that many bytes; past the span: -1."""
        n = self.vlen[q].astype(np.int64)
        length = self.small(q)
        wide = np.flatnonzero((n > 1) & (n <= 10))
        if len(wide):  # lengths of more than one byte, decoded whole
            qw = q[wide]
            b = self.data[qw[:, None] + _K].astype(np.uint64) & np.uint64(0x7F)
            keep = n[wide][:, None] > _K
            u = np.bitwise_or.reduce(np.where(keep, b << (7 * _K).astype(np.uint64), 0), axis=1)
            u = u.astype(np.uint64)
            length[wide] = (u >> np.uint64(1)).astype(np.int64) ^ -(u & np.uint64(1)).astype(
                np.int64
            )
        out = q + n + length
        return np.where((n <= 10) & (length >= 0) & (out <= self.limit), out, -1)

    def _union(self, branches: list[Step]) -> Step:
        def step(q: np.ndarray) -> np.ndarray:
            idx = self.small(q)
            out = np.full(len(q), -1, dtype=np.int64)
            for i, f in enumerate(branches):
                at = np.flatnonzero(idx == i)
                if len(at):
                    out[at] = f(q[at] + 1)
            return np.where(out <= self.limit, out, -1)

        return step

    def _record(self, fields: list[Step]) -> Step:
        def step(q: np.ndarray) -> np.ndarray:
            x = q.astype(np.int64)
            for f in fields:
                ok = np.flatnonzero(x >= 0)
                x[ok] = f(x[ok])
                x[x > self.limit] = -1
            return x

        return step


class Jumps:
    """Item sizes at every position of a span and their J-item compositions.

    An item larger than the tables' integers hold (a long string) is marked so, and
    stepped by its type where it is met (each such item is that many bytes long, so there
    are few of them).

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
        self.big = int(np.iinfo(dtype).max)  # the item is this size or more
        span = _Span(data, lo, hi, min(size, 1 << 12) + 1)
        self.step = span.step(item)
        d = np.zeros(self.n, dtype)
        for a in range(0, self.n, _CHUNK):
            q = np.arange(a, min(a + _CHUNK, self.n), dtype=np.int64)
            nxt = self.step(q)
            d[a : a + len(q)] = np.where(nxt > q, np.minimum(nxt - q, self.big), 0).astype(dtype)
        self.one = d
        self.j, dj = 1, d
        while self.j * 2 <= _MAX_JUMP and (size >= self.big or size * self.j * 2 < self.big):
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
            out[q] = np.where(ok, np.minimum(first + second, self.big), 0).astype(d.dtype)
        return out

    def skip(self, pos: np.ndarray, count: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Where ``count`` items from each ``pos`` end (-1: an item is not valid, or
        runs past ``end``): J items at a time where J are left and are not a large
        item, else one."""
        x = pos - self.lo
        stop = end - self.lo
        rem = count.astype(np.int64)
        live = np.flatnonzero(rem > 0)
        while len(live):
            at = np.minimum(x[live], self.n - 1)
            jump = self.many[at].astype(np.int64)
            far = (rem[live] >= self.j) & (jump > 0) & (jump < self.big)
            d = np.where(far, jump, self.one[at].astype(np.int64))
            large = ~far & (d >= self.big)
            if large.any():  # an item too large for the tables: stepped by its type
                r = live[large]
                d[large] = np.maximum(self.step(x[r]) - x[r], 0)
            go = d > 0
            x[live] = np.where(go, x[live] + d, -1)
            rem[live] -= np.where(far, self.j, 1)
            dead = live[~go | (x[live] > stop[live])]
            x[dead] = -1
            rem[dead] = 0
            live = live[rem[live] > 0]
        return np.where(x >= 0, x + self.lo, -1)
