"""Resolve the JVM jars cdc_sink needs from Maven Central, once, into a local cache.

Two sets, declared as two profiles of ``pom.xml`` beside this module:

* :func:`resolve_kafka_broker_jars` - an Apache Kafka broker (KRaft) for
  :class:`cdc_sink.kafka.broker.LocalKafka`.
* :func:`resolve_spark_kafka_jars` - Spark's Kafka source (``spark-sql-kafka-0-10``)
  and only those of its dependencies that pyspark does not already ship;
  :func:`spark_kafka_conf` turns them into ``spark.jars``.

Each set is copied by ``mvn dependency:copy-dependencies`` into
``<cache>/jars/<name>-<version>/`` where ``<cache>`` is ``$CDC_SINK_CACHE`` or
``$XDG_CACHE_HOME/cdc_sink`` (``~/.cache/cdc_sink``). A marker file is written after a
successful copy (so a half-finished copy is redone), and an exclusive file lock keeps
two processes from resolving into the same directory at once. Once cached, no Maven
and no network is needed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from cdc_sink.errors import CdcSinkError

__all__ = [
    "POM_PATH",
    "JarResolutionError",
    "MavenNotFound",
    "cache_root",
    "kafka_broker_version",
    "pyspark_version",
    "resolve_kafka_broker_jars",
    "resolve_spark_kafka_jars",
    "spark_kafka_conf",
]

log = logging.getLogger(__name__)

POM_PATH = Path(__file__).with_name("pom.xml")
_MARKER = ".cdc_sink-resolved.json"
_MVN_TIMEOUT_S = 1800.0
_POM_NS = "{http://maven.apache.org/POM/4.0.0}"
# name-version.jar; the greedy name makes the version the last "-<digits>.<digits>..."
_JAR_NAME = re.compile(r"^(?P<artifact>.+)-(?P<version>\d+\.\d+[^/]*)\.jar$")


class JarResolutionError(CdcSinkError, RuntimeError):
    """The jars could not be resolved (Maven failed, or found no such artifact)."""


class MavenNotFound(JarResolutionError):
    """The ``mvn`` executable is not installed (and nothing is cached yet)."""


def cache_root() -> Path:
    """The cache directory: ``$CDC_SINK_CACHE``, else ``$XDG_CACHE_HOME/cdc_sink``."""
    env = os.environ.get("CDC_SINK_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "cdc_sink"


@lru_cache(maxsize=1)
def _pom_properties() -> dict[str, str]:
    root = ET.parse(POM_PATH).getroot()
    props = root.find(f"{_POM_NS}properties")
    if props is None:
        return {}
    return {child.tag.removeprefix(_POM_NS): (child.text or "").strip() for child in props}


def kafka_broker_version() -> str:
    """The Apache Kafka version :func:`resolve_kafka_broker_jars` resolves."""
    return _pom_properties()["kafka.version"]


def pyspark_version() -> str:
    """The installed pyspark's version (read from its metadata; pyspark is not imported)."""
    return metadata.version("pyspark")


def resolve_kafka_broker_jars() -> list[Path]:
    """The classpath of a KRaft Kafka broker (``kafka.Kafka``), resolved once and cached."""
    version = kafka_broker_version()
    directory = cache_root() / "jars" / f"kafka-broker-{version}"
    return _resolve(directory, profile="kafka-broker", attempts=[{}])


def resolve_spark_kafka_jars() -> list[Path]:
    """The jars to add to Spark for ``format("kafka")``, resolved once and cached.

    ``spark-sql-kafka-0-10_2.13`` of exactly the installed pyspark's version is tried
    first. Only if Maven Central does not have it (a pyspark release can reach PyPI
    before its jars reach Central, or a mirror can lag) does it fall back to the pom's
    default (the newest published), with a warning. Jars whose artifact pyspark already
    ships (Scala, slf4j, lz4, snappy, Hadoop client, ...) are left out.
    """
    version = pyspark_version()
    directory = cache_root() / "jars" / f"spark-kafka-{version}"
    exact = {"spark.kafka.version": version, "spark.token.provider.version": version}
    jars = _resolve(directory, profile="spark-kafka", attempts=[exact, {}])
    shipped = _pyspark_shipped_artifacts()
    return [jar for jar in jars if _artifact_of(jar.name) not in shipped]


def spark_kafka_conf() -> dict[str, str]:
    """Spark configuration that adds the Kafka source: ``{"spark.jars": "a.jar,b.jar"}``."""
    return {"spark.jars": ",".join(str(p) for p in resolve_spark_kafka_jars())}


# -- internals ---------------------------------------------------------------------------


def _artifact_of(jar_name: str) -> str:
    m = _JAR_NAME.match(jar_name)
    return m.group("artifact") if m else jar_name.removesuffix(".jar")


