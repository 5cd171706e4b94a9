"""A TCP proxy that adds a fixed latency to each direction (:class:`LatencyProxy`).

It behaves as Toxiproxy's ``latency`` toxic does: every chunk of bytes read from one side
is written to the other ``delay_ms`` milliseconds after it arrived, in order. The delay is
counted from each chunk's own arrival, not from the end of the previous chunk's delay, so
a stream of chunks is shifted in time, not slowed down: bandwidth is not throttled, and a
request and its answer cost one round trip of ``2 * delay_ms`` more than without the
proxy. Connecting to the upstream is not delayed (as with Toxiproxy: the proxy connects
when a client connects to it), nor is closing, beyond the data before it.

It also counts the HTTP/1.x request lines it forwards from clients, per method (``LIST``
for a ``GET`` that lists a bucket, as S3's ``list-type=`` / ``delimiter=`` / ``prefix=``
queries do), so two clients of the same endpoint can be compared by the requests they
make::

    from cdc_sink_testkit.s3 import LatencyProxy, SeaweedS3

    with SeaweedS3() as s3, LatencyProxy("127.0.0.1", s3.ports["s3"], 30) as proxy:
        options = s3.storage_options(endpoint=proxy.endpoint)
        ...
        proxy.requests()          # {"GET": 12, "PUT": 3, "LIST": 1, ...}

The proxy runs an asyncio event loop in a daemon thread of its own; leaving the ``with``
block closes its listening socket and every connection and joins the thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import threading

from cdc_sink_testkit.process import StartStop

__all__ = ["REQUEST_KINDS", "LatencyProxy"]

REQUEST_KINDS: tuple[str, ...] = ("GET", "PUT", "POST", "DELETE", "HEAD", "LIST")
"""The kinds of request :meth:`LatencyProxy.requests` counts."""

_REQUEST_LINE = re.compile(rb"(GET|PUT|POST|DELETE|HEAD) (\S+) HTTP/1\.[01]\r\n")
"""An HTTP/1.x request line (counted where a line or a chunk starts: a client sends its
next request on a connection after the answer to the previous one, so a request starts a
chunk even where the previous body did not end with a newline)."""
_LIST_QUERY = re.compile(rb"[?&](list-type|delimiter|prefix)=")
_TAIL = 8192
"""Bytes of a stream kept to find a request line split between two chunks."""
_CHUNK = 65536


class _RequestCounter:
    """Counts the request lines in one client's byte stream, chunk by chunk."""

    def __init__(self, totals: collections.Counter[str], lock: threading.Lock) -> None:
        self._totals = totals
        self._lock = lock
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        """Counts the request lines that end in ``chunk`` (a line seen whole before is not
        counted again)."""
        buf = self._tail + chunk
        found = []
        fresh = len(self._tail)
        for m in _REQUEST_LINE.finditer(buf):
            start = m.start()
            if m.end() > fresh and (start in (0, fresh) or buf[start - 1] == 0x0A):
                method = m.group(1).decode()
                if method == "GET" and _LIST_QUERY.search(m.group(2)):
                    method = "LIST"
                found.append(method)
        self._tail = buf[-_TAIL:]
        if found:
            with self._lock:
                self._totals.update(found)


class LatencyProxy(StartStop):
    """A proxy on 127.0.0.1 (``.endpoint``, ``.port``) in front of ``upstream_host:
    upstream_port`` that delays each direction by ``delay_ms`` (see the module docstring).

    Use it as a context manager (or :meth:`start` / :meth:`stop`).
    """

    def __init__(self, upstream_host: str, upstream_port: int, delay_ms: float) -> None:
        """Args:
        upstream_host: The address the proxy forwards to.
        upstream_port: Its port.
        delay_ms: Milliseconds added to each direction (0: forwarded at once).
        """
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, not {delay_ms}")
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.delay_ms = delay_ms
        self.port = 0
        """The port the proxy listens on (set by :meth:`start`)."""
        self._counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------ for clients

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>`` of the proxy."""
        return f"http://127.0.0.1:{self.port}"

    def requests(self) -> dict[str, int]:
        """The HTTP requests forwarded so far, per kind (:data:`REQUEST_KINDS`)."""
        with self._lock:
            return {k: self._counts[k] for k in REQUEST_KINDS}

    def reset_requests(self) -> None:
        """Sets every request count back to 0."""
        with self._lock:
            self._counts.clear()

    # ------------------------------------------------------------ life cycle

    def start(self) -> LatencyProxy:
        """Starts listening (returns once the port is bound)."""
        if self._thread is not None:
            raise RuntimeError("the proxy is already started")
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._accept, "127.0.0.1", 0)
                )
                self.port = int(self._server.sockets[0].getsockname()[1])
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=serve, name="latency-proxy", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = self._loop = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Closes the listening socket and every connection, and joins the thread.
        Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already ended
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._loop = self._thread = None

    # ------------------------------------------------------------ internals

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream_w: asyncio.StreamWriter | None = None
        try:
            upstream_r, upstream_w = await asyncio.open_connection(
                self.upstream_host, self.upstream_port
            )
            counter = _RequestCounter(self._counts, self._lock)
            pipes = {
                asyncio.ensure_future(self._pipe(client_r, upstream_w, counter)),
                asyncio.ensure_future(self._pipe(upstream_r, client_w, None)),
            }
            try:
                # both ends of stream forwarded, or one side failed: close both
                await asyncio.wait(pipes, return_when=asyncio.FIRST_EXCEPTION)
            finally:
                for pipe in pipes:
                    pipe.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
        except OSError:
            pass  # the upstream refused the connection: close the client's
        except asyncio.CancelledError:
            pass  # stop(): the connection ends here (asyncio's server logs a re-raise)
        finally:
            for w in (client_w, upstream_w):
                if w is not None:
                    w.close()
            self._tasks.discard(task)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        counter: _RequestCounter | None,
    ) -> None:
        """Forwards ``reader`` to ``writer``, each chunk ``delay_ms`` after it arrived; an
        end of stream becomes a half close of ``writer`` at the same delay."""
        loop = asyncio.get_running_loop()
        delay = self.delay_ms / 1000.0
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, chunk = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not chunk:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                chunk = await reader.read(_CHUNK)
                if counter is not None and chunk:
                    counter.feed(chunk)
                queue.put_nowait((loop.time() + delay, chunk))
                if not chunk:
                    break
                if sender.done():  # the writer failed: stop reading
                    break
            await sender
        finally:
            if not sender.done():
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sender
