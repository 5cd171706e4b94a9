"""rowv2's values: each column's values read from where the rows hold them (private).

:mod:`cdc_sink.formats.rowv2` finds where each row's values are (headers, layouts,
offsets) and hands every column its slots as :class:`Piece` s: the rows, and the byte
position and width of each not-null value (or rows whose column is null). Here each
column is read for all rows at once, by its type's encoding (see the table of
:mod:`cdc_sink.formats.rowv2`): integers of 1, 2, 4 or 8 bytes, 8-byte floats, 16-byte
decimals, raw bytes; a value that does not fit its column refuses its row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cdc_sink.formats._arrays import (
    Parts,
    cast_rows,
    decimal_fits,
    fixed_array,
    int_bounds,
    refuse,
    scatter,
    spans,
    unaligned,
)
from cdc_sink.schema import Column, TableSchema, type_to_str

__all__ = ["Bytes", "Piece", "decode_columns", "full_mask"]


class Bytes:
    """Unaligned little-endian views of the data buffer (one gather per read)."""

    def __init__(self, data: np.ndarray) -> None:
        self.u1 = data
        self.i1 = data.view(np.int8)
        self.u2 = unaligned(data, "<u2")
        self.i2 = unaligned(data, "<i2")
        self.u4 = unaligned(data, "<u4")
        self.i4 = unaligned(data, "<i4")
        self.i8 = unaligned(data, "<i8")
        self.f8 = unaligned(data, "<f8")


@dataclass
class Piece:
    """Some rows' slots of one column: all null, or values at ``pos`` of ``width``."""

    rows: np.ndarray
    null: bool
    pos: np.ndarray | None = None
    width: np.ndarray | None = None


def decode_columns(
    parts: Parts, b: Bytes, pieces: list[list[Piece]], reasons: np.ndarray, schema: TableSchema
) -> tuple[dict[str, pa.Array], dict[str, tuple[pa.Array, np.ndarray]], pa.Array | None]:
    """Builds one array of all rows per column from its pieces."""
    n = parts.n
    key_names = set(schema.primary_key)
    keys: dict[str, pa.Array] = {}
    vals: dict[str, tuple[pa.Array, np.ndarray]] = {}
    seq: pa.Array | None = None
    empty = np.zeros(0, dtype=np.int64)
    for i, c in enumerate(schema.columns):
        mine, pieces[i] = pieces[i], []  # each column's slots freed once it is built
        present = np.zeros(n, dtype=bool)
        for p in mine:
            present[p.rows] = True
        vp = [p for p in mine if not p.null]
        del mine
        rows = np.concatenate([p.rows for p in vp]) if vp else empty
        pos = np.concatenate([p.pos for p in vp if p.pos is not None]) if vp else empty
        width = np.concatenate([p.width for p in vp if p.width is not None]) if vp else empty
        is_seq = c.name == schema.sequence_column
        target = pa.int64() if is_seq else c.type
        arr = _column(parts, b, c, target, rows, pos, width, reasons)
        if c.name in key_names:
            keys[c.name] = arr
        elif is_seq:
            seq = arr
        else:
            vals[c.name] = (arr, present)
    return keys, vals, seq


