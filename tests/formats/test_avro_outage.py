"""A schema registry outage at the decoder: a clear error, never a reject.

The session registry is stopped (and restarted on the same port and storage) or frozen
(SIGSTOP: it accepts connections and never answers). A schema id the process has not
cached yet then makes the decode raise :class:`SchemaRegistryUnavailable` (a
:class:`CdcSinkError`: the micro-batch fails and Spark retries it) within the registry
timeout, and no event is refused; ids already cached decode without the registry; once it
is back, the same messages decode as before.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pyarrow as pa
import pytest

from cdc_sink.errors import CdcSinkError
from cdc_sink.formats.avro_wire import SchemaRegistryUnavailable, cache_clear
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder
from cdc_sink_testkit.registry import LocalRegistry
from tests.avro.connect import avro_datum, avro_schema
from tests.avro.produce import AvroWriter
from tests.formats.test_debezium_docs import MYSQL_CREATE, MYSQL_CUSTOMERS, MYSQL_SCHEMA, doc


def _messages(registry: LocalRegistry) -> list[bytes | None]:
    w = AvroWriter(registry.url, f"outage-{uuid.uuid4().hex[:8]}", avro_schema(MYSQL_SCHEMA))
    payloads = [MYSQL_CREATE["payload"], doc("mysql_customers_update_payload.json")]
    return [w(avro_datum(MYSQL_SCHEMA, p)) for p in payloads]


def test_registry_stopped_then_restarted(schema_registry: LocalRegistry):
    values = pa.array(_messages(schema_registry), pa.binary())
    dec = DebeziumAvroDecoder(registry_url=schema_registry.url, registry_timeout=5)
    before = dec.decode_with_meta(values, MYSQL_CUSTOMERS)  # fetched and cached
    assert len(before.batch) == 2
    schema_registry.kill()
    try:
        # cached ids need no registry
        assert len(dec.decode_with_meta(values, MYSQL_CUSTOMERS).batch) == 2
        cache_clear()  # a new process (an executor) that has not fetched them yet
        with pytest.raises(SchemaRegistryUnavailable, match="unreachable") as info:
            dec.decode_with_meta(values, MYSQL_CUSTOMERS)
        assert isinstance(info.value, CdcSinkError)
    finally:
        schema_registry.restart()
    if not schema_registry.persistent:  # Apicurio 2 (Java 17) keeps schemas in memory
        values = pa.array(_messages(schema_registry), pa.binary())
    after = dec.decode_with_meta(values, MYSQL_CUSTOMERS)
    assert len(after.rejects) == 0
    assert after.batch.op.tolist() == before.batch.op.tolist()
    assert [k.to_pylist() for k in after.batch.keys] == [k.to_pylist() for k in before.batch.keys]


def test_a_registry_that_never_answers_times_out(schema_registry: LocalRegistry):
    values = pa.array(_messages(schema_registry), pa.binary())
    cache_clear()
    dec = DebeziumAvroDecoder(registry_url=schema_registry.url, registry_timeout=1.5)
    pid = schema_registry.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(SchemaRegistryUnavailable):
            dec.decode_with_meta(values, MYSQL_CUSTOMERS)
        assert time.monotonic() - start < 10
    finally:
        os.kill(pid, signal.SIGCONT)
    assert len(dec.decode_with_meta(values, MYSQL_CUSTOMERS).batch) == 2
