"""An S3 endpoint that ignores conditional creates: a proxy in front of a real one.

Every request is forwarded verbatim (its Host header too, so SigV4 signatures still
verify); a ``412 Precondition Failed`` answer is turned into ``200 OK``, which is what a
client sees from an endpoint that silently ignores ``If-None-Match: *`` (the second
create "succeeds"). The object itself is not overwritten: only the answer lies, which is
all the open-time probe can see anyway.
"""

from __future__ import annotations

import http.client
import http.server
import threading
from types import TracebackType
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection"}


class IgnoringConditionalPuts:
    """A proxy on 127.0.0.1 (``.endpoint``) in front of ``upstream`` (``http://h:p``)."""

    def __init__(self, upstream: str) -> None:
        target = urlsplit(upstream)
        host, port = target.hostname or "127.0.0.1", target.port or 80
        lied: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(host, port, timeout=30)
                try:
                    conn.putrequest(
                        self.command, self.path, skip_host=True, skip_accept_encoding=True
                    )
                    for name, value in self.headers.items():
                        if name.lower() not in _HOP_BY_HOP:
                            conn.putheader(name, value)
                    conn.endheaders(body)
                    resp = conn.getresponse()
                    data = resp.read()
                    status, headers = resp.status, resp.getheaders()
                finally:
                    conn.close()
                if status == 412:
                    lied.append(self.path)
                    status, data = 200, b""
                    headers = [("ETag", '"ignored-precondition"')]
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP | {"content-length"}:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.lied = lied
        """The paths of the requests whose 412 answer was turned into 200."""
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> IgnoringConditionalPuts:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
