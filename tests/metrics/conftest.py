"""Fixtures the metrics tests share: a self-signed certificate for the TLS endpoint."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

OPENSSL_REQ = (
    "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
    "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1"
)


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    crt, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [*shlex.split(OPENSSL_REQ), "-keyout", str(key), "-out", str(crt)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return crt, key
