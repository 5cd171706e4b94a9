"""The router's CPU gate: at most ``slots`` threads between two storage waits, every
thread free to wait on storage at once, nothing changed in a thread without a gate."""

from __future__ import annotations

import threading
import time

import pytest

from cdc_sink.utils.cpu_gate import CpuGate, blocking


class _Peak:
    """The most threads seen inside a section at once."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


def _run(threads: int, work: object) -> None:
    ts = [threading.Thread(target=work) for _ in range(threads)]  # type: ignore[arg-type]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=30)
        assert not t.is_alive()


@pytest.mark.parametrize("slots", [1, 2])
def test_at_most_slots_threads_run_between_waits_and_all_wait_together(slots: int) -> None:
    gate, cpu, waiting = CpuGate(slots), _Peak(), _Peak()
    all_waiting = threading.Barrier(6)

    def work() -> None:
        with gate.held():
            with cpu:
                time.sleep(0.01)
            with blocking(), waiting:
                all_waiting.wait(timeout=10)  # every thread waits at once: no slot kept

    _run(6, work)
    assert cpu.peak == slots
    assert waiting.peak == 6


def test_a_nested_wait_gives_the_slot_up_once() -> None:
    gate = CpuGate(1)
    with gate.held():
        with blocking(), blocking(), gate.held():  # another holder fits: the slot is free
            pass
        assert not gate._sem.acquire(blocking=False)  # taken again after the wait


def test_without_a_gate_a_wait_changes_nothing_and_a_thread_holds_one_gate() -> None:
    with blocking():
        pass
    gate = CpuGate(2)
    with gate.held(), pytest.raises(RuntimeError, match="already holds"), gate.held():
        pass
    with pytest.raises(ValueError, match="at least one slot"):
        CpuGate(0)


def test_a_lock_held_across_a_wait_does_not_deadlock_the_gate() -> None:
    """A holds the only slot and a lock, and waits on storage; B takes the slot and
    waits for the lock; A, back from its wait, finds no slot: it goes on without one
    (after REACQUIRE_S) and releases the lock, so both end."""
    gate, lock = CpuGate(1), threading.Lock()
    a_waits, done = threading.Event(), []

    def a() -> None:
        with gate.held(), lock:
            with blocking():
                a_waits.set()
                time.sleep(0.2)  # B takes the slot meanwhile, then blocks on the lock
            done.append("a")

    def b() -> None:
        a_waits.wait(timeout=10)
        with gate.held(), lock:
            done.append("b")

    ts = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=10)
    assert sorted(done) == ["a", "b"]
    assert gate._sem.acquire(blocking=False)  # every slot given back
