"""A connection check at start-up: refused credentials are a clear error, not a hang.

A Kafka client given a wrong SASL password does not fail: librdkafka logs the broker's
refusal, reconnects, and a producer's records wait out ``message.timeout.ms`` (five
minutes by default) before they fail as timed out; a metadata request only says "broker
transport failure". :func:`check_connection` asks the cluster for its metadata once, with
the deployment's settings, and turns what the client reported meanwhile into a typed
error naming the servers, the mechanism and the user (never the password):
:class:`KafkaAuthenticationFailed` or :class:`KafkaUnreachable`. A TLS handshake that
fails (a client that does not trust the broker's certificate: it is missing the CA, or
names the wrong one) is a :class:`KafkaAuthenticationFailed` too, saying so and which
settings give the CA. The streaming job, the producer SDK and the Kafka dead-letter sink
call it before they start when they are given client properties.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from cdc_sink.errors import KafkaAuthenticationFailed, KafkaUnreachable
from cdc_sink.kafka.properties import ClientProperties

__all__ = ["KafkaAuthenticationFailed", "KafkaUnreachable", "check_connection"]


_AUTH_CODES = frozenset({"_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL"})
_CA_SETTINGS = (
    "ssl.ca.location, or ssl.truststore.type=PEM with ssl.truststore.location or "
    "ssl.truststore.certificates"
)


def _who(props: ClientProperties) -> str:
    """``SASL_SSL, PLAIN as 'alice'`` (what was tried, without the secret)."""
    conf = props.confluent_config()
    protocol = conf.get("security.protocol", "PLAINTEXT")
    if not protocol.upper().startswith("SASL"):
        return protocol
    mech = conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI"))
    user = conf.get("sasl.username")
    return f"{protocol}, {mech}" + (f" as {user!r}" if user else "")


def _refusal(bootstrap_servers: str, props: ClientProperties, error: Any) -> str:
    """What an authentication or TLS failure reported by the client says to the user."""
    if error.name() != "_SSL":
        return f"Kafka at {bootstrap_servers} refused the connection ({_who(props)}): {error.str()}"
    conf = props.confluent_config()
    if "ssl.ca.location" in conf or "ssl.ca.pem" in conf:
        hint = "is the CA given in the client properties the one that signed the broker's?"
    else:
        hint = f"the client properties give no CA ({_CA_SETTINGS})"
    return (
        f"the TLS handshake with Kafka at {bootstrap_servers} failed ({_who(props)}; "
        f"{hint}): {error.str()}"
    )


def check_connection(
    bootstrap_servers: str, props: ClientProperties | None = None, *, timeout: float = 30.0
) -> None:
    """Asks the cluster for its metadata with ``props``' settings (confluent-kafka).

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        props: The connection settings (SASL, TLS); none: plaintext.
        timeout: Seconds to wait for an answer.

    Raises:
        KafkaAuthenticationFailed: A broker refused the credentials, or the TLS handshake
            failed.
        KafkaUnreachable: No broker answered within ``timeout``.
        InvalidOption: Settings librdkafka cannot take (``ClientProperties.confluent_config``).
        MissingExtra: confluent-kafka is not installed (the ``kafka`` extra).
    """
    from cdc_sink.utils.extras import require

    require("confluent_kafka", feature="the Kafka connection check")
    from confluent_kafka import KafkaException

    from cdc_sink.kafka._clients import confluent_client

    props = props or ClientProperties()
    reported: list[Any] = []
    quiet = logging.getLogger("cdc_sink.kafka.connection.librdkafka")
    quiet.setLevel(logging.CRITICAL)  # the refusals are reported once, below
    conf: dict[str, Any] = {
        **props.confluent_config(),
        "bootstrap.servers": bootstrap_servers,
        "error_cb": reported.append,
        "logger": quiet,
    }
    admin = confluent_client("admin", conf)  # a setting librdkafka refuses: InvalidOption
    deadline = time.monotonic() + timeout
    auth: list[Any] = []
    while True:  # short requests, serving the error callbacks between them
        left = deadline - time.monotonic()
        try:
            admin.list_topics(timeout=max(0.1, min(1.0, left)))
            return
        except KafkaException as exc:
            failure: Any = exc.args[0] if exc.args else exc
        admin.poll(0)
        auth = [e for e in reported if e.name() in _AUTH_CODES]
        if auth or time.monotonic() >= deadline:
            break
    if auth:
        raise KafkaAuthenticationFailed(_refusal(bootstrap_servers, props, auth[-1]))
    last = reported[-1].str() if reported else str(failure)
    raise KafkaUnreachable(
        f"Kafka at {bootstrap_servers} did not answer within {timeout:g}s ({_who(props)}): {last}"
    )
