"""The compose stack's producer: the demo's orders stream, onto a Kafka topic.

Creates the topic (``--partitions``) unless it exists, then produces the first
``--events`` records of the seeded orders stream (:func:`cdc_sink_testkit.demo.generate_orders`,
malformed records included, as ``cdc-sink demo`` does) with :class:`CdcProducer`, and
exits once every record is delivered. The same ``--events``/``--seed`` always give the
same records, so the table's final state can be checked against
:class:`cdc_sink_testkit.demo.ExpectedTable` fed with them.

    python produce_orders.py --bootstrap-servers 127.0.0.1:9092 --topic orders
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from cdc_sink.kafka.properties import ClientProperties


def build_parser() -> argparse.ArgumentParser:
    """The producer's arguments."""
    from cdc_sink.formats import FORMATS

    p = argparse.ArgumentParser(prog="produce_orders", description=__doc__.split("\n")[0])
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--topic", default="orders")
    p.add_argument("--events", type=int, default=5000, help="records to produce")
    p.add_argument("--seed", type=int, default=7, help="seed of the orders stream")
    p.add_argument("--partitions", type=int, default=4, help="partitions of a new topic")
    p.add_argument("--format", choices=FORMATS, default="json")
    p.add_argument(
        "--wait",
        type=float,
        default=120.0,
        help="seconds to wait for the broker (and the schema registry) to answer",
    )
    p.add_argument(
        "--client-properties",
        default=None,
        help="Kafka and schema-registry settings (default: the file "
        "$CDC_SINK_CLIENT_PROPERTIES names; debezium-avro needs schema.registry.url)",
    )
    return p


def wait_for_registry(props: ClientProperties, timeout: float) -> None:
    """Polls the schema registry's ``/config`` until it answers (it starts with the stack)."""
    from cdc_sink.formats.avro_wire import RegistrySettings, SchemaRegistryUnavailable

    o = props.registry_options()
    if "registry_url" not in o:
        raise SystemExit(
            "--format debezium-avro needs schema.registry.url in the client properties"
        )
    settings = RegistrySettings.from_options(
        o["registry_url"], 5.0, o.get("registry_auth"), o.get("registry_ssl")
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            settings.get("/config")
            return
        except SchemaRegistryUnavailable as exc:
            if time.monotonic() > deadline:
                raise SystemExit(f"no schema registry after {timeout}s ({exc})") from None
        time.sleep(0.5)


def wait_for_broker(bootstrap: str, timeout: float) -> None:
    """Polls the cluster's metadata until it names a broker (the stack starts together)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            if admin.list_topics(timeout=2.0).brokers:
                return
        except Exception as exc:  # KafkaException while the broker starts
            last = exc
        if time.monotonic() > deadline:
            raise SystemExit(f"no Kafka broker at {bootstrap} after {timeout}s ({last})")
        time.sleep(0.5)


def main(argv: Sequence[str] | None = None) -> int:
    """Produces the stream; 0 when every record was delivered."""
    args = build_parser().parse_args(argv)
    from confluent_kafka.admin import AdminClient

    from cdc_sink.kafka.admin import create_topic
    from cdc_sink.kafka.producer import CdcProducer
    from cdc_sink_testkit.demo import generate_orders, orders_schema
    from cdc_sink_testkit.demo.stream import produce_records

    props = ClientProperties.load(args.client_properties)
    wait_for_broker(args.bootstrap_servers, args.wait)
    if args.format == "debezium-avro":
        wait_for_registry(props, args.wait)
    existing = (
        AdminClient({"bootstrap.servers": args.bootstrap_servers}).list_topics(timeout=10).topics
    )
    if args.topic not in existing:
        create_topic(args.bootstrap_servers, args.topic, args.partitions)
    # Debezium connectors send whole rows
    full_rows = args.format in ("debezium", "debezium-avro")
    records = generate_orders(
        args.events, seed=args.seed, style="full_rows" if full_rows else "partial"
    )
    t0 = time.monotonic()
    with CdcProducer(
        args.bootstrap_servers,
        args.topic,
        orders_schema(),
        format=args.format,
        client_properties=props if props.kafka or props.registry else None,
    ) as producer:
        produce_records(producer, records)
        producer.flush()
    print(
        f"produce_orders: {len(records)} records (seed {args.seed}) to {args.topic!r} "
        f"in {time.monotonic() - t0:.1f}s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
