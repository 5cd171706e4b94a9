"""Certificates for the kit's TLS servers (the schema registry, the Kafka broker).

:func:`make_server_certificate` makes, with ``openssl``, a throwaway certificate
authority and a server certificate it signs for one address, valid for a day::

    <directory>/ca.pem      the CA's certificate: what a client trusts
    <directory>/cert.pem    the server's certificate (subjectAltName: the address)
    <directory>/key.pem     its private key (PKCS#8, unencrypted)
    <directory>/server.pem  key.pem and cert.pem in one file (a PEM key store, as
                            Kafka's ``ssl.keystore.type=PEM`` reads it)

The CA's own key is deleted once it has signed: nothing else can be issued under it.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CertificateError", "ServerCertificate", "make_server_certificate"]

_OPENSSL_TIMEOUT_S = 60.0


class CertificateError(RuntimeError):
    """``openssl`` could not make a certificate (the message ends with what it said)."""


@dataclass(frozen=True)
class ServerCertificate:
    """The files :func:`make_server_certificate` wrote (module docstring).

    Attributes:
        ca: The CA's certificate (PEM): what a client must trust.
        cert: The server's certificate (PEM), signed by the CA.
        key: The server's private key (PEM, PKCS#8, unencrypted).
        key_store: ``key`` then ``cert`` in one PEM file.
    """

    ca: Path
    cert: Path
    key: Path
    key_store: Path


def _subject_alt_name(host: str) -> str:
    """``IP:127.0.0.1`` for an address, ``DNS:name`` for a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return f"DNS:{host}"
    return f"IP:{host}"


def _openssl(*args: str) -> None:
    done = subprocess.run(
        ["openssl", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=_OPENSSL_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise CertificateError(f"openssl {args[0]} failed ({done.returncode}): {done.stderr}")


def make_server_certificate(
    directory: Path, host: str = "127.0.0.1", *, days: int = 1
) -> ServerCertificate:
    """Makes a CA and a certificate it signs for ``host`` in ``directory`` (created).

    Args:
        directory: Where the files go (module docstring).
        host: The address (or name) the server is reached at.
        days: How long both certificates are valid.

    Raises:
        CertificateError: ``openssl`` is missing or failed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.pem", directory / "ca-key.pem"
    cert, key = directory / "cert.pem", directory / "key.pem"
    common = ("-newkey", "rsa:2048", "-nodes", "-days", str(days))
    try:
        _openssl(
            "req",
            "-x509",
            *common,
            "-subj",
            "/CN=cdc_sink test kit CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            str(ca_key),
            "-out",
            str(ca),
        )
        _openssl(  # OpenSSL 3: -x509 with -CA issues the request's certificate under the CA
            "req",
            "-x509",
            *common,
            "-CA",
            str(ca),
            "-CAkey",
            str(ca_key),
            "-subj",
            f"/CN={host}",
            "-addext",
            f"subjectAltName={_subject_alt_name(host)}",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
            "-addext",
            "extendedKeyUsage=serverAuth",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CertificateError(f"openssl could not be run: {exc}") from exc
    finally:
        ca_key.unlink(missing_ok=True)
    key_store = directory / "server.pem"
    key_store.write_text(key.read_text() + cert.read_text())
    return ServerCertificate(ca=ca, cert=cert, key=key, key_store=key_store)
