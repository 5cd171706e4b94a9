"""Spark's checkpoint on S3: Hadoop's S3A file system (``s3a://``) and its settings.

A cdc_sink table on S3 (``s3://bucket/table``) is read and written by cdc_sink's own
object-store client; the streaming query's checkpoint is not: Spark keeps it through
Hadoop's file systems, and for S3 that is S3A, which pyspark does not ship.
:func:`resolve_s3a_jars` fetches it once from Maven Central into cdc_sink's jar cache
(``org.apache.hadoop:hadoop-aws`` of the Hadoop version inside pyspark, and the AWS SDK v2
modules it uses rather than the SDK's whole bundle; ``kafka/s3a-pom.xml``), and
:func:`s3a_conf` gives the Spark settings that point S3A at the same endpoint as the
table's ``storage_options``::

    conf = s3a_conf(storage_options={"endpoint": "http://127.0.0.1:8333",
                                     "region": "us-east-1"}, bucket="my-bucket")
    # {"spark.jars": ".../hadoop-aws-3.5.0.jar,...",
    #  "spark.hadoop.fs.s3a.bucket.my-bucket.endpoint": "http://127.0.0.1:8333",
    #  "spark.hadoop.fs.s3a.bucket.my-bucket.path.style.access": "true", ...}

Credentials are never among these settings: pyspark hands a session's settings to
``spark-submit`` as ``--conf`` arguments, on a command line. S3A's default chain reads
them where obstore does, from ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and
``AWS_SESSION_TOKEN`` in the environment (Spark also copies those into the driver's
Hadoop configuration), then from the instance's role; keys held in ``storage_options``
are put into a running session's Hadoop configuration by :func:`set_s3a_credentials`,
through the JVM.

``cdc-sink run --checkpoint s3a://bucket/path`` applies :func:`s3a_checkpoint_conf` to the
Spark session it starts (docs/cluster.md).
"""

from __future__ import annotations

import logging
import os
import re
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from cdc_sink.kafka.jars import JarResolutionError, cache_root, resolve_pom_profile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "S3A_POM_PATH",
    "hadoop_version",
    "resolve_s3a_jars",
    "s3a_checkpoint_conf",
    "s3a_conf",
    "set_s3a_credentials",
]

log = logging.getLogger(__name__)

S3A_POM_PATH = Path(__file__).resolve().parents[1] / "kafka" / "s3a-pom.xml"
"""The Maven pom of the S3A jars (profile ``s3a``)."""

_JAR_NAME = re.compile(r"^(?P<artifact>.+)-(?P<version>\d+\.\d+[^/]*)\.jar$")
_MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
_MAVEN_REPO_ENV = "CDC_SINK_MAVEN_REPO"
_SDK_PROPERTY = "aws-java-sdk-v2.version"
# pyspark's jars providing what an S3A dependency provides under another name
_PROVIDED_AS = {"commons-logging": "jcl-over-slf4j"}


def _pyspark_jars() -> dict[str, str]:
    """The artifacts of pyspark's ``jars/`` directory and their versions."""
    try:
        dist = metadata.distribution("pyspark")
    except metadata.PackageNotFoundError:
        return {}
    jars = Path(str(dist.locate_file("pyspark/jars")))
    out: dict[str, str] = {}
    for jar in jars.glob("*.jar") if jars.is_dir() else ():
        m = _JAR_NAME.match(jar.name)
        if m is not None:
            out[m.group("artifact")] = m.group("version")
    return out


def hadoop_version() -> str:
    """The version of the Hadoop client inside pyspark (``hadoop-client-api-<v>.jar``).

    Raises:
        JarResolutionError: pyspark has no Hadoop client jar (not installed, or built
            without Hadoop).
    """
    version = _pyspark_jars().get("hadoop-client-api")
    if version is None:
        raise JarResolutionError(
            "pyspark's jars hold no hadoop-client-api jar: the S3A version to fetch "
            "cannot be chosen (is pyspark installed?)"
        )
    return version


