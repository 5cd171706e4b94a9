"""Decimal text to ``decimal128(p, s)``, exactly or not at all, by counting digits (private).

Arrow parses decimal text into a fixed number of bits without checking that the digits
fit them: the text of ``2**256 + 5`` cast to ``decimal256`` is ``5``, and the same holds
for ``decimal128`` beyond 2**128. So no decimal text reaches an Arrow cast here. The
text's shape is read with numpy over the whole byte buffer at once (a few prefix counts
per class of byte: digits, non-zero digits, signs, points, exponent marks), which gives
for every value its significant digits ``D`` (leading and trailing zeros dropped, on
either side of the point) and the exponent ``E`` of its last one, so that the value is
``±D × 10**E``. It fits ``decimal128(p, s)`` exactly when it is zero, or when
``E >= -s`` (no digit beyond the scale) and ``len(D) + E <= p - s`` (no more digits
before the point than the type has). Only then are its unscaled digits
(``D`` followed by ``E + s`` zeros, at most ``p``) written out as fixed-width text of 38
digits, which Arrow converts without any risk of wrapping. Lengths, exponents and zeros
are all counted, never parsed as numbers, so a value of any length or exponent
(``1e400``, ``1E-500``, a thousand leading zeros) is judged by what it is.

The accepted text is what Arrow's decimal cast accepts: ``[+-]?(D+(.D*)?|.D+)([eE][+-]?D+)?``
(no blanks), which covers every JSON number.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cdc_sink.formats._arrays import binary_parts, fixed_array

__all__ = ["decimal_text"]

_OTHER, _DIGIT, _SIGN, _POINT, _EXP = 0, 1, 2, 3, 4
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[np.frombuffer(b"0123456789", np.uint8)] = _DIGIT
_CLASS[np.frombuffer(b"+-", np.uint8)] = _SIGN
_CLASS[ord(".")] = _POINT
_CLASS[np.frombuffer(b"eE", np.uint8)] = _EXP

_WIDTH = 38
"""Digits of the unscaled text handed to Arrow (decimal128's most)."""
_EXP_DIGITS = 12
"""Exponents with more significant digits than this are saturated (any such exponent
puts a non-zero value out of every decimal128 type)."""
_CHUNK_BYTES = 1 << 22
"""Bytes of text read at once (bounds the per-byte temporaries)."""


class _Marks:
    """Where the bytes of one class are, as a prefix count (``count``) and their
    positions (``first``/``last`` occurrence in a byte range), relative to a chunk."""

    def __init__(self, flag: np.ndarray) -> None:
        self.cs = np.zeros(len(flag) + 1, dtype=np.int64)
        np.cumsum(flag, out=self.cs[1:])
        self.at = np.flatnonzero(flag)

    def count(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """How many bytes of the class lie in ``[a, b)``."""
        out: np.ndarray = self.cs[b] - self.cs[a]
        return out

    def first(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The first position of the class in ``[a, b)``, else ``b``."""
        if not len(self.at):
            return b.copy()
        i = self.cs[a]
        return np.where(self.cs[b] > i, self.at[np.minimum(i, len(self.at) - 1)], b)

    def last(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The last position of the class in ``[a, b)``, else ``a - 1``."""
        if not len(self.at):
            return a - 1
        i = self.cs[b] - 1
        return np.where(i >= self.cs[a], self.at[np.maximum(i, 0)], a - 1)


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
    lo = 0
    total = np.cumsum(p.lengths)
    while lo < n:  # chunks of about _CHUNK_BYTES of text (a long value alone)
        base = total[lo - 1] if lo else 0
        hi = max(int(np.searchsorted(total, base + _CHUNK_BYTES, side="right")), lo + 1)
        sel = slice(lo, hi)
        raw[sel], bad[sel], oor[sel] = _chunk(p.data, p.starts[sel], p.ends[sel], t)
        lo = hi
    bad &= p.valid
    oor &= p.valid
    return fixed_array(raw, p.valid & ~bad, t), bad, oor


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
        digits = _unscaled_digits(
            text, ms[fit], kf[fit], nd[fit], e[fit] + s, nint[fit], has_dot[fit]
        )
        raw[fit] = _to_decimal128(digits, neg)
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
        j = np.arange(_EXP_DIGITS)
        pos = end[small, None] - _EXP_DIGITS + j
        take = j >= _EXP_DIGITS - sig[small, None]
        d = np.where(take, text[np.where(take, pos, 0)].astype(np.int64) - ord("0"), 0)
        x[small] = d @ (10 ** np.arange(_EXP_DIGITS - 1, -1, -1, dtype=np.int64))
    return x


def _unscaled_digits(
    text: np.ndarray,
    ms: np.ndarray,
    kf: np.ndarray,
    nd: np.ndarray,
    zeros: np.ndarray,
    nint: np.ndarray,
    has_dot: np.ndarray,
) -> np.ndarray:
    """The unscaled values as ``(k, 38)`` ASCII digits, right-aligned: the ``nd``
    significant mantissa digits from digit index ``kf``, then ``zeros`` zeros."""
    j = np.arange(_WIDTH)
    q = j - (_WIDTH - (nd + zeros))[:, None]  # index among the significant digits
    take = (q >= 0) & (q < nd[:, None])
    digit = kf[:, None] + q
    pos = ms[:, None] + digit + (has_dot[:, None] & (digit >= nint[:, None]))
    out: np.ndarray = np.where(take, text[np.where(take, pos, 0)], ord("0")).astype(np.uint8)
    return out


def _to_decimal128(digits: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """``(k, 38)`` ASCII digits with their signs as ``(k, 16)`` little-endian unscaled
    decimal128 bytes (Arrow's exact conversion of at most 38 digits)."""
    k = len(digits)
    textual = np.empty((k, _WIDTH + 1), dtype=np.uint8)
    textual[:, 0] = np.where(neg, ord("-"), ord("+"))
    textual[:, 1:] = digits
    offsets = np.arange(k + 1, dtype=np.int32) * (_WIDTH + 1)
    arr = pa.Array.from_buffers(
        pa.string(), k, [None, pa.py_buffer(offsets), pa.py_buffer(textual)]
    ).cast(pa.decimal128(_WIDTH, 0))
    buf = arr.buffers()[1]
    assert buf is not None
    out: np.ndarray = np.frombuffer(buf, dtype=np.uint8)[: k * 16].reshape(k, 16)
    return out
