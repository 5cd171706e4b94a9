"""Resolve the JVM jars cdc_sink needs from Maven Central, once, into a local cache.

:func:`resolve_spark_kafka_jars` - Spark's Kafka source (``spark-sql-kafka-0-10``) and
only those of its dependencies that pyspark does not already ship, declared as the
``spark-kafka`` profile of ``pom.xml`` beside this module; :func:`spark_kafka_conf` turns
them into ``spark.jars``. :func:`resolve_pom_profile` is the resolution itself, for any
pom and profile (the test kit resolves its local broker's jars with it).

The Kafka source must match the running Spark. :func:`choose_spark_kafka_version` picks
it from the versions Maven Central publishes (read from the artifact's
``maven-metadata.xml``): the installed pyspark's own version where it exists, else the
newest patch of the same minor, else the newest release of the nearest lower minor (a
pyspark release reaches PyPI before, or without, its jars on Central), with a warning
(docs/compatibility.md).

Each profile is copied by ``mvn dependency:copy-dependencies`` into
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
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from cdc_sink.errors import JarResolutionError, MavenNotFound

__all__ = [
    "POM_PATH",
    "JarResolutionError",
    "MavenNotFound",
    "cache_root",
    "choose_spark_kafka_version",
    "connector_version",
    "exclusive_lock",
    "find_mvn",
    "pyspark_version",
    "resolve_pom_profile",
    "resolve_spark_kafka_jars",
    "run_maven",
    "spark_kafka_conf",
]

log = logging.getLogger(__name__)

POM_PATH = Path(__file__).with_name("pom.xml")
_MARKER = ".cdc_sink-resolved.json"
_MVN_TIMEOUT_S = 1800.0
# name-version.jar; the greedy name makes the version the last "-<digits>.<digits>..."
_JAR_NAME = re.compile(r"^(?P<artifact>.+)-(?P<version>\d+\.\d+[^/]*)\.jar$")
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")  # previews, RCs and dev builds are not
_LEADING_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)")
SPARK_KAFKA_ARTIFACT = "spark-sql-kafka-0-10_2.13"
SPARK_TOKEN_PROVIDER_ARTIFACT = "spark-token-provider-kafka-0-10_2.13"
_MAVEN_REPO_ENV = "CDC_SINK_MAVEN_REPO"  # where maven-metadata.xml is read (a mirror)
_MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
_METADATA_TIMEOUT_S = 30.0
_warned: set[tuple[str, str]] = set()


def cache_root() -> Path:
    """The cache directory: ``$CDC_SINK_CACHE``, else ``$XDG_CACHE_HOME/cdc_sink``."""
    env = os.environ.get("CDC_SINK_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "cdc_sink"


def pyspark_version() -> str:
    """The installed pyspark's version (read from its metadata; pyspark is not imported)."""
    return metadata.version("pyspark")


def resolve_spark_kafka_jars(spark_version: str | None = None) -> list[Path]:
    """The jars to add to Spark for ``format("kafka")``, resolved once and cached.

    ``spark-sql-kafka-0-10_2.13`` of the version :func:`choose_spark_kafka_version`
    picks for that Spark (its own version where Maven Central has it, else
    the nearest published one, with a warning). Where Central's metadata cannot be read
    (offline, behind a mirror: set ``$CDC_SINK_MAVEN_REPO``), the exact version is tried
    and then the pom's default. Jars whose artifact pyspark already ships (Scala, slf4j,
    lz4, snappy, Hadoop client, ...) are left out.

    Args:
        spark_version: The Spark the jars are for, e.g. a cluster's (``spark-submit
            --version``); default: the installed pyspark's.

    Raises:
        ValueError: ``spark_version`` is not a release number (``4.2.0``, ``4.3.0.dev1``).
    """
    version = spark_version or pyspark_version()
    if _LEADING_VERSION.match(version) is None or "/" in version:
        raise ValueError(f"not a Spark version: {version!r} (such as 4.2.0)")
    directory = cache_root() / "jars" / f"spark-kafka-{version}"
    jars = resolve_pom_profile(
        POM_PATH, directory, profile="spark-kafka", attempts=lambda: _spark_kafka_attempts(version)
    )
    _warn_if_mismatched(version, connector_version(jars))
    shipped = _pyspark_shipped_artifacts()
    return [jar for jar in jars if _artifact_of(jar.name) not in shipped]


def choose_spark_kafka_version(spark_version: str, available: Iterable[str]) -> str | None:
    """The ``spark-sql-kafka`` release to run with Spark ``spark_version``.

    Args:
        spark_version: The running Spark's version (``pyspark.__version__``).
        available: The versions the repository publishes (previews and RCs are ignored).

    Returns:
        ``spark_version`` itself when published; else the newest patch of the same
        minor; else the newest release of the nearest lower minor of the same major;
        None when the major has no release at or below that minor.
    """
    m = _LEADING_VERSION.match(spark_version)
    if m is None:
        return None
    major, minor, patch = (int(g) for g in m.groups())
    releases = [
        r
        for r in (_release(v) for v in available)
        if r is not None and r[0] == major and r[1] <= minor
    ]
    if (major, minor, patch) in releases and _RELEASE.match(spark_version):
        return spark_version
    same_minor = [r for r in releases if r[1] == minor]
    best = max(same_minor or releases, default=None)
    return None if best is None else ".".join(map(str, best))


