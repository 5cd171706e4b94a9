"""Tampered WAL segments and pre-images objects: their records are intact (every CRC
holds: a tamperer recomputes them) but what they say is not what a writer writes.

Each is refused with :class:`~cdc_sink.errors.WalCorruption` naming the object and an
offset, never another error: a header field that is not an int in range (``Infinity``
once raised ``OverflowError``), a body that would decompress to far more than it stores
(a 20 KB "zstd bomb" once grew the reader by hundreds of MB before any check ran), and
pre-images whose header names another bucket or version than the log entry that names
them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.batch import ChangeBatch
from cdc_sink.errors import WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.storage.bounded_ipc import MAX_EXPANSION
from cdc_sink.storage.framing import RECORD_HEADER_SIZE
from cdc_sink.storage.objectstore import ObjectStore, as_store
from cdc_sink.storage.pages import PageFileWriter, PageReader
from cdc_sink.storage.preimages import preimages_schema, read_preimages, write_preimages
from cdc_sink.storage.rejects import REJECTS_SCHEMA, read_rejects, write_rejects
from cdc_sink.storage.segments import read_change_segment, write_change_segment
from cdc_sink.storage.wal import WAL_MAGIC, decode_segment, encode_segment
from tests.fixtures import ID_A

BUCKET, VERSION = 3, 7


@pytest.fixture
def schema() -> TableSchema:
    return TableSchema.from_dict(ID_A)


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return as_store(tmp_path)


def _segment(store: ObjectStore, schema: TableSchema) -> str:
    wire = pa.table({"__op": ["insert"] * 3, "id": [1, 2, 3], "a": ["x", "y", "z"]})
    batch, rejects = ChangeBatch.from_arrow(wire, schema)
    assert not len(rejects)
    return write_change_segment(store, BUCKET, VERSION, schema.schema_id, batch)[0]


def _preimages(store: ObjectStore, schema: TableSchema) -> str:
    rows = pa.table(
        {"c0": pa.array([1, 2], pa.int64()), "c1": ["a", None], "_live": [True, False]},
        schema=preimages_schema(schema),
    )
    return write_preimages(store, BUCKET, VERSION, schema.schema_id, rows, compression="lz4")


def _rewrite(store: ObjectStore, rel: str, edit: Callable[[dict[str, object]], str]) -> None:
    """Rewrites the object's header with ``edit`` (its JSON text), CRCs recomputed."""
    records = decode_segment(store.get(rel), path=rel)
    header = edit(json.loads(records[0]))
    store.put(rel, encode_segment([header.encode(), records[1]]))


def _read(kind: str, store: ObjectStore, rel: str, schema: TableSchema) -> object:
    if kind == "segment":
        return read_change_segment(store, rel, schema)
    return read_preimages(store, rel, schema, bucket=BUCKET, version=VERSION)


_WRITE = {"segment": _segment, "preimages": _preimages}

BAD_VALUES = ["Infinity", "-Infinity", "NaN", "1e400", "-1", "1.5", '"3"', "true", "null"]


@pytest.mark.parametrize("kind", ["segment", "preimages"])
@pytest.mark.parametrize("field", ["version", "bucket", "schema_id", "rows", "bytes"])
@pytest.mark.parametrize("value", BAD_VALUES)
def test_a_header_field_that_is_no_int_in_range_is_wal_corruption(
    kind: str, field: str, value: str, store: ObjectStore, schema: TableSchema
) -> None:
    rel = _WRITE[kind](store, schema)

    def edit(h: dict[str, object]) -> str:
        h[field] = "@"
        return json.dumps(h).replace('"@"', value)

    _rewrite(store, rel, edit)
    with pytest.raises(WalCorruption) as err:
        _read(kind, store, rel, schema)
    assert err.value.path == store.location(rel)
    assert err.value.offset == len(WAL_MAGIC)  # where the header record starts
    assert field in str(err.value)


@pytest.mark.parametrize("kind", ["segment", "preimages"])
@pytest.mark.parametrize("field", ["version", "bucket", "schema_id", "rows"])
def test_a_header_without_a_required_field_is_wal_corruption(
    kind: str, field: str, store: ObjectStore, schema: TableSchema
) -> None:
    rel = _WRITE[kind](store, schema)
    _rewrite(store, rel, lambda h: json.dumps({k: v for k, v in h.items() if k != field}))
    with pytest.raises(WalCorruption, match=field):
        _read(kind, store, rel, schema)


@pytest.mark.parametrize("kind", ["segment", "preimages"])
def test_an_untampered_object_reads_back(
    kind: str, store: ObjectStore, schema: TableSchema
) -> None:
    rel = _WRITE[kind](store, schema)
    got = _read(kind, store, rel, schema)
    if kind == "segment":
        assert isinstance(got, tuple)
        assert got[0].rows == 3 and got[0].bytes is not None
    else:
        assert isinstance(got, pa.Table)
        assert got.column("c0").to_pylist() == [1, 2]


@pytest.mark.parametrize(("bucket", "version"), [(BUCKET + 1, VERSION), (BUCKET, VERSION + 1)])
def test_preimages_of_another_bucket_or_version_than_their_entry_are_wal_corruption(
    store: ObjectStore, schema: TableSchema, bucket: int, version: int
) -> None:
    rel = _preimages(store, schema)
    with pytest.raises(WalCorruption, match="named by the log entry") as err:
        read_preimages(store, rel, schema, bucket=bucket, version=version)
    assert err.value.path == store.location(rel)