def _sdk_version(hadoop: str) -> str | None:
    """The AWS SDK v2 version Hadoop ``hadoop`` was built with (hadoop-project's pom on
    Maven Central, or ``$CDC_SINK_MAVEN_REPO``); None when it cannot be read."""
    repo = (os.environ.get(_MAVEN_REPO_ENV) or _MAVEN_CENTRAL).rstrip("/")
    url = f"{repo}/org/apache/hadoop/hadoop-project/{hadoop}/hadoop-project-{hadoop}.pom"
    if not url.startswith(("https://", "http://", "file://")):
        return None
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            root = ET.fromstring(resp.read())
    except (OSError, ET.ParseError) as exc:
        log.warning("cannot read %s (%s): using s3a-pom.xml's AWS SDK version", url, exc)
        return None
    for el in root.iter():
        if el.tag.rsplit("}", 1)[-1] == _SDK_PROPERTY and el.text:
            return el.text.strip()
    return None


def _attempts(hadoop: str) -> list[dict[str, str]]:
    """hadoop-aws of pyspark's Hadoop with the SDK it was built with; else the pom's
    defaults."""
    props = {"hadoop.version": hadoop}
    sdk = _sdk_version(hadoop)
    if sdk is not None:
        props["aws.sdk.version"] = sdk
    return [props, {}]


def resolve_s3a_jars() -> list[Path]:
    """The jars that give Spark ``s3a://``, resolved from Maven Central once and cached.

    ``hadoop-aws`` of :func:`hadoop_version`, and the AWS SDK v2 modules S3A uses, of
    the version that Hadoop release was built with, in
    ``<cache>/jars/s3a-hadoop-<v>/`` (``$CDC_SINK_CACHE``; the Kafka jars' cache and
    rules, :mod:`cdc_sink.kafka.jars`). Jars whose artifact pyspark already ships
    (netty, Apache HttpClient, slf4j, ...) are left out.

    Raises:
        MavenNotFound: Maven is needed and not installed.
        JarResolutionError: Maven could not resolve them.
    """
    hadoop = hadoop_version()
    directory = cache_root() / "jars" / f"s3a-hadoop-{hadoop}"
    jars = resolve_pom_profile(
        S3A_POM_PATH, directory, profile="s3a", attempts=lambda: _attempts(hadoop)
    )
    shipped = _pyspark_jars()
    kept = []
    for jar in jars:
        m = _JAR_NAME.match(jar.name)
        artifact = m.group("artifact") if m else jar.stem
        if artifact in shipped or _PROVIDED_AS.get(artifact) in shipped:
            continue
        kept.append(jar)
    if not any(j.name.startswith("hadoop-aws-") for j in kept):
        raise JarResolutionError(f"no hadoop-aws jar among {[j.name for j in jars]}")
    return kept


