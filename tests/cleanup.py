"""Things a test starts, stopped after it: the body of list-yielding fixtures."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

__all__ = ["stopped_after"]

_T = TypeVar("_T")


def stopped_after(stop: Callable[[_T], object]) -> Iterator[list[_T]]:
    """Yields a list the test appends what it starts to; then calls ``stop`` on each.

    Use as a fixture's body: ``yield from stopped_after(Thing.close)``.
    """
    started: list[_T] = []
    yield started
    for item in started:
        stop(item)