@pytest.mark.parametrize("kind", ["segment", "preimages"])
def test_a_header_declaring_fewer_bytes_than_the_body_holds_is_wal_corruption(
    kind: str, store: ObjectStore, schema: TableSchema
) -> None:
    rel = _WRITE[kind](store, schema)
    _rewrite(store, rel, lambda h: json.dumps({**h, "bytes": 10}))
    header = decode_segment(store.get(rel), path=rel)[0]
    with pytest.raises(WalCorruption, match="would decompress") as err:
        _read(kind, store, rel, schema)
    assert err.value.path == store.location(rel)
    assert err.value.offset == len(WAL_MAGIC) + RECORD_HEADER_SIZE + len(header)  # record 1


# ---------------------------------------------------------------- decompression bombs

BOMB_ROWS = 80_000_000
"""Zeros of int64 in the bomb: 640 MB once decompressed, about 20 KB with ZSTD."""

# Reads the object at argv[2] (of kind argv[1]) in the table at argv[3]; prints the
# growth of the process's peak RSS during the read, in bytes, and the error raised.
READER = textwrap.dedent(
    """
    import resource, sys
    from cdc_sink.schema import TableSchema
    from cdc_sink.storage.objectstore import as_store
    from cdc_sink.storage.preimages import read_preimages
    from cdc_sink.storage.segments import read_change_segment
    from tests.fixtures import ID_A

    kind, rel, root = sys.argv[1:4]
    schema = TableSchema.from_dict(ID_A)
    store = as_store(root)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        if kind == "segment":
            read_change_segment(store, rel, schema)
        else:
            read_preimages(store, rel, schema, bucket=3, version=7)
        error = "none"
    except Exception as exc:
        error = type(exc).__name__
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(grown * 1024, error)
    """
)


def _bomb() -> bytes:
    """An IPC stream of one int64 column of :data:`BOMB_ROWS` zeros, ZSTD-compressed (the
    zeros come from ``calloc``: building it maps the zero page, no memory)."""
    zeros = pa.array(np.zeros(BOMB_ROWS, dtype=np.int64))
    sink = pa.BufferOutputStream()
    opts = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, pa.schema([("c0", pa.int64())]), options=opts) as w:
        w.write_batch(pa.RecordBatch.from_arrays([zeros], names=["c0"]))
    return bytes(sink.getvalue().to_pybytes())


@pytest.mark.parametrize("kind", ["segment", "preimages"])
def test_a_decompression_bomb_is_refused_before_the_reader_grows(
    kind: str, store: ObjectStore, schema: TableSchema, tmp_path: Path
) -> None:
    rel = _WRITE[kind](store, schema)
    bomb = _bomb()
    assert len(bomb) < 64 << 10  # the whole object stays tiny
    header = {"version": VERSION, "bucket": BUCKET, "schema_id": schema.schema_id, "rows": 1}
    if kind == "segment":
        header["format"] = 2
    store.put(rel, encode_segment([json.dumps(header).encode(), bomb]))
    proc = subprocess.run(
        [sys.executable, "-c", READER, kind, rel, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[2],
    )
    assert proc.returncode == 0, proc.stderr
    grown, error = proc.stdout.split()
    assert error == "WalCorruption"
    assert int(grown) < 64 << 20


def test_a_page_that_would_decompress_past_the_expansion_limit_is_wal_corruption(
    tmp_path: Path,
) -> None:
    bomb = _bomb()  # a stream of one column: what a page blob is
    writer = PageFileWriter(str(tmp_path), "_pages/0/x.pages")
    loc = writer.add(bomb, 1, None)  # its CRC is the bomb's: only the size gives it away
    writer.finish()
    assert len(bomb) * MAX_EXPANSION < BOMB_ROWS * 8
    with pytest.raises(WalCorruption, match="would decompress") as err:
        PageReader(str(tmp_path)).array(loc)
    assert err.value.offset == loc.offset


def test_a_rejects_file_that_would_decompress_past_the_limit_is_wal_corruption(
    store: ObjectStore,
) -> None:
    rel = write_rejects(store, VERSION, REJECTS_SCHEMA.empty_table())
    zeros = pa.array(np.zeros(BOMB_ROWS, dtype=np.int64))
    sink = pa.BufferOutputStream()
    opts = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(sink, pa.schema([("c0", pa.int64())]), options=opts) as w:
        w.write_batch(pa.RecordBatch.from_arrays([zeros], names=["c0"]))
    bomb = sink.getvalue().to_pybytes()
    assert len(bomb) < 64 << 10
    store.put(rel, bomb)
    with pytest.raises(WalCorruption, match="would decompress") as err:
        read_rejects(store, rel)
    assert err.value.offset == 8


def test_a_rejects_file_that_is_no_arrow_file_is_wal_corruption(store: ObjectStore) -> None:
    rel = write_rejects(store, VERSION, REJECTS_SCHEMA.empty_table())
    store.put(rel, b"PAR1" + b"\0" * 64)
    with pytest.raises(WalCorruption, match="not an Arrow IPC file"):
        read_rejects(store, rel)
