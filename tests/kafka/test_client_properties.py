"""The client properties file: parsing, secret placeholders, and each client's spelling of
the same settings (librdkafka, kafka-python, Spark's Java client, the registry options)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_sink.errors import InvalidOption
from cdc_sink.formats.avro_wire import RegistrySettings
from cdc_sink.kafka.properties import PROPERTIES_ENV, ClientProperties, parse_properties

# As Confluent's client.properties for a SASL/SSL cluster with a registry.
CONFLUENT_STYLE = """\
# Required connection configs for Kafka producer, consumer, and admin
bootstrap.servers=pkc-xxxx.us-east-1.aws.confluent.cloud:9092
security.protocol=SASL_SSL
sasl.mechanisms=PLAIN
sasl.username=${env:KAFKA_USER}
sasl.password=${env:KAFKA_PASSWORD}
ssl.ca.location=/etc/ssl/certs/ca.pem

! Schema Registry
schema.registry.url=https://psrc-xxxx.us-east-2.aws.confluent.cloud
basic.auth.credentials.source=USER_INFO
basic.auth.user.info=${dir:SECRETS:registry}
schema.registry.ssl.ca.location : /etc/ssl/certs/registry-ca.pem
schema.registry.request.timeout.ms 2500
"""

# As Kafka's own tools take it (Java names, a JAAS line continued over two lines).
JAVA_STYLE = """\
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="alice" password="s3cr\\\\\\"et";
"""


def _env(tmp_path: Path) -> dict[str, str]:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "registry").write_text("reg-user:reg-pass\n")
    return {"KAFKA_USER": "svc", "KAFKA_PASSWORD": "p@ss=word", "SECRETS": str(secrets)}


def _load(tmp_path: Path, text: str, env: dict[str, str]) -> ClientProperties:
    path = tmp_path / "client.properties"
    path.write_text(text.replace("SECRETS", env.get("SECRETS", "SECRETS")))
    return ClientProperties.load(path, environ=env)


def test_parse_properties_separators_comments_and_continuations() -> None:
    got = parse_properties("a=1\n# c\n! c\nb : two words\nc 3\nd=x\\\n   y\n\ne=\n")
    assert got == {"a": "1", "b": "two words", "c": "3", "d": "xy", "e": ""}
    # Java's escapes: \t, \uXXXX, and a backslash before anything else keeps it
    assert parse_properties(r"k=a\tb\u00e9\\\"q") == {"k": 'a\tb\u00e9\\"q'}


def test_confluent_style_file_gives_every_client_the_same_settings(tmp_path: Path) -> None:
    env = _env(tmp_path)
    props = _load(tmp_path, CONFLUENT_STYLE, env)
    conf = props.confluent_config()
    assert conf["sasl.username"] == "svc" and conf["sasl.password"] == "p@ss=word"
    assert conf["security.protocol"] == "SASL_SSL" and conf["ssl.ca.location"].endswith("ca.pem")
    assert not any(k.startswith(("schema.registry", "basic.auth")) for k in conf)
    kp = ClientProperties(
        kafka={k: v for k, v in props.kafka.items() if k != "bootstrap.servers"}
    ).kafka_python_config()
    assert kp == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "svc",
        "sasl_plain_password": "p@ss=word",
        "ssl_cafile": "/etc/ssl/certs/ca.pem",
    }
    spark = props.spark_options()
    assert spark["kafka.security.protocol"] == "SASL_SSL"
    assert spark["kafka.sasl.mechanism"] == "PLAIN"
    assert spark["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="svc" password="p@ss=word";'
    )
    assert spark["kafka.ssl.truststore.type"] == "PEM"
    assert spark["kafka.ssl.truststore.location"] == "/etc/ssl/certs/ca.pem"
    reg = props.registry_options()
    assert reg == {
        "registry_url": "https://psrc-xxxx.us-east-2.aws.confluent.cloud",
        "registry_auth": "reg-user:reg-pass",
        "registry_ssl": {"ca_location": "/etc/ssl/certs/registry-ca.pem"},
        "registry_timeout": 2.5,
    }
    settings = RegistrySettings.from_options(
        reg["registry_url"], reg["registry_timeout"], reg["registry_auth"], reg["registry_ssl"]
    )
    assert settings.auth == "reg-user:reg-pass"


def test_java_jaas_config_is_read_for_librdkafka_and_kept_for_spark(tmp_path: Path) -> None:
    props = _load(tmp_path, JAVA_STYLE, {})
    conf = props.confluent_config()
    assert "sasl.jaas.config" not in conf
    assert conf["sasl.username"] == "alice" and conf["sasl.password"] == 's3cr"et'
    spark = props.spark_options()
    assert spark["kafka.sasl.jaas.config"] == props.kafka["sasl.jaas.config"]
    assert spark["kafka.sasl.mechanism"] == "SCRAM-SHA-512"


def test_repr_hides_every_secret(tmp_path: Path) -> None:
    env = _env(tmp_path)
    text = repr(_load(tmp_path, CONFLUENT_STYLE, env)) + repr(_load(tmp_path, JAVA_STYLE, {}))
    for secret in ("p@ss=word", "reg-pass", "s3cr"):
        assert secret not in text
    assert "SASL_SSL" in text  # what is not secret stays readable


def test_unset_environment_variable_is_named_not_its_value(tmp_path: Path) -> None:
    with pytest.raises(InvalidOption, match="'KAFKA_PASSWORD' is not set") as err:
        _load(tmp_path, CONFLUENT_STYLE, {"KAFKA_USER": "svc"})
    assert err.value.option == "sasl.password"


def test_file_placeholder_reads_a_key_of_another_properties_file(tmp_path: Path) -> None:
    vault = tmp_path / "vault.properties"
    vault.write_text("kafka.password=from-vault\n")
    props = ClientProperties.from_mapping(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.password": f"${{file:{vault}:kafka.password}}",
        }
    )
    assert props.confluent_config()["sasl.password"] == "from-vault"
    with pytest.raises(InvalidOption, match="has no key 'other'"):
        ClientProperties.from_mapping({"sasl.password": f"${{file:{vault}:other}}"})
    with pytest.raises(InvalidOption, match="cannot read"):
        ClientProperties.from_mapping({"sasl.password": f"${{dir:{tmp_path}:missing}}"})


def test_environment_variable_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("security.protocol=SSL\n")
    props = ClientProperties.load(environ={PROPERTIES_ENV: str(path)})
    assert props.kafka == {"security.protocol": "SSL"} and props.source == str(path)
    assert ClientProperties.load(environ={}) == ClientProperties()
    with pytest.raises(InvalidOption, match="client properties"):
        ClientProperties.load(tmp_path / "nope.properties", environ={})


def test_a_mechanism_without_a_known_login_module_needs_an_explicit_jaas_config() -> None:
    props = ClientProperties.from_mapping(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "u"}
    )
    with pytest.raises(InvalidOption, match=r"explicit sasl\.jaas\.config"):
        props.spark_options()


def test_settings_kafka_python_cannot_take_are_refused_by_name() -> None:
    props = ClientProperties.from_mapping({"enable.idempotence": "true"})
    with pytest.raises(InvalidOption, match=r"'enable\.idempotence'"):
        props.kafka_python_config()
