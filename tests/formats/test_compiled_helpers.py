"""The compiled helpers of the per-column work (``match`` and ``ints`` of
``cdc_sink/formats/_cscan.c``) against the general paths they shortcut.

``match_strings`` must give the same codes with the compiled ``match`` as with the numpy
hash; ``int_values`` must give the same values, bad and out-of-range masks with the
compiled ``ints`` (plain literals of up to 18 digits) as with Arrow's cast of every
literal, on what producers write and what they should not: signs, leading zeros, ``-0``,
19 and more digits, fractions, exponents, blanks, non-ASCII bytes and empty spans.
Whole decodes with and without the compiled pass are compared in
``test_compiled_scan.py``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_sink.formats import _jsonscan
from cdc_sink.formats._arrays import binary_parts, int_bounds
from cdc_sink.formats._jsonnumbers import int_values
from cdc_sink.formats._jsonstrings import match_strings
from tests.formats.fuzz_decoders import ci_settings

SETTINGS = ci_settings(60)


def _concat(pieces: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces back to back, with each one's span."""
    lengths = np.array([len(p) for p in pieces], dtype=np.int64)
    ends = np.cumsum(lengths)
    data = np.frombuffer(b"".join(pieces) or b"\0", dtype=np.uint8)
    return data, ends - lengths, ends


def _both(fn: Any, *args: Any) -> tuple[Any, Any]:
    """``fn(*args)`` with the compiled helpers, then without them."""
    assert _jsonscan._cscan is not None
    fast = fn(*args)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_jsonscan, "_cscan", None)
        slow = fn(*args)
    return fast, slow


NAMES = st.lists(st.text(max_size=24), min_size=1, max_size=12, unique=True)  # as column names


@SETTINGS
@given(names=NAMES, others=st.lists(st.binary(max_size=24), max_size=12), seed=st.integers(0))
def test_match_gives_the_numpy_codes(names: list[str], others: list[bytes], seed: int) -> None:
    """Names, near misses (a byte changed, cut, extended) and random bytes."""
    rnd = np.random.default_rng(seed)
    pieces = [n.encode() for n in names] + others
    for n in names:
        e = bytearray(n.encode() + b"x")
        e[int(rnd.integers(len(e)))] ^= 1
        pieces += [bytes(e), bytes(e[:-1]), n.encode()[:-1]]
    pieces = [pieces[i] for i in rnd.permutation(len(pieces))]
    data, starts, ends = _concat(pieces)
    escaped = np.zeros(len(pieces), dtype=bool)
    fast, slow = _both(match_strings, data, starts, ends, escaped, names)
    np.testing.assert_array_equal(fast, slow)
    code = {n.encode(): i for i, n in enumerate(names)}
    assert fast.tolist() == [code.get(p, -1) for p in pieces]


def test_match_reads_escaped_names_the_same() -> None:
    r"""``"\u006fp"`` is the name ``op``: decoded by the general path in both."""
    pieces = [b"\\u006fp", b"op", b"o\\np"]
    data, starts, ends = _concat(pieces)
    escaped = np.array([True, False, True])
    fast, slow = _both(match_strings, data, starts, ends, escaped, ["op", "o\np"])
    assert fast.tolist() == slow.tolist() == [0, 0, 1]


INTEGER_TEXT = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.from_regex(r"\A-?[0-9]{1,22}\Z"),  # leading zeros, -0, 18/19/20 digits
    st.from_regex(r"\A[ +\-0-9.eE]{0,8}\Z"),  # fractions, exponents, blanks, signs
    st.sampled_from(["", "-", "1.0", "1e3", "-0", "NaN", "Infinity", "9" * 18, "9" * 19]),
    st.text(max_size=6),
)


def _int_values(texts: list[str], lo: int, hi: int) -> tuple[np.ndarray, ...]:
    parts = binary_parts(pa.array([t.encode() for t in texts], pa.binary()))
    m = SimpleNamespace(value_start=parts.starts, value_end=parts.ends)
    return int_values(parts, m, np.arange(len(texts)), lo, hi)  # type: ignore[arg-type]


@SETTINGS
@given(
    texts=st.lists(INTEGER_TEXT, min_size=1, max_size=30),
    bounds=st.sampled_from([pa.int8(), pa.int16(), pa.int32(), pa.int64()]),
)
def test_ints_give_arrows_values_and_reasons(texts: list[str], bounds: pa.DataType) -> None:
    lo, hi = int_bounds(bounds)
    fast, slow = _both(_int_values, texts, lo, hi)
    v_fast, bad_fast, oor_fast = fast
    v_slow, bad_slow, oor_slow = slow
    np.testing.assert_array_equal(bad_fast, bad_slow)
    np.testing.assert_array_equal(oor_fast, oor_slow)
    np.testing.assert_array_equal(v_fast[~bad_fast], v_slow[~bad_slow])


def test_ints_shortcut_only_plain_literals() -> None:
    """The literals the shortcut takes, and the bounds of the types."""
    assert _jsonscan._cscan is not None
    texts = ["0", "-0", "007", "-128", "127", "128", "9" * 18, "-" + "9" * 18, "9" * 19, "1.0"]
    data, starts, ends = _concat([t.encode() for t in texts])
    v = np.empty(len(texts), dtype=np.int64)
    ok = np.empty(len(texts), dtype=np.uint8)
    assert _jsonscan._cscan.ints(data, starts, ends, v, ok) == 8
    assert ok.tolist() == [1] * 8 + [0, 0]
    assert v[:8].tolist() == [0, 0, 7, -128, 127, 128, int("9" * 18), -int("9" * 18)]
    got, bad, oor = _int_values(texts, -128, 127)
    assert bad.tolist() == [False] * 5 + [True, True, True, True, True]
    assert oor.tolist() == [False] * 5 + [True] * 4 + [False]
    assert got[:5].tolist() == [0, 0, 7, -128, 127]


def test_helpers_refuse_spans_outside_the_data() -> None:
    assert _jsonscan._cscan is not None
    data = np.frombuffer(b"12", dtype=np.uint8)
    bad = (np.array([0], np.int64), np.array([3], np.int64))
    with pytest.raises(ValueError, match="bounds"):
        _jsonscan._cscan.match(data, *bad, (b"12",), np.empty(1, np.int64))
    with pytest.raises(ValueError, match="bounds"):
        _jsonscan._cscan.ints(data, *bad, np.empty(1, np.int64), np.empty(1, np.uint8))
    with pytest.raises(TypeError, match="bytes"):
        _jsonscan._cscan.match(data, bad[0], bad[0], ("12",), np.empty(1, np.int64))