def connector_version(jars: Sequence[Path]) -> str | None:
    """The version of the ``spark-sql-kafka`` jar among ``jars`` (None: not there)."""
    for jar in jars:
        m = _JAR_NAME.match(jar.name)
        if m is not None and m.group("artifact") == SPARK_KAFKA_ARTIFACT:
            return m.group("version")
    return None


def spark_kafka_conf() -> dict[str, str]:
    """Spark configuration that adds the Kafka source: ``{"spark.jars": "a.jar,b.jar"}``."""
    return {"spark.jars": ",".join(str(p) for p in resolve_spark_kafka_jars())}


# -- internals ---------------------------------------------------------------------------


def _artifact_of(jar_name: str) -> str:
    m = _JAR_NAME.match(jar_name)
    return m.group("artifact") if m else jar_name.removesuffix(".jar")


def _release(version: str) -> tuple[int, int, int] | None:
    m = _RELEASE.match(version.strip())
    return None if m is None else (int(m[1]), int(m[2]), int(m[3]))


def _maven_versions(artifact: str) -> list[str]:
    """The versions of ``org.apache.spark:<artifact>`` listed by the repository's metadata.

    Raises:
        OSError: The metadata could not be read.
    """
    repo = os.environ.get(_MAVEN_REPO_ENV) or _MAVEN_CENTRAL
    url = f"{repo.rstrip('/')}/org/apache/spark/{artifact}/maven-metadata.xml"
    if not url.startswith(("https://", "http://", "file://")):
        raise OSError(f"${_MAVEN_REPO_ENV}: not a URL: {repo!r}")
    with urllib.request.urlopen(url, timeout=_METADATA_TIMEOUT_S) as resp:
        body = resp.read()
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise OSError(f"{url}: not Maven metadata: {exc}") from exc
    return [(v.text or "").strip() for v in root.iter("version")]


def _spark_kafka_attempts(spark_version: str) -> list[dict[str, str]]:
    """The property sets the ``spark-kafka`` profile is tried with, best first."""
    try:
        connectors = _maven_versions(SPARK_KAFKA_ARTIFACT)
        providers = _maven_versions(SPARK_TOKEN_PROVIDER_ARTIFACT)
    except OSError as exc:
        log.warning(
            "cannot read the published spark-sql-kafka versions (%s); trying %s, "
            "then the pom's default",
            exc,
            spark_version,
        )
        return [{"spark.kafka.version": spark_version}, {}]
    chosen = choose_spark_kafka_version(spark_version, connectors)
    if chosen is None:
        log.warning(
            "Maven has no spark-sql-kafka for Spark %s; using the pom's default", spark_version
        )
        return [{}]
    attempt = {"spark.kafka.version": chosen}
    # The token provider is a dependency with fewer releases (no 4.1.0): the newest one
    # not newer than the connector.
    ceiling = _release(chosen)
    provider = max(
        (
            r
            for r in map(_release, providers)
            if r is not None and ceiling is not None and r <= ceiling
        ),
        default=None,
    )
    if provider is not None:
        attempt["spark.token.provider.version"] = ".".join(map(str, provider))
    return [attempt, {}]


def _warn_if_mismatched(spark_version: str, connector: str | None) -> None:
    """Warns (once per process) when the Kafka source is not the running Spark's version."""
    if connector is None or connector == spark_version or (spark_version, connector) in _warned:
        return
    _warned.add((spark_version, connector))
    log.warning(
        "Maven Central has no %s %s: Spark %s runs with the Kafka source %s (the nearest "
        "published; see docs/compatibility.md)",
        SPARK_KAFKA_ARTIFACT,
        spark_version,
        spark_version,
        connector,
    )


def _pyspark_shipped_artifacts() -> frozenset[str]:
    try:
        dist = metadata.distribution("pyspark")
    except metadata.PackageNotFoundError:
        return frozenset()
    jars_dir = Path(str(dist.locate_file("pyspark/jars")))
    if not jars_dir.is_dir():
        return frozenset()
    return frozenset(_artifact_of(p.name) for p in jars_dir.glob("*.jar"))