def _option(options: Mapping[str, str], name: str) -> str | None:
    """An obstore S3 option, spelled ``name`` or ``aws_<name>`` (any case)."""
    lowered = {k.lower(): v for k, v in options.items()}
    return lowered.get(name, lowered.get(f"aws_{name}"))


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def s3a_conf(
    storage_options: Mapping[str, str] | None = None,
    *,
    bucket: str | None = None,
    with_jars: bool = True,
) -> dict[str, str]:
    """The Spark settings for ``s3a://`` paths on the store ``storage_options`` name.

    From obstore's S3 options (``endpoint``, ``region``, ``virtual_hosted_style_request``;
    each also with an ``aws_`` prefix): the endpoint (with path-style access unless
    virtual-hosted style is asked for, and TLS off for an ``http://`` endpoint) and the
    region; without an endpoint, S3A's own (AWS). Each is a ``spark.hadoop.fs.s3a.*``
    setting, scoped to ``bucket`` when given (``fs.s3a.bucket.<bucket>.*``: other
    buckets keep S3A's defaults). Keys in the options are left out (the module
    docstring says where credentials come from).

    Args:
        storage_options: The table's store options.
        bucket: Scope the settings to this bucket.
        with_jars: Include ``spark.jars`` (:func:`resolve_s3a_jars`).

    Raises:
        JarResolutionError: With ``with_jars``, the jars could not be resolved.
    """
    opts = dict(storage_options or {})
    prefix = f"spark.hadoop.fs.s3a.bucket.{bucket}." if bucket else "spark.hadoop.fs.s3a."
    fs: dict[str, str] = {}
    endpoint = _option(opts, "endpoint") or _option(opts, "endpoint_url")
    if endpoint:
        fs["endpoint"] = endpoint
        fs["path.style.access"] = str(
            not _truthy(_option(opts, "virtual_hosted_style_request"))
        ).lower()
        fs["connection.ssl.enabled"] = str(not endpoint.lower().startswith("http://")).lower()
    region = _option(opts, "region") or _option(opts, "default_region")
    if region:
        fs["endpoint.region"] = region
    conf = {prefix + k: v for k, v in fs.items()}
    if with_jars:
        conf["spark.jars"] = ",".join(str(j) for j in resolve_s3a_jars())
    return conf


def _credentials(opts: Mapping[str, str], bucket: str | None) -> dict[str, str]:
    """The Hadoop settings of the keys ``opts`` hold (none: S3A's default chain)."""
    key, secret = _option(opts, "access_key_id"), _option(opts, "secret_access_key")
    if (key is None) != (secret is None):
        raise ValueError(
            "storage_options: access_key_id and secret_access_key go together (or both "
            "come from the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
        )
    if key is None or secret is None:
        return {}
    prefix = f"fs.s3a.bucket.{bucket}." if bucket else "fs.s3a."
    out = {prefix + "access.key": key, prefix + "secret.key": secret}
    token = _option(opts, "session_token") or _option(opts, "token")
    if token:
        out[prefix + "session.token"] = token
        out[prefix + "aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        )
    return out


def set_s3a_credentials(
    spark: SparkSession, storage_options: Mapping[str, str] | None, *, bucket: str | None = None
) -> bool:
    """Puts the keys of ``storage_options`` in the running session's Hadoop configuration
    (through the JVM: never on a command line), scoped to ``bucket`` when given, before
    any ``s3a://`` path of it is opened.

    Returns:
        False when the options hold no keys (S3A's default chain applies: the
        ``AWS_*`` environment variables, then the instance's role).

    Raises:
        ValueError: A key without its secret, or the reverse.
    """
    settings = _credentials(dict(storage_options or {}), bucket)
    if not settings:
        return False
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in settings.items():
        hadoop.set(key, value)
    return True


def s3a_checkpoint_conf(
    conf: Mapping[str, str], checkpoint: str, storage_options: Mapping[str, str] | None
) -> dict[str, str]:
    """``conf`` plus, when ``checkpoint`` is an ``s3a://`` URL, :func:`s3a_conf` for its
    bucket (the S3A jars appended to any ``spark.jars`` of ``conf``).

    Args:
        conf: The session's other settings.
        checkpoint: The streaming checkpoint's location.
        storage_options: The table's store options (the checkpoint's bucket is on the
            same store).

    Raises:
        ValueError: An ``s3a://`` URL without a bucket.
        JarResolutionError: The jars could not be resolved.
    """
    out = dict(conf)
    if not checkpoint.lower().startswith("s3a://"):
        return out
    bucket = checkpoint[len("s3a://") :].split("/", 1)[0]
    if not bucket:
        raise ValueError(f"--checkpoint {checkpoint!r}: no bucket")
    extra = s3a_conf(storage_options, bucket=bucket)
    jars = [j for j in (out.get("spark.jars", ""), extra.pop("spark.jars")) if j]
    out.update(extra)
    out["spark.jars"] = ",".join(jars)
    return out
