"""The job's Prometheus metrics: names, labels and values as scraped, reason classes,
the array-fed histogram, the /metrics endpoint and the Kafka progress reader."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cdc_sink.metrics import (
    OPS,
    OUTCOMES,
    PHASES,
    REASON_CLASSES,
    RESULTS,
    MetricsServerError,
    ProgressPoller,
    SinkMetrics,
    classify_reason,
    classify_reasons,
    kafka_progress,
    start_metrics_server,
)
from cdc_sink.metrics.histogram import BulkHistogram
from cdc_sink.schema import TableSchema
from cdc_sink.spark.writer import BatchStats

LABELS = {"table": "orders", "app_id": "job-1"}

SCHEMA = TableSchema.from_dict(
    {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "v", "type": "string"},
            {"name": "n", "type": "int8"},
            {"name": "r", "type": "float64", "nullable": False},
            {"name": "s", "type": "int64"},
        ],
        "primary_key": ["id"],
        "sequence_column": "s",
        "num_buckets": 2,
    }
)


def scrape(m: SinkMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the exposition text: (name, labels) -> value."""
    out = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return samples[(name, frozenset({**LABELS, **labels}.items()))]


def committed_batch() -> BatchStats:
    # 100 events read: 60 applied (40 inserted, 15 updated, 5 deleted), 10 stale,
    # 4 ignored, 6 rejected; 20 skipped by the decoder on purpose (tombstones).
    fresh = np.array([40, 80, 120, 900, 2500], dtype=np.int64)  # produce -> visible, ms
    return BatchStats(
        batch_id=3,
        version=7,
        skipped=False,
        events=100,
        rejected=6,
        counts={
            "inserted": 40,
            "updated": 15,
            "deleted": 5,
            "ignored": 4,
            "stale": 10,
            "rejected": 2,
        },
        total_s=0.3,
        committed_ms=1_700_000_000_500,
        phases={"read": 0.02, "decode": 0.05, "apply": 0.1, "commit": 0.03, "dead_letters": 0.2},
        ops={"insert": 30, "upsert": 20, "update": 15, "delete": 9},
        rejects_by_reason={
            "not a JSON object": 2,
            "unknown column 'zz'": 1,
            "column 'n': 300 is not a valid int8": 1,
            "update of missing key": 2,
        },
        ts_sample=1_700_000_000_500 - fresh,
    )


# ---------------------------------------------------------------------- series and names
def test_every_series_exists_at_zero_before_the_first_batch() -> None:
    s = scrape(SinkMetrics("orders", "job-1"))
    for outcome in OUTCOMES:
        assert sample(s, "cdc_sink_events_total", op="all", outcome=outcome) == 0
    for op in OPS:
        assert sample(s, "cdc_sink_events_total", op=op, outcome="received") == 0
    for reason in REASON_CLASSES:
        assert sample(s, "cdc_sink_dead_letters_total", reason=reason) == 0
    for result in RESULTS:
        assert sample(s, "cdc_sink_batches_total", result=result) == 0
    for phase in PHASES:
        assert sample(s, "cdc_sink_batch_phase_seconds_count", phase=phase) == 0
    for result in ("ok", "failed"):
        assert sample(s, "cdc_sink_gc_runs_total", result=result) == 0
    for name in (
        "cdc_sink_batch_duration_seconds_count",
        "cdc_sink_batch_events_count",
        "cdc_sink_freshness_seconds_count",
        "cdc_sink_compactions_total",
        "cdc_sink_compaction_duration_seconds_count",
        "cdc_sink_gc_duration_seconds_count",
        "cdc_sink_gc_removed_files_total",
        "cdc_sink_gc_removed_bytes_total",
    ):
        assert sample(s, name) == 0, name


def test_two_jobs_in_one_process_do_not_collide() -> None:
    a, b = SinkMetrics("a", "x"), SinkMetrics("b", "y")
    a.observe_batch(committed_batch())
    assert a.value("cdc_sink_batches_total", result="committed") == 1
    assert b.value("cdc_sink_batches_total", result="committed") == 0


