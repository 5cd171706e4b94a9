"""A gate on the CPU work of many threads that mostly wait on storage (internal).

The whole-database router writes the tables of a micro-batch on a pool of threads so
that their storage waits (fsyncs, object-store requests) overlap. Their CPU work is
mostly small numpy and Arrow calls, each of which releases and takes the GIL again: with
many threads runnable at once, every such call contends for it, and the contention costs
more CPU than the work (docs/benchmarks.md, "Many tables in one job"). A :class:`CpuGate`
lets at most ``slots`` of its threads run between two storage waits; a thread holding it
gives its slot up for the length of each wait (:func:`blocking`), so the waits still
overlap across all the threads.

Code that waits on storage wraps the wait in :func:`blocking`; in a thread that holds no
gate (every thread but the router's) it does nothing.

A thread coming back from a wait takes a slot again, but waits for one at most
:data:`REACQUIRE_S` and then goes on without one: a thread may hold a lock across a
storage wait (a table's dead letters, the root's stop records) that another gated
thread, holding a slot, waits for, and an unbounded wait for the slot would deadlock the
two. So the gate bounds the threads doing CPU work most of the time, never correctness.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["REACQUIRE_S", "CpuGate", "blocking"]

REACQUIRE_S = 0.05
"""Seconds a thread back from a storage wait waits for a slot before going on without."""

_local = threading.local()


class CpuGate:
    """At most ``slots`` threads at once between :meth:`held` and its end, except while
    they are in :func:`blocking`."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"a CPU gate needs at least one slot, got {slots}")
        self.slots = slots
        # One slot (the router's default) is a plain lock: its handoff between threads
        # runs in C, where a Semaphore's runs Python code under the GIL it gates.
        self._sem: threading.Lock | threading.Semaphore = (
            threading.Lock() if slots == 1 else threading.Semaphore(slots)
        )

    @contextmanager
    def held(self) -> Iterator[None]:
        """Runs the ``with`` body in one of the gate's slots (waiting for one)."""
        if getattr(_local, "gate", None) is not None:
            raise RuntimeError("this thread already holds a CPU gate")
        self._sem.acquire()
        _local.gate, _local.slotted = self, True
        try:
            yield
        finally:
            _local.gate = None
            if _local.slotted:
                self._sem.release()


@contextmanager
def blocking() -> Iterator[None]:
    """A storage wait: the calling thread's gate slot (if it holds one) is free for
    another thread until the wait ends, then taken again (waiting at most
    :data:`REACQUIRE_S` for it)."""
    gate: CpuGate | None = getattr(_local, "gate", None)
    if gate is None:
        yield
        return
    _local.gate = None  # a nested wait (a retry's) gives nothing up twice
    if _local.slotted:
        gate._sem.release()
    try:
        yield
    finally:
        _local.slotted = gate._sem.acquire(timeout=REACQUIRE_S)
        _local.gate = gate
