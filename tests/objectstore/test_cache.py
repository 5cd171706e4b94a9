"""The bounded cache of immutable objects (``objectstore/cache.py``) on each backend: a
warm read of a cacheable key makes no request, other keys always reach the store, the
bytes kept never exceed the bound (least recently used evicted first), and writes,
lists and deletes pass through."""

from __future__ import annotations

import pytest

from cdc_sink.storage.objectstore import ObjectStore
from cdc_sink.storage.objectstore.cache import CachingStore, ObjectCache
from tests.objectstore.conftest import Target


def _immutable(key: str) -> bool:
    return key.startswith("imm/")


def _cached(store: ObjectStore, max_bytes: int = 1 << 20) -> CachingStore:
    return CachingStore(store, max_bytes, cacheable=_immutable)


def test_a_warm_read_of_a_cacheable_key_makes_no_request(target: Target) -> None:
    store = target.open()
    store.put("imm/a", b"0123456789")
    cached = _cached(store)
    first = (cached.get("imm/a"), cached.get_range("imm/a", 2, 3), cached.head("imm/a").size)
    before = store.counters.snapshot()
    again = (cached.get("imm/a"), cached.get_range("imm/a", 2, 3), cached.head("imm/a").size)
    assert first == again == (b"0123456789", b"234", 10)
    assert store.counters.snapshot().minus(before).total_requests == 0
    assert cached.cache.hits == 2


def test_other_keys_always_reach_the_store(target: Target) -> None:
    store = target.open()
    cached = _cached(store)
    cached.put("log/x", b"one")
    assert cached.get("log/x") == b"one"
    cached.put("log/x", b"two")
    assert cached.get("log/x") == b"two"
    assert cached.cache.nbytes == 0


def test_writes_lists_and_deletes_pass_through(target: Target) -> None:
    store = target.open()
    cached = _cached(store)
    cached.put_new("imm/n", b"new")
    cached.put_if_absent("imm/c", b"created")
    assert cached.list_keys("imm") == store.list_keys("imm") == ["imm/c", "imm/n"]
    cached.delete_many(["imm/c", "imm/n"])
    assert store.list_keys("imm") == []


def test_the_cache_holds_at_most_its_bound_evicting_the_least_recently_used() -> None:
    cache = ObjectCache(10)
    cache.put(("a", 0, 4), b"aaaa")
    cache.put(("b", 0, 4), b"bbbb")
    assert cache.get(("a", 0, 4)) == b"aaaa"  # now b is the least recently used
    cache.put(("c", 0, 4), b"cccc")
    assert (cache.get(("b", 0, 4)), cache.nbytes) == (None, 8)
    assert cache.get(("a", 0, 4)) == b"aaaa"
    cache.put(("big", 0, 11), b"x" * 11)  # larger than the bound: not kept
    assert cache.get(("big", 0, 11)) is None
    assert cache.nbytes == 8


def test_a_cache_of_zero_bytes_keeps_nothing() -> None:
    cache = ObjectCache(0)
    cache.put(("a", 0, 1), b"a")
    assert (cache.get(("a", 0, 1)), cache.nbytes) == (None, 0)


@pytest.mark.parametrize("bound", [-1, 1.5])
def test_a_bound_that_is_no_size_is_refused(bound: object) -> None:
    with pytest.raises(ValueError, match="cache bound"):
        ObjectCache(bound)  # type: ignore[arg-type]
