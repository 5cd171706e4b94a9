"""Unit tests of the spark-submit entry points' command lines (no Spark is started)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from cdc_sink.table import TableOptions

JOBS = Path(__file__).resolve().parents[2] / "streaming_jobs"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_jobs_{name}", JOBS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cdc_to_tablets_arguments_and_defaults() -> None:
    job = _load("cdc_to_tablets")
    args = job.build_parser().parse_args(
        ["--bootstrap-servers", "k:9092", "--topic", "orders", "--table-path", "/data/o"]
    )
    assert (args.format, args.trigger, args.apply_mode) == ("json", "1 second", "driver")
    assert args.checkpoint is None and args.dead_letter is None
    assert args.starting_offsets == "earliest"
    assert args.numpy_hugepages == "off" and args.decode_processes == 0
    assert args.arrow_memory_pool == "auto" and args.decode_in is None
    args = job.build_parser().parse_args(
        [
            "--bootstrap-servers",
            "k:9092",
            "--topic",
            "orders",
            "--table-path",
            "/data/o",
            "--format",
            "debezium",
            "--trigger",
            "available-now",
            "--apply-mode",
            "executors",
            "--dead-letter",
            "kafka://k:9092/dlq",
            "--kafka-option",
            "kafka.security.protocol=SSL",
            "--kafka-option",
            "kafka.sasl.jaas.config=a=b",
            "--numpy-hugepages",
            "numpy",
            "--decode-processes",
            "3",
            "--decode-in",
            "executors",
        ]
    )
    assert args.format == "debezium" and args.apply_mode == "executors"
    assert args.numpy_hugepages == "numpy" and args.decode_processes == 3
    assert args.decode_in == "executors"
    assert job.parse_kafka_options(args.kafka_option) == {
        "kafka.security.protocol": "SSL",
        "kafka.sasl.jaas.config": "a=b",
    }


def test_cdc_to_tablets_numpy_hugepages_set_the_driver_and_the_executors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cdc_sink.runtime.hugepages import HUGEPAGE_ENV, numpy_hugepages, set_numpy_hugepages

    monkeypatch.delenv(HUGEPAGE_ENV, raising=False)  # put back after the test

    job = _load("cdc_to_tablets")
    before = numpy_hugepages()
    try:
        assert job.apply_numpy_hugepages("off") == {
            "spark.executorEnv.NUMPY_MADVISE_HUGEPAGE": "0",
            "spark.executorEnv.MIMALLOC_ALLOW_THP": "0",
        }
        assert numpy_hugepages() is False
        assert job.apply_numpy_hugepages("on") == {"spark.executorEnv.NUMPY_MADVISE_HUGEPAGE": "1"}
        assert numpy_hugepages() is True
        assert job.apply_numpy_hugepages("numpy") == {}
        assert numpy_hugepages() is True
    finally:
        set_numpy_hugepages(before)


def test_cdc_to_tablets_arrow_memory_pool_choices() -> None:
    """Every choice of the flag is one :func:`use_arrow_memory_pool` takes."""
    from cdc_sink.runtime.arrow_pool import POOLS

    job = _load("cdc_to_tablets")
    base = ["--bootstrap-servers", "k", "--topic", "t", "--table-path", "/x"]
    for choice in ("auto", *POOLS, "pyarrow"):
        args = job.build_parser().parse_args([*base, "--arrow-memory-pool", choice])
        assert args.arrow_memory_pool == choice
    with pytest.raises(SystemExit):
        job.build_parser().parse_args([*base, "--arrow-memory-pool", "tcmalloc"])


def test_cdc_to_tablets_refuses_bad_arguments() -> None:
    job = _load("cdc_to_tablets")
    with pytest.raises(SystemExit):
        job.build_parser().parse_args(["--topic", "t", "--table-path", "/x"])
    with pytest.raises(SystemExit):
        job.build_parser().parse_args(
            [
                "--bootstrap-servers",
                "k",
                "--topic",
                "t",
                "--table-path",
                "/x",
                "--numpy-hugepages",
                "?",
            ]
        )
    with pytest.raises(ValueError, match="KEY=VALUE"):
        job.parse_kafka_options(["novalue"])


def test_cdc_to_tablets_observability_and_maintenance_flags() -> None:
    job = _load("cdc_to_tablets")
    base = ["--bootstrap-servers", "k:9092", "--topic", "orders", "--table-path", "/data/o"]
    args = job.build_parser().parse_args(base)
    assert args.metrics_port is None and args.metrics_host == "127.0.0.1"
    assert args.table_name is None and args.log_level == "INFO"
    assert (args.compact_every, args.gc_every) == (0, 100)
    assert args.decoder_option == [] and args.json_decoder == "python"
    args = job.build_parser().parse_args(
        [
            *base,
            "--metrics-port",
            "0",
            "--metrics-host",
            "0.0.0.0",
            "--table-name",
            "orders",
            "--log-level",
            "debug",
            "--compact-every",
            "5",
            "--gc-every",
            "0",
            "--retain-versions",
            "3",
            "--retain-seconds",
            "0",
            "--decoder-option",
            "decimal_handling=string",
            "--decoder-option",
            "strict=true",
            "--decoder-option",
            'columns=["a", "b"]',
            "--decoder-option",
            "n=3",
        ]
    )
    assert (args.metrics_port, args.metrics_host, args.table_name) == (0, "0.0.0.0", "orders")
    assert args.log_level == "DEBUG"
    assert (args.compact_every, args.gc_every, args.retain_versions) == (5, 0, 3)
    assert job.parse_decoder_options(args.decoder_option) == {
        "decimal_handling": "string",
        "strict": True,
        "columns": ["a", "b"],
        "n": 3,
    }
    with pytest.raises(ValueError, match="--decoder-option 'x': expected KEY=VALUE"):
        job.parse_decoder_options(["x"])
    with pytest.raises(SystemExit):
        job.build_parser().parse_args([*base, "--log-level", "LOUD"])


def test_cdc_to_tablets_failure_reason_is_one_line() -> None:
    job = _load("cdc_to_tablets")

    class StreamingQueryException(Exception):
        pass

    StreamingQueryException.__module__ = "pyspark.errors.exceptions.captured"
    # The shape of Spark 4's message for an error raised in a foreachBatch function.
    spark_msg = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
        "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function "
        "in foreach batch sink. Reason: An exception was raised by the Python Proxy. Return "
        "Message: Traceback (most recent call last):\n"
        '  File "/x/py4j/clientserver.py", line 644, in _call_proxy\n'
        "    return_value = getattr(self.pool[obj_id], method)(*params)\n"
        "                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        '  File "/x/cdc_sink/table.py", line 9, in commit\n'
        "    raise CommitConflict(msg)\n"
        "cdc_sink.errors.CommitConflict: version 7 was committed by another writer\n"
        " SQLSTATE: 39000 SQLSTATE: XXKST\n=== Streaming Query ===\nIdentifier: [id = 1]\n"
    )
    assert job.failure_reason(StreamingQueryException(spark_msg)) == (
        "CommitConflict: version 7 was committed by another writer"
    )
    jvm = StreamingQueryException(
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Failed to "
        "construct kafka consumer\n\tat org.apache.kafka..."
    )
    assert job.failure_reason(jvm) == "Failed to construct kafka consumer"
    assert job.failure_reason(FileNotFoundError("no schema")) == "FileNotFoundError: no schema"


def test_snapshot_query_arguments() -> None:
    q = _load("snapshot_query")
    args = q.build_parser().parse_args(
        [
            "--table-path",
            "/t",
            "--timestamp",
            "1700000000000",
            "--group-by",
            "status",
            "--sum",
            "amount",
            "--sum",
            "items",
        ]
    )
    assert args.sum == ["amount", "items"] and args.version is None
    with pytest.raises(SystemExit):
        q.build_parser().parse_args(["--table-path", "/t", "--version", "1", "--timestamp", "1"])


def test_cdc_to_tablets_signal_handler_only_records_the_stop() -> None:
    """The handler runs inside whatever Py4J call the main thread is in: it must not call
    into Spark, only record the request (the main thread stops the query)."""
    import signal

    from cdc_sink.job.runner import _StopRequest

    stop = _StopRequest()
    before = signal.getsignal(signal.SIGTERM)
    try:
        stop.install()
        assert signal.getsignal(signal.SIGTERM) is stop
        assert signal.getsignal(signal.SIGINT) is stop
        stop(signal.SIGTERM, None)
        assert stop.event.is_set() and stop.signum == signal.SIGTERM
        stop(signal.SIGTERM, None)  # a second signal: the next one kills
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, before)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_cdc_to_tablets_codec_flags_name_the_table_options() -> None:
    job = _load("cdc_to_tablets")
    base = ["--bootstrap-servers", "k:9092", "--topic", "orders", "--table-path", "/data/o"]
    opts = job.table_options(job.build_parser().parse_args(base))
    assert (opts.page_compression, opts.wal_compression) == ("zstd", "lz4")
    assert opts == TableOptions()  # the job's defaults are the library's
    args = job.build_parser().parse_args(
        [*base, "--page-compression", "none", "--wal-compression", "zstd"]
    )
    opts = job.table_options(args)
    assert (opts.page_compression, opts.wal_compression) == (None, "zstd")
    with pytest.raises(SystemExit) as exc:
        job.build_parser().parse_args([*base, "--page-compression", "gzip"])
    assert exc.value.code == 2