# ---------------------------------------------------------------------- one batch
def test_committed_batch_counts_outcomes_ops_reasons_phases_and_freshness() -> None:
    m = SinkMetrics("orders", "job-1")
    m.observe_batch(committed_batch())
    s = scrape(m)
    assert sample(s, "cdc_sink_batches_total", result="committed") == 1
    outcomes = {o: sample(s, "cdc_sink_events_total", op="all", outcome=o) for o in OUTCOMES}
    assert outcomes == {"applied": 60, "stale": 10, "ignored": 4 + 20, "rejected": 6}
    assert sum(outcomes.values()) == 100  # every event read has one outcome
    received = {op: sample(s, "cdc_sink_events_total", op=op, outcome="received") for op in OPS}
    assert received == {
        "insert": 30,
        "upsert": 20,
        "update": 15,
        "delete": 9,
        "truncate": 0,
        "unknown": 26,
    }
    assert sum(received.values()) == 100
    reasons = {r: sample(s, "cdc_sink_dead_letters_total", reason=r) for r in REASON_CLASSES}
    assert {r: n for r, n in reasons.items() if n} == {
        "bad_json": 2,
        "unknown_column": 1,
        "wrong_type": 1,
        "update_missing_key": 2,
    }
    for phase, seconds in committed_batch().phases.items():
        assert sample(s, "cdc_sink_batch_phase_seconds_count", phase=phase) == 1
        assert sample(s, "cdc_sink_batch_phase_seconds_sum", phase=phase) == pytest.approx(seconds)
    assert sample(s, "cdc_sink_batch_duration_seconds_sum") == pytest.approx(0.3)
    assert sample(s, "cdc_sink_batch_events_sum") == 100
    assert sample(s, "cdc_sink_batch_events_bucket", le="100.0") == 1
    assert sample(s, "cdc_sink_batch_events_bucket", le="10.0") == 0
    assert sample(s, "cdc_sink_freshness_seconds_count") == 5
    assert sample(s, "cdc_sink_freshness_seconds_sum") == pytest.approx(3.64)
    assert sample(s, "cdc_sink_freshness_seconds_bucket", le="0.05") == 1  # 40 ms
    assert sample(s, "cdc_sink_freshness_seconds_bucket", le="0.1") == 2  # + 80 ms
    assert sample(s, "cdc_sink_freshness_seconds_bucket", le="1.0") == 4  # + 120, 900
    assert sample(s, "cdc_sink_freshness_seconds_bucket", le="2.0") == 4
    assert sample(s, "cdc_sink_freshness_seconds_bucket", le="3.0") == 5  # + 2500 ms
    assert sample(s, "cdc_sink_freshness_seconds_bucket", le="+Inf") == 5
    assert sample(s, "cdc_sink_last_commit_timestamp_seconds") == pytest.approx(1_700_000_000.5)


def test_skipped_replay_counts_only_the_batch() -> None:
    m = SinkMetrics("orders", "job-1")
    m.observe_batch(
        BatchStats(batch_id=1, version=None, skipped=True, events=0, rejected=0, result="skipped")
    )
    s = scrape(m)
    assert sample(s, "cdc_sink_batches_total", result="skipped") == 1
    assert sample(s, "cdc_sink_batches_total", result="committed") == 0
    assert sample(s, "cdc_sink_batch_duration_seconds_count") == 0
    assert m.value("cdc_sink_last_commit_timestamp_seconds") is None  # no commit yet


def test_failed_batch_counts_its_phases_but_no_events() -> None:
    m = SinkMetrics("orders", "job-1")
    m.observe_batch(
        BatchStats(
            batch_id=2,
            version=None,
            skipped=False,
            events=50,
            rejected=0,
            result="failed",
            phases={"read": 0.5, "decode": 0.25},
        )
    )
    s = scrape(m)
    assert sample(s, "cdc_sink_batches_total", result="failed") == 1
    assert sample(s, "cdc_sink_batch_phase_seconds_sum", phase="read") == 0.5
    assert sample(s, "cdc_sink_events_total", op="all", outcome="applied") == 0
    assert sample(s, "cdc_sink_batch_events_count") == 0


def test_batch_stats_without_phases_uses_decode_and_apply_seconds() -> None:
    @dataclass
    class OldStats:
        batch_id: int = 0
        version: int | None = 1
        skipped: bool = False
        events: int = 5
        rejected: int = 1
        counts: dict[str, int] = field(default_factory=lambda: {"inserted": 4, "rejected": 1})
        decode_s: float = 0.5
        apply_s: float = 0.25
        total_s: float = 1.0
        committed_ms: int = 1000

        def freshness_ms(self) -> np.ndarray:
            return np.empty(0, np.int64)

    m = SinkMetrics("orders", "job-1")
    m.observe_batch(OldStats())
    assert m.value("cdc_sink_batch_phase_seconds_sum", phase="decode") == 0.5
    assert m.value("cdc_sink_batch_phase_seconds_sum", phase="apply") == 0.25
    assert m.value("cdc_sink_dead_letters_total", reason="other") == 1
    assert m.value("cdc_sink_events_total", op="all", outcome="applied") == 4


