"""Avro binary decoded column by column across many records at once (private).

Records written with one schema have the same layout: the same fields in the same order,
each a fixed sequence of encodings. :class:`Reader` therefore reads one *field* of every
record in one numpy step (all the records' varints, lengths or floats at once, each at
its own offset), then the next field, keeping one read offset per record; a union reads
every record's branch index, then each branch on the records that took it. What comes
out is a tree of :class:`Val` (one per schema node read) holding numpy columns: integers,
floats, byte spans into the message buffer, branch indices. The cost is a few numpy
operations per field the records hold, whatever the number of records: a branch no
record takes and a type whose values take no bytes (``null``, records of them) are not
walked (:func:`unread`: their fields are made when a decoder asks for them), and the
schema's expansion is bounded when it is loaded (:data:`~._avro_schema.MAX_EXPANDED`).

Arrays and maps are skipped (the decoders read no column from them) block by block: a
block of fixed-width items at once, a block of items made of varints by jump tables
(:mod:`._avro_skip`), other items item by item (one step per item index, over the
records that still have items); a block given with its byte size at once. A record may
have :data:`MAX_BLOCKS` blocks and one more per :data:`BYTES_PER_BLOCK` of its bytes.

Nothing here raises on message bytes. A record whose bytes do not fit its schema (a
varint longer than 10 bytes or past the end, a length or count past the end, a union
branch or enum symbol out of range, a boolean byte that is not 0 or 1, trailing bytes)
gets a reason; its offset jumps to its end so that what follows reads nothing from it.
Every read is bounds-checked against the record's own end, and a count is refused when
it exceeds the bytes left (items of no bytes: :data:`ZERO_ITEMS_PER_BLOCK`), so the work
and memory of a record are bounded by its size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cdc_sink.formats._arrays import refuse, unaligned
from cdc_sink.formats._avro_schema import Node
from cdc_sink.formats._avro_skip import Jumps, item_bytes, map_entry

__all__ = [
    "BYTES_PER_BLOCK",
    "MAX_BLOCKS",
    "PAD",
    "ZERO_ITEMS_PER_BLOCK",
    "Reader",
    "Unread",
    "Val",
    "padded",
    "unread",
]

PAD = 16
"""Zero bytes after the buffer: a varint's ten bytes or a double's eight read past a
record's end without clipping (and are then refused by their bounds)."""

_K = np.arange(10, dtype=np.uint64)
_SHIFTS = (7 * _K).astype(np.uint64)
_MALFORMED = "malformed event: Avro "
_STRING = Node("string")
MAX_BLOCKS = 16
"""Blocks the arrays and maps of one record may have whatever its size (see
:meth:`Reader._skip_blocks`)."""
BYTES_PER_BLOCK = 64
"""Bytes of a record that allow one more block in its arrays and maps."""
ZERO_ITEMS_PER_BLOCK = 1 << 20
"""Most items of a type of no bytes (``null``...) one block may count (skipped at once;
other items are bounded by the bytes left)."""


@dataclass(eq=False)
class Val:
    """The decoded values of one schema node over the records ``rows`` that hold it.

    Attributes:
        node: The schema node.
        rows: The records (indices into the reader's records) holding a value here.
        ints: Integers (``int``, ``long``, an enum's symbol index), int64.
        floats: ``float``/``double`` values (float32 for ``float``).
        bools: ``boolean`` values.
        starts: Byte offsets of ``bytes``/``string``/``fixed`` values in the buffer.
        ends: One past their last byte.
        branch: A union's branch per record of ``rows``.
        children: A record's fields by name, or a union's branches by index (as names
            ``"0"``, ``"1"``...).
    """

    node: Node
    rows: np.ndarray
    ints: np.ndarray | None = None
    floats: np.ndarray | None = None
    bools: np.ndarray | None = None
    starts: np.ndarray | None = None
    ends: np.ndarray | None = None
    branch: np.ndarray | None = None
    children: dict[str, Val] = field(default_factory=dict)

    def nonnull(self) -> tuple[Val, np.ndarray]:
        """The value of a ``["null", T]`` union's T branch (or the value itself), and
        the rows of :attr:`rows` that hold a null."""
        node = self.node
        if node.kind != "union":
            return self, np.zeros(0, dtype=np.int64)
        t = node.nonnull()
        if t is node:
            return self, np.zeros(0, dtype=np.int64)
        ti = node.branches.index(t)
        assert self.branch is not None
        return self.children[str(ti)], self.rows[self.branch != ti]


