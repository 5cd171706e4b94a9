"""Encodings of a change batch inside a WAL change segment (record 1 of the segment).

Two formats exist; the segment header (record 0) names the one its body uses:

* **Format 1, wire** (segments written before the compact WAL; no ``"format"`` in the
  header): an uncompressed Arrow IPC stream of :meth:`ChangeBatch.to_arrow`. Every value
  column a batch touches is stored at full length, a cell per event, set or not.
* **Format 2, compact** (what is written now): an Arrow IPC stream whose buffers are
  compressed (LZ4 frames by default, none for small batches; ZSTD is read alike: the
  stream names its codec), holding **one record batch of one row** in which every column is a
  ``large_list`` — so that columns of different lengths fit in one batch::

      __op            list<int8>    one code per event                      (n values)
      __seq           list<int64>   seq deltas: seq[0], seq[1]-seq[0], ...  (n, optional)
      <key column>    list<type>    the key of each event                   (n values)
      <value column>  list<type>    only the cells events *set*             (k values)
      __set__<col>    list<bool>    the presence bitmap of the column       (n bits)

  A value column holds the values of the events whose ``__set__`` bit is on, in event
  order, so its length is the bitmap's popcount (k). The deltas make a monotonic ``seq``
  (offsets, LSNs) small numbers that compress; they wrap in int64 both ways, so every seq
  round-trips. Schema metadata ``cdc_sink.change_format = "2"`` tags the stream.

Reading format 2 spreads each column back to one cell per event with numpy scatters
(cells an event does not set are null; the presence mask is what tells them from a set
null) and rebuilds the batch without re-validating it: the batch was validated before it
was written, and the segment's CRCs prove the bytes are the ones written. Structural
checks (names, types, lengths, op codes) turn any mismatch into
:class:`~cdc_sink.errors.WalCorruption`. Format 1 is read as before, through
:meth:`ChangeBatch.from_arrow` (which validates every event).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.batch import OP_TRUNCATE, SET_PREFIX, ChangeBatch
from cdc_sink.errors import WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.utils.arrays import one_array

__all__ = [
    "COMPRESS_MIN_EVENTS",
    "DEFAULT_COMPRESSION",
    "FORMAT_COMPACT",
    "FORMAT_WIRE",
    "WAL_CODECS",
    "WalCompression",
    "decode_compact",
    "decode_wire",
    "encode_compact",
    "encode_wire",
]

FORMAT_WIRE = 1
"""Segment body format 1: the uncompressed wire form (read only, for old segments)."""

FORMAT_COMPACT = 2
"""Segment body format 2: present cells only, compressed (see the module docstring)."""

_META_KEY = b"cdc_sink.change_format"
_READ_OPTIONS = pa.ipc.IpcReadOptions(use_threads=False)  # small buffers: no pool hand-off
WalCompression = Literal["lz4", "zstd"] | None
"""The codec of format 2 bodies (Arrow IPC buffer compression), or None."""

WAL_CODECS: tuple[WalCompression, ...] = ("lz4", "zstd", None)
"""Every :data:`WalCompression` value."""

DEFAULT_COMPRESSION: WalCompression = "lz4"
"""Codec of format 2 bodies: LZ4, whose decompression costs less than ZSTD's (replay speed
is what reopening a table waits for), for somewhat more bytes than ZSTD writes; both keep
a segment under Parquet's size (docs/benchmarks-history.md, "Compact WAL", "Where the time
goes")."""

COMPRESS_MIN_EVENTS = 4096
"""Batches smaller than this are written uncompressed: each compressed buffer (several per
column) pays a fixed codec cost that a small commit would feel, for a few KB saved."""


