"""The object-store contract, the same assertions on every backend (a local directory and
a real S3 server): round trips, byte ranges, listing by prefix, delete, head, the
create-if-absent commit primitive, and the request counters."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from cdc_sink.storage.objectstore import (
    CallKind,
    ObjectExists,
    ObjectNotFound,
    ObjectStore,
    ShortRead,
)
from cdc_sink.storage.objectstore.counters import CALL_KINDS


def _payload(n: int, seed: int = 0) -> bytes:
    return bytes((i * 131 + seed) % 256 for i in range(n))


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("size", [0, 1, 4096, 3 * 1024 * 1024 + 17])
def test_put_then_get_returns_the_bytes(store: ObjectStore, size: int) -> None:
    data = os.urandom(size)
    store.put("dir/obj.bin", data)
    assert store.get("dir/obj.bin") == data


def test_put_takes_bytes_bytearray_and_memoryview(store: ObjectStore) -> None:
    data = _payload(100)
    for i, form in enumerate([data, bytearray(data), memoryview(data)]):
        store.put(f"forms/{i}", form)
        assert store.get(f"forms/{i}") == data


def test_every_write_takes_a_view_of_an_arrow_buffer(store: ObjectStore) -> None:
    data = _payload(1000)
    view = memoryview(pa.py_buffer(data))  # signed bytes, format "b"
    store.put("arrow/put", view)
    store.put_if_absent("arrow/create", view)
    store.put_new("arrow/new", view)
    assert [store.get(f"arrow/{k}") for k in ("put", "create", "new")] == [data] * 3


def test_put_replaces_an_existing_object(store: ObjectStore) -> None:
    store.put("k", b"first version")
    store.put("k", b"second")
    assert store.get("k") == b"second"
    assert store.head("k").size == len(b"second")


@pytest.mark.parametrize("size", [0, 4096])
def test_put_new_then_get_returns_the_bytes(store: ObjectStore, size: int) -> None:
    data = os.urandom(size)
    before = store.counters.snapshot()
    store.put_new("attempt/obj.bin", memoryview(data))
    counted = store.counters.snapshot().minus(before)
    assert (counted.requests["PUT"], counted.bytes["PUT"]) == (1, size)
    assert store.get("attempt/obj.bin") == data


def test_get_of_a_missing_key_is_object_not_found(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound) as err:
        store.get("never/written")
    assert isinstance(err.value, FileNotFoundError)


# ---------------------------------------------------------------- ranges


def test_get_range_returns_exactly_the_range(store: ObjectStore) -> None:
    data = _payload(10_000)
    store.put("r", data)
    for start, length in [(0, 1), (0, len(data)), (1234, 4321), (len(data) - 7, 7)]:
        assert store.get_range("r", start, length) == data[start : start + length]


def test_get_range_of_zero_bytes_is_empty(store: ObjectStore) -> None:
    store.put("r", b"abc")
    assert store.get_range("r", 1, 0) == b""


@pytest.mark.parametrize(("start", "length"), [(5, 10), (10, 1), (11, 3)])
def test_get_range_past_the_end_is_a_short_read(
    store: ObjectStore, start: int, length: int
) -> None:
    store.put("r", _payload(10))
    with pytest.raises(ShortRead):
        store.get_range("r", start, length)


def test_get_range_of_a_missing_key_is_object_not_found(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        store.get_range("missing", 0, 4)


@pytest.mark.parametrize(("start", "length"), [(-1, 2), (0, -1)])
def test_get_range_refuses_negative_arguments(store: ObjectStore, start: int, length: int) -> None:
    with pytest.raises(ValueError):
        store.get_range("r", start, length)


# ---------------------------------------------------------------- list


def test_list_by_prefix_matches_whole_segments_sorted_by_key(store: ObjectStore) -> None:
    keys = ["_wal/1/b.wal", "_wal/1/a.wal", "_wal/10/c.wal", "_wal/1/sub/d.wal", "_log/0.json"]
    for i, key in enumerate(keys):
        store.put(key, _payload(i + 1))
    under_1 = [k for k in keys if k.startswith("_wal/1/")]
    listed = store.list("_wal/1")
    assert [i.key for i in listed] == sorted(under_1)
    assert [i.size for i in listed] == [keys.index(k) + 1 for k in sorted(under_1)]
    assert [i.key for i in store.list("_wal/1/")] == sorted(under_1)
    assert [i.key for i in store.list("")] == sorted(keys)


def test_list_keys_lists_the_keys_of_list(store: ObjectStore) -> None:
    for key in ["x/2", "x/1", "x/sub/3", "y/4"]:
        store.put(key, b"v")
    for prefix in ["", "x", "x/sub", "none"]:
        assert store.list_keys(prefix) == [i.key for i in store.list(prefix)]


def test_list_of_a_prefix_with_nothing_under_it_is_empty(store: ObjectStore) -> None:
    store.put("a/b", b"x")
    assert store.list("nothing") == []
    assert store.list("a/b") == []  # a key is no prefix of itself


def test_list_reports_modification_times(store: ObjectStore) -> None:
    store.put("t", b"x")
    (info,) = store.list("")
    assert info.last_modified == store.head("t").last_modified


# ---------------------------------------------------------------- delete, head


def test_delete_removes_the_object_and_a_missing_key_is_no_error(store: ObjectStore) -> None:
    store.put("d/1", b"x")
    store.delete("d/1")
    with pytest.raises(ObjectNotFound):
        store.head("d/1")
    store.delete("d/1")
    store.delete("d/never")


def test_delete_many_removes_every_key_given(store: ObjectStore) -> None:
    keys = [f"m/{i:03d}" for i in range(25)]
    for key in keys:
        store.put(key, b"x")
    store.delete_many([*keys[:20], "m/missing"])
    assert [i.key for i in store.list("m")] == keys[20:]


def test_head_gives_the_size(store: ObjectStore) -> None:
    store.put("h", _payload(321))
    info = store.head("h")
    assert (info.key, info.size) == ("h", 321)


def test_head_of_a_missing_key_is_object_not_found(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        store.head("missing")


# ---------------------------------------------------------------- put_if_absent


def test_put_if_absent_creates_once_and_then_raises_object_exists(store: ObjectStore) -> None:
    store.put_if_absent("_log/00000000000000000001.json", b"winner")
    with pytest.raises(ObjectExists) as err:
        store.put_if_absent("_log/00000000000000000001.json", b"loser")
    assert isinstance(err.value, FileExistsError)
    assert store.get("_log/00000000000000000001.json") == b"winner"


def test_put_if_absent_does_not_create_over_an_object_written_by_put(store: ObjectStore) -> None:
    store.put("k", b"plain")
    with pytest.raises(ObjectExists):
        store.put_if_absent("k", b"conditional")
    assert store.get("k") == b"plain"


def test_put_if_absent_after_delete_creates_again(store: ObjectStore) -> None:
    store.put_if_absent("k", b"1")
    store.delete("k")
    store.put_if_absent("k", b"2")
    assert store.get("k") == b"2"


# ---------------------------------------------------------------- keys


@pytest.mark.parametrize(
    "key", ["", "/abs", "a//b", "a/./b", "a/../b", "..", "trailing/", "nul\x00", "back\\slash"]
)
def test_a_malformed_key_is_refused_before_any_request(store: ObjectStore, key: str) -> None:
    before = store.counters.snapshot()
    with pytest.raises(ValueError):
        store.get(key)
    with pytest.raises(ValueError):
        store.put_if_absent(key, b"x")
    assert store.counters.snapshot() == before


# ---------------------------------------------------------------- counters


def test_counters_count_requests_and_bytes_per_call_kind(store: ObjectStore) -> None:
    before = store.counters.snapshot()
    a, b = _payload(1000), _payload(300, seed=1)
    store.put("c/a", a)
    store.put_if_absent("c/b", b)
    with pytest.raises(ObjectExists):
        store.put_if_absent("c/b", b)
    got = store.get("c/a")
    part = store.get_range("c/b", 10, 20)
    with pytest.raises(ObjectNotFound):
        store.get("c/missing")
    store.list("c")
    store.head("c/a")
    store.delete("c/a")
    delta = store.counters.snapshot().minus(before)
    expected_requests: dict[CallKind, int] = {"PUT": 3, "GET": 3, "LIST": 1, "HEAD": 1}
    expected_requests["DELETE"] = 1
    assert delta.requests == {k: expected_requests[k] for k in CALL_KINDS}
    expected_bytes = dict.fromkeys(CALL_KINDS, 0)
    expected_bytes["PUT"] = len(a) + 2 * len(b)
    expected_bytes["GET"] = len(got) + len(part)
    assert delta.bytes == expected_bytes
    assert delta.total_requests == sum(expected_requests.values())
