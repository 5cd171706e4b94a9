"""``cdc_sink.utils.parallel.ordered_map``: results in input order whatever order the threads
finish in, the work really overlaps, an exception reaches the consumer at its item's
turn, the look-ahead is bounded, and a consumer that stops cancels what was not started."""

from __future__ import annotations

import threading
import time

import pytest

from cdc_sink.utils.parallel import ordered_map


def test_results_come_in_input_order_from_overlapping_threads() -> None:
    both_in = threading.Barrier(2, timeout=10)  # passes only if two items run at once
    names: set[str] = set()

    def work(i: int) -> int:
        names.add(threading.current_thread().name)
        if i < 2:
            both_in.wait()
        time.sleep(0.002 * ((7 * i) % 5))  # finish out of order
        return i * i

    assert list(ordered_map(work, range(20), 2, name="t-map")) == [i * i for i in range(20)]
    assert names and all(n.startswith("t-map") for n in names)


def test_one_thread_maps_in_the_calling_thread() -> None:
    names = []
    out = list(ordered_map(lambda i: names.append(threading.current_thread().name) or i, [1, 2], 1))
    assert out == [1, 2] and set(names) == {threading.current_thread().name}


def test_an_exception_is_raised_at_its_items_turn() -> None:
    def work(i: int) -> int:
        if i == 3:
            raise ValueError("item 3")
        return i

    got = []
    with pytest.raises(ValueError, match="item 3"):
        for x in ordered_map(work, range(10), 2):
            got.append(x)
    assert got == [0, 1, 2]


def test_look_ahead_is_bounded_and_stopping_cancels_the_rest() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> int:
        with lock:
            started.append(i)
        return i

    gen = ordered_map(work, range(1000), 2, ahead_per_thread=3)
    assert next(gen) == 0
    time.sleep(0.05)
    assert len(started) <= 2 * 3 + 1  # never more than threads x ahead in flight
    gen.close()
    n = len(started)
    time.sleep(0.05)
    assert len(started) == n < 1000  # nothing started after the consumer stopped
