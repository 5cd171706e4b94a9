"""What a batch may cost the schema registry, and what the registry's answers mean (issue 49).

A writer to the topic chooses the schema ids its messages name. These tests put a small
registry of their own in front of the decoder (an HTTP/1.1 server in a thread, serving
Confluent's API under Apicurio's ``/apis/ccompat/v7`` prefix) and count what reaches it:
every GET and every new connection. Ids the registry never gave are bounded per batch
and remembered apart from the schemas; a registry that knows none of a batch's ids and
looks like the wrong one fails the batch instead of dead-lettering every message; a
registry that answers JSON nested too deeply is unavailable, not a crash.
"""

from __future__ import annotations

import io
import json
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from cdc_sink.errors import CdcSinkError, InvalidOption
from cdc_sink.formats import avro_wire
from cdc_sink.formats.avro_wire import (
    FETCH_THREADS,
    MAX_NEW_IDS,
    RegistrySettings,
    SchemaRegistryMismatch,
    SchemaRegistryUnavailable,
    TooManySchemaIds,
    cache_clear,
)
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder
from tests.avro.connect import avro_datum, avro_schema
from tests.formats.test_debezium_docs import MYSQL_CREATE, MYSQL_CUSTOMERS, MYSQL_SCHEMA

PREFIX = "/apis/ccompat/v7"
SCHEMA_TEXT = json.dumps(avro_schema(MYSQL_SCHEMA))


@dataclass
class Registry:
    """The test's registry: what it knows, and what it was asked."""

    url: str = ""
    schemas: dict[int, str] = field(default_factory=dict)
    subjects: list[str] = field(default_factory=list)
    raw: dict[int, bytes] = field(default_factory=dict)  # ids answered with these bytes
    close_after_answer: bool = False  # drop each connection without saying so
    gets: Counter[str] = field(default_factory=Counter)
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def knows(self, *ids: int) -> None:
        for sid in ids:
            self.schemas[sid] = SCHEMA_TEXT
        self.subjects = ["customers-value"]

    def id_gets(self, sid: int) -> int:
        return self.gets[f"{PREFIX}/schemas/ids/{sid}"]


def _handler(reg: Registry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as Confluent's and Apicurio's servers

        def setup(self) -> None:
            super().setup()
            with reg.lock:
                reg.connections += 1

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            with reg.lock:
                reg.gets[self.path] += 1
            body, status = self._answer()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            if reg.close_after_answer:
                self.close_connection = True

        def _answer(self) -> tuple[bytes, int]:
            path = self.path.removeprefix(PREFIX)
            if path == "/subjects":
                return json.dumps(reg.subjects).encode(), 200
            if path.startswith("/schemas/ids/"):
                sid = int(path.rsplit("/", 1)[1])
                if sid in reg.raw:
                    return reg.raw[sid], 200
                if sid in reg.schemas:
                    return json.dumps({"schema": reg.schemas[sid]}).encode(), 200
            return b'{"error_code": 40403, "message": "Schema not found"}', 404

    return Handler


@pytest.fixture
def registry() -> Iterator[Registry]:
    reg = Registry()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(reg))
    server.daemon_threads = True
    reg.url = f"http://127.0.0.1:{server.server_address[1]}{PREFIX}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cache_clear()  # a process that has looked nothing up yet
    try:
        yield reg
    finally:
        cache_clear()
        server.shutdown()
        server.server_close()


def _datum() -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(
        buf,
        fastavro.parse_schema(avro_schema(MYSQL_SCHEMA)),
        avro_datum(MYSQL_SCHEMA, MYSQL_CREATE["payload"]),
    )
    return buf.getvalue()


DATUM = _datum()


def _messages(ids: list[int]) -> pa.Array:
    return pa.array([b"\x00" + sid.to_bytes(4, "big") + DATUM for sid in ids], pa.binary())


def _decoder(reg: Registry) -> DebeziumAvroDecoder:
    return DebeziumAvroDecoder(registry_url=reg.url, registry_timeout=5)


def test_a_batch_naming_more_new_ids_than_the_limit_fails_before_any_fetch(
    registry: Registry,
) -> None:
    registry.knows(1)
    ids = [1] * 10 + list(range(1000, 4000))  # 3,000 ids the registry never gave
    with pytest.raises(TooManySchemaIds, match="never gave") as info:
        _decoder(registry).decode_with_meta(_messages(ids), MYSQL_CUSTOMERS)
    assert isinstance(info.value, CdcSinkError)
    assert info.value.count == 3001 and info.value.limit == MAX_NEW_IDS
    assert sum(registry.gets.values()) == 0


def test_the_decoder_option_sets_how_many_new_ids_a_batch_may_name(registry: Registry) -> None:
    registry.knows(1, 2, 3)
    dec = DebeziumAvroDecoder(registry_url=registry.url, registry_max_new_ids=2)
    with pytest.raises(TooManySchemaIds, match="more than the 2 a batch") as info:
        dec.decode_with_meta(_messages([1, 2, 3]), MYSQL_CUSTOMERS)
    assert (info.value.count, info.value.limit) == (3, 2)
    assert sum(registry.gets.values()) == 0
    assert len(dec.decode_with_meta(_messages([1, 2]), MYSQL_CUSTOMERS).batch) == 2
    assert len(dec.decode_with_meta(_messages([1, 2, 3]), MYSQL_CUSTOMERS).batch) == 3


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10", True])
def test_a_bad_new_ids_limit_is_an_invalid_option(bad: Any) -> None:
    with pytest.raises(InvalidOption) as info:
        DebeziumAvroDecoder(registry_url="http://127.0.0.1:1", registry_max_new_ids=bad)
    assert info.value.option == "registry_max_new_ids"


