"""The S3A settings of :mod:`cdc_sink.spark.s3a`: obstore's storage options spelled as
Hadoop's ``fs.s3a.*``, scoped to the checkpoint's bucket, keys never among them; and the
S3A jars resolved for pyspark's Hadoop client."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from cdc_sink.spark import s3a
from cdc_sink.spark.s3a import s3a_checkpoint_conf, s3a_conf, set_s3a_credentials

SEAWEED_LIKE = {
    "endpoint": "http://127.0.0.1:8333",
    "region": "us-east-1",
    "allow_http": "true",
    "access_key_id": "AKIDEXAMPLE",
    "secret_access_key": "wJalrXUtnFEMI/K7MDENG",
}


def test_an_http_endpoint_is_path_style_without_tls_scoped_to_the_bucket() -> None:
    conf = s3a_conf(SEAWEED_LIKE, bucket="b1", with_jars=False)
    assert conf == {
        "spark.hadoop.fs.s3a.bucket.b1.endpoint": "http://127.0.0.1:8333",
        "spark.hadoop.fs.s3a.bucket.b1.path.style.access": "true",
        "spark.hadoop.fs.s3a.bucket.b1.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.bucket.b1.endpoint.region": "us-east-1",
    }


def test_keys_in_the_storage_options_never_become_spark_settings() -> None:
    conf = s3a_conf({**SEAWEED_LIKE, "session_token": "tok"}, with_jars=False)
    values = " ".join(conf.values())
    assert SEAWEED_LIKE["secret_access_key"] not in values
    assert SEAWEED_LIKE["access_key_id"] not in values
    assert "tok" not in values
    assert not [k for k in conf if re.search(r"key|token|provider", k)]


def test_aws_prefixed_options_https_and_virtual_hosted_style() -> None:
    conf = s3a_conf(
        {
            "AWS_ENDPOINT": "https://s3.example.com",
            "aws_region": "eu-west-1",
            "virtual_hosted_style_request": "true",
        },
        with_jars=False,
    )
    assert conf == {
        "spark.hadoop.fs.s3a.endpoint": "https://s3.example.com",
        "spark.hadoop.fs.s3a.path.style.access": "false",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "true",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
    }


def test_without_an_endpoint_s3a_keeps_its_own() -> None:
    assert s3a_conf({"region": "us-west-2"}, with_jars=False) == {
        "spark.hadoop.fs.s3a.endpoint.region": "us-west-2"
    }


def test_a_checkpoint_not_on_s3a_changes_nothing_and_resolves_no_jar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_resolution() -> list[Path]:
        raise AssertionError("resolved the S3A jars for a local checkpoint")

    monkeypatch.setattr(s3a, "resolve_s3a_jars", no_resolution)
    conf = {"spark.jars": "/k/kafka.jar", "a": "b"}
    assert s3a_checkpoint_conf(conf, "/tmp/checkpoint", SEAWEED_LIKE) == conf
    assert s3a_checkpoint_conf(conf, "s3://b/c", SEAWEED_LIKE) == conf


def test_an_s3a_checkpoint_adds_its_bucket_settings_and_appends_the_jars(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(s3a, "resolve_s3a_jars", lambda: [Path("/c/hadoop-aws-3.5.0.jar")])
    conf = s3a_checkpoint_conf(
        {"spark.jars": "/k/kafka.jar", "a": "b"}, "s3a://ckpt-bucket/job/1", SEAWEED_LIKE
    )
    assert conf["spark.jars"] == "/k/kafka.jar,/c/hadoop-aws-3.5.0.jar"
    assert conf["a"] == "b"
    assert conf["spark.hadoop.fs.s3a.bucket.ckpt-bucket.endpoint"] == SEAWEED_LIKE["endpoint"]
    assert conf == {
        **{"spark.jars": conf["spark.jars"], "a": "b"},
        **s3a_conf(SEAWEED_LIKE, bucket="ckpt-bucket", with_jars=False),
    }


def test_an_s3a_checkpoint_without_a_bucket_is_refused() -> None:
    with pytest.raises(ValueError, match="no bucket"):
        s3a_checkpoint_conf({}, "s3a:///job", SEAWEED_LIKE)


class _HadoopConf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _Session:
    """What set_s3a_credentials touches of a SparkSession: its Hadoop configuration."""

    def __init__(self) -> None:
        self.hadoop = _HadoopConf()
        jsc: Any = type("Jsc", (), {"hadoopConfiguration": lambda _self: self.hadoop})()
        self.sparkContext = type("Sc", (), {"_jsc": jsc})()


def test_keys_of_the_storage_options_go_into_the_running_sessions_hadoop_conf() -> None:
    spark = _Session()
    assert set_s3a_credentials(spark, SEAWEED_LIKE, bucket="b1")  # type: ignore[arg-type]
    assert spark.hadoop.values == {
        "fs.s3a.bucket.b1.access.key": SEAWEED_LIKE["access_key_id"],
        "fs.s3a.bucket.b1.secret.key": SEAWEED_LIKE["secret_access_key"],
    }


def test_without_keys_nothing_is_set_and_half_a_key_is_refused() -> None:
    spark = _Session()
    assert not set_s3a_credentials(spark, {"endpoint": "http://x"})  # type: ignore[arg-type]
    assert spark.hadoop.values == {}
    with pytest.raises(ValueError, match="go together"):
        set_s3a_credentials(spark, {"access_key_id": "AKID"})  # type: ignore[arg-type]


@pytest.mark.integration
def test_the_s3a_jars_are_hadoop_aws_of_pysparks_hadoop_and_none_pyspark_ships() -> None:
    jars = s3a.resolve_s3a_jars()
    names = {j.name for j in jars}
    assert f"hadoop-aws-{s3a.hadoop_version()}.jar" in names
    assert any(n.startswith("s3-2.") for n in names)  # the SDK's S3 module, not its bundle
    assert not any(n.startswith("bundle-") for n in names)
    import pyspark

    shipped = {
        re.sub(r"-\d+\.\d+[^/]*\.jar$", "", p.name)
        for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")
    }
    assert not [n for n in names if re.sub(r"-\d+\.\d+[^/]*\.jar$", "", n) in shipped]
