"""Decimal text to ``decimal128(p, s)``, exactly or not at all, by counting digits (private).

Arrow parses decimal text into a fixed number of bits without checking that the digits
fit them: the text of ``2**256 + 5`` cast to ``decimal256`` is ``5``, the same holds for
``decimal128`` beyond 2**128, and a direct cast to ``decimal128(p, s)`` also loses what an
exponent or the rescale to ``s`` pushes past 128 bits. So a value reaches Arrow as
written only when its unscaled value cannot wrap a ``decimal256(76, s)`` parse, whose
every later cast checks what it loses (:func:`_by_casts`; one vectorized cast): at most
38 bytes, so at most 38 digits, and either *plain* (no exponent mark: scaled by 10**s,
at most 10**38) or with an exponent ``x`` of at most four digits that leaves
``m + |x + s| <= 76`` for its ``m`` mantissa bytes: the parse's rescale to ``s`` then
multiplies within 76 digits or divides by at most 10**76 (further, Arrow's check of what
a division loses does not hold: ``5.397555239464236e-180`` became ``0.000``). The
exponent marks are found by Arrow's substring search and the exponents read from each
value's last four bytes, so the values Debezium's ``double`` mode and JSON writers of
doubles write (``1.2345E7``) take the casts too.

Every other value, and every one a cast refused, is judged by :func:`counted`. Its
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
import pyarrow.compute as pc

from cdc_sink.formats._arrays import (
    Parts,
    binary_parts,
    cast_rows,
    decimal_overflow,
    fixed_array,
    gather,
    unaligned,
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
_CHUNK_BYTES = 1 << 20
"""Bytes of text read at once (bounds the per-byte temporaries: a long value alone)."""
_EXP_DIGITS_CAST = 4
"""The most exponent digits of a value converted by Arrow's casts."""


class _Marks:
    """Where the bytes of one class are in a chunk, and how many lie before a position:
    for a sparse class its sorted positions (searched by binary search), for a dense one
    (digits) a prefix count alone, whose steps are its positions. Queried per value
    range ``[a, b)``."""

    def __init__(self, flag: np.ndarray) -> None:
        self.total = int(np.count_nonzero(flag))
        self.at: np.ndarray | None = None
        self.cs: np.ndarray | None = None
        if self.total * 8 > len(flag):
            self.cs = np.zeros(len(flag) + 1, dtype=np.int32)
            np.cumsum(flag, out=self.cs[1:])
        else:
            self.at = np.flatnonzero(flag)
        self._seen: list[tuple[np.ndarray, np.ndarray]] = []

    def before(self, x: np.ndarray) -> np.ndarray:
        """How many bytes of the class lie before each position ``x`` (remembered per
        array: the same bounds are queried more than once)."""
        for y, n in self._seen:
            if y is x:
                return n
        if self.cs is not None:
            n = self.cs[x]
        else:
            assert self.at is not None
            n = np.searchsorted(self.at, x)
        self._seen.append((x, n))
        return n

    def _position(self, k: np.ndarray) -> np.ndarray:
        """The position of the ``k``-th byte of the class (from 0)."""
        if self.at is not None:
            out: np.ndarray = self.at[k]
            return out
        assert self.cs is not None
        return np.searchsorted(self.cs, k + 1, side="left") - 1

    def count(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """How many bytes of the class lie in ``[a, b)``."""
        out: np.ndarray = self.before(b) - self.before(a)
        return out

    def first(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The first position of the class in ``[a, b)``, else ``b``."""
        if not self.total:
            return b.copy()
        i, j = self.before(a), self.before(b)
        return np.where(j > i, self._position(np.minimum(i, self.total - 1)), b)

    def last(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The last position of the class in ``[a, b)``, else ``a - 1``."""
        if not self.total:
            return a - 1
        i, j = self.before(a), self.before(b)
        return np.where(j > i, self._position(np.maximum(j - 1, 0)), a - 1)


def _marks(strs: pa.Array, p: Parts) -> np.ndarray:
    """Per value, the position of its first exponent mark (``e`` or ``E``), -1 where none:
    by Arrow's substring search over the values (no array of the data's length)."""
    values = strs
    if not (pa.types.is_binary(strs.type) or pa.types.is_string(strs.type)):
        if p.buffer is None or not p.n:
            return np.full(p.n, -1, dtype=np.int64)
        offsets = np.append(p.starts[:1], p.ends)
        values = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), p.n, [None, pa.py_buffer(offsets), p.buffer]
        )
    lower, upper = (
        pc.find_substring(values, m).fill_null(-1).to_numpy(zero_copy_only=False)
        for m in ("e", "E")
    )
    first = np.where(
        (lower >= 0) & (upper >= 0), np.minimum(lower, upper), np.maximum(lower, upper)
    )
    out: np.ndarray = np.where(first >= 0, p.starts + first, -1)
    return out


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
    bad = np.zeros(n, dtype=bool)
    oor = np.zeros(n, dtype=bool)
    at, arr, ok = _by_casts(strs, p, t)
    if len(at) == n and ok.all():  # every value (nulls too) converted by the casts
        return arr, bad, oor
    raw = np.zeros((n, 16), dtype=np.uint8)
    data = arr.buffers()[1] if len(arr) else None
    if data is not None and ok.any():
        whole = np.frombuffer(data, dtype=np.uint8)[arr.offset * 16 : (arr.offset + len(arr)) * 16]
        raw[at[ok]] = whole.reshape(len(arr), 16)[ok]
    done = np.zeros(n, dtype=bool)
    done[at[ok]] = True
    rest = np.flatnonzero(p.valid & ~done)
    if len(rest):
        sub = strs if len(rest) == n else strs.take(pa.array(rest))
        raw[rest], bad[rest], oor[rest] = counted(sub, t)
    return fixed_array(raw, p.valid & ~bad, t), bad, oor


