"""The ``rowv2`` format: one op byte followed by a row in TiDB's row format v2.

The row layout follows the TiDB proposal "A new storage row format for efficient
decoding" (docs/design/2018-07-19-row-format.md), preceded by one op byte::

    byte 0    1       2       3-4         5-6       7 ...
    +------+-------+-------+-----------+---------+-------------+-------------+------------+--------+
    | op   | codec | flags | not_null  | null    | not-null    | null ids    | offsets:   | values |
    | u8   | 128   | bit 0 | count     | count   | ids, sorted | sorted      | end of     |        |
    | 0..3 |       | = big | u16 LE    | u16 LE  | u8 (big:u32)| u8 (big:u32)| each value |        |
    |      |       |       |           |         |             |             | u16 (u32)  |        |
    +------+-------+-------+-----------+---------+-------------+-------------+------------+--------+

- op: 0 insert, 1 upsert, 2 update, 3 delete (:data:`cdc_sink.batch.OP_CODES`);
- flags bit 0 ("big"): column ids and offsets take 4 bytes instead of 1 and 2. A writer
  sets it when a column id is above 255 or the values take more than 65535 bytes; the
  other flag bits must be 0;
- ids are cdc_sink's stable column ids (:attr:`cdc_sink.schema.Column.id`). A row must
  carry every key column as not-null. A column in the not-null array is set to its value,
  one in the null array is set to null, and a column in neither array is **absent**
  (not set: the row keeps its value, or a new row takes the default);
- offsets: one per not-null column, the end of its value relative to the first value;
  the last one is the length of the value area (no trailing bytes are allowed).

Value encodings (by column type):

=====================  =================================================================
type                   bytes
=====================  =================================================================
int8 .. int64          signed little-endian in the smallest of 1, 2, 4 or 8 bytes that
                       holds the value, as TiDB does (the decoder accepts any of the four
                       widths when the value fits the column)
bool                   as an integer 0 or 1 (1 byte)
date32                 as an integer: days since 1970-01-01
timestamp[us, UTC]     as an integer: microseconds since the epoch (int64 range)
float64, float32       8-byte little-endian IEEE 754 float64 (float32 columns too; the
                       decoder casts, refusing finite values that overflow float32)
string                 the raw UTF-8 bytes (validated)
binary                 the raw bytes
decimal128(p, s)       16-byte little-endian two's complement of the unscaled value
                       (value * 10**s), at most p digits
=====================  =================================================================

Two deliberate simplifications of TiDB's own encodings: TiDB stores floats and decimals
in its older "comparable" codecs (decimals in its binary MyDecimal format); cdc_sink
uses plain IEEE float64 and 16-byte unscaled integers, which decode without any per-row
work.

Sequence numbers: on a table with a ``sequence_column`` S, the event's ``seq`` is the
value of S in the row (an integer encoded as above). The decoder takes ``seq`` from it
(and does not treat S as a set column); a row without S, or with S null, is rejected
(``seq is missing``/``seq is null``).

Decoding (:class:`Rowv2Decoder`) is vectorized: the headers of all rows are read at
once with numpy from the Arrow offsets and data buffers, column ids and value offsets
are gathered for every (row, column) slot at once, slots are grouped by column with a
stable radix sort, and each column's values are gathered by their computed offsets for
all rows together (:mod:`._rowv2_values`). A malformed row (truncated, bad codec byte,
unknown flags, unsorted or duplicate ids, an id both null and not-null, an unknown id,
offsets out of order or out of range, trailing bytes, a value width that does not fit
the type, an unknown op) becomes a reject; the other rows decode.

What a row declares is checked against the schema before anything is sized by it
(issue 38): a header declaring more column ids than the schema has columns (a valid
row names each column once at most) is refused from its 7 header bytes, so the per-slot
work of the rows that pass is bounded by the schema's width; the id arrays are then
read once per distinct layout, and every reason is one string shared by the rows it
refuses.

The encoders (:func:`encode_value`, :func:`pack_row`, :func:`encode_rows`,
:func:`encode_event` and the registry's :func:`rowv2_encoder`, per row: producer and
test tools) live in :mod:`._rowv2_encode` and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.batch import OP_DELETE
from cdc_sink.formats._arrays import (
    Parts,
    binary_parts,
    new_reasons,
    no_reason,
    position_array,
    refuse,
    spans,
)
from cdc_sink.formats._arrays_runs import Columns, assemble
from cdc_sink.formats._base import Decoded, Decoder, FormatName
from cdc_sink.formats._rowv2_encode import (
    CODEC_VERSION,
    FLAG_BIG,
    encode_event,
    encode_rows,
    encode_value,
    pack_row,
    rowv2_encoder,
)
from cdc_sink.formats._rowv2_values import Bytes, Piece, decode_columns, full_mask
from cdc_sink.schema import TableSchema

__all__ = [
    "CODEC_VERSION",
    "FLAG_BIG",
    "Rowv2Decoder",
    "encode_event",
    "encode_rows",
    "encode_value",
    "pack_row",
    "rowv2_encoder",
]


_HEADER = 7  # op, codec, flags, u16 n_not_null, u16 n_null


# ====================================================================== decoding
_GROUP_MIN = 256  # a layout shared by this many rows is decoded as one (rows x columns) matrix


@dataclass
class _Headers:
    """Header fields of the rows whose header is well formed (all arrays aligned)."""

    rows: np.ndarray  # input row index
    nn: np.ndarray  # number of not-null columns
    nl: np.ndarray  # number of null columns
    big: np.ndarray  # 4-byte ids and offsets
    ids_at: np.ndarray  # byte position of the id arrays
    offs_at: np.ndarray  # byte position of the offsets
    vals_at: np.ndarray  # byte position of the first value
    end: np.ndarray  # one past the row's last byte


@dataclass
class _Layouts:
    """Distinct row layouts (codec, flags, counts and id arrays), parsed once each."""

    nn: np.ndarray  # per layout
    nl: np.ndarray  # per layout
    first: np.ndarray  # per layout: index of its first slot
    cidx: np.ndarray  # per slot: schema column index
    reason: np.ndarray  # per layout: why its rows are refused, or None


class Rowv2Decoder(Decoder):
    """Decoder of the ``rowv2`` format (see the module docstring); vectorized.

    Rows are grouped by layout (the header bytes up to the offsets: codec, flags, counts
    and column ids), found by hashing the header bytes of all rows at once. Each distinct
    layout's ids are parsed and validated once. A layout shared by many rows is decoded
    as a matrix: the offsets of all its rows in one gather; the rows of rare layouts are
    decoded together slot by slot. Values are then read per column for all rows at once.
    """

    name: ClassVar[FormatName] = "rowv2"

    def decode_with_meta(
        self,
        values: pa.BinaryArray | pa.LargeBinaryArray,
        schema: TableSchema,
        *,
        position: np.ndarray | None = None,
        keys: pa.BinaryArray | pa.LargeBinaryArray | None = None,
    ) -> Decoded:
        """Decodes ``rowv2`` message values (see :meth:`Decoder.decode_with_meta`).

        ``ts_ms`` is always ``None``: the format carries no producer timestamp. ``keys``
        is ignored: every row carries its key.
        """
        del keys
        parts = binary_parts(values)
        n = parts.n
        pos = None if position is None else position_array(position, n)
        reasons = new_reasons(n)
        refuse(reasons, ~parts.valid, "null message value")
        refuse(
            reasons,
            parts.valid & (parts.lengths < _HEADER),
            f"truncated row: shorter than the {_HEADER}-byte header",
        )
        op = np.zeros(n, dtype=np.int8)
        b = Bytes(parts.data)
        pieces: list[list[Piece]] = [[] for _ in schema.columns]
        h = _headers(parts, b, reasons, op, len(schema.columns))
        if len(h.rows):
            self._layout_rows(parts, b, h, reasons, schema, pieces)
        del h
        keys, vals, seq = decode_columns(parts, b, pieces, reasons, schema)
        del parts, b, pieces  # the offsets as int64, the slots: not held while assembling
        return assemble(
            schema, Columns(op=op, keys=keys, values=vals, seq=seq, reasons=reasons), pos
        )

    @staticmethod
    def _layout_rows(
        parts: Parts,
        b: Bytes,
        h: _Headers,
        reasons: np.ndarray,
        schema: TableSchema,
        pieces: list[list[Piece]],
    ) -> None:
        sig = pc.dictionary_encode(spans(parts, parts.starts[h.rows] + 1, h.offs_at))
        lay = sig.indices.to_numpy(zero_copy_only=False)
        n_layouts = len(sig.dictionary)
        reps = np.full(n_layouts, -1, dtype=np.int64)
        reps[lay[::-1]] = np.arange(len(lay) - 1, -1, -1)  # first row of each layout
        lt = _parse_layouts(b, h, reps, schema)
        bad_layout = ~no_reason(lt.reason)
        if bad_layout.any():
            bad_rows = np.flatnonzero(bad_layout[lay])
            rows = h.rows[bad_rows]
            fresh = no_reason(reasons[rows])
            reasons[rows[fresh]] = lt.reason[lay[bad_rows[fresh]]]
        counts = np.bincount(lay, minlength=n_layouts)
        key = lay.astype(np.uint16) if n_layouts <= 0xFFFF else lay
        order = np.argsort(key, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(counts)])
        grouped = (counts >= _GROUP_MIN) & ~bad_layout
        for u in np.flatnonzero(grouped).tolist():
            _matrix_layout(b, h, order[bounds[u] : bounds[u + 1]], u, lt, reasons, pieces)
        rest = np.flatnonzero(~grouped[lay] & ~bad_layout[lay])
        if len(rest):
            _slot_rows(b, h, rest, lay[rest], lt, reasons, pieces)


def _headers(
    parts: Parts, b: Bytes, reasons: np.ndarray, op_out: np.ndarray, n_columns: int
) -> _Headers:
    """Reads the 7-byte header of every row; refuses rows whose header is malformed or
    declares more column ids than the schema's ``n_columns``."""
    pt = _pos_type(parts)
    rows = np.flatnonzero(no_reason(reasons)).astype(pt)
    hs = parts.starts[rows].astype(pt)
    end = parts.ends[rows].astype(pt)
    op = b.u1[hs]
    codec = b.u1[hs + 1]
    flags = b.u1[hs + 2]
    nn = b.u2[hs + 3].astype(pt)
    nl = b.u2[hs + 5].astype(pt)
    big = (flags & FLAG_BIG) != 0
    ids_at = hs + pt(_HEADER)
    del hs
    if big.any():
        offs_at = ids_at + (nn + nl) * np.where(big, pt(4), pt(1))
        vals_at = offs_at + nn * np.where(big, pt(4), pt(2))
    else:
        offs_at = ids_at + nn + nl
        vals_at = offs_at + 2 * nn
    bad = np.zeros(len(rows), dtype=bool)
    for mask, reason in (
        (codec != CODEC_VERSION, f"bad codec version byte (expected {CODEC_VERSION})"),
        ((flags & (0xFF ^ FLAG_BIG)) != 0, "unknown flag bits in the row header"),
        (op > OP_DELETE, "unknown op byte (expected 0..3)"),
        (
            nn + nl > n_columns,
            f"the header declares more column ids than the schema's {n_columns} columns",
        ),
        (
            vals_at > end,
            "truncated row: the header declares more column ids and offsets than the row holds",
        ),
    ):
        refuse(reasons, full_mask(mask & ~bad, rows, len(reasons)), reason)
        bad |= mask
    op_out[rows] = np.where(bad, 0, op).astype(np.int8)
    if not bad.any():  # (no copies when every header is well formed, as usual)
        return _Headers(rows, nn, nl, big, ids_at, offs_at, vals_at, end)
    g = np.flatnonzero(~bad)
    return _Headers(
        rows=rows[g],
        nn=nn[g],
        nl=nl[g],
        big=big[g],
        ids_at=ids_at[g],
        offs_at=offs_at[g],
        vals_at=vals_at[g],
        end=end[g],
    )


