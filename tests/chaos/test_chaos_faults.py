"""Bounded chaos runs with environmental faults (see harness.py): the Kafka broker killed
and restarted, the table's disk filling up, and fsync failing with EIO.

In each, the real streaming job must ride through the fault or fail with a one-line
reason that names it, and, started again without the fault, resume: afterwards every
retained version equals the reference model at its batch's offsets, nothing is lost or
applied twice, and the dead letters are exactly the rejected records.

The long runs are ``benchmarks/chaos.py --broker-bounces/--enospc-runs/--eio-runs``
(figures in docs/benchmarks-history.md, "Chaos").
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_sink_testkit.kafka import KafkaHandle, LocalKafka
from tests.chaos.harness import ChaosConfig, ChaosResult, run_chaos

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _cfg(kafka: KafkaHandle, tmp_path: Path, name: str, **kw: object) -> ChaosConfig:
    base: dict[str, object] = dict(
        bootstrap=kafka.bootstrap_servers,
        topic=f"chaos-{name}-{uuid.uuid4().hex[:8]}",
        workdir=tmp_path / "chaos",
        events=900,
        kills=0,
        max_offsets=100,
        produce_seconds=20.0,
        run_timeout=180.0,
        fault_timeout=120.0,
    )
    base.update(kw)
    return ChaosConfig(**base)  # type: ignore[arg-type]


def _check(res: ChaosResult) -> None:
    print(res.to_json())
    assert res.failures == [], "\n".join(res.failures)
    assert res.versions_checked >= 3 and res.reads > 0, res
    assert res.dead_letters == res.dead_letters_expected > 0, res


@pytest.fixture
def local_kafka(chaos_kafka: KafkaHandle) -> Iterator[LocalKafka]:
    """A broker this test may kill and restart: the suite's own when it is local."""
    if isinstance(chaos_kafka, LocalKafka):
        yield chaos_kafka
        return
    with LocalKafka() as kafka:
        yield kafka


def test_a_broker_bounce_loses_nothing(local_kafka: LocalKafka, tmp_path: Path) -> None:
    # One bounce in the suite's time budget; benchmarks/chaos.py --broker-bounces N
    # bounces the broker again and again in one run of the job.
    cfg = _cfg(
        local_kafka,
        tmp_path,
        "broker",
        seed=21,
        broker=local_kafka,
        broker_bounces=1,
        broker_down=(0.5, 2.0),
        produce_seconds=40.0,
    )
    res = run_chaos(cfg)
    _check(res)
    bounces = [f for f in res.faults if f["fault"] == "broker"]
    assert len(bounces) == 1, res.faults
    assert all(f["outcome"] in ("rode through", "failed") for f in bounces), res.faults


@pytest.fixture
def root_for_tmpfs() -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting the table's tmpfs needs root (mount -t tmpfs)")


def test_full_disk_fails_clearly_and_resumes(
    root_for_tmpfs: None, chaos_kafka: KafkaHandle, tmp_path: Path
) -> None:
    cfg = _cfg(chaos_kafka, tmp_path, "enospc", seed=22, enospc_runs=1, table_fs_mb=24)
    res = run_chaos(cfg)
    _check(res)
    [fault] = res.faults
    assert fault["outcome"] == "failed", fault
    assert "No space left on device" in fault["reason"], fault
    assert fault["resume_seconds"] is not None, fault
    assert not (cfg.workdir / "fs").is_mount()


@pytest.fixture
def c_compiler() -> None:
    if not (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("building fsync_eio.so (the LD_PRELOAD fsync fault) needs a C compiler")


def test_fsync_eio_fails_clearly_and_resumes(
    c_compiler: None, chaos_kafka: KafkaHandle, tmp_path: Path
) -> None:
    # Driver mode here; benchmarks/chaos.py --eio-runs also runs executors mode.
    cfg = _cfg(chaos_kafka, tmp_path, "eio", seed=23, eio_runs=1, eio_at=(8, 24))
    res = run_chaos(cfg)
    _check(res)
    [fault] = res.faults
    assert fault["injected"] and "fails with EIO" in fault["injected"], fault
    if fault["outcome"] == "failed":
        assert "Input/output error" in fault["reason"], fault
        assert fault["resume_seconds"] is not None, fault
    else:
        assert fault["outcome"] == "rode through", fault