def test_new_ids_are_fetched_together_over_kept_alive_connections(registry: Registry) -> None:
    ids = list(range(1, 201))
    registry.knows(*ids)
    dec = _decoder(registry)
    got = dec.decode_with_meta(_messages(ids), MYSQL_CUSTOMERS)
    assert len(got.batch) == 200 and len(got.rejects) == 0
    assert all(registry.id_gets(sid) == 1 for sid in ids)
    assert registry.connections <= FETCH_THREADS
    again = dec.decode_with_meta(_messages(ids), MYSQL_CUSTOMERS)
    assert len(again.batch) == 200
    assert sum(registry.gets.values()) == 200  # cached: no second fetch


def test_a_connection_the_registry_closed_is_replaced(registry: Registry) -> None:
    registry.knows(1, 2)
    registry.close_after_answer = True
    dec = _decoder(registry)
    assert len(dec.decode_with_meta(_messages([1]), MYSQL_CUSTOMERS).batch) == 1
    assert len(dec.decode_with_meta(_messages([2]), MYSQL_CUSTOMERS).batch) == 1
    assert registry.connections == 2


def test_unknown_ids_are_dead_lettered_with_the_reason_and_remembered(registry: Registry) -> None:
    registry.knows(1)
    dec = _decoder(registry)
    for _ in range(2):
        got = dec.decode_with_meta(_messages([1, 999, 1]), MYSQL_CUSTOMERS)
        assert len(got.batch) == 2
        assert got.rejects.as_dict() == {
            1: "malformed event: unknown schema id 999 (the registry has none)"
        }
    assert registry.id_gets(999) == 1


def test_unknown_ids_never_push_a_schema_in_use_out_of_the_cache(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(avro_wire, "CACHE_SIZE", 16)  # a test-sized cache
    registry.knows(1)
    dec = _decoder(registry)
    assert len(dec.decode_with_meta(_messages([1]), MYSQL_CUSTOMERS).batch) == 1
    for b in range(5):  # 50 ids the registry never gave, 10 a batch, nothing else in it
        got = dec.decode_with_meta(
            _messages(list(range(100 + 10 * b, 110 + 10 * b))), MYSQL_CUSTOMERS
        )
        assert len(got.rejects) == 10 and len(got.batch) == 0
    assert len(dec.decode_with_meta(_messages([1]), MYSQL_CUSTOMERS).batch) == 1
    assert registry.id_gets(1) == 1


def test_a_registry_that_knows_none_of_the_ids_and_never_gave_one_fails_the_batch(
    registry: Registry,
) -> None:
    registry.subjects = ["some-other-topic-value"]  # a live registry, but not ours
    with pytest.raises(SchemaRegistryMismatch, match="wrong registry URL") as info:
        _decoder(registry).decode_with_meta(_messages([1, 2, 2]), MYSQL_CUSTOMERS)
    assert isinstance(info.value, SchemaRegistryUnavailable)
    assert info.value.ids == [1, 2]


def test_a_registry_that_lost_its_storage_fails_the_batch(registry: Registry) -> None:
    registry.knows(1)
    dec = _decoder(registry)
    assert len(dec.decode_with_meta(_messages([1]), MYSQL_CUSTOMERS).batch) == 1
    registry.schemas.clear()
    registry.subjects = []
    with pytest.raises(SchemaRegistryMismatch, match="lost its storage"):
        dec.decode_with_meta(_messages([2, 3]), MYSQL_CUSTOMERS)
    # a schema this process holds still decodes; an unknown id beside it is a reject
    got = dec.decode_with_meta(_messages([1, 2]), MYSQL_CUSTOMERS)
    assert len(got.batch) == 1 and list(got.rejects.as_dict()) == [1]


def test_json_nested_too_deeply_from_the_registry_is_registry_unavailable(
    registry: Registry,
) -> None:
    registry.raw[1] = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(SchemaRegistryUnavailable, match="did not answer readable JSON"):
        _decoder(registry).decode_with_meta(_messages([1]), MYSQL_CUSTOMERS)


def test_a_schema_nested_too_deeply_is_a_reject_not_a_crash(registry: Registry) -> None:
    deep = '{"type": "array", "items": ' * 50_000 + '"int"' + "}" * 50_000
    registry.knows(1)
    registry.schemas[2] = deep
    got = _decoder(registry).decode_with_meta(_messages([1, 2]), MYSQL_CUSTOMERS)
    assert len(got.batch) == 1
    assert "schema id 2 is not a readable Avro schema" in got.rejects.as_dict()[1]


def test_a_tls_file_that_cannot_be_read_names_its_option(tmp_path: Any) -> None:
    settings = RegistrySettings(
        url="https://127.0.0.1:1/apis/ccompat/v7", ca_location=str(tmp_path / "missing.pem")
    )
    with pytest.raises(InvalidOption, match="ca_location") as info:
        settings.get("/subjects")
    assert info.value.option == "registry_ssl"
