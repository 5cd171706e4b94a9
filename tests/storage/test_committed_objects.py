"""Every reader of an object a committed log entry names (a WAL segment, a rejects file,
a snapshot manifest) goes through one door, segments.read_committed_object: the path is
checked as a path of its kind, the object is read with one ``get``, and a missing object
is a :class:`~cdc_sink.errors.WalCorruption` naming where it should be."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from cdc_sink.batch import ChangeBatch
from cdc_sink.errors import WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.storage.objectstore import ObjectStore, as_store
from cdc_sink.storage.rejects import read_rejects, write_rejects
from cdc_sink.storage.segments import read_change_segment, write_change_segment
from cdc_sink.storage.snapshot import read_manifest
from cdc_sink.table import TableOptions, create_table
from tests.fixtures import ID_A

_Reader = Callable[[ObjectStore, str], object]


def _segment(root: Path) -> str:
    schema = TableSchema.from_dict(ID_A)
    batch, _ = ChangeBatch.from_arrow(pa.table({"__op": ["insert"], "id": [1], "a": ["x"]}), schema)
    return write_change_segment(root, 0, 1, schema.schema_id, batch)[0]


def _rejects(root: Path) -> str:
    return write_rejects(root, 1, pa.table({"position": [0], "reason": ["bad"]}))


def _manifest(root: Path) -> str:
    table = create_table(root, ID_A, options=TableOptions.for_tests())
    table.apply([{"op": "insert", "key": {"id": 1}, "set": {"a": "x"}}])
    table.compact()
    keys = as_store(root).list_keys("_snapshots")
    return next(k for k in keys if k.endswith(".manifest"))  # one bucket's


# kind: (write one, read it back, what the missing-object error calls it)
OBJECTS: dict[str, tuple[Callable[[Path], str], _Reader, str]] = {
    "segment": (
        _segment,
        lambda s, rel: read_change_segment(s, rel, TableSchema.from_dict(ID_A)),
        "a committed WAL segment is missing",
    ),
    "rejects": (_rejects, read_rejects, "a rejects file named by the log is missing"),
    "manifest": (_manifest, read_manifest, "a committed snapshot manifest is missing"),
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "t"


@pytest.mark.parametrize("kind", sorted(OBJECTS))
def test_a_committed_object_is_read_with_one_get(kind: str, root: Path) -> None:
    write, read, _ = OBJECTS[kind]
    rel = write(root)
    store = as_store(root)
    before = store.counters.snapshot()
    read(store, rel)
    used = store.counters.snapshot().minus(before)
    assert used.requests["GET"] == 1
    assert used.total_requests == 1


@pytest.mark.parametrize("kind", sorted(OBJECTS))
def test_a_missing_committed_object_is_wal_corruption_naming_its_location(
    kind: str, root: Path
) -> None:
    write, read, message = OBJECTS[kind]
    rel = write(root)
    store = as_store(root)
    store.delete(rel)
    with pytest.raises(WalCorruption, match=message) as err:
        read(store, rel)
    assert err.value.path == store.location(rel)
    assert err.value.offset == 0


@pytest.mark.parametrize("kind", sorted(OBJECTS))
def test_a_path_of_another_kind_is_refused_before_any_get(kind: str, root: Path) -> None:
    write, read, _ = OBJECTS[kind]
    write(root)
    other = _rejects(root) if kind != "rejects" else _segment(root)
    store = as_store(root)
    before = store.counters.snapshot()
    with pytest.raises(WalCorruption):
        read(store, other)
    assert store.counters.snapshot().minus(before).requests["GET"] == 0
