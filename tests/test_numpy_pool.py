"""cdc_sink.runtime.numpy_pool: numpy buffers kept for reuse, in one context only."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.errors import InvalidArgument
from cdc_sink.runtime import numpy_pool

pytestmark = pytest.mark.skipif(
    not numpy_pool.available(), reason="the extension cdc_sink.runtime._npcache is not built"
)

BIG = 1 << 20  # elements of float64: 8 MiB, a cached size class


def handler_of(a: np.ndarray) -> str:
    """The name of the memory handler that allocated ``a``'s buffer."""
    return str(np._core.multiarray.get_handler_name(a))


@pytest.fixture(autouse=True)
def _empty_pool():
    numpy_pool.set_limit(256 << 20)
    numpy_pool.release()
    yield
    numpy_pool.set_limit(256 << 20)
    numpy_pool.release()


def test_arrays_made_inside_the_context_use_the_pool_and_outside_it_numpys_own():
    before = np.empty(10)
    with numpy_pool.reusing():
        inside = np.empty(BIG)
        small = np.empty(3)
    after = np.empty(10)
    assert handler_of(inside) == handler_of(small) == "cdc_sink_reuse"
    assert handler_of(before) == handler_of(after) == "default_allocator"


def test_a_freed_buffer_is_handed_out_again_to_an_array_of_its_size_class():
    with numpy_pool.reusing():
        a = np.ones(BIG)
        addr = a.ctypes.data
        del a
        s = numpy_pool.stats()
        assert s.idle_bytes >= BIG * 8
        b = np.empty(BIG - 100)  # same class: rounded up to a multiple of 2**m / 16
        assert b.ctypes.data == addr
    assert numpy_pool.stats().hits == s.hits + 1


def test_zeros_from_a_reused_buffer_are_zero():
    with numpy_pool.reusing():
        a = np.full(BIG, 7.0)
        del a
        z = np.zeros(BIG)
        assert numpy_pool.stats().hits >= 1
        assert not z.any()


def test_growing_and_shrinking_in_place_keep_the_contents():
    with numpy_pool.reusing():
        for n0, n1 in [(BIG, 3 * BIG), (3 * BIG, BIG // 3), (BIG, 10), (10, BIG), (5, 9)]:
            a = np.arange(n0, dtype=np.int64)
            a.resize(n1, refcheck=False)  # numpy reallocs the buffer
            k = min(n0, n1)
            assert (a[:k] == np.arange(k)).all()
            assert not a[k:].any()


def test_the_limit_bounds_the_kept_bytes_and_zero_keeps_none():
    numpy_pool.set_limit(BIG * 8 * 2)
    with numpy_pool.reusing():
        arrays = [np.empty(BIG) for _ in range(5)]
        del arrays
    assert BIG * 8 <= numpy_pool.stats().idle_bytes <= BIG * 8 * 2
    numpy_pool.set_limit(0)
    assert numpy_pool.stats().idle_bytes == 0
    with numpy_pool.reusing():
        np.empty(BIG)  # freed at once: not kept
    assert numpy_pool.stats().idle_bytes == 0


def test_release_frees_the_kept_buffers_but_not_those_in_use():
    with numpy_pool.reusing():
        live = np.arange(BIG, dtype=np.float64)
        np.empty(2 * BIG)  # freed at once: kept
    assert numpy_pool.release() >= 2 * BIG * 8
    assert numpy_pool.stats().idle_bytes == 0
    assert live[-1] == BIG - 1  # still valid, freed later into the pool
    del live
    assert numpy_pool.stats().idle_bytes >= BIG * 8


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True, None])
def test_a_bad_limit_is_a_typed_error(bad: object):
    with pytest.raises(InvalidArgument, match="nbytes"):
        numpy_pool.set_limit(bad)  # type: ignore[arg-type]


def test_other_threads_keep_numpys_allocator_and_threads_share_the_pool_safely():
    errors: list[BaseException] = []
    other: list[str] = []

    def work(seed: int) -> None:
        try:
            rng = np.random.default_rng(seed)
            with numpy_pool.reusing():
                for _ in range(200):
                    n = int(rng.integers(1, 3 * BIG))
                    a = np.full(n, seed, dtype=np.int32)
                    b = a.copy()
                    assert (b == seed).all() and handler_of(b) == "cdc_sink_reuse"
        except BaseException as e:
            errors.append(e)

    def outside() -> None:
        other.append(handler_of(np.empty(BIG)))

    with numpy_pool.reusing():
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        threads.append(threading.Thread(target=outside))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert other == ["default_allocator"]  # a new thread starts in numpy's default


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4 * BIG), min_size=1, max_size=12), st.data())
def test_any_sequence_of_sizes_gives_arrays_that_hold_what_is_written(
    sizes: list[int], data: st.DataObject
):
    with numpy_pool.reusing():
        kept = []
        for i, n in enumerate(sizes):
            a = np.full(n, i, dtype=np.uint8)
            if data.draw(st.booleans()):
                kept.append((i, a))
        for i, a in kept:
            assert (a == i).all()
