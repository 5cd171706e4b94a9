"""What the structural scan of JSON events produces, and what it may spend (private).

The JSON decoders find the members of every event themselves (Arrow's JSON reader cannot
tell an absent member from one set to ``null``, and *absent is not null* for change
events). The scan (:func:`._jsonscan.scan`) gives them:

- :class:`Members`: every object member of the events up to a level, in document order,
  with where its name and value are and what kind of value it is (``KIND_*``);
- :class:`JsonScan`: those members, a structure reason per refused event, and which
  events the compiled pass verified as valid JSON text;
- :class:`Budget`: what one event may declare at most (members and nesting).

**Budgets (issue 38).** A decoder passes a :class:`Budget`: the most members an event may
hold at the levels it indexes (what its schema can use, and a margin for ignored
members), and the deepest nesting it accepts. An event beyond either is refused with one
reason (the same string for every such event, built once) and leaves no members in the
index, so what the decoder then allocates per event is bounded by the schema, not by
what a message declares. Both scanners check the structure first and the budgets next
(depth before members), so they give the same reason: the compiled pass parses an event
over budget to its end without recording more members (its open containers take one bit
per level), the numpy scanner counts the members it found.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "KIND_ARRAY",
    "KIND_BAD",
    "KIND_FALSE",
    "KIND_NAMES",
    "KIND_NULL",
    "KIND_NUMBER",
    "KIND_OBJECT",
    "KIND_STRING",
    "KIND_TRUE",
    "Budget",
    "JsonScan",
    "Members",
    "no_members",
]

KIND_BAD = 0
KIND_OBJECT = 1
KIND_ARRAY = 2
KIND_STRING = 3
KIND_NUMBER = 4
KIND_TRUE = 5
KIND_FALSE = 6
KIND_NULL = 7
KIND_NAMES = ("invalid", "object", "array", "string", "number", "true", "false", "null")


@dataclass(frozen=True)
class Budget:
    """What one event may declare, at most (see the module docstring).

    Attributes:
        members: Members at the levels the scan indexes (1..``max_level``).
        depth: Nesting of objects and arrays (the event itself is level 1).
        what: What is nested too deep, in the reason (the format's words).
    """

    members: int
    depth: int
    what: str = "nested"

    def __post_init__(self) -> None:
        if self.members < 1 or self.depth < 1:
            raise ValueError(f"a budget must allow a member and a level, got {self}")

    @property
    def members_reason(self) -> str:
        """The reason of an event holding too many members."""
        return f"event has more than {self.members} members (more than the schema can use)"

    @property
    def depth_reason(self) -> str:
        """The reason of an event nested too deep."""
        return f"{self.what} deeper than {self.depth} levels"


@dataclass
class Members:
    """Object members of the events, in document order.

    Attributes:
        event: Index of the event holding the member.
        level: 1 for members of the top-level object, 2 for members of their values...
        parent: Index of the member whose value is the enclosing object; -1 for level 1;
            -2 when the enclosing object is an array element.
        name_start: First byte of the name (after its opening quote).
        name_end: The name's closing quote.
        name_escaped: Whether the name holds a backslash escape.
        kind: ``KIND_*`` of the value.
        value_start: First byte of the value.
        value_end: One past the value's last byte.
        value_escaped: Whether a string value holds a backslash escape.
    """

    event: np.ndarray
    level: np.ndarray
    parent: np.ndarray
    name_start: np.ndarray
    name_end: np.ndarray
    name_escaped: np.ndarray
    kind: np.ndarray
    value_start: np.ndarray
    value_end: np.ndarray
    value_escaped: np.ndarray

    def __len__(self) -> int:
        return len(self.event)


def no_members() -> Members:
    """An index of no member (with the dtypes of a scan's)."""
    empty = np.zeros(0, dtype=np.int64)
    flag = np.zeros(0, dtype=bool)
    return Members(
        empty, empty, empty, empty, empty, flag, np.zeros(0, np.int8), empty, empty, flag
    )


@dataclass
class JsonScan:
    """The structural index of a batch of JSON events.

    Attributes:
        reasons: Per event, why its structure is invalid (``None`` when it is one object).
        members: The object members up to the scan's ``max_level``.
        verified: Per event, whether the compiled pass found it valid JSON text as a
            whole (RFC 8259 grammar of every value, UTF-8): such an event needs no
            grammar check by Arrow's parser. All false with the numpy scanner.
    """

    reasons: np.ndarray
    members: Members
    verified: np.ndarray
