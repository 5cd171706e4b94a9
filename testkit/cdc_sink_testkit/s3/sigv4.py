"""AWS Signature Version 4 for the few bucket requests the test kit makes itself.

The product talks to S3 through obstore; the kit only needs to create (and list) buckets
on its own server, which obstore cannot do. A signed request is a plain
:mod:`urllib.request` call with the headers :func:`signed_headers` returns.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import urllib.error
import urllib.request
from urllib.parse import quote

__all__ = ["signed_headers", "signed_request"]

_ALGORITHM = "AWS4-HMAC-SHA256"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_headers(
    method: str,
    host: str,
    path: str,
    *,
    access_key: str,
    secret_key: str,
    region: str = "us-east-1",
    body: bytes = b"",
    now: datetime.datetime | None = None,
) -> dict[str, str]:
    """The headers that sign ``method host/path`` (no query string) for service ``s3``.

    Args:
        method: ``PUT``, ``GET``...
        host: ``host:port`` as the request's Host header will carry it.
        path: The absolute path, unencoded (``/bucket``).
        access_key: The access key id.
        secret_key: The secret key.
        region: The signing region.
        body: The request body (its SHA-256 is signed).
        now: The signing time (default: now, UTC).

    Returns:
        ``x-amz-date``, ``x-amz-content-sha256`` and ``Authorization``.
    """
    when = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = when.strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    payload = hashlib.sha256(body).hexdigest()
    names = "host;x-amz-content-sha256;x-amz-date"
    canonical = "\n".join(
        [
            method,
            quote(path, safe="/-_.~"),
            "",
            f"host:{host}",
            f"x-amz-content-sha256:{payload}",
            f"x-amz-date:{stamp}",
            "",
            names,
            payload,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join([_ALGORITHM, stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return {
        "x-amz-date": stamp,
        "x-amz-content-sha256": payload,
        "Authorization": (
            f"{_ALGORITHM} Credential={access_key}/{scope}, "
            f"SignedHeaders={names}, Signature={signature}"
        ),
    }


def signed_request(
    method: str,
    endpoint: str,
    path: str,
    *,
    access_key: str,
    secret_key: str,
    region: str = "us-east-1",
    timeout: float = 10.0,
) -> tuple[int, bytes]:
    """Sends a signed request without a body to ``endpoint`` (``http://host:port``).

    Returns:
        The HTTP status and the response body (an error status is returned, not raised).

    Raises:
        OSError: The endpoint cannot be reached.
    """
    host = endpoint.split("://", 1)[1].rstrip("/")
    headers = signed_headers(
        method, host, path, access_key=access_key, secret_key=secret_key, region=region
    )
    req = urllib.request.Request(f"{endpoint.rstrip('/')}{quote(path)}", method=method)
    for name, value in headers.items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
