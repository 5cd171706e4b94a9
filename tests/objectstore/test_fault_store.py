"""The test kit's FaultStore over each backend: it fails, tears and delays exactly the
calls its faults choose (by operation, key and count) and passes every other through."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from cdc_sink.storage.objectstore import (
    ObjectExists,
    ObjectNotFound,
    ObjectStore,
    StoreIOError,
)
from cdc_sink_testkit.faults import Call, FaultStore


@pytest.fixture
def faulty(store: ObjectStore) -> FaultStore:
    return FaultStore(store)


def test_without_faults_every_call_passes_through_and_is_logged(faulty: FaultStore) -> None:
    faulty.put("a", b"1")
    faulty.put_if_absent("b", b"2")
    assert faulty.get("a") == b"1"
    assert faulty.inner.get("b") == b"2"
    assert [i.key for i in faulty.list("")] == ["a", "b"]
    assert faulty.calls == [
        Call("put", "a"),
        Call("put_if_absent", "b"),
        Call("get", "a"),
        Call("list", ""),
    ]


def test_fail_raises_and_the_inner_store_never_sees_the_call(faulty: FaultStore) -> None:
    fault = faulty.fail("put")
    with pytest.raises(StoreIOError, match="injected fault"):
        faulty.put("k", b"data")
    with pytest.raises(ObjectNotFound):
        faulty.inner.head("k")
    assert (fault.fired, fault.keys) == (1, ["k"])
    faulty.put("k", b"data")  # times=1: the next call goes through
    assert faulty.inner.get("k") == b"data"


def test_fail_after_makes_the_call_and_then_raises(faulty: FaultStore) -> None:
    faulty.fail("put_if_absent", after=True)
    with pytest.raises(StoreIOError):
        faulty.put_if_absent("_log/1", b"entry")
    assert faulty.inner.get("_log/1") == b"entry"  # the outcome the caller could not see
    with pytest.raises(ObjectExists):
        faulty.put_if_absent("_log/1", b"entry")


def test_fail_raises_the_error_it_was_given(faulty: FaultStore) -> None:
    faulty.fail("get", error=TimeoutError("slow disk"))
    faulty.inner.put("k", b"x")
    with pytest.raises(TimeoutError, match="slow disk"):
        faulty.get("k")
    faulty.fail("head", error=lambda op, key: KeyError(f"{op}:{key}"))
    with pytest.raises(KeyError, match="head:k"):
        faulty.head("k")


def test_nth_and_times_choose_which_matching_calls_fail(faulty: FaultStore) -> None:
    faulty.inner.put("k", b"x")
    faulty.fail("get", nth=3, times=2)
    outcomes = []
    for _ in range(6):
        try:
            faulty.get("k")
            outcomes.append("ok")
        except StoreIOError:
            outcomes.append("failed")
    assert outcomes == ["ok", "ok", "failed", "failed", "ok", "ok"]


def test_times_none_fails_every_matching_call_from_nth_on(faulty: FaultStore) -> None:
    faulty.inner.put("k", b"x")
    faulty.fail("get", nth=2, times=None)
    assert faulty.get("k") == b"x"
    for _ in range(3):
        with pytest.raises(StoreIOError):
            faulty.get("k")


def test_a_key_or_a_predicate_chooses_the_objects(faulty: FaultStore) -> None:
    faulty.fail("put", key="exact", times=None)
    faulty.fail("put", key=lambda k: k.startswith("_log/"), times=None)
    faulty.put("other", b"1")
    faulty.put("_wal/1/x", b"2")
    for key in ("exact", "_log/0"):
        with pytest.raises(StoreIOError):
            faulty.put(key, b"3")
    assert [i.key for i in faulty.inner.list("")] == ["_wal/1/x", "other"]


def test_tear_of_a_write_leaves_a_partial_object_and_raises(faulty: FaultStore) -> None:
    data = bytes(range(200))
    faulty.tear("put", keep=0.25)
    with pytest.raises(StoreIOError):
        faulty.put("seg", data)
    assert faulty.inner.get("seg") == data[: len(data) // 4]
    faulty.tear("put_if_absent", keep=7)
    with pytest.raises(StoreIOError):
        faulty.put_if_absent("_log/2", data)
    assert faulty.inner.get("_log/2") == data[:7]
    with pytest.raises(ObjectExists):  # the torn object holds the name
        faulty.put_if_absent("_log/2", data)


def test_tear_of_a_read_returns_a_prefix_of_the_object(faulty: FaultStore) -> None:
    data = bytes(range(100))
    faulty.inner.put("k", data)
    faulty.tear("get", keep=10)
    assert faulty.get("k") == data[:10]
    assert faulty.get("k") == data


def test_delay_holds_a_call_until_released_forcing_an_interleaving(faulty: FaultStore) -> None:
    release = threading.Event()
    held = threading.Event()

    def wait() -> None:
        held.set()
        release.wait(timeout=60)

    faulty.delay("put", key="k", wait=wait)
    slow = threading.Thread(target=faulty.put, args=("k", b"slow writer"))
    slow.start()
    assert held.wait(timeout=60)
    faulty.put("k", b"fast writer")  # overtakes the held one
    assert faulty.inner.get("k") == b"fast writer"
    release.set()
    slow.join(timeout=60)
    assert faulty.inner.get("k") == b"slow writer"


def test_clear_removes_every_fault(faulty: FaultStore) -> None:
    faulty.fail(("put", "get"), times=None)
    faulty.clear()
    faulty.put("k", b"x")
    assert faulty.get("k") == b"x"


def test_the_wrapper_counts_its_calls_and_the_inner_store_its_own(faulty: FaultStore) -> None:
    inner_before = faulty.inner.counters.snapshot()
    faulty.fail("put")
    with pytest.raises(StoreIOError):
        faulty.put("k", b"abc")
    faulty.put("k", b"abc")
    assert faulty.counters.snapshot().requests["PUT"] == 2
    assert faulty.inner.counters.snapshot().minus(inner_before).requests["PUT"] == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: f.tear("list", keep=1), "can be torn"),
        (lambda f: f.tear("put", keep=1.5), "keep must be"),
        (lambda f: f.fail("rename"), "unknown operations"),
        (lambda f: f.fail("get", nth=0), "nth must be"),
    ],
)
def test_a_fault_that_cannot_be_made_is_refused(
    faulty: FaultStore, call: Callable[[FaultStore], object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        call(faulty)
