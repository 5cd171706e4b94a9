"""Kafka Connect schemas and values as Confluent's Avro converter writes them (tests):
the test kit's :mod:`cdc_sink_testkit.avro_connect`, where the kit's Debezium streams
(:mod:`cdc_sink_testkit.inventory`) use it too."""

from cdc_sink_testkit.avro_connect import avro_datum, avro_schema, connect_json

__all__ = ["avro_datum", "avro_schema", "connect_json"]
