"""Tables named by URL on each backend (a directory and the S3 server): creation writes
``_table.json``, schema 0 and version 0 into the store, opening finds them again, and a
second creation, a missing table and a schema change behave alike on both. Opening
writes nothing: an object store's conditional creates are proved before the first write,
so a reader needs no right to write, and a writer behind an endpoint that ignores them
is refused before it writes anything."""

from __future__ import annotations

import json
import uuid

import pytest

from cdc_sink.errors import TableExists, TableNotFound
from cdc_sink.schema import TableSchema
from cdc_sink.storage.layout import TABLE_FILE, schema_key
from cdc_sink.storage.objectstore import ConditionalWritesUnsupported, ObjectStore, store_for
from cdc_sink.storage.objectstore.cache import CachingStore
from cdc_sink.storage.version_log import VersionLog
from cdc_sink.table import Table, TableOptions, create_table, open_table
from cdc_sink_testkit.s3 import SeaweedS3
from tests.fixtures import ID_NAME
from tests.objectstore.conftest import Target
from tests.objectstore.proxy import IgnoringConditionalPuts

SCHEMA = TableSchema.from_dict(ID_NAME)


def test_create_writes_the_table_file_schema_and_version_0_to_the_store(target: Target) -> None:
    table = create_table(target.url, SCHEMA, storage_options=target.options or None)
    store = target.open()
    meta = json.loads(store.get(TABLE_FILE))
    assert meta["page_rows"] == TableOptions().page_rows
    assert TableSchema.from_dict(json.loads(store.get(schema_key(0)))) == SCHEMA
    assert store.list_keys() == sorted([TABLE_FILE, schema_key(0), VersionLog.entry_key(0)])
    assert table.version == 0
    assert table.read().num_rows == 0


def test_open_finds_the_table_by_its_url(target: Target) -> None:
    create_table(target.url, SCHEMA, storage_options=target.options or None)
    table = open_table(target.url, storage_options=target.options or None)
    assert (table.version, table.schema) == (0, SCHEMA)
    assert table.versions()[0]["kind"] == "create"


def test_a_second_creation_is_table_exists(target: Target) -> None:
    create_table(target.url, SCHEMA, storage_options=target.options or None)
    with pytest.raises(TableExists):
        create_table(target.url, SCHEMA, storage_options=target.options or None)


def test_opening_an_empty_place_is_table_not_found(target: Target) -> None:
    with pytest.raises(TableNotFound):
        open_table(target.url, storage_options=target.options or None)


def test_a_creation_that_crashed_before_version_0_is_created_again(target: Target) -> None:
    store = target.open()
    meta = {"format": 1, "page_rows": TableOptions().page_rows, "index_seed": "0123456789abcdef"}
    store.put_if_absent(TABLE_FILE, json.dumps(meta).encode())
    with pytest.raises(TableNotFound):
        open_table(target.url, storage_options=target.options or None)
    table = create_table(target.url, SCHEMA, storage_options=target.options or None)
    assert table.version == 0
    assert json.loads(store.get(TABLE_FILE)) == meta  # the crashed creation's seed kept


def test_a_creation_of_other_options_under_way_is_table_exists(target: Target) -> None:
    store = target.open()
    meta = {"format": 1, "page_rows": 8, "index_seed": "0123456789abcdef"}
    store.put_if_absent(TABLE_FILE, json.dumps(meta).encode())
    with pytest.raises(TableExists, match="other options"):
        create_table(target.url, SCHEMA, storage_options=target.options or None)
    assert store.list_keys() == [TABLE_FILE]


def test_a_creation_of_another_schema_under_way_is_table_exists(target: Target) -> None:
    create_table(target.url, SCHEMA, storage_options=target.options or None)
    store = target.open()
    store.delete(VersionLog.entry_key(0))  # as if creation had not committed yet
    other = SCHEMA.add_column("extra", "int32")
    with pytest.raises(TableExists, match="another schema"):
        create_table(target.url, other, storage_options=target.options or None)


def test_a_schema_change_writes_the_new_schema_to_the_store(target: Target) -> None:
    table = create_table(target.url, SCHEMA, storage_options=target.options or None)
    v = table.add_column("extra", "int32", default=7)
    reopened = open_table(target.url, storage_options=target.options or None)
    assert reopened.version == v
    assert reopened.schema.names == ["id", "name", "extra"]
    assert reopened.schema_at(0) == SCHEMA
    stored = TableSchema.from_dict(json.loads(target.open().get(schema_key(1))))
    assert stored == reopened.schema


def _backing(table: Table) -> ObjectStore:
    """The store under the table's cache of immutable objects (the store itself if none)."""
    return table.store.inner if isinstance(table.store, CachingStore) else table.store


def test_opening_writes_nothing_and_the_first_write_proves_conditional_creates(
    target: Target,
) -> None:
    create_table(target.url, SCHEMA, storage_options=target.options or None)
    table = open_table(target.url, storage_options=target.options or None)
    store = _backing(table)
    assert table.read().num_rows == 0
    assert (store.counters.snapshot().requests["PUT"], store.writes_checked) == (0, False)
    table.apply([{"op": "upsert", "key": {"id": 1}, "set": {"name": "a"}}])
    assert store.writes_checked
    assert open_table(target.url, storage_options=target.options or None).read().num_rows == 1


def test_a_reader_reads_through_an_endpoint_ignoring_conditional_creates_but_never_writes(
    s3_server: SeaweedS3,
) -> None:
    url = s3_server.url(f"t-{uuid.uuid4().hex}")
    create_table(url, SCHEMA, storage_options=s3_server.storage_options())
    with IgnoringConditionalPuts(s3_server.endpoint) as proxy:
        options = s3_server.storage_options(endpoint=proxy.endpoint)
        table = open_table(url, storage_options=options)
        assert (table.version, table.read().num_rows) == (0, 0)
        with pytest.raises(ConditionalWritesUnsupported):
            table.apply([{"op": "upsert", "key": {"id": 1}, "set": {"name": "a"}}])
    keys = store_for(url, s3_server.storage_options()).list_keys()
    assert keys == sorted([TABLE_FILE, schema_key(0), VersionLog.entry_key(0)])