def _pom_digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def find_mvn(purpose: str = "the Kafka jars") -> str:
    """The ``mvn`` to run: ``$CDC_SINK_MVN``, else on PATH, else under ``$MAVEN_HOME`` or
    ``$M2_HOME``.

    Args:
        purpose: What Maven downloads, for the error message.

    Raises:
        MavenNotFound: No Maven was found.
    """
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
        f"Apache Maven ('mvn') is needed once to download {purpose} from Maven "
        "Central, and it is not on PATH. Install it (e.g. 'apt-get install maven'), or set "
        "CDC_SINK_MVN to its path, or CDC_SINK_CACHE to a cache that already holds them."
    )


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``path`` (created if missing): one process at a time
    fills a cache directory."""
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


def resolve_pom_profile(
    pom: Path,
    directory: Path,
    *,
    profile: str,
    attempts: Callable[[], list[dict[str, str]]] = lambda: [{}],
) -> list[Path]:
    """The jars of the Maven ``profile`` of ``pom``, copied into ``directory`` once.

    Cached: a marker in ``directory`` names the jars of a complete copy made from this
    very pom (its SHA-256); otherwise Maven copies them, under an exclusive file lock,
    with the first of ``attempts()`` (``-D`` property sets, computed only when Maven must
    run) that works.

    Args:
        pom: The ``pom.xml`` declaring ``profile``.
        directory: Where the jars go, e.g. ``cache_root() / "jars" / "<name>-<version>"``.
        profile: The Maven profile (``-P``).
        attempts: The property sets to try, best first (default: the pom's own).

    Raises:
        MavenNotFound: Maven is needed and not installed.
        JarResolutionError: No attempt resolved the profile.
    """
    digest = _pom_digest(pom)
    jars = _read_marker(directory, digest)
    if jars is not None:
        return jars
    with exclusive_lock(directory.with_name(directory.name + ".lock")):
        jars = _read_marker(directory, digest)  # another process may have finished it
        if jars is not None:
            return jars
        return _copy_first_working(pom, directory, profile, digest, attempts())


def _copy_first_working(
    pom: Path, directory: Path, profile: str, digest: str, attempts: list[dict[str, str]]
) -> list[Path]:
    """Runs Maven with each property set in turn until one copies the jars."""
    mvn = find_mvn()
    failures: list[str] = []
    for i, props in enumerate(attempts):
        if directory.exists():
            shutil.rmtree(directory)
        error = _copy_dependencies(mvn, pom, profile, props, directory)
        if error is not None:
            failures.append(error)
            continue
        if i > 0:
            log.warning(
                "%s: %s could not be resolved; using %s instead",
                profile,
                _describe(attempts[0]),
                _describe(props),
            )
        return _publish_marker(directory, profile, digest, props)
    if directory.exists():
        shutil.rmtree(directory)
    raise JarResolutionError(
        f"Maven could not resolve profile {profile!r} of {pom}:\n" + "\n---\n".join(failures)
    )


def _describe(props: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in props.items()) or "the pom's defaults"


def _publish_marker(
    directory: Path, profile: str, digest: str, props: Mapping[str, str]
) -> list[Path]:
    """Records the copied jars; the marker appears only when the copy is complete."""
    names = sorted(p.name for p in directory.glob("*.jar"))
    if not names:
        raise JarResolutionError(f"mvn copied no jar into {directory}")
    record = {"pom_sha256": digest, "profile": profile, "properties": dict(props), "jars": names}
    tmp = directory / (_MARKER + ".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(directory / _MARKER)
    return [directory / n for n in names]


def _copy_dependencies(
    mvn: str, source_pom: Path, profile: str, props: Mapping[str, str], directory: Path
) -> str | None:
    """Run mvn; return None on success, else a description of the failure."""
    goals = [
        f"-P{profile}",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={directory}",
        *(f"-D{k}={v}" for k, v in props.items()),
    ]
    return run_maven(source_pom, goals, mvn=mvn, what=f"{profile} jars")


def run_maven(
    source_pom: Path, goals: Sequence[str], *, mvn: str | None = None, what: str = "artifacts"
) -> str | None:
    """Runs ``mvn -q -B -f <pom> <goals>`` on a private copy of ``source_pom`` (so Maven
    writes nothing next to it), in a temporary directory, with a timeout.

    Args:
        source_pom: The pom to run.
        goals: Profiles, goals and ``-D`` properties.
        mvn: The Maven to run (default: :func:`find_mvn`).
        what: What is resolved, for the log.

    Returns:
        None on success, else a description of the failure (the command and its
        ``[ERROR]`` lines, or the output's tail).

    Raises:
        MavenNotFound: Maven cannot be run.
    """
    mvn = mvn or find_mvn()
    with tempfile.TemporaryDirectory(prefix="cdc_sink-mvn-") as work:
        pom = Path(work) / "pom.xml"
        shutil.copyfile(source_pom, pom)
        cmd = [mvn, "-q", "-B", "-f", str(pom), *goals]
        log.info("resolving %s: %s", what, " ".join(cmd))
        try:
            proc = subprocess.run(
                cmd,
                cwd=work,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=_MVN_TIMEOUT_S,
                check=False,
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