def _read_ints(b: Bytes, pos: np.ndarray, width: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reads signed little-endian integers of width 1/2/4/8; other widths are flagged."""
    if len(width) and (width == width[0]).all() and int(width[0]) in (1, 2, 4, 8):
        view = {1: b.i1, 2: b.i2, 4: b.i4, 8: b.i8}[int(width[0])]
        return view[pos].astype(np.int64), np.zeros(len(pos), dtype=bool)
    vals = np.zeros(len(pos), dtype=np.int64)
    bad = (width != 1) & (width != 2) & (width != 4) & (width != 8)
    for w, view in ((1, b.i1), (2, b.i2), (4, b.i4), (8, b.i8)):
        sel = np.flatnonzero(width == w)
        if len(sel):
            vals[sel] = view[pos[sel]]
    return vals, bad


def _column(
    parts: Parts,
    b: Bytes,
    c: Column,
    target: pa.DataType,
    rows: np.ndarray,
    pos: np.ndarray,
    width: np.ndarray,
    reasons: np.ndarray,
) -> pa.Array:
    """Decodes the not-null values of one column into an array of all ``n`` rows (null
    elsewhere); a bad value refuses its row."""
    n = parts.n
    tname = type_to_str(c.type)
    valid = np.zeros(n, dtype=bool)
    t = c.type

    def fail(mask: np.ndarray, reason: str) -> np.ndarray:
        if mask.any():
            refuse(reasons, full_mask(mask, rows, n), f"column {c.name!r}: {reason}")
        return mask

    if (
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date32(t)
        or pa.types.is_timestamp(t)
    ):
        v, bad = _read_ints(b, pos, width)
        fail(bad, f"a value of a width other than 1, 2, 4 or 8 bytes is not a valid {tname}")
        if pa.types.is_boolean(t):
            bad |= fail(~bad & (v != 0) & (v != 1), "a bool must be 0 or 1")
            store: type[np.generic] = np.bool_
        else:
            lo, hi = int_bounds(t)
            bad |= fail(~bad & ((v < lo) | (v > hi)), f"value out of range of {tname}")
            store = _int_store(target)
        full: np.ndarray = np.zeros(n, dtype=store)
        full[rows] = v.astype(store)
        valid[rows[~bad]] = True
        return fixed_array(full, valid, target)
    if pa.types.is_floating(t):
        bad = fail(width != 8, f"a {tname} value must take 8 bytes")
        f = np.where(bad, 0.0, b.f8[np.where(bad, 0, pos)]) if len(pos) else np.zeros(0)
        if t == pa.float32():
            with np.errstate(over="ignore"):
                f32 = f.astype(np.float32)
            bad |= fail(~bad & np.isfinite(f) & ~np.isfinite(f32), "out of range of float32")
            full = np.zeros(n, dtype=np.float32)
            full[rows] = f32
        else:
            full = np.zeros(n, dtype=np.float64)
            full[rows] = f
        valid[rows[~bad]] = True
        return fixed_array(full, valid, t)
    if pa.types.is_decimal(t):
        bad = fail(width != 16, f"a {tname} value must take 16 bytes")
        ok = np.flatnonzero(~bad)
        raw = np.empty((len(ok), 2), dtype=np.int64)
        raw[:, 0] = b.i8[pos[ok]]
        raw[:, 1] = b.i8[pos[ok] + 8]
        raw16 = raw.view(np.uint8).reshape(len(ok), 16)
        too_big = np.zeros(len(pos), dtype=bool)
        too_big[ok] = ~decimal_fits(raw16, t.precision)
        bad |= fail(too_big, f"value does not fit {tname}")
        full = np.zeros((n, 16), dtype=np.uint8)
        full[rows[ok]] = raw16
        valid[rows[~bad]] = True
        return fixed_array(full, valid, t)
    # string / binary: the raw bytes
    arr = spans(parts, pos, pos + width).cast(pa.binary())
    if pa.types.is_string(t):
        arr, bad_utf8 = cast_rows(arr, pa.string())
        fail(bad_utf8, "value is not valid UTF-8")
    return scatter(arr, rows, n)


def _int_store(target: pa.DataType) -> type[np.generic]:
    """The numpy type that holds the integers (or days, or timestamps) of ``target``."""
    if pa.types.is_date32(target) or target == pa.int32():
        return np.int32
    if target == pa.int16():
        return np.int16
    if target == pa.int8():
        return np.int8
    return np.int64


def full_mask(mask: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Expands ``mask`` over ``rows`` to a mask of all ``n`` rows."""
    out = np.zeros(n, dtype=bool)
    out[rows[mask]] = True
    return out