def test_a_failing_update_is_logged_and_counted_never_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    m = SinkMetrics("orders", "job-1")
    broken = BatchStats(batch_id=1, version=2, skipped=False, events=3, rejected=0)
    broken.counts = None  # type: ignore[assignment]
    broken.freshness_ms = None  # type: ignore[assignment,method-assign]
    m.observe_batch(broken)
    assert m.value("cdc_sink_metrics_errors_total") == 1
    assert "metrics update observe_batch failed" in caplog.text


def test_counters_accumulate_over_batches() -> None:
    m = SinkMetrics("orders", "job-1")
    for _ in range(3):
        m.observe_batch(committed_batch())
    assert m.value("cdc_sink_events_total", op="all", outcome="applied") == 180
    assert m.value("cdc_sink_dead_letters_total", reason="bad_json") == 6
    assert m.value("cdc_sink_batches_total", result="committed") == 3


# ---------------------------------------------------------------------- table, maintenance
def test_table_gauges_follow_table_stats(tmp_path: object) -> None:
    import cdc_sink

    t = cdc_sink.create_table(f"{tmp_path}/t", SCHEMA)
    t.apply([{"op": "upsert", "key": {"id": i}, "set": {"r": 1.0}, "seq": 1} for i in range(10)])
    t.apply([{"op": "delete", "key": {"id": 0}, "seq": 2}])
    m = SinkMetrics("t", "job-1")
    m.observe_table(t.stats())
    assert m.value("cdc_sink_table_version") == 2
    assert m.value("cdc_sink_table_oldest_version") == 0
    assert m.value("cdc_sink_table_live_rows") == 9
    assert m.value("cdc_sink_table_memory_bytes") > 0
    assert m.value("cdc_sink_table_wal_bytes") > 0
    assert m.value("cdc_sink_table_snapshot_bytes") == 0
    assert m.value("cdc_sink_table_outstanding_delta_versions") >= 1


def test_maintenance_counters() -> None:
    m = SinkMetrics("orders", "job-1")
    m.observe_compaction(0.2)
    m.observe_gc(0.5, ok=True, removed_files=7, removed_bytes=4096)
    m.observe_gc(0.1, ok=False)
    assert m.value("cdc_sink_compactions_total") == 1
    assert m.value("cdc_sink_compaction_duration_seconds_sum") == pytest.approx(0.2)
    assert m.value("cdc_sink_gc_runs_total", result="ok") == 1
    assert m.value("cdc_sink_gc_runs_total", result="failed") == 1
    assert m.value("cdc_sink_gc_removed_files_total") == 7
    assert m.value("cdc_sink_gc_removed_bytes_total") == 4096
    assert m.value("cdc_sink_gc_duration_seconds_count") == 2


# ---------------------------------------------------------------------- Kafka progress
def test_kafka_progress_from_a_query_progress() -> None:
    progress = json.loads(
        json.dumps(
            {
                "name": "q",
                "inputRowsPerSecond": 120.5,
                "processedRowsPerSecond": "NaN",
                "sources": [
                    {
                        "description": "KafkaV2[Subscribe[a]]",
                        "metrics": {
                            "avgOffsetsBehindLatest": "10.0",
                            "maxOffsetsBehindLatest": "25",
                            "minOffsetsBehindLatest": "0",
                        },
                    },
                    {
                        "description": "KafkaV2[Subscribe[b]]",
                        "metrics": {
                            "avgOffsetsBehindLatest": "30.0",
                            "maxOffsetsBehindLatest": "40",
                        },
                    },
                ],
            }
        )
    )
    k = kafka_progress(progress)
    assert k.input_rows_per_second == 120.5
    assert k.processed_rows_per_second is None  # NaN is not a figure
    assert (k.avg_offsets_behind, k.max_offsets_behind) == (20.0, 40.0)
    m = SinkMetrics("orders", "job-1")
    m.observe_progress(
        input_rows_per_second=k.input_rows_per_second,
        processed_rows_per_second=k.processed_rows_per_second,
        avg_offsets_behind=k.avg_offsets_behind,
        max_offsets_behind=k.max_offsets_behind,
    )
    assert m.value("cdc_sink_kafka_input_rows_per_second") == 120.5
    assert m.value("cdc_sink_kafka_processed_rows_per_second") is None
    assert m.value("cdc_sink_kafka_max_offsets_behind_latest") == 40


