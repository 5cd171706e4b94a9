"""Objects that pickle their configuration only: what a process builds while it runs
(open tables, worker pools, statistics) is made again, empty, where they are unpickled."""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["ProcessLocal"]


class ProcessLocal:
    """A base whose ``_PROCESS_LOCAL`` attributes are never pickled: :meth:`__getstate__`
    leaves them out, :meth:`__setstate__` calls :meth:`_init_process_state` to make them
    afresh (Spark pickles a ``foreachBatch`` function to run it elsewhere, e.g. in a
    Spark Connect server)."""

    _PROCESS_LOCAL: ClassVar[tuple[str, ...]] = ()
    """The attributes a process holds while it runs, made by :meth:`_init_process_state`."""

    def _init_process_state(self) -> None:
        """Sets this process's state, empty."""
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        """The configuration only."""
        return {k: v for k, v in self.__dict__.items() if k not in self._PROCESS_LOCAL}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """The object in this process: its configuration, and no process state yet."""
        self.__dict__.update(state)
        self._init_process_state()
