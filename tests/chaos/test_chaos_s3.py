"""The chaos runs of test_chaos.py with the table on the session's real S3 server
(SeaweedFS) instead of a local directory (issue 39): random SIGKILLs of the streaming
job in both apply modes, a reader process throughout; afterwards every retained version
equals the reference model at its batch's offsets, nothing is lost or applied twice, the
dead letters are exactly the rejected records, and every version read the same way each
time. The long run (20 and more kills) is ``benchmarks/chaos.py --s3``.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from cdc_sink_testkit.kafka import KafkaHandle
from cdc_sink_testkit.s3 import SeaweedS3
from tests.chaos.harness import ChaosConfig, run_chaos

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

KILLS = {"driver": 1, "executors": 1}


@pytest.mark.parametrize("apply_mode", ["driver", "executors"])
def test_random_sigkills_on_an_s3_table_lose_nothing_and_apply_nothing_twice(
    apply_mode: str, chaos_kafka: KafkaHandle, s3_server: SeaweedS3, tmp_path: Path
) -> None:
    name = f"chaos-s3-{apply_mode}-{uuid.uuid4().hex[:8]}"
    cfg = ChaosConfig(
        bootstrap=chaos_kafka.bootstrap_servers,
        topic=name,
        workdir=tmp_path / "chaos",
        apply_mode=apply_mode,
        events=1200,
        kills=KILLS[apply_mode],
        seed=17 if apply_mode == "driver" else 18,
        produce_seconds=15.0,
        table_url=s3_server.url(f"{name}/table"),
        storage_options=s3_server.storage_options(),
    )
    res = run_chaos(cfg)
    print(res.to_json())
    assert res.failures == [], "\n".join(res.failures)
    assert res.kills == KILLS[apply_mode], res
    assert res.versions_checked >= 3 and res.reads > 0, res
    assert res.dead_letters == res.dead_letters_expected > 0, res
