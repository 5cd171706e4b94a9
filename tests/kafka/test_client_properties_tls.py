"""The CA of a TLS cluster, written in Java's or librdkafka's names, given to each client
in its own: librdkafka, kafka-python and Spark's Java client (``kafka.`` options)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_sink.errors import InvalidOption
from cdc_sink.kafka.properties import ClientProperties, parse_properties
from cdc_sink_testkit.tls import make_server_certificate


@pytest.fixture(scope="module")
def ca_pem(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real CA certificate (PEM), made by the test kit with openssl."""
    return make_server_certificate(tmp_path_factory.mktemp("tls")).ca


def test_java_pem_truststore_location_is_every_clients_ca(ca_pem: Path) -> None:
    props = ClientProperties.from_mapping(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca_pem),
        }
    )
    conf = props.confluent_config()
    assert conf == {"security.protocol": "SSL", "ssl.ca.location": str(ca_pem)}
    assert props.kafka_python_config() == {"security_protocol": "SSL", "ssl_cafile": str(ca_pem)}
    assert props.spark_options() == {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca_pem),
    }


def test_java_truststore_certificates_on_joined_lines_are_pem_for_librdkafka(
    ca_pem: Path,
) -> None:
    # As a properties file writes them: continuation lines, which the parser joins.
    pem_lines = ca_pem.read_text().splitlines()
    text = "security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.certificates=" + (
        "\\\n    ".join(pem_lines) + "\n"
    )
    entries = parse_properties(text)
    assert "\n" not in entries["ssl.truststore.certificates"]  # one line, as Java reads it
    props = ClientProperties.from_mapping(entries)
    conf = props.confluent_config()
    assert conf["ssl.ca.pem"] == ca_pem.read_text()  # header, 64-char lines, footer
    assert not any(k.startswith("ssl.truststore.") for k in conf)
    spark = props.spark_options()
    assert spark["kafka.ssl.truststore.type"] == "PEM"
    assert spark["kafka.ssl.truststore.certificates"] == entries["ssl.truststore.certificates"]
    assert "kafka.ssl.truststore.location" not in spark
    with pytest.raises(InvalidOption, match="from a file only") as err:
        props.kafka_python_config()
    assert err.value.option == "ssl.truststore.certificates"


def test_librdkafka_ca_pem_becomes_a_pem_truststore_for_spark(ca_pem: Path) -> None:
    pem = ca_pem.read_text()
    props = ClientProperties.from_mapping({"security.protocol": "SSL", "ssl.ca.pem": pem})
    assert props.confluent_config()["ssl.ca.pem"] == pem
    assert props.spark_options() == {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": pem,
    }


def test_a_jks_truststore_is_sparks_and_librdkafka_needs_a_pem_ca_beside_it(
    ca_pem: Path,
) -> None:
    jks = {
        "security.protocol": "SSL",
        "ssl.truststore.location": "/etc/kafka/truststore.jks",
        "ssl.truststore.password": "changeit",
    }
    alone = ClientProperties.from_mapping(jks)  # Java's default type: JKS
    with pytest.raises(InvalidOption, match=r"JKS: librdkafka .* reads PEM") as err:
        alone.confluent_config()
    assert err.value.option == "ssl.truststore.type"
    assert "changeit" not in str(err.value)

    both = ClientProperties.from_mapping({**jks, "ssl.ca.location": str(ca_pem)})
    assert both.confluent_config() == {"security.protocol": "SSL", "ssl.ca.location": str(ca_pem)}
    spark = both.spark_options()
    assert spark["kafka.ssl.truststore.location"] == "/etc/kafka/truststore.jks"
    assert spark["kafka.ssl.truststore.password"] == "changeit"
    assert "kafka.ssl.truststore.type" not in spark  # Java's own default, not PEM
    assert "kafka.ssl.ca.location" not in spark


def test_no_host_name_check_is_spelled_for_each_client() -> None:
    java = ClientProperties.from_mapping(
        {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": ""}
    )
    assert java.confluent_config()["ssl.endpoint.identification.algorithm"] == "none"
    assert java.kafka_python_config()["ssl_check_hostname"] is False
    assert java.spark_options()["kafka.ssl.endpoint.identification.algorithm"] == ""
    librdkafka = ClientProperties.from_mapping({"ssl.endpoint.identification.algorithm": "none"})
    assert librdkafka.spark_options()["kafka.ssl.endpoint.identification.algorithm"] == ""
    checked = ClientProperties.from_mapping({"ssl.endpoint.identification.algorithm": "https"})
    assert checked.confluent_config()["ssl.endpoint.identification.algorithm"] == "https"
    assert checked.kafka_python_config()["ssl_check_hostname"] is True
    assert checked.spark_options()["kafka.ssl.endpoint.identification.algorithm"] == "https"
