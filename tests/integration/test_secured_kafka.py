"""A secured Kafka: one client properties file serves every client, against a real broker
whose listeners take only SASL (PLAIN and SCRAM), only TLS, or both.

The test kit's broker is started with ``SASL_PLAINTEXT``, ``SSL`` and ``SASL_SSL``
listeners (its PLAINTEXT listener is only used here to create topics; its TLS
certificate is signed by a throwaway CA, :attr:`LocalKafka.ca_file`). Through a secured
listener, configured by one properties file (the password only in an environment
variable the file names, ``${env:…}``; the CA in librdkafka's or Java's spelling): the
producer SDK writes the orders stream, the streaming job (``--client-properties``) reads
it with Spark's Kafka source and writes its dead letters to a Kafka topic, the Kafka
dead-letter sink reads them back; the table equals the expected state of the stream and
the dead letters are the malformed records, once each. A wrong password is a
``KafkaAuthenticationFailed`` (producer, dead-letter sink) or the job's exit code 2 with
the broker's refusal; a client that lacks the broker's CA gets the same, saying the TLS
handshake failed; both within seconds, never a hang.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cdc_sink
from cdc_sink.kafka.connection import KafkaAuthenticationFailed
from cdc_sink.kafka.deadletter import KafkaDeadLetter
from cdc_sink.kafka.producer import CdcProducer
from cdc_sink.kafka.properties import ClientProperties
from cdc_sink_testkit.kafka.broker import LocalKafka
from tests.integration.streams import orders_job_args

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
USER, PASSWORD = "orders-svc", "s3cret pass=word"


@pytest.fixture(scope="module")
def secured_kafka() -> Iterator[LocalKafka]:
    broker = LocalKafka(
        num_partitions=3, sasl_users={USER: PASSWORD, "admin": "admin-pw"}, ssl=True
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _properties(tmp_path: Path, mechanism: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.username={USER}\n"
        "sasl.password=${env:ORDERS_KAFKA_PASSWORD}\n"
    )
    return path


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_producer_and_dead_letters_through_sasl(
    secured_kafka: LocalKafka, tmp_path: Path, mechanism: str
) -> None:
    from cdc_sink_testkit.demo import generate_orders, orders_schema
    from cdc_sink_testkit.demo.stream import produce_records

    topic = f"orders-{mechanism.lower()}"
    secured_kafka.create_topic(topic, 3)
    path = _properties(tmp_path, mechanism)
    props = ClientProperties.load(path, environ={"ORDERS_KAFKA_PASSWORD": PASSWORD})
    records = generate_orders(400, seed=3)
    with CdcProducer(
        secured_kafka.sasl_bootstrap_servers, topic, orders_schema(), client_properties=props
    ) as producer:
        produce_records(producer, records)
    assert producer.raw.delivered == len(records)  # acknowledged by the broker

    wrong = ClientProperties.load(path, environ={"ORDERS_KAFKA_PASSWORD": "nope"})
    t0 = time.monotonic()
    with pytest.raises(KafkaAuthenticationFailed, match=rf"{mechanism} as '{USER}'") as err:
        CdcProducer(
            secured_kafka.sasl_bootstrap_servers, topic, orders_schema(), client_properties=wrong
        )
    assert time.monotonic() - t0 < 15
    assert "nope" not in str(err.value)
    dlq = KafkaDeadLetter(
        secured_kafka.sasl_bootstrap_servers, f"{topic}.dlq", client_properties=wrong, timeout=15
    )
    with pytest.raises(KafkaAuthenticationFailed, match=f"{topic}.dlq"):
        dlq.ensure_topic()


def _job(bootstrap: str, topic: str, tmp_path: Path, properties: Path) -> list[str]:
    from cdc_sink.spark.session import local_submit_command

    return [
        *local_submit_command(),
        str(REPO / "streaming_jobs" / "cdc_to_tablets.py"),
        *orders_job_args(
            bootstrap,
            topic,
            tmp_path,
            "--trigger",
            "available-now",
            "--dead-letter",
            f"kafka://{bootstrap}/{topic}.dead-letter",
            "--client-properties",
            str(properties),
        ),
    ]


def test_streaming_job_reads_and_dead_letters_through_sasl(
    secured_kafka: LocalKafka, tmp_path: Path
) -> None:
    from cdc_sink.spark.session import local_submit_env
    from cdc_sink_testkit.demo import ExpectedTable, diff_rows, generate_orders, orders_schema
    from cdc_sink_testkit.demo.stream import produce_records

    topic = "orders-job"
    secured_kafka.create_topic(topic, 3)
    path = _properties(tmp_path, "SCRAM-SHA-256")
    props = ClientProperties.load(path, environ={"ORDERS_KAFKA_PASSWORD": PASSWORD})
    records = generate_orders(1200, seed=17)
    with CdcProducer(
        secured_kafka.sasl_bootstrap_servers, topic, orders_schema(), client_properties=props
    ) as producer:
        produce_records(producer, records)
    expected = ExpectedTable(orders_schema())
    expected.apply_all(r.event if r.decodable else None for r in records)

    job = _job(secured_kafka.sasl_bootstrap_servers, topic, tmp_path, path)
    env = {**local_submit_env(), "ORDERS_KAFKA_PASSWORD": "wrong"}
    t0 = time.monotonic()
    refused = subprocess.run(job, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2, refused.stdout + refused.stderr[-3000:]
    said = refused.stdout + refused.stderr  # spark-submit passes Python's stderr to stdout
    assert f"refused the connection (SASL_PLAINTEXT, SCRAM-SHA-256 as '{USER}')" in said
    assert "wrong" not in said  # the password is not echoed
    assert time.monotonic() - t0 < 120  # before the Spark session starts: no hang
    assert not (tmp_path / "orders").exists()

    env["ORDERS_KAFKA_PASSWORD"] = PASSWORD
    assert PASSWORD not in " ".join(job)  # the secret is not on the command line
    done = subprocess.run(job, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    table = cdc_sink.open_table(tmp_path / "orders")
    assert diff_rows(expected.snapshot(), table.read().to_pylist(), orders_schema()) == []
    dead = KafkaDeadLetter(
        secured_kafka.sasl_bootstrap_servers, f"{topic}.dead-letter", client_properties=props
    ).read(deduplicate=False)
    coordinates = list(zip(dead["partition"].to_pylist(), dead["offset"].to_pylist(), strict=True))
    assert len(coordinates) == sum(r.malformed for r in records)
    assert len(set(coordinates)) == len(coordinates)  # each once


# -- TLS ---------------------------------------------------------------------------------

# The CA as each client library spells it; {ca} is the broker's CA file.
CA_SPELLINGS = {
    "librdkafka": "ssl.ca.location={ca}\n",
    "java-location": "ssl.truststore.type=PEM\nssl.truststore.location={ca}\n",
    "java-certificates": (  # the certificates themselves, read by Kafka's ${dir:} provider
        "ssl.truststore.type=PEM\nssl.truststore.certificates=${{dir:{ca_dir}:{ca_name}}}\n"
    ),
}


def _tls_properties(path: Path, protocol: str, ca: Path | None, spelling: str) -> Path:
    """A client properties file for ``protocol`` (``SSL`` or ``SASL_SSL``, SCRAM-SHA-512)
    trusting ``ca`` in ``spelling`` (no CA at all when ``ca`` is None)."""
    text = f"security.protocol={protocol}\n"
    if protocol == "SASL_SSL":
        text += (
            f"sasl.mechanism=SCRAM-SHA-512\nsasl.username={USER}\n"
            "sasl.password=${env:ORDERS_KAFKA_PASSWORD}\n"
        )
    if ca is not None:
        text += CA_SPELLINGS[spelling].format(ca=ca, ca_dir=ca.parent, ca_name=ca.name)
    path.write_text(text)
    return path


def _tls_bootstrap(broker: LocalKafka, protocol: str) -> str:
    return broker.ssl_bootstrap_servers if protocol == "SSL" else broker.sasl_ssl_bootstrap_servers


def _dead_letter_rows(records: list[Any], topic: str) -> list[dict[str, Any]]:
    """Dead letters of the malformed ``records`` as the sink writes them."""
    return [
        {
            "topic": topic,
            "partition": 0,
            "offset": i,
            "key": str(r.index).encode(),
            "value": json.dumps(r.event).encode(),
            "reason": f"malformed: {r.kind}",
            "batch_id": 1,
            "app_id": "tls-test",
        }
        for i, r in enumerate(records)
        if r.malformed
    ]


@pytest.mark.parametrize(
    ("protocol", "spelling", "backend"),
    [
        ("SSL", "librdkafka", "confluent"),
        ("SSL", "java-location", "kafka-python"),
        ("SASL_SSL", "java-certificates", "confluent"),
    ],
)
def test_producer_and_dead_letters_through_tls(
    secured_kafka: LocalKafka, tmp_path: Path, protocol: str, spelling: str, backend: str
) -> None:
    from cdc_sink.kafka.deadletter import records_from_rows
    from cdc_sink_testkit.demo import generate_orders, orders_schema
    from cdc_sink_testkit.demo.stream import produce_records

    assert secured_kafka.ca_file is not None
    topic = f"orders-{protocol.lower()}-{spelling}"
    secured_kafka.create_topic(topic, 3)
    path = _tls_properties(
        tmp_path / "client.properties", protocol, secured_kafka.ca_file, spelling
    )
    props = ClientProperties.load(path, environ={"ORDERS_KAFKA_PASSWORD": PASSWORD})
    bootstrap = _tls_bootstrap(secured_kafka, protocol)
    records = generate_orders(300, seed=5)
    with CdcProducer(
        bootstrap, topic, orders_schema(), backend=backend, client_properties=props
    ) as producer:
        produce_records(producer, records)
    assert producer.raw.delivered == len(records)  # acknowledged by the broker

    rows = _dead_letter_rows(records, topic)
    dlq = KafkaDeadLetter(
        bootstrap, f"{topic}.dlq", backend=backend, client_properties=props, timeout=30
    )
    dlq.write_version(records_from_rows(rows), app_id="tls-test", version=1)
    if dlq.exactly_once:  # the cursor moved in the same transaction
        assert dlq.forwarded_version("tls-test") == 1
    dlq.close()
    got = dlq.read(deduplicate=False).to_pylist()
    assert sorted((r["offset"], r["value"]) for r in got) == [
        (r["offset"], r["value"]) for r in rows
    ]


def _other_ca(tmp_path: Path) -> Path:
    """A CA that did not sign the broker's certificate."""
    from cdc_sink_testkit.tls import make_server_certificate

    return make_server_certificate(tmp_path / "other-ca").ca


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_a_client_without_the_ca_gets_a_clear_error_not_a_hang(
    secured_kafka: LocalKafka, tmp_path: Path, protocol: str
) -> None:
    from cdc_sink.kafka.connection import check_connection
    from cdc_sink_testkit.demo import orders_schema

    bootstrap = _tls_bootstrap(secured_kafka, protocol)
    env = {"ORDERS_KAFKA_PASSWORD": PASSWORD}
    no_ca = ClientProperties.load(
        _tls_properties(tmp_path / "none.properties", protocol, None, ""), environ=env
    )
    t0 = time.monotonic()
    with pytest.raises(KafkaAuthenticationFailed, match=r"TLS handshake .* failed") as err:
        check_connection(bootstrap, no_ca, timeout=30)
    assert time.monotonic() - t0 < 15
    assert "give no CA (ssl.ca.location" in str(err.value)
    assert "certificate verify failed" in str(err.value)  # the client's own reason
    with pytest.raises(KafkaAuthenticationFailed, match="give no CA"):
        CdcProducer(bootstrap, "orders-no-ca", orders_schema(), client_properties=no_ca)
    dlq = KafkaDeadLetter(bootstrap, "orders-no-ca.dlq", client_properties=no_ca, timeout=15)
    with pytest.raises(KafkaAuthenticationFailed, match=r"orders-no-ca\.dlq.*TLS handshake"):
        dlq.ensure_topic()
    assert time.monotonic() - t0 < 45  # three clients, each refused within seconds

    wrong = ClientProperties.load(
        _tls_properties(tmp_path / "wrong.properties", protocol, _other_ca(tmp_path), "librdkafka"),
        environ=env,
    )
    with pytest.raises(KafkaAuthenticationFailed, match="the one that signed the broker's"):
        check_connection(bootstrap, wrong, timeout=30)


