"""A module-level slot for a test hook that production code leaves empty.

The fault points (:func:`cdc_sink.storage.faults.set_hook`) and the file-operation recorder
(:func:`cdc_sink.storage.fsutil.set_recorder`) each keep theirs in one.
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["HookSlot"]

_H = TypeVar("_H")


class HookSlot(Generic[_H]):
    """Holds one hook, or ``None`` (the default, and always so in production)."""

    __slots__ = ("current",)

    def __init__(self) -> None:
        self.current: _H | None = None
        """The hook installed, or ``None``."""

    def install(self, hook: _H | None) -> _H | None:
        """Installs ``hook`` (``None``: removes the one installed).

        Returns:
            The hook installed before.
        """
        previous, self.current = self.current, hook
        return previous