def test_kafka_progress_without_kafka_metrics() -> None:
    k = kafka_progress(
        {"inputRowsPerSecond": 0.0, "processedRowsPerSecond": 0.0, "sources": [{"metrics": {}}]}
    )
    assert (k.avg_offsets_behind, k.max_offsets_behind) == (None, None)


class _Query:
    """What ProgressPoller reads of a StreamingQuery: ``lastProgress`` (a dict or None)."""

    def __init__(self) -> None:
        self.lastProgress: dict[str, object] | None = None


def test_progress_poller_copies_each_new_progress_once() -> None:
    q = _Query()
    m = SinkMetrics("orders", "job-1")
    poller = ProgressPoller(q, m)
    assert not poller.poll()  # no trigger yet
    q.lastProgress = {
        "batchId": 3,
        "timestamp": "2026-11-23T10:00:00.000Z",
        "inputRowsPerSecond": 50.0,
        "processedRowsPerSecond": 80.0,
        "sources": [{"metrics": {"avgOffsetsBehindLatest": "7.0", "maxOffsetsBehindLatest": "9"}}],
    }
    assert poller.poll()
    assert m.value("cdc_sink_kafka_max_offsets_behind_latest") == 9
    assert not poller.poll()  # the same progress again
    q.lastProgress = {
        **q.lastProgress,
        "batchId": 4,
        "sources": [{"metrics": {"avgOffsetsBehindLatest": "0.0", "maxOffsetsBehindLatest": "0"}}],
    }
    assert poller.poll()
    assert m.value("cdc_sink_kafka_max_offsets_behind_latest") == 0


def test_progress_poller_never_raises() -> None:
    class Broken:
        @property
        def lastProgress(self) -> None:
            raise RuntimeError("py4j gateway gone")

    assert not ProgressPoller(Broken(), SinkMetrics("orders", "job-1")).poll()


# ---------------------------------------------------------------------- histogram
def test_bulk_histogram_buckets_are_cumulative_and_inclusive() -> None:
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry()
    h = BulkHistogram("h_seconds", "help", ("k",), (1.0, 2.0, 5.0))
    reg.register(h)
    h.observe_many(np.array([0.5, 1.0, 1.5, 2.0, 7.0, np.nan]), "a")
    h.observe_many(np.array([3.0]), "a")
    got = {
        s.labels["le"]: s.value
        for s in reg.collect().__next__().samples
        if s.name == "h_seconds_bucket"
    }
    assert got == {"1.0": 2, "2.0": 4, "5.0": 5, "+Inf": 6}
    assert reg.get_sample_value("h_seconds_count", {"k": "a"}) == 6
    assert reg.get_sample_value("h_seconds_sum", {"k": "a"}) == 15.0
    with pytest.raises(ValueError, match="increasing"):
        BulkHistogram("x", "y", (), (2.0, 1.0))


# ---------------------------------------------------------------------- reasons
def _decoded_reasons(
    fmt: str, messages: list[bytes | None], schema: TableSchema = SCHEMA, **options: object
) -> dict[int, str]:
    from cdc_sink.formats import get_decoder

    dec = get_decoder(fmt, **options).decode_with_meta(
        pa.array(messages, pa.binary()), schema, position=np.arange(len(messages))
    )
    return {int(p): r for p, r in zip(dec.rejects.positions, dec.rejects.reasons, strict=True)}


