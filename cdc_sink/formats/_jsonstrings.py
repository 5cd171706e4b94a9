"""Matching and decoding JSON strings in place, for many strings at once (private).

The structural index (:mod:`._jsonscan`) gives the byte span of every member name and
string value; :func:`match_strings` maps such spans to an index in a list of known names
(member names, op codes) vectorized, by a hash of the first and last 8 bytes and the
length, verified exactly; :func:`decode_string` decodes one string with escapes, and
:func:`raw_text` quotes a JSON text, shortened, for a reject reason.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from cdc_sink.formats import _jsonscan
from cdc_sink.formats._arrays import unaligned


def _words(data: np.ndarray, pos: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """The first ``min(nbytes, 8)`` bytes at each ``pos`` as a little-endian uint64."""
    out = np.zeros(len(pos), dtype=np.uint64)
    u8 = unaligned(data, "<u8")
    fast = pos + 8 <= len(data)
    take = np.clip(nbytes, 0, 8).astype(np.uint64)
    mask = np.where(
        take >= 8,
        np.uint64(0xFFFFFFFFFFFFFFFF),
        (np.uint64(1) << (take * np.uint64(8))) - np.uint64(1),
    )
    if fast.any():
        out[fast] = u8[pos[fast]] & mask[fast]
    for k in range(8):  # the few words that would run past the buffer: byte by byte
        slow = np.flatnonzero(~fast & (take > k))
        if len(slow):
            out[slow] |= data[pos[slow] + k].astype(np.uint64) << np.uint64(8 * k)
    return out


def _hash(first: np.ndarray, last: np.ndarray, length: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h: np.ndarray = (
            (first * np.uint64(0x9E3779B97F4A7C15))
            ^ (last * np.uint64(0xC2B2AE3D27D4EB4F))
            ^ (length.astype(np.uint64) * np.uint64(0x165667B19E3779F9))
        )
    return h


def match_strings(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    escaped: np.ndarray,
    names: Sequence[str],
) -> np.ndarray:
    """Index in ``names`` of each JSON string content ``data[starts:ends]`` (-1: none).

    Vectorized: a hash of (first 8 bytes, last 8 bytes, length) finds the candidate name;
    those 8-byte words and the length identify a name of up to 16 bytes exactly, longer
    ones are verified byte by byte. With the compiled pass built (``_jsonscan._cscan``),
    its ``match`` does the same in one loop. A content with backslash escapes is decoded
    with :mod:`json` (per such string; escapes in names and ops are rare).
    """
    m = len(starts)
    codes = np.full(m, -1, dtype=np.int64)
    if m == 0 or not names:
        return codes
    enc = [nm.encode("utf-8") for nm in names]
    compiled = _jsonscan._cscan
    if compiled is not None:
        compiled.match(
            np.ascontiguousarray(data),
            np.ascontiguousarray(starts, dtype=np.int64),
            np.ascontiguousarray(ends, dtype=np.int64),
            tuple(enc),
            codes,
        )
    else:
        codes = _match_hashed(data, starts, ends, enc)
    lookup = {nm: i for i, nm in enumerate(names)}
    for i in np.flatnonzero(escaped & (codes < 0)).tolist():
        text = decode_string(data, int(starts[i]), int(ends[i]))
        if text in lookup:
            codes[i] = lookup[text]
    return codes


def _match_hashed(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray, enc: list[bytes]
) -> np.ndarray:
    """The numpy body of :func:`match_strings` (without the escaped contents)."""
    m = len(starts)
    codes = np.full(m, -1, dtype=np.int64)
    length = ends - starts
    first = _words(data, starts, length)
    last = np.zeros(m, dtype=np.uint64)
    long_ = np.flatnonzero(length > 8)
    if len(long_):
        last[long_] = _words(data, ends[long_] - 8, np.full(len(long_), 8))
    h = _hash(first, last, length)
    n_first = np.array([int.from_bytes(e[:8], "little") for e in enc], dtype=np.uint64)
    n_last = np.array(
        [int.from_bytes(e[-8:], "little") if len(e) > 8 else 0 for e in enc], dtype=np.uint64
    )
    n_len = np.array([len(e) for e in enc], dtype=np.int64)
    nh = _hash(n_first, n_last, n_len)
    order = np.argsort(nh)
    nh_sorted = nh[order]
    at = np.minimum(np.searchsorted(nh_sorted, h), len(enc) - 1)
    cand = order[at]
    ok = (
        (nh_sorted[at] == h)
        & (n_len[cand] == length)
        & (n_first[cand] == first)
        & (n_last[cand] == last)
    )
    for code in [i for i, e in enumerate(enc) if len(e) > 16]:
        sel = np.flatnonzero(ok & (cand == code))
        if len(sel):
            e = np.frombuffer(enc[code], np.uint8)
            same = (data[starts[sel][:, None] + np.arange(len(e))] == e).all(axis=1)
            ok[sel[~same]] = False
    codes[ok] = cand[ok]
    return codes


def decode_string(data: np.ndarray, start: int, end: int) -> str | None:
    """Decodes one JSON string content (between its quotes); ``None`` if invalid."""
    try:
        text = json.loads(b'"' + data[start:end].tobytes() + b'"')
    except ValueError:
        return None
    return text if isinstance(text, str) else None


def raw_text(data: np.ndarray, start: int, end: int, limit: int = 60) -> str:
    """The JSON text ``data[start:end]`` for a reject reason (shortened)."""
    text = data[start : min(end, start + limit)].tobytes().decode("utf-8", "replace")
    return text + ("..." if end - start > limit else "")
