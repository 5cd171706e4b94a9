"""The S3 server of the test session (a real SeaweedFS, see :mod:`cdc_sink_testkit.s3`):
started on first use, once per session, stopped at its end. ``tests/conftest.py``
exposes :func:`s3_server` to every test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdc_sink_testkit.s3 import SeaweedS3


@pytest.fixture(scope="session")
def s3_server() -> Iterator[SeaweedS3]:
    """The session's S3 server (``.url(prefix)``, ``.storage_options()``)."""
    server = SeaweedS3().start()
    try:
        yield server
    finally:
        server.stop()