class Reader:
    """Reads records of one schema from a message buffer, field by field.

    Args:
        data: The message buffer (``uint8``) followed by :data:`PAD` zero bytes
            (:func:`padded`), so that reads near its end need no clipping.
        starts: Where each record's Avro body starts.
        ends: One past each record's last byte.
        reasons: One reject reason per record (updated; a record keeps its first).
    """

    def __init__(
        self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray, reasons: np.ndarray
    ) -> None:
        self.data = data
        self.pos = np.asarray(starts, dtype=np.int64).copy()
        self.end = np.asarray(ends, dtype=np.int64)
        self.reasons = reasons
        self._pad = data
        self.blocks = np.zeros(len(self.pos), dtype=np.int64)
        self.block_limit = MAX_BLOCKS + (self.end - self.pos) // BYTES_PER_BLOCK

    def read_record(self, node: Node) -> Val:
        """Reads every record as ``node`` and refuses the records with trailing bytes."""
        rows = np.arange(len(self.pos), dtype=np.int64)
        val = self.read(node, rows)
        left = self.pos != self.end
        self._fail(rows[left], "record has trailing bytes after its schema's fields")
        return val

    def read(self, node: Node, rows: np.ndarray) -> Val:
        """Reads one value of ``node`` for each record of ``rows``."""
        if not len(rows) or node.width == 0:
            return unread(node, rows)  # nothing to read: no walk of its types
        kind = node.kind
        if kind in ("int", "long"):
            return Val(node, rows, ints=self._long(rows, 32 if kind == "int" else 64))
        if kind == "boolean":
            return self._bool(node, rows)
        if kind in ("float", "double"):
            return self._float(node, rows, 4 if kind == "float" else 8)
        if kind in ("bytes", "string"):
            n = self._long(rows, 64)
            return self._span(node, rows, n, "length")
        if kind == "fixed":
            return self._span(node, rows, np.full(len(rows), node.size, np.int64), "fixed")
        if kind == "enum":
            idx = self._long(rows, 32)
            bad = (idx < 0) | (idx >= len(node.symbols))
            self._fail(rows[bad], f"enum index out of range of {node.name}")
            return Val(node, rows, ints=idx)
        if kind == "union":
            return self._union(node, rows)
        if kind == "record":
            val = Val(node, rows)
            for name, child in node.fields:
                val.children[name] = self.read(child, rows)
            return val
        self._skip_blocks(node, rows)  # array, map
        return Val(node, rows)

    # -------------------------------------------------------------- primitives
    def _fail(self, rows: np.ndarray, why: str) -> None:
        """Refuses ``rows`` (each keeps its first reason) and moves them to their end."""
        if len(rows):
            refuse(self.reasons, _mask(len(self.reasons), rows), _MALFORMED + why)
            self.pos[rows] = self.end[rows]

    def _long(self, rows: np.ndarray, bits: int) -> np.ndarray:
        """Zigzag varints at each record's offset (0 where refused)."""
        p = self.pos[rows]
        e = self.end[rows]
        first = self._pad[p]
        out = np.zeros(len(rows), dtype=np.int64)
        short = (first < 0x80) & (p < e)
        u = first[short].astype(np.int64)
        out[short] = (u >> 1) ^ -(u & 1)
        length = short.astype(np.int64)
        slow = np.flatnonzero(~short)
        if len(slow):
            ps, es = p[slow], e[slow]
            b = self._pad[ps[:, None] + _K.astype(np.int64)]
            inside = ps[:, None] + _K.astype(np.int64) < es[:, None]
            stop = ((b & 0x80) == 0) & inside
            done = stop.any(axis=1)
            n = np.where(done, np.argmax(stop, axis=1) + 1, 0)
            keep = (_K[None, :] < n[:, None].astype(np.uint64)).astype(np.uint64)
            v = np.bitwise_or.reduce(((b & 0x7F).astype(np.uint64) << _SHIFTS) * keep, axis=1)
            over = done & (n == 10) & (b[:, 9] > 1)  # a 10th byte holds bit 63 only
            past = ~done & ~inside.all(axis=1)
            self._fail(rows[slow[past]], "varint runs past the end of the message")
            self._fail(rows[slow[~done & ~past]], "varint longer than 10 bytes")
            self._fail(rows[slow[over]], "varint overflows 64 bits")
            sv = (v >> np.uint64(1)).astype(np.int64) ^ -(v & np.uint64(1)).astype(np.int64)
            ok = done & ~over
            out[slow[ok]] = sv[ok]
            length[slow[ok]] = n[ok]
        if bits == 32:
            big = (out < -(2**31)) | (out >= 2**31)
            self._fail(rows[big], "int out of the 32-bit range")
            out[big] = 0
        self.pos[rows] = np.where(length > 0, p + length, self.pos[rows])
        return out

    def _bool(self, node: Node, rows: np.ndarray) -> Val:
        p = self.pos[rows]
        inside = p < self.end[rows]
        b = self._pad[p]
        self._fail(rows[~inside], "boolean past the end of the message")
        self._fail(rows[inside & (b > 1)], "boolean byte is not 0 or 1")
        ok = inside & (b <= 1)
        self.pos[rows[ok]] += 1
        return Val(node, rows, bools=b == 1)

    def _float(self, node: Node, rows: np.ndarray, size: int) -> Val:
        p = self.pos[rows]
        ok = p + size <= self.end[rows]
        self._fail(rows[~ok], f"{node.kind} past the end of the message")
        view = unaligned(self._pad, "<f4" if size == 4 else "<f8")
        vals = view[np.where(ok, p, 0)] if len(view) else np.zeros(len(rows))
        self.pos[rows[ok]] += size
        return Val(node, rows, floats=vals)

    def _span(self, node: Node, rows: np.ndarray, n: np.ndarray, what: str) -> Val:
        p = self.pos[rows]
        bad = (n < 0) | (n > self.end[rows] - p)
        self._fail(rows[bad & (n < 0)], f"negative {what}")
        self._fail(rows[bad & (n >= 0)], f"{what} runs past the end of the message")
        n = np.where(bad, 0, n)
        p = np.where(bad, self.pos[rows], p)
        self.pos[rows] = p + n
        return Val(node, rows, starts=p, ends=p + n)

    # -------------------------------------------------------------- complex types
    def _union(self, node: Node, rows: np.ndarray) -> Val:
        idx = self._long(rows, 32)
        bad = (idx < 0) | (idx >= len(node.branches))
        self._fail(rows[bad], "union branch out of range")
        val = Val(node, rows, branch=np.where(bad, -1, idx))
        val.children = Unread(node, rows[:0])  # the branches no record takes
        taken = idx[~bad]
        if len(taken) == len(idx) and len(idx) and (idx == idx[0]).all():
            # every record takes the same branch (a column never or always null)
            val.children[str(int(idx[0]))] = self.read(node.branches[int(idx[0])], rows)
            return val
        for i in np.unique(taken).tolist():
            val.children[str(i)] = self.read(node.branches[i], rows[idx == i])
        return val

    def _skip_blocks(self, node: Node, rows: np.ndarray) -> None:
        """Skips an array's or a map's blocks (their values are not kept): a block of
        items of a fixed width at once, items made of varints by jump tables
        (:mod:`._avro_skip`), others item by item across the records. A
        record may have :data:`MAX_BLOCKS` blocks in its arrays and maps, and one more
        per :data:`BYTES_PER_BLOCK` bytes of it (writers put a whole array in one block,
        or split it in blocks of many bytes; tiny blocks only make work)."""
        assert node.items is not None
        width = node.items.width if node.kind == "array" else -1
        item = node.items if node.kind == "array" else map_entry(node.items)
        tabled = item_bytes(item) > 0  # jump tables (:mod:`._avro_skip`)
        jumps: Jumps | None = None
        active = rows
        while len(active):
            self.blocks[active] += 1
            many = self.blocks[active] > self.block_limit[active]
            self._fail(active[many], f"{node.kind} of more blocks than its record's bytes allow")
            active = active[~many]
            count = self._long(active, 64)
            sized = count < 0
            if sized.any():  # a negative count comes with the block's size in bytes
                srows = active[sized]
                size = self._long(srows, 64)
                self._span(node, srows, size, "block size")
            left = self.end[active] - self.pos[active]
            count = np.where(sized, 0, count)
            # items of no bytes: a bound per block; others: a byte at least each
            limit = ZERO_ITEMS_PER_BLOCK if width == 0 else left // max(width, 1)
            too_many = count > limit
            self._fail(active[too_many], f"{node.kind} block count exceeds the bytes left")
            count = np.where(too_many, 0, count)
            ended = (count == 0) & ~sized  # a zero count ends the array
            items, active = active[count > 0], active[~ended & ~too_many]
            todo = count[count > 0]
            if width >= 0:
                self.pos[items] += todo * width  # the whole block at once
                continue
            if tabled and len(items):  # many items at once
                if jumps is None:
                    hi = int(self.end[items].max())
                    jumps = Jumps(self._pad, int(self.pos[items].min()), hi, item)
                after = jumps.skip(self.pos[items], todo, self.end[items])
                bad = after < 0
                self._fail(
                    items[bad], f"{node.kind} item does not fit its type or runs past the end"
                )
                self.pos[items[~bad]] = after[~bad]
                continue
            while len(items):
                if node.kind == "map":
                    self.read(_STRING, items)
                self.read(node.items, items)
                todo = todo - 1
                items = items[todo > 0]
                todo = todo[todo > 0]


