"""The README's "Run on a cluster" commands, run as written against a real Spark
standalone cluster of two workers (issue 40), so that the README cannot drift.

The commands are taken from the section's two ``bash`` blocks:

1. the build: its first line (``pip wheel --no-deps -w dist .``) is done by the wheel
   test's own helper (tests/job/wheel.py, the same ``pip wheel`` of this checkout), the
   rest as written: an empty virtual environment gets the wheel and its dependencies,
   its ``cdc-sink run --help`` works, and venv-pack packs it;
2. the submit: the settings at its top (every one of them, no more, no fewer) are
   replaced by this test's cluster URL, Spark version, Kafka, topic, table on the
   session's S3 server (SeaweedFS), checkpoint and ``available-now`` trigger; the rest
   runs as written: ``spark-submit --archives`` of the packed environment, the jars of
   ``cdc-sink jars``, the thin script ``streaming_jobs/cdc_to_tablets.py`` in executors
   mode.

The cluster's workers hold the S3 keys in their environment (``conf/spark-env.sh``, as
the README tells), and nothing else: no ``PYTHONPATH`` to this checkout, so the
executors' only cdc_sink is the archive's. The table read back equals the demo's orders
stream applied by the reference model, every malformed record is a reject, and each
worker unpacked the archive, C extensions included.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import cdc_sink
from cdc_sink.kafka.jars import pyspark_version
from cdc_sink_testkit.cluster import StandaloneCluster, spark_class
from cdc_sink_testkit.kafka import KafkaHandle
from cdc_sink_testkit.s3 import SeaweedS3
from tests.integration.streams import job_process_env, produce_orders
from tests.job.wheel import REPO, build_wheel, run

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]

SECTION = "## Run on a cluster"
BUILD_LINE = "pip wheel --no-deps -w dist ."
EVENTS = 900
# CDC_SINK_* settings the job reads that locate things, not configure the job: kept
_KEPT = ("CDC_SINK_CACHE", "CDC_SINK_MVN", "CDC_SINK_MAVEN_REPO")
_ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=(\S+|'[^']*')(\s+#.*)?$")


def readme_blocks() -> list[str]:
    """The ``bash`` blocks of README.md's "Run on a cluster" section."""
    text = (REPO / "README.md").read_text()
    start = text.index(f"\n{SECTION}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def command_lines(block: str) -> list[str]:
    """The block's commands, one per line (continuations joined), without blank and
    comment-only lines."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [ln for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def substituted(block: str, values: Mapping[str, str]) -> str:
    """``block`` with the settings at its top (``NAME=value  # comment`` lines before
    the first command) set to ``values``; the settings must be exactly ``values``'s."""
    lines = block.splitlines()
    names: list[str] = []
    for i, line in enumerate(lines):
        m = _ASSIGNMENT.match(line)
        if m is None:
            if line.strip():
                break
            continue
        names.append(m.group(1))
        lines[i] = f"{m.group(1)}={shlex.quote(values.get(m.group(1), ''))}"
    assert sorted(names) == sorted(values), "the README's settings changed: update this test"
    return "\n".join(lines) + "\n"


def bash(script: str, cwd: Path, env: Mapping[str, str], timeout: float) -> str:
    """Runs ``script`` with ``bash -euo pipefail`` in ``cwd``; its output (stdout and
    stderr), asserted to exit 0."""
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{script}\n--- output ---\n{done.stdout[-6000:]}"
    return done.stdout


def user_env(**extra: str) -> dict[str, str]:
    """A user's shell: this environment without the job's, Spark's and the S3 settings
    (the Maven cache's kept), the cluster's Spark installation (``SPARK_HOME``: the
    pyspark its workers run) and this interpreter's ``bin`` (python, spark-submit) first
    on ``PATH``, Spark bound to 127.0.0.1; then ``extra``."""
    env = job_process_env("AWS_", "PYTHONPATH")
    env.update({k: os.environ[k] for k in _KEPT if k in os.environ})
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env["SPARK_HOME"] = str(spark_class().parent.parent)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def packed_cluster(s3_server: SeaweedS3) -> Iterator[StandaloneCluster]:
    """Two workers of one core, the S3 keys in their environment, and no ``PYTHONPATH``
    to this checkout: the executors import only what an application ships them."""
    keys = s3_server.storage_options()
    env = {
        "AWS_ACCESS_KEY_ID": keys["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": keys["secret_access_key"],
    }
    with StandaloneCluster(workers=2, cores=1, memory="2g", python_path=[], env=env) as c:
        yield c


def test_the_readmes_cluster_commands_apply_the_stream_on_a_standalone_cluster(
    packed_cluster: StandaloneCluster,
    cluster_kafka: KafkaHandle,
    s3_server: SeaweedS3,
    tmp_path: Path,
) -> None:
    build, submit = readme_blocks()
    topic = f"orders-cluster-{uuid.uuid4().hex[:8]}"
    orders = produce_orders(cluster_kafka, topic, EVENTS, seed=40, partitions=2)

    # 1. the wheel, the environment, its job, the archive
    first, *rest = command_lines(build)
    assert first == BUILD_LINE
    build_wheel(tmp_path / "dist")
    bash("\n".join(rest), tmp_path, user_env(), timeout=600)
    help_text = run(
        [str(tmp_path / "cdc_sink_env" / "bin" / "cdc-sink"), "run", "--help"], tmp_path
    )
    assert help_text.startswith("usage: cdc_to_tablets")
    assert (tmp_path / "cdc_sink_env.tar.gz").stat().st_size > 0

    # 2. the submit, from a directory with the clone's streaming_jobs/
    (tmp_path / "streaming_jobs").symlink_to(REPO / "streaming_jobs")
    storage = s3_server.storage_options()
    table = s3_server.url(f"cluster-{uuid.uuid4().hex}/orders")
    settings = {
        "MASTER": packed_cluster.url,
        "SPARK_VERSION": pyspark_version(),  # the cluster's: its workers run this pyspark
        "KAFKA": cluster_kafka.bootstrap_servers,
        "TOPIC": topic,
        "TABLE": table,
        "S3_ENDPOINT": storage["endpoint"],
        "S3_REGION": storage["region"],
        "CHECKPOINT": str(tmp_path / "checkpoint"),
        "TRIGGER": "available-now",
    }
    env = user_env(
        AWS_ACCESS_KEY_ID=storage["access_key_id"],
        AWS_SECRET_ACCESS_KEY=storage["secret_access_key"],
        CDC_SINK_MAX_OFFSETS_PER_TRIGGER="300",  # a few micro-batches
    )
    output = bash(substituted(submit, settings), tmp_path, env, timeout=600)
    assert storage["secret_access_key"] not in output

    got = cdc_sink.open_table(table, storage_options=storage)
    assert got.version >= 3  # EVENTS records, at most 300 a batch
    assert orders.differences(got.read().to_pylist()) == []
    rejects = sum(got.rejects(v).num_rows for v in range(1, got.version + 1))
    assert rejects == orders.malformed

    for i in range(packed_cluster.workers):  # each worker ran the archive's Python
        (environment,) = (packed_cluster.worker_dir(i) / "work").glob("app-*/*/environment")
        assert (environment / "bin" / "python").exists()
        assert list(environment.glob("lib/python3*/site-packages/cdc_sink/formats/_cscan*.so"))
