"""Number members' literals: their text, and integer literals as int64 (private).

The integer conversion that every integer-typed column, ``seq``, ``ts_ms`` and the
Debezium temporal and decimal-scale members go through. With the compiled pass built
(``_jsonscan._cscan``), the plain literals of up to 18 digits (``-?[0-9]{1,18}``, which
always fit int64) are converted by its ``ints``; every other literal goes to Arrow's
cast, which converts or refuses it. Both give the same values and reasons
(``tests/formats/test_compiled_helpers.py``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.formats import _jsonscan
from cdc_sink.formats._arrays import Parts, cast_rows, spans
from cdc_sink.formats._jsonscan import Members

__all__ = ["int_values", "number_tokens"]


def number_tokens(parts: Parts, m: Members, sel: np.ndarray) -> pa.Array:
    """The raw JSON text of number members as ``string`` (null where not UTF-8: such a
    token is no number, and the cast that follows refuses it)."""
    views = spans(parts, m.value_start[sel], m.value_end[sel])
    try:
        return views.cast(pa.string())
    except pa.ArrowInvalid:
        arr, _ = cast_rows(views.cast(pa.binary()), pa.string())
        return arr.fill_null("?")


def int_values(
    parts: Parts, m: Members, sel: np.ndarray, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integer number members as int64, with a mask of non-integers/out of range and
    the mask of those that are integers out of ``[lo, hi]`` (or of int64).

    With the compiled pass built, the plain literals of up to 18 digits are converted by
    it; Arrow's cast converts (or refuses) the rest.
    """
    compiled = _jsonscan._cscan
    if compiled is None or not len(sel):
        return _arrow_ints(parts, m, sel, lo, hi)
    v = np.empty(len(sel), dtype=np.int64)
    ok = np.empty(len(sel), dtype=np.uint8)
    done = compiled.ints(
        np.ascontiguousarray(parts.data),
        np.ascontiguousarray(m.value_start[sel], dtype=np.int64),
        np.ascontiguousarray(m.value_end[sel], dtype=np.int64),
        v,
        ok,
    )
    bad = np.zeros(len(sel), dtype=bool)
    r = np.zeros(len(sel), dtype=bool)
    if done < len(sel):
        rest = np.flatnonzero(ok == 0)
        v[rest], bad[rest], r[rest] = _arrow_ints(parts, m, sel[rest], lo, hi)
    plain = ok.view(bool)
    r[plain] = (v[plain] < lo) | (v[plain] > hi)
    bad |= r
    return v, bad, r


def _arrow_ints(
    parts: Parts, m: Members, sel: np.ndarray, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`int_values` by Arrow's cast of the literals."""
    tokens = number_tokens(parts, m, sel)
    arr, bad = cast_rows(tokens, pa.int64())
    v = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    r = ~bad & ((v < lo) | (v > hi))
    if bad.any():  # an integer literal beyond int64 is out of range, not invalid
        big = np.asarray(
            pc.match_substring_regex(tokens, r"^-?[0-9]{19,}$").fill_null(False), dtype=bool
        )
        r |= bad & big
    return v, bad | r, r
