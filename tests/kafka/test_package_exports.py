"""The public names of cdc_sink.kafka (docs/architecture.md §9) resolve, lazily, with their
real types for type checkers; the local broker is the test kit's, not the product's; the
core works without the optional extras."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cdc_sink.kafka as kafka_pkg
from cdc_sink.kafka.deadletter import KafkaDeadLetter, ParquetDeadLetter
from cdc_sink.kafka.producer import CdcProducer, DeliveryError
from cdc_sink.utils.extras import MissingExtra, require, require_any

REPO = Path(__file__).resolve().parents[2]


def test_public_names_resolve_to_their_implementations() -> None:
    assert kafka_pkg.CdcProducer is CdcProducer
    assert kafka_pkg.DeliveryError is DeliveryError
    assert kafka_pkg.KafkaDeadLetter is KafkaDeadLetter
    assert kafka_pkg.ParquetDeadLetter is ParquetDeadLetter
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = kafka_pkg.Nope
    assert set(kafka_pkg.__all__) <= set(dir(kafka_pkg))


def test_the_local_broker_is_exported_by_the_test_kit_not_the_product() -> None:
    import cdc_sink_testkit.kafka as kit
    from cdc_sink_testkit.kafka.broker import LocalKafka, start_kafka

    for name in ("LocalKafka", "start_kafka"):
        assert name not in kafka_pkg.__all__
        assert not hasattr(kafka_pkg, name)
    assert kit.LocalKafka is LocalKafka
    assert kit.start_kafka is start_kafka


def test_importing_the_package_loads_no_kafka_client() -> None:
    code = "import sys, cdc_sink.kafka; print('confluent_kafka' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_type_checkers_see_the_real_types_of_the_lazy_exports(tmp_path: Path) -> None:
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    if mypy is None:
        pytest.skip("mypy is not installed (the dev extra)")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        textwrap.dedent("""\
        from cdc_sink.kafka import (CdcProducer, DeliveryError, KafkaDeadLetter,
                                    ParquetDeadLetter)
        reveal_type(CdcProducer)
        reveal_type(DeliveryError)
        reveal_type(KafkaDeadLetter)
        reveal_type(ParquetDeadLetter)
        """)
    )
    out = subprocess.run(
        [
            mypy,
            "--strict",
            "--follow-imports=silent",
            "--no-error-summary",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(snippet),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    revealed = [ln for ln in out.stdout.splitlines() if "Revealed type is" in ln]
    assert len(revealed) == 4, out.stdout + out.stderr
    assert not any('"Any"' in ln for ln in revealed), out.stdout
    # Each is the class itself (its constructor).
    expected = [CdcProducer, DeliveryError, KafkaDeadLetter, ParquetDeadLetter]
    for line, cls in zip(revealed, expected, strict=True):
        assert f"-> {cls.__module__}.{cls.__qualname__}" in line, line


def test_require_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    require("pyarrow", feature="the core")  # installed: nothing happens
    with pytest.raises(MissingExtra, match=r"pip install 'cdc_sink\[all\]'") as info:
        require("numpy", "not_a_module_x", feature="x")
    assert info.value.extra == "all"  # not a known optional module
    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if not installed
    with pytest.raises(
        ImportError,
        match=r"cdc_sink.spark needs 'pyspark'.*"
        r"pip install 'cdc_sink\[spark\]'",
    ) as info:
        require("pyspark", feature="cdc_sink.spark")
    assert info.value.extra == "spark"
    require_any("not_a_module_x", "pyarrow", feature="either")
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)
    monkeypatch.setitem(sys.modules, "kafka", None)
    with pytest.raises(MissingExtra, match=r"cdc_sink\[kafka\]"):
        require_any("confluent_kafka", "kafka", feature="a Kafka client")


# Runs in a fresh interpreter where every optional dependency is hidden (a finder ahead of
# the others says it does not exist, as when it is not installed): the core must work,
# and each feature must say which extra it needs.
_WITHOUT_EXTRAS = """
import importlib.abc, sys, tempfile
HIDDEN = {"pyspark", "pandas", "confluent_kafka", "kafka", "prometheus_client", "rich"}
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
import cdc_sink, cdc_sink.table, cdc_sink.kafka, cdc_sink.kafka.jars
from cdc_sink.utils.extras import MissingExtra
schema = cdc_sink.TableSchema.from_dict({
    "columns": [{"name": "id", "type": "int64", "nullable": False},
                {"name": "v", "type": "string"}],
    "primary_key": ["id"], "num_buckets": 2})
with tempfile.TemporaryDirectory() as d:
    table = cdc_sink.create_table(d + "/t", schema)
    res = table.apply([{"op": "upsert", "key": {"id": 1}, "set": {"v": "a"}}],
                      app_id="a", batch_id=0)
    assert table.read(version=res.version).to_pylist() == [{"id": 1, "v": "a"}]
    from cdc_sink.kafka import ParquetDeadLetter
    ParquetDeadLetter(d + "/dlq").write_version(
        __import__("cdc_sink.kafka.deadletter").kafka.deadletter.records_from_rows(
            [{"topic": "t", "partition": 0, "offset": 1}]), app_id="a", version=1)
    import contextlib, io
    from cdc_sink.cli import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["versions", d + "/t"]) == 1
    assert "pip install 'cdc_sink[cli]'" in err.getvalue(), err.getvalue()
def extra_of(fn):
    try:
        fn()
    except MissingExtra as exc:
        return exc.extra
    return None
def spark_pkg():
    import cdc_sink.spark
def spark_session():
    from cdc_sink.spark.session import local_spark
    local_spark()
def metrics():
    import cdc_sink.metrics
def kafka_dead_letter():
    from cdc_sink.kafka import KafkaDeadLetter
    KafkaDeadLetter("127.0.0.1:9", "dlq")
def topic():
    from cdc_sink.kafka.admin import create_topic
    create_topic("127.0.0.1:9", "t")
print(extra_of(spark_pkg), extra_of(spark_session), extra_of(metrics),
      extra_of(kafka_dead_letter), extra_of(topic))
"""


def test_the_core_works_without_the_optional_extras() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["spark", "spark", "metrics", "kafka", "kafka"]