def _parse_layouts(b: Bytes, h: _Headers, reps: np.ndarray, schema: TableSchema) -> _Layouts:
    """Parses and validates the id arrays of each layout, from one row per layout."""
    nn, nl, big, ids_at = h.nn[reps], h.nl[reps], h.big[reps], h.ids_at[reps]
    n_layouts = len(reps)
    cnt = nn + nl
    total = int(cnt.sum())
    lay = np.repeat(np.arange(n_layouts), cnt)
    first = np.cumsum(cnt) - cnt
    k = np.arange(total, dtype=np.int64) - first[lay]
    slot_big = big[lay]
    idpos = ids_at[lay] + np.where(slot_big, 4 * k, k)
    ids = b.u1[idpos].astype(np.int64)
    if slot_big.any():
        ids[slot_big] = b.u4[idpos[slot_big]]
    is_null = k >= nn[lay]
    reason = np.full(n_layouts, None, dtype=object)

    same = (lay[1:] == lay[:-1]) & (is_null[1:] == is_null[:-1])
    unsorted = np.unique(lay[1:][same & (ids[1:] <= ids[:-1])])
    reason[unsorted] = "column ids are not sorted and unique"

    max_id = max(c.id for c in schema.columns)
    lut = np.full(max_id + 2, -1, dtype=np.int32)
    for i, c in enumerate(schema.columns):
        lut[c.id] = i
    cidx = lut[np.minimum(ids, max_id + 1)]
    _first_reasons(reason, lay, np.flatnonzero(cidx < 0), ids, "unknown column id {}")

    key = (lay << 32) | ids
    nn_keys = key[~is_null]
    nl_sel = np.flatnonzero(is_null)
    if len(nn_keys) and len(nl_sel):
        at = np.minimum(np.searchsorted(nn_keys, key[nl_sel]), len(nn_keys) - 1)
        both = nl_sel[nn_keys[at] == key[nl_sel]]
        _first_reasons(reason, lay, both, ids, "column id {} is both null and not null")
    return _Layouts(nn=nn, nl=nl, first=first, cidx=cidx, reason=reason)


