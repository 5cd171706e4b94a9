"""Schemas given as JSON text, parsed with a nesting limit (private).

The Avro schemas of a registry (:mod:`._avro_schema`) and the Kafka Connect envelope
schemas of Debezium JSON events (:mod:`._debezium_schema`) are JSON that anyone who can
write to a topic or register a schema controls. :func:`load_schema_json` parses such a
text and refuses it when it is not JSON or nests deeper than the caller's limit (no
schema either format writes is more than a handful of levels deep), without letting
Python's ``RecursionError`` out.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SchemaTextError", "load_schema_json"]


class SchemaTextError(ValueError):
    """A schema text that is not JSON or nests too deeply (the message says which);
    each caller raises its own error with the message."""


def load_schema_json(text: str | bytes, max_depth: int) -> Any:
    """Parses a schema's JSON text.

    Args:
        text: The JSON text.
        max_depth: The deepest nesting of objects and arrays accepted.

    Raises:
        SchemaTextError: Not JSON, or nested deeper than ``max_depth``.
    """
    try:
        obj = json.loads(text)
    except RecursionError:
        raise SchemaTextError(f"nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise SchemaTextError(f"not JSON ({type(exc).__name__})") from None
    if _depth(obj) > max_depth:
        raise SchemaTextError(f"nested deeper than {max_depth} levels")
    return obj


def _depth(v: Any) -> int:
    """Nesting depth of a parsed JSON value (iterative)."""
    best = 0
    stack = [(v, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict):
            best = max(best, d)
            stack.extend((y, d + 1) for y in x.values())
        elif isinstance(x, list):
            best = max(best, d)
            stack.extend((y, d + 1) for y in x)
    return best
