"""Decimal text to ``decimal128(p, s)``, exactly or not at all, by counting digits (private).

Arrow parses decimal text into a fixed number of bits without checking that the digits
fit them: the text of ``2**256 + 5`` cast to ``decimal256`` is ``5``, the same holds for
``decimal128`` beyond 2**128, and a direct cast to ``decimal128(p, s)`` also loses what an
exponent or the rescale to ``s`` pushes past 128 bits. Only *plain* values reach Arrow as
written: at most 38 bytes and no exponent mark, so at most 38 digits, which its
``decimal256(76, s)`` parse holds even once scaled by 10**38, and whose every later cast
checks what it loses (:func:`_plain`; the most common form, one vectorized cast).

Every other value, and every plain one a cast refused, is judged by :func:`counted`. Its
shape is read with numpy over the byte buffer (the sorted positions of non-zero digits,
signs, points, exponent marks and other bytes, queried per value by binary search), which
gives its significant digits ``D`` (leading and trailing zeros dropped, on either side of
the point) and the exponent ``E`` of the last one, so that the value is ``±D × 10**E``.
It fits ``decimal128(p, s)`` exactly when it is zero, or when ``E >= -s`` (no digit
beyond the scale) and ``len(D) + E <= p - s`` (no more digits before the point than the
type has). Only then are its unscaled digits (``D`` followed by ``E + s`` zeros, at most
``p``) written out as integer text, which Arrow converts without any risk of wrapping.
Lengths, exponents and zeros are counted, never parsed as numbers, so a value of any
length or exponent (``1e400``, ``1E-500``, a thousand leading zeros) is judged by what it
is. A refused value is *out of range* when it has more digits before the point than
``p - s``, else *invalid* (not decimal text, or digits beyond the scale).

The accepted text is what Arrow's decimal cast accepts: ``[+-]?(D+(.D*)?|.D+)([eE][+-]?D+)?``
(no blanks), which covers every JSON number.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cdc_sink.formats._arrays import (
    Parts,
    binary_parts,
    cast_rows,
    decimal_overflow,
    fixed_array,
    gather,
)

__all__ = ["counted", "decimal_text"]

_OTHER, _DIGIT, _SIGN, _POINT, _EXP = 0, 1, 2, 3, 4
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[np.frombuffer(b"0123456789", np.uint8)] = _DIGIT
_CLASS[np.frombuffer(b"+-", np.uint8)] = _SIGN
_CLASS[ord(".")] = _POINT
_CLASS[np.frombuffer(b"eE", np.uint8)] = _EXP

_WIDTH = 38
"""decimal128's most digits: the longest plain value, and the most digits of the
unscaled integer text handed to Arrow."""
_EXP_DIGITS = 12
"""Exponents with more significant digits than this are saturated (any such exponent
puts a non-zero value out of every decimal128 type)."""
_CHUNK_BYTES = 1 << 22
"""Bytes of text read at once (bounds the per-byte temporaries)."""


class _Marks:
    """Where the bytes of one class are in a chunk (their sorted positions ``at``), and
    how many lie before a position: by binary search for a sparse class, by a prefix
    count for a dense one (digits). Queried per value range ``[a, b)``."""

    def __init__(self, flag: np.ndarray) -> None:
        self.at = np.flatnonzero(flag)
        self.cs: np.ndarray | None = None
        if len(self.at) * 8 > len(flag):
            self.cs = np.zeros(len(flag) + 1, dtype=np.int32)
            np.cumsum(flag, out=self.cs[1:])
        self._seen: list[tuple[np.ndarray, np.ndarray]] = []

    def before(self, x: np.ndarray) -> np.ndarray:
        """How many bytes of the class lie before each position ``x`` (remembered per
        array: the same bounds are queried more than once)."""
        for y, n in self._seen:
            if y is x:
                return n
        n = self.cs[x] if self.cs is not None else np.searchsorted(self.at, x)
        self._seen.append((x, n))
        return n

    def count(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """How many bytes of the class lie in ``[a, b)``."""
        out: np.ndarray = self.before(b) - self.before(a)
        return out

    def first(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The first position of the class in ``[a, b)``, else ``b``."""
        if not len(self.at):
            return b.copy()
        i, j = self.before(a), self.before(b)
        return np.where(j > i, self.at[np.minimum(i, len(self.at) - 1)], b)

    def last(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The last position of the class in ``[a, b)``, else ``a - 1``."""
        if not len(self.at):
            return a - 1
        i, j = self.before(a), self.before(b)
        return np.where(j > i, self.at[np.maximum(j - 1, 0)], a - 1)


def decimal_text(strs: pa.Array, t: pa.DataType) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Decimal text (strings or JSON number tokens) to ``t``, exactly or not at all.

    Args:
        strs: ``string`` (or ``binary``) values; nulls stay null and are not flagged.
        t: A ``decimal128(p, s)`` type.

    Returns:
        The decimals (null where bad), the mask of bad values (not decimal text, digits
        beyond the scale, or out of range) and the mask of those out of range (more
        digits before the point than ``p - s``).
    """
    p = binary_parts(strs)
    n = p.n
    raw = np.zeros((n, 16), dtype=np.uint8)
    bad = np.zeros(n, dtype=bool)
    oor = np.zeros(n, dtype=bool)
    done = _plain(strs, p, t, raw)
    rest = np.flatnonzero(p.valid & ~done)
    if len(rest):
        sub = strs if len(rest) == n else strs.take(pa.array(rest))
        raw[rest], bad[rest], oor[rest] = counted(sub, t)
    return fixed_array(raw, p.valid & ~bad, t), bad, oor


def _plain(strs: pa.Array, p: Parts, t: pa.DataType, raw: np.ndarray) -> np.ndarray:
    """Converts the *plain* values, at most 38 bytes without an exponent mark, by Arrow's
    casts (a ``decimal256(76, s)`` parse, then ``t``): at most 38 digits, scaled by at
    most 10**38, cannot wrap 76 digits, and every cast checks what it loses. Writes
    their unscaled bytes into ``raw``.

    Returns:
        The mask of the values converted; the others (not plain, or refused by a cast)
        are left to :func:`counted`, which also says why a value is refused.
    """
    plain = p.valid & (p.lengths <= _WIDTH)
    marks = np.flatnonzero((p.data == ord("e")) | (p.data == ord("E")))
    if len(marks):  # the value holding each mark
        owner = np.searchsorted(p.ends, marks, side="right")
        plain[owner[owner < p.n]] = False
    at = np.flatnonzero(plain)
    if not len(at):
        return plain
    sub = strs if len(at) == p.n else strs.take(pa.array(at))
    wide, refused = cast_rows(sub, pa.decimal256(76, t.scale))
    arr, over = cast_rows(wide, t)
    ok = ~(refused | over | decimal_overflow(arr))
    data = arr.buffers()[1]
    if data is not None and ok.any():
        whole = np.frombuffer(data, dtype=np.uint8)[arr.offset * 16 : (arr.offset + len(arr)) * 16]
        raw[at[ok]] = whole.reshape(len(arr), 16)[ok]
    plain[at[~ok]] = False
    return plain


def counted(strs: pa.Array, t: pa.DataType) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`decimal_text` by counting digits only (no Arrow parse of the text as
    written), for every value of ``strs``.

    Returns:
        The unscaled values (``(n, 16)`` little-endian bytes), the bad and the out of
        range masks (nulls are neither).
    """
    p = binary_parts(strs)
    n = p.n
    raw = np.zeros((n, 16), dtype=np.uint8)
    bad = np.zeros(n, dtype=bool)
    oor = np.zeros(n, dtype=bool)
    lo = 0
    total = np.cumsum(p.lengths)
    while lo < n:  # chunks of about _CHUNK_BYTES of text (a long value alone)
        base = total[lo - 1] if lo else 0
        hi = max(int(np.searchsorted(total, base + _CHUNK_BYTES, side="right")), lo + 1)
        sel = slice(lo, hi)
        raw[sel], bad[sel], oor[sel] = _chunk(p.data, p.starts[sel], p.ends[sel], t)
        lo = hi
    return raw, bad & p.valid, oor & p.valid


def _chunk(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray, t: pa.DataType
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`decimal_text` of the values ``[starts, ends)`` of ``data`` (ascending).

    Returns:
        The unscaled values (``(k, 16)`` little-endian bytes), the bad and the out of
        range masks.
    """
    k = len(starts)
    if not k:
        return np.zeros((0, 16), np.uint8), np.zeros(0, bool), np.zeros(0, bool)
    off = int(starts[0])
    text = data[off : max(int(ends[-1]), off)]
    a = np.asarray(starts, dtype=np.int64) - off
    b = np.maximum(np.asarray(ends, dtype=np.int64) - off, a)
    if not len(text):  # every value empty: none is decimal text
        return np.zeros((k, 16), np.uint8), np.ones(k, bool), np.zeros(k, bool)
    cls = _CLASS[text]
    sign = _Marks(cls == _SIGN)
    point = _Marks(cls == _POINT)
    exp = _Marks(cls == _EXP)
    nonzero = _Marks((cls == _DIGIT) & (text != ord("0")))
    lead = (b > a) & (cls[np.minimum(a, len(text) - 1)] == _SIGN)
    ms = a + lead  # the mantissa: [ms, ep)
    ep = exp.first(a, b)
    has_exp = ep < b
    dot = point.first(a, b)
    has_dot = dot < b
    es = np.minimum(ep + 1, b)  # the exponent: [es, b), after its sign
    exp_sign = has_exp & (es < b) & (cls[np.minimum(es, len(text) - 1)] == _SIGN)
    es = es + exp_sign
    ok = (_Marks(cls == _OTHER).count(a, b) == 0) & (exp.count(a, b) <= 1)
    ok &= point.count(a, b) <= 1
    ok &= sign.count(a, b) == lead.astype(np.int64) + exp_sign
    ok &= ~has_dot | (dot < ep)
    ok &= ep - ms - has_dot >= 1  # a digit in the mantissa
    ok &= ~has_exp | (b > es)  # and in the exponent
    x = _exponent(text, nonzero, es, b, has_exp & ok)
    x = np.where(exp_sign & (text[np.maximum(es - 1, 0)] == ord("-")), -x, x)
    first = nonzero.first(ms, ep)
    last = nonzero.last(ms, ep)
    zero = first >= ep
    nint = np.where(has_dot, dot - ms, ep - ms)
    nfrac = np.where(has_dot, ep - dot - 1, 0)
    kf = first - ms - (has_dot & (first > dot))  # mantissa digit indices
    kl = last - ms - (has_dot & (last > dot))
    nd = kl - kf + 1
    e = x - nfrac + (nint + nfrac - 1 - kl)  # the exponent of the last significant digit
    p, s = t.precision, t.scale
    oor = ok & ~zero & (nd + e > p - s)
    bad = ~ok | oor | (~zero & (e < -s))
    fit = np.flatnonzero(~bad & ~zero)
    raw = np.zeros((k, 16), dtype=np.uint8)
    if len(fit):
        neg = text[a[fit]] == ord("-")
        raw[fit] = _unscaled(text, first[fit], last[fit], nd[fit], e[fit] + s, neg)
    return raw, bad, oor


def _exponent(
    text: np.ndarray, nonzero: _Marks, es: np.ndarray, end: np.ndarray, use: np.ndarray
) -> np.ndarray:
    """The magnitude of the exponent digits ``[es, end)`` (0 where not ``use``), saturated
    beyond :data:`_EXP_DIGITS` significant digits."""
    x = np.zeros(len(es), dtype=np.int64)
    f = np.where(use, nonzero.first(es, end), end)
    sig = end - f
    big = sig > _EXP_DIGITS
    x[big] = 10**_EXP_DIGITS
    small = np.flatnonzero(use & ~big & (sig > 0))
    if len(small):
        sig_s, start = sig[small], f[small]
        acc = np.zeros(len(small), dtype=np.int64)
        for j in range(int(sig_s.max())):  # digit j of each (at most _EXP_DIGITS rounds)
            has = j < sig_s
            d = text[np.where(has, start + j, 0)].astype(np.int64) - ord("0")
            acc = np.where(has, acc * 10 + d, acc)
        x[small] = acc
    return x


def _unscaled(
    text: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    nd: np.ndarray,
    zeros: np.ndarray,
    neg: np.ndarray,
) -> np.ndarray:
    """The unscaled values whose significant digits are the ``nd`` digits of
    ``text[first..last]`` (a point among them skipped), followed by ``zeros`` zeros (at
    most 38 digits in all), as ``(k, 16)`` little-endian decimal128 bytes.

    They are written as signed integer text (a sign, then the digits) and converted by
    Arrow, which is exact for integer text of at most 38 digits."""
    k = len(first)
    span = gather(text, first, last - first + 1)
    digits = span[span != ord(".")]  # nd[i] digits each, in order
    lengths = 1 + nd + zeros
    offsets = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    buf = np.full(int(offsets[-1]), ord("0"), dtype=np.uint8)
    buf[offsets[:-1]] = np.where(neg, ord("-"), ord("+"))
    before = np.cumsum(nd) - nd
    buf[np.repeat(offsets[:-1] + 1 - before, nd) + np.arange(len(digits))] = digits
    arr = pa.Array.from_buffers(
        pa.string(), k, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(buf)]
    ).cast(pa.decimal128(_WIDTH, 0))
    data = arr.buffers()[1]
    assert data is not None
    out: np.ndarray = np.frombuffer(data, dtype=np.uint8)[: k * 16].reshape(k, 16)
    return out