def encode_wire(batch: ChangeBatch) -> bytes:
    """Format 1: the batch's wire form as an uncompressed Arrow IPC stream.

    Kept so tests can write segments as older versions did; the WAL writes format 2.

    Args:
        batch: The batch.

    Returns:
        The segment body.
    """
    table = batch.to_arrow()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def decode_wire(payload: bytes, schema: TableSchema, *, rows: int, path: str) -> ChangeBatch:
    """Reads a format 1 body back into a validated batch of ``schema``.

    Args:
        payload: The segment body.
        schema: The table schema the segment was written with.
        rows: The event count the segment header records.
        path: The segment file, for error messages.

    Returns:
        The batch.

    Raises:
        WalCorruption: The body does not hold ``rows`` valid events.
    """
    table = pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
    if table.num_rows != rows:
        raise WalCorruption("change segment row count differs from its header", path=path, offset=0)
    batch, rejects = ChangeBatch.from_arrow(table, schema)
    if len(rejects):
        raise WalCorruption(
            f"committed segment holds invalid events: {rejects.reasons[:3]}", path=path, offset=0
        )
    return batch


class _Lists:
    """Builds the one-element ``large_list`` columns of one segment body: the columns of
    one length share their offsets buffer, and the list types are made once per value
    type (a body has a dozen columns, and a table writes a body for every batch)."""

    def __init__(self) -> None:
        self._offsets: dict[int, pa.Buffer] = {}
        self._types: dict[pa.DataType, pa.DataType] = {}

    def one(self, arr: pa.Array | pa.ChunkedArray) -> pa.Array:
        """``arr`` as the single element of a large_list array (no copy of the values)."""
        arr = one_array(arr)
        n = len(arr)
        offsets = self._offsets.get(n)
        if offsets is None:
            offsets = self._offsets[n] = pa.py_buffer(np.array([0, n], dtype=np.int64))
        t = self._types.get(arr.type)
        if t is None:
            t = self._types[arr.type] = pa.large_list(arr.type)
        return pa.Array.from_buffers(t, 1, [None, offsets], children=[arr])


def _bits(packed: bytes, n: int) -> pa.Array:
    """Packed little-endian mask bits as an Arrow boolean array of ``n`` events."""
    return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(packed)])


def _seq_deltas(seq: np.ndarray) -> np.ndarray:
    """``seq[0], seq[1] - seq[0], ...`` in wrapping int64 arithmetic."""
    s = np.asarray(seq, dtype=np.int64)
    out = np.empty_like(s)
    if len(s):
        out[0] = s[0]
        np.subtract(s[1:], s[:-1], out=out[1:])
    return out


def _set_cells(batch: ChangeBatch) -> list[tuple[str, pa.Array, pa.Array]]:
    """Per value column the batch has, in schema order: its name, the values of the
    events that set it, and its presence bits. Columns of one presence mask (a batch's
    deletes set none of them) share their bits and are filtered together, in one call."""
    n = len(batch)
    cols = [c for c in batch.schema.value_columns if c.id in batch.values]
    packed = [
        np.packbits(np.asarray(batch.present[c.id], dtype=bool), bitorder="little").tobytes()
        for c in cols
    ]
    groups: dict[bytes, list[int]] = {}
    for i, key in enumerate(packed):
        groups.setdefault(key, []).append(i)
    values: list[pa.Array | None] = [None] * len(cols)
    bits: list[pa.Array | None] = [None] * len(cols)
    for key, members in groups.items():
        mask_bits = _bits(key, n)
        arrays = [one_array(batch.values[cols[i].id]) for i in members]
        if mask_bits.true_count != n:
            names = [str(i) for i in members]
            arrays = pa.RecordBatch.from_arrays(arrays, names=names).filter(mask_bits).columns
        for i, arr in zip(members, arrays, strict=True):
            values[i], bits[i] = arr, mask_bits
    return [
        (c.name, v, b)
        for c, v, b in zip(cols, values, bits, strict=True)
        if v is not None and b is not None
    ]