def _by_casts(strs: pa.Array, p: Parts, t: pa.DataType) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """Converts by Arrow's casts (a ``decimal256(76, s)`` parse, then ``t``) the values
    whose unscaled value cannot wrap 76 digits: those of at most 38 bytes (so at most 38
    digits) that are *plain* (no exponent mark: scaled by at most 10**38), or whose
    exponent ``x`` (at most :data:`_EXP_DIGITS_CAST` digits, read here) shifts their
    ``m`` mantissa bytes within 76 digits either way (``m + |x + s| <= 76``). Every
    cast checks what it loses (a digit beyond the scale, a digit beyond the precision).
    Nulls are cast too (they stay null).

    Returns:
        The values cast (their indices), the cast array (of those values) and which of
        them converted; the others (not such values, or refused by a cast) are left to
        :func:`counted`, which also says why a value is refused.
    """
    short = p.lengths <= _WIDTH
    mark = _marks(strs, p)
    use = ~p.valid | (short & (mark < 0))
    expo = np.flatnonzero(p.valid & short & (mark >= 0))
    if len(expo):
        use[expo[_shift_fits(p, expo, mark[expo], t.scale)]] = True
    at = np.flatnonzero(use)
    if not len(at):
        return at, pa.nulls(0, t), np.zeros(0, dtype=bool)
    sub = strs if len(at) == p.n else strs.take(pa.array(at))
    wide, refused = cast_rows(sub, pa.decimal256(76, t.scale))
    arr, over = cast_rows(wide, t)
    ok = ~(refused | over | decimal_overflow(arr))
    return at, arr, ok


def _shift_fits(p: Parts, rows: np.ndarray, mark: np.ndarray, scale: int) -> np.ndarray:
    """Whether the values ``rows``, each with its exponent mark at ``mark``, have an
    exponent ``x`` of at most :data:`_EXP_DIGITS_CAST` digits (after an optional sign)
    with ``m + |x + s| <= 76`` for ``m`` mantissa bytes: their unscaled value, ``m``
    digits at most shifted up by at most ``x + s``, cannot wrap 76 digits, nor be shifted
    down by more than 76 (see :func:`_by_casts`).
    A value that is not decimal text may pass: Arrow's parse refuses it."""
    data = p.data
    if len(data) < 4:
        return np.zeros(len(rows), dtype=bool)
    start, end = p.starts[rows], p.ends[rows]
    after = data[np.minimum(mark + 1, end - 1)]
    sign = (mark + 1 < end) & ((after == ord("+")) | (after == ord("-")))
    n = end - (mark + 1 + sign)  # exponent digits
    # the last 4 bytes of each value in one unaligned read (byte 3 is the last digit)
    tail = unaligned(data, "<u4")[np.maximum(end - 4, 0)].view(np.uint8).reshape(-1, 4)
    ok = (n >= 1) & (n <= _EXP_DIGITS_CAST) & (end >= 4)
    x = np.zeros(len(rows), dtype=np.int64)
    for j in range(_EXP_DIGITS_CAST):  # digit j from the end
        has = n > j
        d = tail[:, 3 - j] - np.uint8(ord("0"))  # wraps below "0": > 9 as well
        ok &= ~has | (d <= 9)
        x += np.where(has, d, 0).astype(np.int64) * 10**j
    x = np.where(sign & (after == ord("-")), -x, x)
    fits: np.ndarray = ok & ((mark - start) + np.abs(x + scale) <= 76)
    return fits


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
