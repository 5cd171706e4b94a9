"""Python values of column types: ISO date/timestamp parsing and one coercion per type.

Every place that turns a JSON-ish Python value (an event's ``set``, a column default, a
value to encode) into a value of a column type goes through here, so the accepted inputs
are the same everywhere:

- :func:`parse_timestamp` / :func:`parse_date`: ISO 8601 text (a ``Z`` suffix is UTC, a
  timestamp without offset is UTC);
- :func:`coerce` (and :func:`coercer`, the same resolved once per column): one function
  per column type behind one dispatch. Strings are parsed where the type has a text form
  (ISO dates and timestamps, base64 binary, decimal text) and the Python type is checked.

:func:`coerce` has two modes. The default (*lenient*) mode leaves the rest to pyarrow,
which checks ranges and precision when the value is put in an array (and also takes, for
instance, epoch integers for dates and timestamps). ``strict=True`` returns the value in
the canonical form of the column type and checks it here: integers in range, floats as
``float``, decimals quantized to the column's scale and within its precision,
timestamps timezone-aware UTC, dates ``date`` (not ``datetime``), binary ``bytes``.

Two checks hold in both modes, because pyarrow alone would not give the decoders'
answer: a float is ``float`` and a finite value beyond float32 is refused for a float32
column (pyarrow would store ``inf``; an integer beyond every float is refused too), and a
decimal that fits the column exactly is quantized to its scale, so that ``1.5000…0`` with
more digits than the type, or ``0E+400``, is stored like ``1.5`` and ``0`` (pyarrow refuses
those; it refuses every decimal that does not fit, whatever its length).
The public names are re-exported by :mod:`cdc_sink.schema`.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import math
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa

__all__ = [
    "CONVERSION_ERRORS",
    "TYPE_KINDS",
    "coerce",
    "coercer",
    "parse_date",
    "parse_timestamp",
    "type_kind",
]

CONVERSION_ERRORS: tuple[type[Exception], ...] = (
    TypeError,
    ValueError,
    OverflowError,
    pa.ArrowException,
    decimal.InvalidOperation,
    binascii.Error,
)
"""What converting a Python value to a column type raises for a value that does not fit
(this module's coercions, then ``pyarrow`` building the array or scalar)."""


def parse_timestamp(text: str) -> dt.datetime:
    """Parses an ISO 8601 timestamp into a timezone-aware datetime.

    A ``Z`` stands for ``+00:00``; a timestamp without offset is taken as UTC.

    Raises:
        ValueError: ``text`` is not an ISO 8601 timestamp.
    """
    d = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return d if d.tzinfo else d.replace(tzinfo=dt.timezone.utc)


def parse_date(text: str) -> dt.date:
    """Parses an ISO 8601 date (``YYYY-MM-DD``).

    Raises:
        ValueError: ``text`` is not an ISO 8601 date.
    """
    return dt.date.fromisoformat(text)


# ---------------------------------------------------------------------- one per type
#: The kinds of the supported column types, with the test of each, in dispatch order.
TYPE_KINDS: tuple[tuple[str, Callable[[pa.DataType], bool]], ...] = (
    ("integer", pa.types.is_integer),
    ("floating", pa.types.is_floating),
    ("boolean", pa.types.is_boolean),
    ("string", pa.types.is_string),
    ("binary", pa.types.is_binary),
    ("decimal", pa.types.is_decimal),
    ("timestamp", pa.types.is_timestamp),
    ("date", pa.types.is_date32),
)


def type_kind(t: pa.DataType) -> str | None:
    """The kind of column type ``t`` (a name of :data:`TYPE_KINDS`; None: unsupported)."""
    return next((kind for kind, is_kind in TYPE_KINDS if is_kind(t)), None)


class _Coerce:
    """One coercion per type kind (a method named after it). Each takes a non-null
    value, the column type and the mode, and raises TypeError (wrong Python type) or
    ValueError (does not parse, out of range; decimal text that does not parse raises
    decimal.InvalidOperation in lenient mode)."""

    @staticmethod
    def integer(v: Any, t: pa.DataType, strict: bool) -> Any:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{v!r} is not an integer")
        if strict:
            bits = t.bit_width
            if not -(2 ** (bits - 1)) <= v < 2 ** (bits - 1):
                raise ValueError(f"{v} is out of range of int{bits}")
        return v

    @staticmethod
    def floating(v: Any, t: pa.DataType, strict: bool) -> Any:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{v!r} is not a number")
        f = float(v)  # OverflowError: an integer beyond every float
        if t.bit_width == 32 and math.isfinite(f):
            try:
                struct.pack("<f", f)  # rounds to nearest, as a float32 cast does
            except OverflowError:
                raise ValueError(f"{v!r} is out of range of float32") from None
        return f

    @staticmethod
    def boolean(v: Any, t: pa.DataType, strict: bool) -> Any:
        if not isinstance(v, bool):
            raise TypeError(f"{v!r} is not a bool")
        return v

    @staticmethod
    def string(v: Any, t: pa.DataType, strict: bool) -> Any:
        if not isinstance(v, str):
            raise TypeError(f"{v!r} is not a string")
        return v

    @staticmethod
    def binary(v: Any, t: pa.DataType, strict: bool) -> Any:
        if isinstance(v, str):
            return base64.b64decode(v, validate=True)
        if strict and not isinstance(v, bytes):
            raise TypeError(f"{v!r} is not bytes")
        return v

    @staticmethod
    def decimal(v: Any, t: pa.DataType, strict: bool) -> Any:
        if isinstance(v, bool) or not isinstance(v, (str, int, float, decimal.Decimal)):
            if strict:
                raise TypeError(f"{v!r} is not a decimal")
            return v
        try:
            d = decimal.Decimal(str(v))
        except decimal.InvalidOperation as exc:
            if strict:
                raise ValueError(f"{v!r} is not a decimal") from exc
            raise
        q = _exact_decimal(d, t)
        if q is not None:
            return q
        if strict:
            raise ValueError(f"{v!r} does not fit {t}")
        return d  # pyarrow refuses it (with more digits than the type, it never wraps)

    @staticmethod
    def timestamp(v: Any, t: pa.DataType, strict: bool) -> Any:
        if isinstance(v, str):
            v = parse_timestamp(v)
        if not strict:
            return v
        if not isinstance(v, dt.datetime):
            raise TypeError(f"{v!r} is not a timestamp")
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return v.astimezone(dt.timezone.utc)

    @staticmethod
    def date(v: Any, t: pa.DataType, strict: bool) -> Any:
        if isinstance(v, str):
            return parse_date(v)
        if strict and (isinstance(v, dt.datetime) or not isinstance(v, dt.date)):
            raise TypeError(f"{v!r} is not a date")
        return v

    @staticmethod
    def unsupported(v: Any, t: pa.DataType, strict: bool) -> Any:
        if strict:
            raise TypeError(f"unsupported column type {t}")
        return v


def _exact_decimal(d: decimal.Decimal, t: pa.DataType) -> decimal.Decimal | None:
    """``d`` at the scale of decimal type ``t`` when that is exact and within its
    precision, else None (whatever the length or exponent of ``d``: ``1.5000…0`` and
    ``0E+400`` fit ``decimal128(9, 3)``, ``1E-500`` and ``2**256 + 5`` do not)."""
    # Quantize with room for every digit of the type (decimal's default context holds
    # 28, a decimal128 38): a value with more digits than that does not fit anyway.
    ctx = decimal.Context(prec=t.precision + 2)
    try:
        q = d.quantize(decimal.Decimal(1).scaleb(-t.scale), context=ctx)
    except decimal.InvalidOperation:
        return None
    if q != d or len(q.as_tuple().digits) > t.precision:
        return None
    return q


def coercer(t: pa.DataType, *, strict: bool = False) -> Callable[[Any], Any]:
    """The coercion of :func:`coerce` for column type ``t``, resolved once (for a column
    of many values). ``None`` maps to ``None``."""
    fn = getattr(_Coerce, type_kind(t) or "unsupported")

    def convert(value: Any) -> Any:
        return None if value is None else fn(value, t, strict)

    return convert


def coerce(value: Any, t: pa.DataType, *, strict: bool = False) -> Any:
    """``value`` (as a JSON event or a user carries it) as a value of column type ``t``.

    Args:
        value: A Python value; ``None`` stays ``None``.
        t: The column's Arrow type.
        strict: Return the canonical Python value of ``t``, range-checked here (see the
            module docstring); otherwise a value pyarrow accepts for ``t`` once its own
            checks pass.

    Raises:
        TypeError: The value is not of a Python type the column takes.
        ValueError: It does not parse, or (strict) is out of range or does not fit.
        decimal.InvalidOperation: (lenient) decimal text that does not parse.
    """
    return coercer(t, strict=strict)(value)