def encode_compact(
    batch: ChangeBatch, *, compression: WalCompression = DEFAULT_COMPRESSION
) -> bytes:
    """Format 2: only the cells each event sets, plus presence bitmaps, compressed.

    Args:
        batch: The batch (validated, as every :class:`ChangeBatch` is).
        compression: Arrow IPC buffer codec: ``"lz4"``, ``"zstd"`` or ``None``; batches of
            fewer than :data:`COMPRESS_MIN_EVENTS` events are not compressed.

    Returns:
        The segment body.
    """
    lists = _Lists()
    names: list[str] = ["__op"]
    arrays: list[pa.Array] = [lists.one(pa.array(batch.op, pa.int8()))]
    if batch.seq is not None:
        names.append("__seq")
        arrays.append(lists.one(pa.array(_seq_deltas(batch.seq), pa.int64())))
    for col, key in zip(batch.schema.key_columns, batch.keys, strict=True):
        names.append(col.name)
        arrays.append(lists.one(key))
    for name, values, bits in _set_cells(batch):
        names += [name, SET_PREFIX + name]
        arrays += [lists.one(values), lists.one(bits)]
    fields = [pa.field(name, arr.type) for name, arr in zip(names, arrays, strict=True)]
    body = pa.RecordBatch.from_arrays(
        arrays, schema=pa.schema(fields, metadata={_META_KEY: str(FORMAT_COMPACT).encode()})
    )
    sink = pa.BufferOutputStream()
    if len(batch) < COMPRESS_MIN_EVENTS:
        compression = None
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, body.schema, options=options) as w:
        w.write_batch(body)
    return bytes(sink.getvalue().to_pybytes())


