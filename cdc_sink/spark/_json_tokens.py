"""Where a member's JSON token is in a native JSON message, by regular expression (private).

Spark's ``from_json`` gives Jackson's text of a value, which for a number with a point
or an exponent is the text of a double (``1E-500`` becomes ``0.0``); the JVM decoder
reads such a member's own token from the message instead (:mod:`cdc_sink.spark.decode`).
The expressions here find it: they walk the event's top-level members to its one ``key``
or ``set`` object (:func:`object_text`), then that object's members to the column's one
member (:func:`member_token`), skipping every other value whole. They are possessive
throughout, so their cost is linear in the message (no backtracking, no recursion per
repeated token: a long string of escapes or a million members is one pass), and they
read strings as tokens, so a name inside a string is never taken for a member. Values
nested deeper than :data:`~cdc_sink.formats.native_json.MAX_DEPTH` levels, which the
Python decoders refuse, are not skipped: the member is then not found.

The messages they read have passed ``from_json`` (run with single quotes refused), so
the expressions only have to skip JSON, not to check it. A member whose name is written
with escapes (``"d\\u0065c"``), or repeated, is not found.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from cdc_sink.formats.native_json import MAX_DEPTH

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn

__all__ = ["member_anywhere", "member_token", "object_text"]

_WS = r"[ \t\r\n]*+"
_STRING = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_SCALAR = r'[^\s,:\[\]{}"]++'
_TOKEN = f"(?:{_STRING}|{_SCALAR})"


def _json_value(depth: int) -> str:
    """A regular expression of one JSON value nested at most ``depth`` levels (objects
    and arrays alike: ``from_json`` has checked the grammar, this only skips values)."""
    value = _TOKEN
    for _ in range(depth):
        value = (
            f"(?:{_STRING}|{_SCALAR}|[\\[{{]{_WS}"
            f"(?:(?:{_STRING}{_WS}:{_WS})?{value}{_WS},?{_WS})*+[\\]}}])"
        )
    return value


_MEMBER = f"{_STRING}{_WS}:{_WS}{_json_value(MAX_DEPTH)}"
_OBJECT = f"\\{{{_WS}(?:{_MEMBER}{_WS},?{_WS})*+\\}}"


def _quoted(name: str) -> str:
    """A member name as JSON writes it plainly, as a regular expression."""
    return re.escape(json.dumps(name, ensure_ascii=False))


def _single_member(name: str, value: str) -> str:
    """The members of a JSON object after its ``{``, through its ``}``, with exactly one
    member ``name``, whose value (matching ``value``) is group 1."""
    other = f"(?!{_quoted(name)}{_WS}:){_MEMBER}"
    return (
        f"{_WS}(?:{other}{_WS},{_WS})*+{_quoted(name)}{_WS}:{_WS}({value})"
        f"{_WS}(?:,{_WS}{other}{_WS})*+\\}}"
    )


def object_text(message: SparkColumn, where: str) -> SparkColumn:
    """The text of the event's one top-level object member ``where`` ('' if none)."""
    from pyspark.sql import functions as F

    return F.regexp_extract(message, f"^{_WS}\\{{{_single_member(where, _OBJECT)}", 1)


def member_token(obj: SparkColumn, name: str) -> SparkColumn:
    """The token of the one member ``name`` of the object text ``obj`` with a string,
    number or literal value ('' if none)."""
    from pyspark.sql import functions as F

    return F.regexp_extract(obj, f"^\\{{{_single_member(name, _TOKEN)}\\z", 1)


def member_anywhere(name: str) -> str:
    """A regular expression of the first member ``name`` with a string, number or literal
    value anywhere in a message, its token group 1 (for a reason's text only)."""
    return f"{_quoted(name)}{_WS}:{_WS}({_TOKEN})"
