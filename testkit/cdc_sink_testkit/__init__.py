"""cdc_sink's test kit: what the tests, the benchmarks and the demo need, apart from the
product (the ``cdc_sink`` package never imports it).

* :mod:`cdc_sink_testkit.kafka` - real Kafka for tests: a local KRaft broker from Maven
  Central's jars (:class:`~cdc_sink_testkit.kafka.LocalKafka`), a Docker container, or an
  external cluster (:func:`~cdc_sink_testkit.kafka.start_kafka`).
* :mod:`cdc_sink_testkit.docker_engine` - a Docker engine for the container tests.
* :mod:`cdc_sink_testkit.reference` - the reference semantics of a table, for checks.
* :mod:`cdc_sink_testkit.demo` - the orders demo (``cdc-sink demo``, ``make demo``).
* :mod:`cdc_sink_testkit.checkout` - the clone the kit is installed from (``docker/``).

Installed from a clone: ``pip install -e testkit`` (``make install`` does it).
"""