def _unpack(buf: pa.Buffer, offset: int, count: int) -> np.ndarray:
    """``count`` bits of an Arrow bitmap, from bit ``offset``, as a numpy bool array."""
    raw = np.frombuffer(buf, dtype=np.uint8)[offset // 8 :]
    bits: np.ndarray = np.unpackbits(raw, count=offset % 8 + count, bitorder="little")
    return bits[offset % 8 :].view(bool)


def _spread_validity(values: pa.Array, mask: np.ndarray) -> pa.Buffer:
    """Validity bitmap of the spread column: set and not null."""
    valid = mask
    if values.null_count:
        valid = np.zeros(len(mask), dtype=bool)
        valid[mask] = _unpack(values.buffers()[0], values.offset, len(values))
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _fixed_width(t: pa.DataType) -> bool:
    """Types laid out as [validity, one fixed-width value per cell]."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_duration(t)
        or pa.types.is_decimal(t)
        or pa.types.is_fixed_size_binary(t)
    )


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _spread(values: pa.Array, mask: np.ndarray, n: int) -> pa.Array:
    """A column of ``n`` cells holding ``values`` at the ``mask`` positions, in order, and
    null elsewhere. Fixed-width, boolean and string/binary columns are scattered into new
    buffers with numpy (string bytes are shared, only offsets are rebuilt); other types
    take one ``take``."""
    k = len(values)
    if k == n:  # every event sets it (popcount == n: the mask is all True)
        return values
    t = values.type
    if k == 0:
        return pa.nulls(n, t)
    bufs = values.buffers()
    off = values.offset
    if pa.types.is_boolean(t):
        bits = np.zeros(n, dtype=bool)
        bits[mask] = _unpack(bufs[1], off, k)
        data = pa.py_buffer(np.packbits(bits, bitorder="little"))
        return pa.Array.from_buffers(t, n, [_spread_validity(values, mask), data])
    if _fixed_width(t) and len(bufs) == 2:
        width = t.bit_width // 8
        raw = np.frombuffer(bufs[1], dtype=np.uint8)[off * width : (off + k) * width]
        if width in _UINT:
            full = np.zeros(n, dtype=_UINT[width])
            full[mask] = raw.view(_UINT[width])
        else:
            full = np.zeros((n, width), dtype=np.uint8)
            full[mask] = raw.reshape(k, width)
        return pa.Array.from_buffers(t, n, [_spread_validity(values, mask), pa.py_buffer(full)])
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    if large or pa.types.is_string(t) or pa.types.is_binary(t):
        odt = np.int64 if large else np.int32
        offsets = np.frombuffer(bufs[1], dtype=odt)[off : off + k + 1]
        lengths = np.zeros(n, dtype=odt)
        lengths[mask] = np.diff(offsets)
        full_off = np.empty(n + 1, dtype=odt)
        full_off[0] = 0
        np.cumsum(lengths, out=full_off[1:])
        np.add(full_off, offsets[0], out=full_off)
        data = bufs[2] if bufs[2] is not None else pa.py_buffer(b"")
        return pa.Array.from_buffers(
            t, n, [_spread_validity(values, mask), pa.py_buffer(full_off), data]
        )
    idx = np.cumsum(mask, dtype=np.int64)
    idx -= 1
    np.maximum(idx, 0, out=idx)
    return pc.if_else(pa.array(mask), values.take(pa.array(idx)), pa.scalar(None, t))


def decode_compact(payload: bytes, schema: TableSchema, *, rows: int, path: str) -> ChangeBatch:
    """Reads a format 2 body back into a batch of ``schema`` (its values spread back to
    one cell per event); the arguments are those of :func:`decode_wire`.

    Raises:
        WalCorruption: The body is not a format 2 body of ``rows`` events of ``schema``.
    """
    body = _CompactBody(payload, rows=rows, path=path)
    op = np.asarray(
        body.column("__op", pa.int8(), rows).to_numpy(zero_copy_only=False), dtype=np.int8
    )
    if len(op) and (int(op.min()) < 0 or int(op.max()) > OP_TRUNCATE):
        raise body.bad("an op code is out of range")
    seq = None
    if "__seq" in body.cols:
        deltas = body.column("__seq", pa.int64(), rows, nulls=False)
        seq = np.cumsum(deltas.to_numpy(zero_copy_only=False), dtype=np.int64)
    keys = tuple(body.column(c.name, c.type, rows) for c in schema.key_columns)
    values: dict[int, pa.Array] = {}
    present: dict[int, np.ndarray] = {}
    for c in schema.value_columns:
        if c.name in body.cols:
            values[c.id], present[c.id] = body.sparse_column(c.name, c.type)
    if body.cols:
        raise body.bad(f"unknown column(s) {sorted(body.cols)}")
    return ChangeBatch(schema=schema, op=op, keys=keys, values=values, present=present, seq=seq)


class _CompactBody:
    """The columns of a format 2 body, checked as they are taken."""

    def __init__(self, payload: bytes, *, rows: int, path: str) -> None:
        self.rows = rows
        self.path = path
        try:
            reader = pa.ipc.open_stream(pa.py_buffer(payload), options=_READ_OPTIONS)
            batches = list(reader)
        except (pa.ArrowException, OSError) as exc:
            raise self.bad(f"unreadable Arrow stream ({exc})") from None
        meta = reader.schema.metadata or {}
        if meta.get(_META_KEY) != str(FORMAT_COMPACT).encode():
            raise self.bad("the stream is not tagged as format 2")
        if len(batches) != 1 or batches[0].num_rows != 1:
            raise self.bad("expected one record batch of one row")
        self.cols: dict[str, pa.Array] = {}
        for name, col in zip(batches[0].schema.names, batches[0].columns, strict=True):
            if not pa.types.is_large_list(col.type) or col.null_count:
                raise self.bad(f"column {name!r} is not a large_list")
            self.cols[name] = col.flatten()

    def bad(self, what: str) -> WalCorruption:
        """The error for a body that breaks the format."""
        return WalCorruption(f"compact change segment: {what}", path=self.path, offset=0)

    def column(
        self, name: str, type_: pa.DataType, length: int | None, *, nulls: bool = True
    ) -> pa.Array:
        """Takes column ``name``, which must be of ``type_`` and ``length`` values."""
        arr = self.cols.pop(name, None)
        if arr is None:
            raise self.bad(f"column {name!r} is missing")
        if arr.type != type_:
            raise self.bad(f"column {name!r} is {arr.type}, expected {type_}")
        if length is not None and len(arr) != length:
            raise self.bad(f"column {name!r} has {len(arr)} values, expected {length}")
        if not nulls and arr.null_count:
            raise self.bad(f"{name!r} holds nulls")
        return arr

    def sparse_column(self, name: str, type_: pa.DataType) -> tuple[pa.Array, np.ndarray]:
        """Takes value column ``name`` and its presence bits: the column spread back to
        one cell per event, and the mask of the events that set it."""
        bits = self.column(SET_PREFIX + name, pa.bool_(), self.rows, nulls=False)
        rows = self.rows
        mask = _unpack(bits.buffers()[1], bits.offset, rows) if rows else np.zeros(0, dtype=bool)
        vals = self.column(name, type_, int(np.count_nonzero(mask)))
        return _spread(vals, mask, rows), mask
