"""The test kit's latency-injecting proxy (:class:`cdc_sink_testkit.s3.LatencyProxy`):
bytes pass unchanged both ways, a round trip costs at least twice the delay, chunks are
shifted in time rather than delayed one after another, and a table on the S3 server
works through it (with its HTTP requests counted per kind)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from cdc_sink.schema import TableSchema
from cdc_sink.table import create_table, open_table
from cdc_sink_testkit.s3 import LatencyProxy, SeaweedS3
from tests.fixtures import ID_NAME

DELAY_MS = 50


class _Echo:
    """A TCP server on 127.0.0.1 that sends back every byte it receives."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the accept (a close alone does not)
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=5)
        assert not self._thread.is_alive()


@pytest.fixture
def echo() -> Iterator[_Echo]:
    server = _Echo()
    try:
        yield server
    finally:
        server.close()


def _receive(sock: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        data = sock.recv(n - len(got))
        assert data, "the proxy closed the connection early"
        got += data
    return bytes(got)


def test_bytes_pass_unchanged_both_ways(echo: _Echo) -> None:
    payload = os.urandom(3 * 1024 * 1024) + bytes(range(256))
    with (
        LatencyProxy("127.0.0.1", echo.port, 5) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port)) as sock,
    ):
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        assert _receive(sock, len(payload)) == payload
        sender.join()


def test_a_round_trip_costs_twice_the_delay(echo: _Echo) -> None:
    with (
        LatencyProxy("127.0.0.1", echo.port, DELAY_MS) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port)) as sock,
    ):
        for i in range(3):
            t0 = time.perf_counter()
            sock.sendall(b"ping %d" % i)
            assert _receive(sock, 6) == b"ping %d" % i
            assert time.perf_counter() - t0 >= 2 * DELAY_MS / 1000


def test_chunks_are_shifted_not_serialized(echo: _Echo) -> None:
    """Ten chunks sent 10 ms apart come back ~2 delays after the last one was sent, not
    after ten delays: the delay does not throttle a stream."""
    with (
        LatencyProxy("127.0.0.1", echo.port, DELAY_MS) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port)) as sock,
    ):
        t0 = time.perf_counter()
        for i in range(10):
            sock.sendall(b"%d" % i)
            time.sleep(0.01)
        assert _receive(sock, 10) == b"0123456789"
        elapsed = time.perf_counter() - t0
    assert 2 * DELAY_MS / 1000 <= elapsed < 5 * DELAY_MS / 1000 + 0.1


def test_stop_closes_open_connections(echo: _Echo) -> None:
    proxy = LatencyProxy("127.0.0.1", echo.port, 1).start()
    sock = socket.create_connection(("127.0.0.1", proxy.port))
    sock.sendall(b"x")
    assert _receive(sock, 1) == b"x"
    proxy.stop()
    sock.settimeout(5)
    assert sock.recv(1) == b""
    sock.close()
    proxy.stop()  # idempotent
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=2)


def test_a_table_on_s3_commits_and_reads_back_through_the_proxy(s3_server: SeaweedS3) -> None:
    schema = TableSchema.from_dict(ID_NAME)
    with LatencyProxy("127.0.0.1", s3_server.ports["s3"], 5) as proxy:
        url = s3_server.url(f"latency-{uuid.uuid4().hex}")
        options = s3_server.storage_options(endpoint=proxy.endpoint)
        table = create_table(url, schema, storage_options=options)
        for batch in range(3):
            events = [
                {"op": "upsert", "key": {"id": k}, "set": {"name": f"b{batch}"}} for k in range(10)
            ]
            table.apply(events, app_id="job", batch_id=batch)
        proxy.reset_requests()
        before = table.store.counters.snapshot()
        table.apply([{"op": "upsert", "key": {"id": 1}, "set": {"name": "x"}}])
        stored = table.store.counters.snapshot().minus(before).requests
        counted = proxy.requests()
        # the proxy sees on the wire what the store counts it asked for
        assert counted["PUT"] >= 1
        assert {k: counted[k] for k in ("GET", "PUT", "LIST", "HEAD")} == {
            k: stored[k] for k in ("GET", "PUT", "LIST", "HEAD")
        }
        reader = open_table(url, storage_options=options)
        rows = reader.read().sort_by("id").to_pylist()
    assert [r["name"] for r in rows] == ["b2", "x", *["b2"] * 8]
