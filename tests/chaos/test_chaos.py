"""Bounded chaos runs of the real streaming job (see harness.py): SIGKILLs at random
moments, in both apply modes (driver mode with the Kafka dead-letter sink, the JVM JSON
decoder and one death at the fault point between the rejects and the log entry;
executors mode with the Parquet sink and the Python decoder), a reader process
throughout; afterwards every retained version equals the reference model fed from the
topic at its batch's offsets, nothing is lost or applied twice, the dead letters are
exactly the rejected records, and every version read the same way each time.

The long run is ``benchmarks/chaos.py`` (figures in docs/benchmarks-history.md, "Chaos").
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from cdc_sink_testkit.kafka import KafkaHandle
from tests.chaos.harness import ChaosConfig, run_chaos

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

# Each kill costs a Spark start; the CI budget of the suite is a few minutes (the long
# runs, hundreds of kills, are benchmarks/chaos.py).
KILLS = {"driver": 1, "executors": 1}
VARIANT = {
    "driver": dict(
        dead_letter="kafka", json_decoder="jvm", fault_points=("table.rejects_written",)
    ),
    "executors": dict(dead_letter="parquet", json_decoder="python"),
}


@pytest.mark.parametrize("apply_mode", ["driver", "executors"])
def test_random_sigkills_lose_nothing_and_apply_nothing_twice(
    apply_mode: str, chaos_kafka: KafkaHandle, tmp_path: Path
) -> None:
    cfg = ChaosConfig(
        bootstrap=chaos_kafka.bootstrap_servers,
        topic=f"chaos-{apply_mode}-{uuid.uuid4().hex[:8]}",
        workdir=tmp_path / "chaos",
        apply_mode=apply_mode,
        events=1500,
        kills=KILLS[apply_mode],
        seed=7 if apply_mode == "driver" else 8,
        produce_seconds=20.0,
        **VARIANT[apply_mode],
    )  # type: ignore[arg-type]
    res = run_chaos(cfg)
    print(res.to_json())
    assert res.failures == [], "\n".join(res.failures)
    assert res.kills == KILLS[apply_mode], res
    assert res.fault_points_hit == list(cfg.fault_points), res
    assert res.versions_checked >= 3 and res.reads > 0, res
    assert res.dead_letters == res.dead_letters_expected > 0, res