def test_a_jks_truststore_alone_stops_the_job_with_the_reason(
    secured_kafka: LocalKafka, tmp_path: Path
) -> None:
    """librdkafka (the job's connection check) cannot read a JKS trust store: the job
    says so and exits 2 before Spark starts."""
    from tests.integration.streams import cdc_sink_command, job_process_env

    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SSL\nssl.truststore.location=/etc/kafka/truststore.jks\n"
        "ssl.truststore.password=changeit\n"
    )
    done = subprocess.run(
        [
            cdc_sink_command(),
            "run",
            *orders_job_args(secured_kafka.ssl_bootstrap_servers, "orders-jks", tmp_path),
            "--client-properties",
            str(path),
        ],
        env=job_process_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    assert "ssl.truststore.type JKS: librdkafka" in done.stderr
    assert "ssl.ca.location" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "orders").exists()


def test_streaming_job_reads_and_dead_letters_through_ssl(
    secured_kafka: LocalKafka, tmp_path: Path
) -> None:
    """One properties file in Java's spelling (``ssl.truststore.type=PEM``,
    ``ssl.truststore.location``) for the producer, Spark's Kafka source and the Kafka
    dead-letter sink; the same file without the CA stops the job with exit code 2."""
    from cdc_sink.spark.session import local_submit_env
    from cdc_sink_testkit.demo import ExpectedTable, diff_rows, generate_orders, orders_schema
    from cdc_sink_testkit.demo.stream import produce_records

    assert secured_kafka.ca_file is not None
    bootstrap = secured_kafka.ssl_bootstrap_servers
    topic = "orders-ssl-job"
    secured_kafka.create_topic(topic, 3)
    path = _tls_properties(
        tmp_path / "client.properties", "SSL", secured_kafka.ca_file, "java-location"
    )
    props = ClientProperties.load(path)
    records = generate_orders(1200, seed=19)
    with CdcProducer(bootstrap, topic, orders_schema(), client_properties=props) as producer:
        produce_records(producer, records)
    expected = ExpectedTable(orders_schema())
    expected.apply_all(r.event if r.decodable else None for r in records)

    env = local_submit_env()
    no_ca = _tls_properties(tmp_path / "no-ca.properties", "SSL", None, "")
    t0 = time.monotonic()
    refused = subprocess.run(
        _job(bootstrap, topic, tmp_path, no_ca),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr[-3000:]
    said = refused.stdout + refused.stderr  # spark-submit passes Python's stderr to stdout
    assert f"the TLS handshake with Kafka at {bootstrap} failed (SSL;" in said
    assert time.monotonic() - t0 < 120  # before the Spark session starts: no hang
    assert not (tmp_path / "orders").exists()

    done = subprocess.run(
        _job(bootstrap, topic, tmp_path, path), env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    table = cdc_sink.open_table(tmp_path / "orders")
    assert diff_rows(expected.snapshot(), table.read().to_pylist(), orders_schema()) == []
    dead = KafkaDeadLetter(bootstrap, f"{topic}.dead-letter", client_properties=props).read(
        deduplicate=False
    )
    coordinates = list(zip(dead["partition"].to_pylist(), dead["offset"].to_pylist(), strict=True))
    assert len(coordinates) == sum(r.malformed for r in records)
    assert len(set(coordinates)) == len(coordinates)  # each once
