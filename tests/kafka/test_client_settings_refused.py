"""One client.properties for Spark (Java) and the Python clients, and the settings a client
refuses (issue 49).

Kafka's Java client reads a client certificate from a key store (``ssl.keystore.type``,
``ssl.keystore.key``, ``ssl.keystore.location``...), and takes settings librdkafka does
not know (its TLS protocols, serializers...). The Python clients built from the same
file get the key store in librdkafka's names and leave the Java-only settings out, with a
logged note; a setting a client still refuses is an ``InvalidOption`` naming the setting,
never its value. The clients are built for real (librdkafka loads the key and certificate
when a client is made); no broker is needed, none is reached.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdc_sink.errors import InvalidOption
from cdc_sink.kafka._clients import confluent_client
from cdc_sink.kafka.admin import admin_client
from cdc_sink.kafka.connection import check_connection
from cdc_sink.kafka.producer import RawProducer
from cdc_sink.kafka.properties import ClientProperties
from cdc_sink_testkit.tls import ServerCertificate, make_server_certificate

NOWHERE = "127.0.0.1:1"
SECRET = "Zm9vYmFyc2VjcmV0"  # what a bad value holds: never in an error


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> ServerCertificate:
    return make_server_certificate(tmp_path_factory.mktemp("tls"))


def _properties_file(path: Path, entries: dict[str, str]) -> ClientProperties:
    """``entries`` written as a Java properties file (PEM texts over continued lines, as
    one writes them for Java's PEM key store), then read back."""
    lines = []
    for key, value in entries.items():
        text = " \\\n    ".join(value.strip().splitlines())
        lines.append(f"{key}={text}")
    path.write_text("\n".join(lines) + "\n")
    return ClientProperties.load(path)


def _producer(conf: dict[str, Any]) -> None:
    RawProducer(NOWHERE, backend="confluent", **conf).close(timeout=1)


def _admin(conf: dict[str, Any]) -> None:
    admin_client(NOWHERE, **conf)


def _consumer(conf: dict[str, Any]) -> None:
    confluent_client("consumer", {**conf, "bootstrap.servers": NOWHERE, "group.id": "g"}).close()


BUILDERS = pytest.mark.parametrize(
    "build", [_producer, _admin, _consumer], ids=["producer", "admin", "consumer"]
)


@BUILDERS
def test_a_java_pem_key_store_given_as_text_serves_the_python_clients(
    build: Callable[[dict[str, Any]], None],
    tls: ServerCertificate,
    tmp_path: Path,
) -> None:
    props = _properties_file(
        tmp_path / "client.properties",
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tls.ca),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": tls.key.read_text(),
            "ssl.keystore.certificate.chain": tls.cert.read_text(),
            "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
            "metrics.num.samples": "3",
        },
    )
    build(props.confluent_config())  # librdkafka loads the key and checks it fits the cert


@BUILDERS
def test_a_java_pem_key_store_file_serves_the_python_clients(
    build: Callable[[dict[str, Any]], None], tls: ServerCertificate
) -> None:
    build(
        {
            "security.protocol": "SSL",
            "ssl.ca.location": str(tls.ca),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls.key_store),
        }
    )


def test_java_only_settings_are_left_out_with_one_note(caplog: pytest.LogCaptureFixture) -> None:
    java = {
        "key.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
        "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    }
    with caplog.at_level(logging.INFO, logger="cdc_sink.kafka._clients"):
        _admin(java)
        _producer(java)  # the same settings again: no second note
    notes = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(notes) == 1
    assert "key.serializer" in notes[0] and "ssl.enabled.protocols" in notes[0]
    assert "ByteArraySerializer" not in notes[0] and "TLSv1" not in notes[0]


@BUILDERS
def test_a_jks_key_store_needs_a_pem_certificate_beside_it(
    build: Callable[[dict[str, Any]], None], tls: ServerCertificate
) -> None:
    jks = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(tls.ca),
        "ssl.keystore.type": "JKS",
        "ssl.keystore.location": "/etc/kafka/client.jks",
        "ssl.keystore.password": SECRET,
    }
    with pytest.raises(InvalidOption, match=r"ssl\.certificate\.location") as info:
        build(jks)
    assert info.value.option == "ssl.keystore.type"
    assert SECRET not in str(info.value)
    build({**jks, "ssl.certificate.location": str(tls.cert), "ssl.key.location": str(tls.key)})


@BUILDERS
@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("ssl.key.pem", f"-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----\n"),
        ("ssl.keystore.key", f"-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----\n"),
        ("ssl.key.location", f"/nonexistent/{SECRET}.pem"),
        ("acks", SECRET),
        ("sasl.mechanism", SECRET),
        ("no.such.setting", SECRET),
    ],
)
def test_a_setting_librdkafka_refuses_is_named_without_its_value(
    build: Callable[[dict[str, Any]], None], setting: str, value: str, tls: ServerCertificate
) -> None:
    protocol = "SASL_SSL" if setting.startswith("sasl") else "SSL"
    conf = {"security.protocol": protocol, setting: value}
    if setting == "ssl.key.location":
        conf["ssl.certificate.location"] = str(tls.cert)
    with pytest.raises(InvalidOption) as info:
        build(conf)
    assert info.value.option == setting
    assert setting in str(info.value)
    assert SECRET not in str(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is None


def test_kafka_python_names_a_setting_it_does_not_take() -> None:
    with pytest.raises(InvalidOption, match="ssl_keystore") as info:
        RawProducer(NOWHERE, backend="kafka-python", ssl_keystore=SECRET)
    assert info.value.option == "ssl_keystore"
    assert SECRET not in str(info.value)


def test_the_start_up_connection_check_names_a_refused_setting() -> None:
    props = ClientProperties.from_mapping(
        {
            "security.protocol": "SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": f"-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----",
        }
    )
    with pytest.raises(InvalidOption) as info:
        check_connection(NOWHERE, props, timeout=5)
    assert info.value.option == "ssl.keystore.key"
    assert SECRET not in str(info.value)