def test_reason_classes_of_native_json_rejects() -> None:
    cases: list[tuple[bytes | None, str]] = [
        (b"not json", "bad_json"),
        (b"", "bad_json"),
        (None, "bad_json"),
        (b"[1]", "bad_json"),
        (b'{"op":"upsert","key":{"id":1},"set":{"r":1.0},"seq":1} {"a":1}', "bad_json"),
        (b'{"op":"bogus","key":{"id":1},"seq":1}', "unknown_op"),
        (b'{"key":{"id":1},"seq":1}', "unknown_op"),
        (b'{"op":"upsert","key":{"id":1},"set":{"zz":1,"r":1.0},"seq":1}', "unknown_column"),
        (b'{"op":"upsert","key":{"id":1,"q":2},"set":{"r":1.0},"seq":1}', "unknown_column"),
        (b'{"op":"upsert","key":{"id":1},"set":{"n":"x","r":1.0},"seq":1}', "wrong_type"),
        (b'{"op":"upsert","key":{"id":"abc"},"set":{"r":1.0},"seq":1}', "wrong_type"),
        (b'{"op":"upsert","key":{"id":1},"set":{"r":1.0},"seq":"x"}', "wrong_type"),
        (b'{"op":"upsert","key":{"id":1},"set":{"r":null},"seq":1}', "null_not_allowed"),
        (b'{"op":"insert","key":{"id":1},"set":{"v":"x"},"seq":1}', "null_not_allowed"),
        (b'{"op":"upsert","key":{},"set":{"r":1.0},"seq":1}', "missing_key"),
        (b'{"op":"upsert","set":{"r":1.0},"seq":1}', "missing_key"),
        (b'{"op":"upsert","key":{"id":1},"set":{"id":1,"r":1.0},"seq":1}', "key_in_set"),
        (b'{"op":"upsert","key":{"id":1},"set":{"r":1.0}}', "missing_seq"),
        (b'{"op":"upsert","key":{"id":1},"set":5,"seq":1}', "bad_envelope"),
        (b'{"op":"upsert","key":{"id":1},"set":{"r":1.0,"r":2.0},"seq":1}', "bad_envelope"),
    ]
    reasons = _decoded_reasons("json", [m for m, _ in cases])
    assert sorted(reasons) == list(range(len(cases)))  # every case was rejected
    got = {i: classify_reason(reasons[i]) for i in reasons}
    assert got == {i: cls for i, (_, cls) in enumerate(cases)}, reasons


def test_reason_classes_of_rowv2_and_debezium_rejects() -> None:
    rowv2 = _decoded_reasons("rowv2", [b"\x01\x00", b"\x09" * 12])
    assert {classify_reason(r) for r in rowv2.values()} == {"bad_json"}, rowv2
    from cdc_sink.formats.debezium import encode_debezium

    trunc = encode_debezium("t", None, None, SCHEMA, envelope=False)
    deb = _decoded_reasons("debezium", [trunc, b"{]"], truncate="reject")
    assert [classify_reason(deb[i]) for i in (0, 1)] == ["truncated_rejected", "bad_json"], deb


def test_reason_class_of_a_tablet_refusal(tmp_path: object) -> None:
    import cdc_sink

    t = cdc_sink.create_table(f"{tmp_path}/t", SCHEMA)
    res = t.apply([{"op": "update", "key": {"id": 5}, "set": {"v": "x"}, "seq": 1}])
    assert [classify_reason(r) for r in res.rejects.reasons] == ["update_missing_key"]


def test_reason_classes_are_bounded_and_quoted_text_cannot_change_them() -> None:
    assert (
        classify_reason("column 'unknown op': \"seq is missing\" is not a valid int8")
        == "wrong_type"
    )
    assert classify_reason("column 'x': value out of range of int16") == "out_of_range"
    assert classify_reason("column 'amount': 1.234 has more than 2 decimals") == "out_of_range"
    assert classify_reason("seq out of range of int32") == "out_of_range"
    from cdc_sink.schema import bounds_reason

    for t in (pa.int8(), pa.date32(), pa.timestamp("us", tz="UTC"), pa.decimal128(10, 2)):
        assert classify_reason(f"column 'x': {bounds_reason(t)}") == "out_of_range", t
    assert classify_reason("something new") == "other"
    assert classify_reason("") == "other"
    rng = np.random.default_rng(1)
    for _ in range(200):
        text = "".join(chr(c) for c in rng.integers(32, 127, size=30))
        assert classify_reason(text) in REASON_CLASSES
    assert classify_reasons({"seq is missing": 2, "seq is null": 3, "x": 0}) == {"missing_seq": 5}