def unread(node: Node, rows: np.ndarray) -> Val:
    """The value of ``node`` on records ``rows`` without reading: for no record at all,
    or for a type whose values take no bytes (``null``, a record of them). A record's
    fields and a union's branches are made when asked for (:class:`Unread`), so no
    type the records do not hold is walked."""
    kind = node.kind
    empty = rows[:0]
    if kind in ("int", "long", "enum"):
        return Val(node, rows, ints=np.zeros(len(rows), np.int64))
    if kind in ("float", "double"):
        return Val(node, rows, floats=np.zeros(len(rows), "<f4" if kind == "float" else "<f8"))
    if kind == "boolean":
        return Val(node, rows, bools=np.zeros(len(rows), bool))
    if kind in ("bytes", "string", "fixed"):
        z = np.zeros(len(rows), np.int64)
        return Val(node, rows, starts=z, ends=z.copy())
    if kind == "record":
        return Val(node, rows, children=Unread(node, rows))
    if kind == "union":
        return Val(node, rows, branch=empty.copy(), children=Unread(node, empty))
    return Val(node, rows)  # null, array, map


class Unread(dict[str, Val]):
    """The fields of a record (or the branches of a union) not read, made on demand by
    :func:`unread` on the records ``rows`` (a union's: none)."""

    def __init__(self, node: Node, rows: np.ndarray) -> None:
        super().__init__()
        self.node, self.rows = node, rows

    def __missing__(self, key: str) -> Val:
        node = self.node
        child = node.field(key) if node.kind == "record" else _branch(node, key)
        if child is None:
            raise KeyError(key)
        self[key] = val = unread(child, self.rows)
        return val

    def get(self, key: str, default: Val | None = None) -> Val | None:  # type: ignore[override]
        """The field (branch) ``key``, made if not read; ``default`` if none."""
        try:
            return self[key]
        except KeyError:
            return default

    def like(self, rows: np.ndarray) -> Unread:
        """Empty children of the same node on other records (for a restricted value)."""
        return Unread(self.node, rows if self.node.kind == "record" else rows[:0])


def _branch(node: Node, key: str) -> Node | None:
    if key.isdigit() and int(key) < len(node.branches):
        return node.branches[int(key)]
    return None


def padded(data: np.ndarray) -> np.ndarray:
    """``data`` followed by :data:`PAD` zero bytes (one copy per decode)."""
    return np.concatenate([data, np.zeros(PAD, dtype=np.uint8)])


def _mask(n: int, rows: np.ndarray) -> np.ndarray:
    m = np.zeros(n, dtype=bool)
    m[rows] = True
    return m
