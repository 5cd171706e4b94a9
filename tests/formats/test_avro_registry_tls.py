"""The schema registry reached over TLS with the settings of the client properties file,
the same file that holds the Kafka cluster's security settings.

A real Apicurio Registry serves ``https`` only, with a self-signed certificate. The
``debezium-avro`` encoder registers through it and the decoder fetches through it with the
``schema.registry.*`` entries of one properties file; the events decode to the same
change batch as the same events through the Debezium JSON path. Without the CA entry the
decoder refuses the certificate with a clear ``SchemaRegistryUnavailable``, and nothing
is rejected.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from cdc_sink.formats import get_format
from cdc_sink.formats.avro_wire import SchemaRegistryUnavailable, cache_clear
from cdc_sink.formats.debezium import DebeziumDecoder
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder
from cdc_sink.kafka.properties import ClientProperties
from cdc_sink_testkit.demo import generate_orders, orders_schema
from cdc_sink_testkit.registry import LocalRegistry


@pytest.fixture(scope="module")
def tls_registry() -> Iterator[LocalRegistry]:
    registry = LocalRegistry(tls=True).start()
    try:
        yield registry
    finally:
        registry.stop()


def _properties(tmp_path: Path, registry: LocalRegistry, *, with_ca: bool) -> ClientProperties:
    lines = [
        "security.protocol=SASL_SSL",  # the cluster's settings live beside the registry's
        "sasl.mechanism=PLAIN",
        f"schema.registry.url={registry.url}",
        "schema.registry.request.timeout.ms=5000",
    ]
    if with_ca:
        lines.append(f"schema.registry.ssl.ca.location={registry.ca_file}")
    path = tmp_path / "client.properties"
    path.write_text("\n".join(lines) + "\n")
    return ClientProperties.load(path, environ={})


def test_encode_and_decode_through_an_https_registry(
    tls_registry: LocalRegistry, tmp_path: Path
) -> None:
    assert tls_registry.url.startswith("https://")
    props = _properties(tmp_path, tls_registry, with_ca=True)
    schema = orders_schema()
    events = [r.event for r in generate_orders(300, seed=4, style="full_rows") if not r.malformed]
    encode = get_format("debezium-avro").new_encoder(
        schema, subject=f"tls-{uuid.uuid4().hex[:8]}-value", **props.registry_options()
    )
    avro = pa.array([encode(e) for e in events], pa.binary())
    cache_clear()  # the decoder fetches the schema itself, over TLS
    got = DebeziumAvroDecoder(**props.registry_options()).decode_with_meta(avro, schema)
    json_encode = get_format("debezium").new_encoder(schema)
    json = pa.array([json_encode(e) for e in events], pa.binary())
    want = DebeziumDecoder().decode_with_meta(json, schema)
    assert len(got.rejects) == len(want.rejects) == 0
    assert got.batch.to_arrow().equals(want.batch.to_arrow())


def test_without_the_ca_the_certificate_is_refused_and_nothing_rejected(
    tls_registry: LocalRegistry, tmp_path: Path
) -> None:
    schema = orders_schema()
    good = _properties(tmp_path, tls_registry, with_ca=True)
    encode = get_format("debezium-avro").new_encoder(
        schema, subject=f"tls-{uuid.uuid4().hex[:8]}-value", **good.registry_options()
    )
    events = [r.event for r in generate_orders(20, seed=8, style="full_rows") if not r.malformed]
    avro = pa.array([encode(e) for e in events], pa.binary())
    cache_clear()
    bare = _properties(tmp_path, tls_registry, with_ca=False)
    with pytest.raises(SchemaRegistryUnavailable, match=r"CERTIFICATE_VERIFY_FAILED"):
        DebeziumAvroDecoder(**bare.registry_options()).decode_with_meta(avro, schema)