def _pos_type(parts: Parts) -> type[np.signedinteger]:
    """int32 for the positions and indices of rows (int64 for data of nearly 2 GiB or
    more): a header's positions reach at most a few hundred KB past its row."""
    small = len(parts.data) + (1 << 22) < 2**31 and parts.n < 2**31
    return np.int32 if small else np.int64


def _first_reasons(
    reason: np.ndarray, lay: np.ndarray, slots: np.ndarray, ids: np.ndarray, template: str
) -> None:
    """Gives each layout without a reason ``template`` formatted with the id of its first
    slot among ``slots`` (sorted): once per layout, never per slot."""
    if not len(slots):
        return
    lays, at = np.unique(lay[slots], return_index=True)
    free = no_reason(reason[lays])
    texts = np.empty(int(free.sum()), dtype=object)
    texts[:] = [template.format(i) for i in ids[slots[at[free]]].tolist()]
    reason[lays[free]] = texts


def _offset_reasons(
    dec: np.ndarray, beyond: np.ndarray, trailing: np.ndarray, rows: np.ndarray, reasons: np.ndarray
) -> np.ndarray:
    """Refuses rows with bad value offsets; returns the mask of bad rows."""
    bad: np.ndarray = dec | beyond | trailing
    if bad.any():
        n = len(reasons)
        refuse(reasons, full_mask(dec, rows, n), "value offsets are not increasing")
        refuse(
            reasons, full_mask(beyond, rows, n), "a value offset points beyond the end of the row"
        )
        refuse(reasons, full_mask(trailing, rows, n), "trailing bytes after the last value")
    return bad


