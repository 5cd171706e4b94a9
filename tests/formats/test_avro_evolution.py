"""Schema evolution from the registry, at the decoder: which columns a table gains from
new schema versions, and the changes it cannot take (a clear error naming the subject,
version and field)."""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any

import pytest

from cdc_sink.formats.avro_wire import cache_clear
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder, SchemaEvolutionError
from cdc_sink_testkit.registry import LocalRegistry
from tests.avro.connect import avro_schema
from tests.formats.test_debezium_docs import MYSQL_CUSTOMERS, MYSQL_SCHEMA


def _with_fields(*fields: dict[str, Any], drop: str | None = None) -> dict[str, Any]:
    """The MySQL tutorial's envelope with row fields added (or one dropped)."""
    out = copy.deepcopy(MYSQL_SCHEMA)
    for f in out["fields"][:2]:
        f["fields"] = [g for g in f["fields"] if g["field"] != drop] + list(fields)
    return out


NOTE = {"type": "string", "optional": True, "field": "note"}
AT = {
    "type": "int64",
    "optional": True,
    "field": "at",
    "name": "io.debezium.time.MicroTimestamp",
    "version": 1,
}
PRICE = {
    "type": "bytes",
    "optional": True,
    "field": "price",
    "name": "org.apache.kafka.connect.data.Decimal",
    "version": 1,
    "parameters": {"scale": "2", "connect.decimal.precision": "10"},
}


@pytest.fixture
def subject() -> str:
    cache_clear()
    return f"evolve-{uuid.uuid4().hex[:8]}-value"


def decoder(registry: LocalRegistry, mode: str = "add_columns") -> DebeziumAvroDecoder:
    return DebeziumAvroDecoder(registry_url=registry.url, schema_evolution=mode)


def test_new_optional_fields_become_columns(schema_registry: LocalRegistry, subject: str):
    v1 = schema_registry.register(subject, avro_schema(MYSQL_SCHEMA))
    v2 = schema_registry.register(subject, avro_schema(_with_fields(NOTE, AT, PRICE)))
    dec = decoder(schema_registry)
    assert dec.schema_changes([v1], MYSQL_CUSTOMERS) == []
    assert dec.schema_changes([v2, v1], MYSQL_CUSTOMERS) == [
        ("note", "string"),
        ("at", "timestamp[us, UTC]"),
        ("price", "decimal128(10, 2)"),
    ]
    assert decoder(schema_registry, "none").schema_changes([v2], MYSQL_CUSTOMERS) == []


def test_changes_the_table_cannot_take_name_the_subject_version_and_field(
    schema_registry: LocalRegistry, subject: str
):
    dec = decoder(schema_registry)
    schema_registry.register(subject, avro_schema(MYSQL_SCHEMA))
    retyped = _with_fields(drop="email")
    for f in retyped["fields"][:2]:
        f["fields"].append({"type": "int64", "optional": False, "field": "email"})
    cases = [
        (retyped, "field 'email' is Avro long, which column 'email' (string) does not take"),
        (_with_fields(drop="id"), "key column 'id' is not a field of its rows"),
        (
            _with_fields({"type": "string", "optional": False, "field": "code"}),
            "new field 'code' is required",
        ),
    ]
    for i, (connect, why) in enumerate(cases):
        other = f"{subject}-{i}"  # the registry (BACKWARD) refuses them under one subject
        sid = schema_registry.register(other, avro_schema(connect))
        with pytest.raises(SchemaEvolutionError, match=re.escape(why)) as info:
            dec.schema_changes([sid], MYSQL_CUSTOMERS)
        assert f"schema id {sid} (subject {other} version 1)" in str(info.value)