def _pyspark_shipped_artifacts() -> frozenset[str]:
    try:
        dist = metadata.distribution("pyspark")
    except metadata.PackageNotFoundError:
        return frozenset()
    jars_dir = Path(str(dist.locate_file("pyspark/jars")))
    if not jars_dir.is_dir():
        return frozenset()
    return frozenset(_artifact_of(p.name) for p in jars_dir.glob("*.jar"))


def _pom_digest() -> str:
    return hashlib.sha256(POM_PATH.read_bytes()).hexdigest()


def _find_mvn() -> str:
    override = os.environ.get("CDC_SINK_MVN")
    if override:
        return override
    found = shutil.which("mvn")
    if found:
        return found
    for home in (os.environ.get("MAVEN_HOME"), os.environ.get("M2_HOME")):
        if home and (Path(home) / "bin" / "mvn").is_file():
            return str(Path(home) / "bin" / "mvn")
    raise MavenNotFound(
        "Apache Maven ('mvn') is needed once to download the Kafka/Spark jars from Maven "
        "Central, and it is not on PATH. Install it (e.g. 'apt-get install maven'), or set "
        "CDC_SINK_MVN to its path, or CDC_SINK_CACHE to a cache that already holds the jars."
    )


@contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _read_marker(directory: Path, digest: str) -> list[Path] | None:
    try:
        data = json.loads((directory / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("pom_sha256") != digest:
        return None
    names = data.get("jars")
    if not isinstance(names, list) or not names:
        return None
    jars = [directory / str(n) for n in names]
    if not all(j.is_file() for j in jars):
        return None
    return jars


def _resolve(directory: Path, *, profile: str, attempts: list[Mapping[str, str]]) -> list[Path]:
    digest = _pom_digest()
    jars = _read_marker(directory, digest)
    if jars is not None:
        return jars
    with _exclusive_lock(directory.with_name(directory.name + ".lock")):
        jars = _read_marker(directory, digest)  # another process may have finished it
        if jars is not None:
            return jars
        mvn = _find_mvn()
        failures: list[str] = []
        for i, props in enumerate(attempts):
            if directory.exists():
                shutil.rmtree(directory)
            error = _copy_dependencies(mvn, profile, props, directory)
            if error is None:
                if i > 0:
                    log.warning(
                        "%s: %s is not on Maven Central; using the pom's default instead",
                        profile, ", ".join(f"{k}={v}" for k, v in attempts[0].items()),
                    )
                names = sorted(p.name for p in directory.glob("*.jar"))
                if not names:
                    raise JarResolutionError(f"mvn copied no jar into {directory}")
                record = {"pom_sha256": digest, "profile": profile,
                          "properties": dict(props), "jars": names}
                tmp = directory / (_MARKER + ".tmp")
                tmp.write_text(json.dumps(record, indent=1))
                tmp.replace(directory / _MARKER)  # the marker appears only when complete
                return [directory / n for n in names]
            failures.append(error)
        if directory.exists():
            shutil.rmtree(directory)
        raise JarResolutionError(
            f"Maven could not resolve profile {profile!r} of {POM_PATH}:\n"
            + "\n---\n".join(failures)
        )


def _copy_dependencies(
    mvn: str, profile: str, props: Mapping[str, str], directory: Path
) -> str | None:
    """Run mvn; return None on success, else a description of the failure."""
    # Run on a private copy of the pom so mvn writes nothing next to the package.
    with tempfile.TemporaryDirectory(prefix="cdc_sink-mvn-") as work:
        pom = Path(work) / "pom.xml"
        shutil.copyfile(POM_PATH, pom)
        cmd = [
            mvn, "-q", "-B", "-f", str(pom), f"-P{profile}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={directory}",
            *(f"-D{k}={v}" for k, v in props.items()),
        ]
        log.info("resolving %s jars: %s", profile, " ".join(cmd))
        try:
            proc = subprocess.run(
                cmd, cwd=work, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=_MVN_TIMEOUT_S, check=False,
            )
        except FileNotFoundError as exc:
            raise MavenNotFound(f"cannot run Maven ({mvn}): {exc}") from exc
        except subprocess.TimeoutExpired:
            return f"{' '.join(cmd)}: timed out after {_MVN_TIMEOUT_S:.0f}s"
    if proc.returncode == 0:
        return None
    text = proc.stdout + proc.stderr
    errors = [ln for ln in text.splitlines() if "[ERROR]" in ln and ln.strip() != "[ERROR]"]
    detail = "\n".join(errors[:8]) if errors else text[-4000:]
    return f"{' '.join(cmd)} exited with {proc.returncode}:\n{detail}"