def _matrix_layout(
    b: Bytes,
    h: _Headers,
    sel: np.ndarray,
    u: int,
    lt: _Layouts,
    reasons: np.ndarray,
    pieces: list[list[Piece]],
) -> None:
    """Decodes the offsets of all rows of one frequent layout as an (m, nn) matrix."""
    rows = h.rows[sel]
    nn, nl, first = int(lt.nn[u]), int(lt.nl[u]), int(lt.first[u])
    vals_at = h.vals_at[sel]
    vlen = h.end[sel] - vals_at
    if nn:
        big = bool(h.big[sel[0]])
        # (nn, m): row j holds the end offset of the layout's j-th value for every row.
        pt = h.offs_at.dtype.type
        at = (np.arange(nn, dtype=pt) * pt(4 if big else 2))[:, None] + h.offs_at[sel][None, :]
        ends = b.u4[at].astype(np.int64) if big else b.u2[at].astype(pt)
        del at
        dec = np.zeros(len(sel), dtype=bool)
        for j in range(1, nn):
            dec |= ends[j] < ends[j - 1]
        beyond = ~dec & (ends[-1] > vlen)
        trailing = ~dec & (ends[-1] < vlen)
    else:
        ends = np.zeros((0, len(sel)), dtype=np.int64)
        dec = beyond = np.zeros(len(sel), dtype=bool)
        trailing = vlen != 0
    bad = _offset_reasons(dec, beyond, trailing, rows, reasons)
    if bad.any():
        good = ~bad
        rows, vals_at, ends = rows[good], vals_at[good], ends[:, good]
    ends = ends.astype(vals_at.dtype, copy=False)  # within the row now
    start = vals_at
    for j in range(nn):
        stop = vals_at + ends[j]
        pieces[lt.cidx[first + j]].append(Piece(rows, False, start, stop - start))
        start = stop
    for j in range(nl):
        pieces[lt.cidx[first + nn + j]].append(Piece(rows, True))


