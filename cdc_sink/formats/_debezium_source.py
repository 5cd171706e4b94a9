"""The ``source`` block of Debezium events as a sequence number (private).

With the decoder option ``sequence_source`` other than ``"column"``, the ``seq`` of an
event is its position in the source database's log, read from ``source``:

- ``"lsn"``: PostgreSQL ``source.lsn``;
- ``"binlog"``: MySQL, the number of ``source.file`` (3 for ``mysql-bin.000003``) shifted
  left 32 bits, plus ``source.pos`` (0..2**32-1) and ``source.row`` (0..2**31-1);
- ``"ts_ms"``: ``source.ts_ms`` (a last resort: it is not unique).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.formats._arrays import Parts, refuse, spans
from cdc_sink.formats._jsonmembers import int_member, member_kind, refuse_members
from cdc_sink.formats._jsonscan import KIND_STRING, Members

__all__ = ["SOURCE", "binlog_numbers", "binlog_seq", "source_seq"]

SOURCE = ("ts_ms", "lsn", "file", "pos", "row")
"""The members of ``source`` the decoder reads, in the order :func:`source_seq` takes them."""


def source_seq(
    mode: str,
    parts: Parts,
    m: Members,
    reasons: np.ndarray,
    need: np.ndarray,
    ts_m: np.ndarray,
    lsn_m: np.ndarray,
    file_m: np.ndarray,
    pos_m: np.ndarray,
    row_m: np.ndarray,
) -> pa.Array:
    """The ``seq`` of each event from its source position.

    Args:
        mode: ``sequence_source``: ``"lsn"``, ``"binlog"`` or ``"ts_ms"``.
        parts: The message values.
        m: Their member index.
        reasons: Reject reasons of the events (updated: a missing or bad position).
        need: Events that need a seq.
        ts_m: The ``source.ts_ms`` member of each event (-1: none); likewise ``lsn_m``,
            ``file_m``, ``pos_m`` and ``row_m``.
        lsn_m: ``source.lsn``.
        file_m: ``source.file``.
        pos_m: ``source.pos``.
        row_m: ``source.row``.

    Returns:
        The seq of each event (null where it has none).
    """
    if mode == "lsn":
        v, given = int_member(parts, m, lsn_m, reasons, "source.lsn {raw} is not an integer")
        refuse(reasons, need & ~given, "seq is missing (no source.lsn)")
    elif mode == "ts_ms":
        v, given = int_member(parts, m, ts_m, reasons, "source.ts_ms {raw} is not an integer")
        refuse(reasons, need & ~given, "seq is missing (no source.ts_ms)")
    else:
        v, given = _binlog_seq(parts, m, reasons, need, file_m, pos_m, row_m)
    return pa.array(v, pa.int64(), mask=~given)


def _binlog_seq(
    parts: Parts,
    m: Members,
    reasons: np.ndarray,
    need: np.ndarray,
    file_m: np.ndarray,
    pos_m: np.ndarray,
    row_m: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """MySQL positions: ``file number << 32 | pos``, plus ``row``.

    Returns:
        The values (0 where none) and the mask of events that have one.
    """
    pos, given = int_member(parts, m, pos_m, reasons, "source.pos {raw} is not an integer")
    row, _ = int_member(parts, m, row_m, reasons, "source.row {raw} is not an integer")
    fk = member_kind(m, file_m)
    number = _binlog_file_numbers(parts, m, file_m, fk)
    refuse_members(
        reasons,
        parts,
        m,
        file_m[(fk >= 0) & (number < 0) & need],
        "source.file {raw} is not a binlog file name (name.NNNNNN)",
    )
    return binlog_seq(reasons, need, number, pos, given, row)


def binlog_seq(
    reasons: np.ndarray,
    need: np.ndarray,
    number: np.ndarray,
    pos: np.ndarray,
    given: np.ndarray,
    row: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """MySQL positions from their parts (the JSON and the Avro decoders' one rule):
    ``number << 32 | pos``, plus ``row``; the events of ``need`` without one are refused.

    Args:
        reasons: Reject reasons of the events (updated).
        need: Events that need a seq.
        number: The binlog file number of each event (-1: none, :func:`binlog_numbers`).
        pos: ``source.pos`` (where ``given``).
        given: The events that have a ``source.pos``.
        row: ``source.row`` (0 where none).

    Returns:
        The values (0 where none) and the mask of events that have one.
    """
    refuse(reasons, need & ~given, "seq is missing (no source.pos)")
    refuse(reasons, need & (number < 0), "seq is missing (no source.file)")
    refuse(
        reasons, need & given & ((pos < 0) | (pos >= 1 << 32)), "source.pos is outside 0..2**32-1"
    )
    refuse(reasons, need & ((row < 0) | (row >= 1 << 31)), "source.row is outside 0..2**31-1")
    ok = need & given & (number >= 0) & (pos >= 0) & (pos < 1 << 32) & (row >= 0) & (row < 1 << 31)
    return np.where(ok, (number << 32) + pos + row, 0), ok


def binlog_numbers(names: pa.Array) -> np.ndarray:
    """The number of each binlog file name (``name.NNNNNN``; -1: a null, or a name of
    another form)."""
    digits = pc.struct_field(pc.extract_regex(names, r"\.(?P<n>[0-9]{1,9})$"), "n")
    return np.asarray(
        pc.cast(digits, pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64
    )


def _binlog_file_numbers(
    parts: Parts, m: Members, file_m: np.ndarray, fk: np.ndarray
) -> np.ndarray:
    """The number of each event's binlog file name (``name.NNNNNN``; -1: none)."""
    has_file = np.flatnonzero(fk == KIND_STRING)
    fm = file_m[has_file]
    number = np.full(len(file_m), -1, dtype=np.int64)
    if len(fm):
        names = spans(parts, m.value_start[fm] + 1, m.value_end[fm] - 1)
        num = binlog_numbers(names.cast(pa.binary()).cast(pa.string(), safe=False))
        number[has_file] = num
    return number
