"""Basic auth reaches the schema registry on every call, registrations included.

The test kit's registry (Apicurio) authenticates only through OIDC, so this test puts a
gate in front of the real registry: a small HTTP proxy in the test that answers 401
unless a request carries ``Authorization: Basic`` with the expected credentials, and
forwards the rest to the registry. The ``debezium-avro`` encoder registers through it
and the decoder fetches through it with the ``basic.auth.user.info`` of one client
properties file; without the credentials the registry's 401 is a clear
``SchemaRegistryUnavailable`` and no event is rejected.
"""

from __future__ import annotations

import base64
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pytest

from cdc_sink.formats import get_format
from cdc_sink.formats.avro_wire import SchemaRegistryUnavailable, cache_clear
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder
from cdc_sink.kafka.properties import ClientProperties
from cdc_sink_testkit.demo import generate_orders, orders_schema
from cdc_sink_testkit.registry import CCOMPAT_PATH, LocalRegistry

USER_INFO = "sink-user:p@ss:word"  # a password may hold ':'


@pytest.fixture(scope="module")
def gated(schema_registry: LocalRegistry) -> Iterator[tuple[str, list[str]]]:
    """The registry behind a basic-auth gate: its URL, and the Authorization headers seen."""
    upstream = schema_registry.url.removesuffix(CCOMPAT_PATH)
    want = "Basic " + base64.b64encode(USER_INFO.encode()).decode()
    seen: list[str] = []

    class Gate(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            got = self.headers.get("Authorization", "")
            seen.append(got)
            if got != want:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="registry"')
                self.end_headers()
                return
            length = int(self.headers.get("Content-Length") or 0)
            req = urllib.request.Request(
                upstream + self.path,
                data=self.rfile.read(length) if length else None,
                method=self.command,
                headers={"Content-Type": self.headers.get("Content-Type", "application/json")},
            )
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    status, body = resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                status, body = exc.code, exc.read()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _forward

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Gate)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}{CCOMPAT_PATH}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _options(tmp_path: Path, url: str, user_info: str | None) -> dict[str, object]:
    path = tmp_path / "client.properties"
    lines = [f"schema.registry.url={url}", "basic.auth.credentials.source=USER_INFO"]
    if user_info is not None:
        lines.append("basic.auth.user.info=${env:REGISTRY_USER_INFO}")
    path.write_text("\n".join(lines) + "\n")
    props = ClientProperties.load(path, environ={"REGISTRY_USER_INFO": user_info or ""})
    return props.registry_options()


def test_credentials_reach_the_registry_on_registration_and_fetch(
    gated: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, seen = gated
    schema = orders_schema()
    options = _options(tmp_path, url, USER_INFO)
    encode = get_format("debezium-avro").new_encoder(
        schema, subject=f"auth-{uuid.uuid4().hex[:8]}-value", **options
    )
    events = [r.event for r in generate_orders(50, seed=2, style="full_rows") if not r.malformed]
    values = pa.array([encode(e) for e in events], pa.binary())
    cache_clear()
    got = DebeziumAvroDecoder(**options).decode_with_meta(values, schema)  # type: ignore[arg-type]
    assert len(got.batch) == len(events) and len(got.rejects) == 0
    assert len(seen) >= 2 and all(h.startswith("Basic ") for h in seen)


def test_without_credentials_the_401_is_a_clear_error_and_nothing_is_rejected(
    gated: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, _ = gated
    schema = orders_schema()
    with pytest.raises(SchemaRegistryUnavailable, match="401"):
        get_format("debezium-avro").new_encoder(
            schema, subject="auth-none-value", **_options(tmp_path, url, None)
        )
    encode = get_format("debezium-avro").new_encoder(
        schema, subject=f"auth-{uuid.uuid4().hex[:8]}-value", **_options(tmp_path, url, USER_INFO)
    )
    events = [r.event for r in generate_orders(10, seed=6, style="full_rows") if not r.malformed]
    values = pa.array([encode(e) for e in events], pa.binary())
    cache_clear()
    decoder = DebeziumAvroDecoder(**_options(tmp_path, url, None))  # type: ignore[arg-type]
    with pytest.raises(SchemaRegistryUnavailable, match="answered 401"):
        decoder.decode_with_meta(values, schema)