def _slot_rows(
    b: Bytes,
    h: _Headers,
    sel: np.ndarray,
    lay: np.ndarray,
    lt: _Layouts,
    reasons: np.ndarray,
    pieces: list[list[Piece]],
) -> None:
    """Decodes rows of rare layouts together, one entry per (row, column) slot."""
    rows = h.rows[sel]
    nn, nl = h.nn[sel], h.nl[sel]
    first = lt.first[lay]
    big = h.big[sel]
    vals_at = h.vals_at[sel]
    vlen = h.end[sel] - vals_at
    # not-null slots: offsets
    sr = np.repeat(np.arange(len(sel)), nn)
    j = np.arange(len(sr), dtype=np.int64) - np.repeat(np.cumsum(nn) - nn, nn)
    slot_big = big[sr]
    at = h.offs_at[sel][sr] + np.where(slot_big, 4 * j, 2 * j)
    ends = b.u2[at].astype(np.int64)
    if slot_big.any():
        ends[slot_big] = b.u4[at[slot_big]]
    starts = np.empty_like(ends)
    starts[1:] = ends[:-1]
    starts[j == 0] = 0
    last = j == nn[sr] - 1
    dec = np.zeros(len(sel), dtype=bool)
    dec[sr[ends < starts]] = True
    beyond = np.zeros(len(sel), dtype=bool)
    beyond[sr[last & (ends > vlen[sr])]] = True
    trailing = np.zeros(len(sel), dtype=bool)
    trailing[sr[last & (ends < vlen[sr])]] = True
    trailing |= (nn == 0) & (vlen != 0)
    bad = _offset_reasons(dec, beyond & ~dec, trailing & ~dec, rows, reasons)
    # null slots
    srn = np.repeat(np.arange(len(sel)), nl)
    jn = np.arange(len(srn), dtype=np.int64) - np.repeat(np.cumsum(nl) - nl, nl)
    keep = ~bad[sr]
    keep_n = ~bad[srn]
    cidx = np.concatenate([lt.cidx[first[sr] + j][keep], lt.cidx[(first + nn)[srn] + jn][keep_n]])
    slot_rows = np.concatenate([rows[sr][keep], rows[srn][keep_n]])
    is_null = np.concatenate([np.zeros(int(keep.sum()), bool), np.ones(int(keep_n.sum()), bool)])
    pt = vals_at.dtype
    none = np.zeros(int(keep_n.sum()), pt)
    vpos = np.concatenate([(vals_at[sr] + starts)[keep].astype(pt), none])
    width = np.concatenate([(ends - starts)[keep].astype(pt), none])
    order = np.argsort(cidx, kind="stable")
    bounds = np.searchsorted(cidx[order], np.arange(len(pieces) + 1))
    for ci in range(len(pieces)):
        s = order[bounds[ci] : bounds[ci + 1]]
        if len(s) == 0:
            continue
        nulls = is_null[s]
        if nulls.any():
            pieces[ci].append(Piece(slot_rows[s[nulls]], True))
        s = s[~nulls]
        if len(s):
            pieces[ci].append(Piece(slot_rows[s], False, vpos[s], width[s]))