# ---------------------------------------------------------------------- endpoint
@pytest.fixture
def busy_port() -> Iterator[int]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def test_metrics_endpoint_serves_the_registry_on_a_free_port() -> None:
    m = SinkMetrics("orders", "job-1")
    m.observe_batch(committed_batch())
    with start_metrics_server(m.registry, port=0) as server:
        assert server.port > 0 and server.host == "127.0.0.1"
        with urllib.request.urlopen(server.url, timeout=10) as resp:
            assert resp.status == 200
            text = resp.read().decode()
    assert 'cdc_sink_batches_total{app_id="job-1",result="committed",table="orders"} 1.0' in text
    with pytest.raises(OSError):
        urllib.request.urlopen(server.url, timeout=2)


def test_a_busy_metrics_port_is_an_error_naming_it(busy_port: int) -> None:
    m = SinkMetrics("orders", "job-1")
    with pytest.raises(
        MetricsServerError, match=f"port {busy_port} on 127.0.0.1 is already in use"
    ):
        start_metrics_server(m.registry, port=busy_port)


# ---------------------------------------------------------------------- observer
def test_observer_counts_logs_and_refreshes_table_gauges_for_real_batch_stats(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    import cdc_sink
    from cdc_sink.metrics.observer import BatchObserver
    from cdc_sink.spark.writer import BatchStats

    class Sink:
        on_batch = None

    sink = Sink()
    sink.table = cdc_sink.create_table(f"{tmp_path}/t", SCHEMA)  # type: ignore[attr-defined]
    sink.table.apply([{"op": "upsert", "key": {"id": 1}, "set": {"r": 1.0}, "seq": 1}])
    m = SinkMetrics("t", "job-1")
    obs = BatchObserver(sink, m).attach()
    assert sink.on_batch == obs.on_batch
    st = BatchStats(
        4,
        1,
        False,
        10,
        1,
        {"inserted": 8, "stale": 1},
        ts_sample=np.array([1000, 1500]),
        committed_ms=2000,
        phases={"read": 0.1, "apply": 0.2},
        ops={"upsert": 9},
        rejects_by_reason={"seq is missing": 1},
    )
    with caplog.at_level(logging.INFO, logger="cdc_sink"):
        obs.on_batch(st)
        obs.on_batch(BatchStats(4, None, True, 0, 0, result="skipped"))
        obs.on_batch(BatchStats(5, None, False, 0, 0, result="failed", error="OSError: x"))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "batch batch_id=4 result=committed version=1 events=10 rejects=1 applied=8 stale=1 "
        "ignored=0 read_s=0.100 apply_s=0.200 total_s=0.000 freshness_p50_ms=750 "
        "freshness_p99_ms=995",
        "batch batch_id=4 result=skipped (already committed)",
        "batch batch_id=5 result=failed total_s=0.000 error='OSError: x'",
    ]
    assert [r.levelname for r in caplog.records] == ["INFO", "INFO", "ERROR"]
    assert m.value("cdc_sink_dead_letters_total", reason="missing_seq") == 1
    assert m.value("cdc_sink_events_total", op="upsert", outcome="received") == 9
    assert m.value("cdc_sink_events_total", op="unknown", outcome="received") == 1
    assert m.value("cdc_sink_batches_total", result="failed") == 1
    assert m.value("cdc_sink_table_version") == 1
    assert m.value("cdc_sink_table_live_rows") == 1


def test_observer_refreshes_table_stats_at_most_every_interval(tmp_path: object) -> None:
    import cdc_sink
    from cdc_sink.metrics.observer import BatchObserver
    from cdc_sink.spark.writer import BatchStats

    class Sink:
        on_batch = None

    sink = Sink()
    table = cdc_sink.create_table(f"{tmp_path}/t", SCHEMA)
    sink.table = table  # type: ignore[attr-defined]
    m = SinkMetrics("t", "job-1")
    obs = BatchObserver(sink, m, stats_interval=3600).attach()
    for i in range(3):
        res = table.apply([{"op": "upsert", "key": {"id": i}, "set": {"r": 1.0}, "seq": 1}])
        obs.on_batch(BatchStats(i, res.version, False, 1, 0, {"inserted": 1}))
        # The version follows every batch; the other gauges were refreshed once.
        assert m.value("cdc_sink_table_version") == res.version
        assert m.value("cdc_sink_table_live_rows") == 1
    obs.refresh_if_due()
    assert m.value("cdc_sink_table_live_rows") == 1  # not due within the interval
    obs.stats_interval = 0
    obs.refresh_if_due()  # a batch committed since the last refresh: catches up
    assert m.value("cdc_sink_table_live_rows") == 3
