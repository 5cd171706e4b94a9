"""Record framing: how WAL segments, log entries and checkpoints hold their bytes.

A framed file is an optional 8-byte header (magic + format version) followed by
records, each carrying its own length and CRC32C::

    offset 0        8           16                    16+len₀     24+len₀
           ┌────────┬─────┬─────┬─────────────────────┬─────┬─────┬──────────── ─ ─
           │ magic  │len₀ │crc₀ │ payload₀            │len₁ │crc₁ │ payload₁ ...
           └────────┴─────┴─────┴─────────────────────┴─────┴─────┴──────────── ─ ─
             8 B     u32LE u32LE   len₀ bytes
    magic   b"CDCWAL\\x00\\x01" (WAL segment), b"CDCLOG\\x00\\x01" (log entry), ...:
            six letters, then a big-endian u16 format version
    crc     CRC32C (Castagnoli, google_crc32c) of the 4 length bytes + the payload

Reading distinguishes two kinds of damage. The first bad offset is where a record is
incomplete (the file ends inside its header or payload) or fails its CRC.

* **Torn tail** — nothing valid follows the bad offset: no complete record with a
  correct CRC starts anywhere after it (this includes a file that simply ends, a tail
  of zeros left by a crash, and a partially written header). That is what an
  interrupted append leaves behind, so it is recoverable: the good prefix ends at
  ``valid_length``.
* **Corruption** — a CRC-valid record starts somewhere after the bad offset, so the
  damage sits in the middle of data that was once complete; or the header is not the
  expected magic. This raises :class:`~cdc_sink.errors.WalCorruption` naming the file
  and the bad offset.

The search for a valid record after the bad offset is vectorized and bounded
(:data:`SCAN_BUDGET_BYTES`); when the budget runs out the damage counts as a torn tail.
A length field that overruns the end of the file is therefore torn only when it belongs
to the last record, which is the only case the reader can tell. With
``allow_torn_tail=False`` any damage raises.

Every record is CRC-checked before it is returned, so a damaged file can yield fewer
records but never a wrong one (short of a 2⁻³² CRC collision).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import google_crc32c
import numpy as np
import numpy.typing as npt

from cdc_sink.errors import WalCorruption

__all__ = [
    "HEADER_INT_MAX",
    "MAX_PAYLOAD",
    "RECORD_HEADER_SIZE",
    "SCAN_BUDGET_BYTES",
    "ReadResult",
    "encode_file",
    "encode_record",
    "read_json_header",
    "read_records",
    "record_crc",
]

RECORD_HEADER_SIZE = 8
"""Bytes before each payload: u32 length + u32 CRC32C, little-endian."""

MAX_PAYLOAD = 0xFFFF_FFFF
"""Largest payload a u32 length can describe."""

SCAN_BUDGET_BYTES = 64 << 20
"""Work limit (bytes checksummed, plus 64 per candidate) when looking for a valid record
after a bad one to tell corruption from a torn tail."""

_HEADER = struct.Struct("<II")
_LEN = struct.Struct("<I")
_EMPTY_CRC = google_crc32c.value(_LEN.pack(0))
_SCAN_CHUNK = 1 << 20


@dataclass(frozen=True)
class ReadResult:
    """What :func:`read_records` found in a framed file.

    Attributes:
        records: The payloads of the good prefix, in order.
        valid_length: Offset where the good prefix (header included) ends; equals the
            data length when nothing is torn.
        torn: Whether a torn tail starts at ``valid_length``.
    """

    records: list[bytes]
    valid_length: int
    torn: bool


def record_crc(length_bytes: bytes, payload: bytes) -> int:
    """The CRC32C stored in a record: over its 4 length bytes, then its payload.

    Args:
        length_bytes: The record's u32 little-endian length field.
        payload: The record's payload.

    Returns:
        The checksum as an unsigned 32-bit integer.
    """
    return int(google_crc32c.extend(google_crc32c.value(length_bytes), payload))


def encode_record(payload: bytes) -> bytes:
    """Frame one payload: ``u32 length | u32 CRC32C(length bytes + payload) | payload``.

    Args:
        payload: The record's bytes.

    Returns:
        The framed record.

    Raises:
        ValueError: The payload is longer than :data:`MAX_PAYLOAD`.
    """
    payload = bytes(payload)
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"record payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    length = _LEN.pack(len(payload))
    return length + _LEN.pack(record_crc(length, payload)) + payload


def encode_file(records: Iterable[bytes], *, magic: bytes) -> bytes:
    """A whole framed file: ``magic`` followed by each record framed.

    Args:
        records: The payloads.
        magic: The header (``b""`` for none).

    Returns:
        The file's bytes.
    """
    return magic + b"".join(encode_record(r) for r in records)


def _u32_at(arr: npt.NDArray[np.uint8], start: int, count: int) -> npt.NDArray[np.uint32]:
    """Little-endian u32 values read at every byte offset start .. start+count-1."""
    b = arr[start : start + count + 3].astype(np.uint32)
    u32 = b[:count] | (b[1 : count + 1] << 8) | (b[2 : count + 2] << 16) | (b[3:] << 24)
    return u32.astype(np.uint32, copy=False)


def _valid_record_after(data: bytes, start: int) -> int | None:
    """First offset >= ``start`` where a complete record with a correct CRC begins.

    Returns ``None`` if there is none, or if :data:`SCAN_BUDGET_BYTES` runs out first.
    """
    n = len(data)
    last = n - RECORD_HEADER_SIZE  # the last offset where a record (of length 0) fits
    if start > last:
        return None
    arr = np.frombuffer(data, dtype=np.uint8)
    budget = SCAN_BUDGET_BYTES
    lo = start
    while lo <= last:
        hi = min(last + 1, lo + _SCAN_CHUNK)
        count = hi - lo
        lengths = _u32_at(arr, lo, count).astype(np.int64)
        crcs = _u32_at(arr, lo + 4, count)
        room = last - np.arange(lo, hi, dtype=np.int64)  # payload bytes that fit
        candidates = (lengths <= room) & ((lengths != 0) | (crcs == _EMPTY_CRC))
        for i in np.flatnonzero(candidates).tolist():
            pos = lo + i
            length = int(lengths[i])
            budget -= length + 64
            if budget < 0:
                return None
            body = pos + RECORD_HEADER_SIZE
            if record_crc(data[pos : pos + 4], data[body : body + length]) == int(crcs[i]):
                return pos
        lo = hi
    return None


def read_records(
    data: bytes,
    *,
    path: str,
    magic: bytes,
    allow_torn_tail: bool,
) -> ReadResult:
    """Parse a framed file, verifying every record's CRC.

    Args:
        data: The file's bytes.
        path: The file's name, for error messages.
        magic: The expected header (``b""`` for none).
        allow_torn_tail: Accept a torn tail (see the module docstring) and report it;
            otherwise any damage raises.

    Returns:
        The good records, where they end, and whether a torn tail follows.

    Raises:
        WalCorruption: The header is not ``magic``, a record is damaged with valid data
            after it, or (``allow_torn_tail=False``) the tail is torn.
    """
    data = bytes(data)
    n = len(data)
    h = len(magic)
    records: list[bytes] = []

    def tail(offset: int, what: str) -> ReadResult:
        if not allow_torn_tail:
            raise WalCorruption(f"torn tail: {what}", path=path, offset=offset)
        return ReadResult(records, offset, True)

    if h:
        head = data[:h]
        if head != magic:
            if magic.startswith(data) or data.count(0) == n:
                return tail(0, "incomplete file header")
            # The header read is not shown: the file may be anything (never echo content).
            raise WalCorruption(f"bad file header: not the expected {magic!r}", path=path, offset=0)
    pos = h
    while pos < n:
        if n - pos < RECORD_HEADER_SIZE:
            return tail(pos, "file ends inside a record header")
        length, crc = _HEADER.unpack_from(data, pos)
        body = pos + RECORD_HEADER_SIZE
        end = body + length
        if end > n:
            what = f"record length {length} runs past the end of the file ({n} bytes)"
        else:
            payload = data[body:end]
            if record_crc(data[pos : pos + 4], payload) == crc:
                records.append(payload)
                pos = end
                continue
            what = f"record of {length} bytes fails its CRC32C"
        following = _valid_record_after(data, pos + 1)
        if following is None:
            return tail(pos, what)
        raise WalCorruption(
            f"{what}; a valid record follows at offset {following}", path=path, offset=pos
        )
    return ReadResult(records, n, False)


HEADER_INT_MAX = (1 << 53) - 1
"""The largest int a JSON header field may hold (the largest every JSON reader keeps
exact)."""


def read_json_header(
    payload: bytes,
    fields: Mapping[str, bool],
    *,
    what: str,
    path: str,
    offset: int,
) -> dict[str, int]:
    """The int fields of a header record: a JSON object whose ``fields`` (name ->
    required) are each an int in ``0..HEADER_INT_MAX`` (not a bool, not a float: so no
    ``Infinity``, ``NaN`` or ``1e400``); other members are ignored.

    Args:
        payload: The record.
        fields: The fields read, each mapped to whether it must be there.
        what: What the header belongs to, for messages.
        path: Where it is stored, for messages.
        offset: Where the record starts there.

    Returns:
        The fields present, by name.

    Raises:
        WalCorruption: The record is not such an object (the message never shows its
            bytes).
    """
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError, RecursionError):
        obj = None
    if not isinstance(obj, dict):
        raise WalCorruption(f"{what} header is not a JSON object", path=path, offset=offset)
    out: dict[str, int] = {}
    for name, required in fields.items():
        if name not in obj:
            if required:
                raise WalCorruption(f"{what} header lacks {name!r}", path=path, offset=offset)
            continue
        value = obj[name]
        if type(value) is not int or not 0 <= value <= HEADER_INT_MAX:
            raise WalCorruption(
                f"{what} header field {name!r} is not an int in 0..{HEADER_INT_MAX}",
                path=path,
                offset=offset,
            )
        out[name] = value
    return out
