"""Apicurio Registry from Maven Central, and the Java that runs it.

Two releases serve Confluent's schema registry API (``/apis/ccompat/v7``); which one runs
depends on the Java found (:func:`choose_release`):

- ``3.3.3`` (profile ``apicurio-3`` of ``pom.xml`` beside this module): the Quarkus
  application, ``quarkus-run.jar``; needs Java 21 or newer;
- ``2.6.13.Final`` (profile ``apicurio-2``): one ``*-runner.jar``; runs on Java 17, the
  fallback where no Java 21+ is installed (``make install`` installs Java 17 only).

Each is a ``tar.gz`` that Maven unpacks (``dependency:unpack-dependencies``) into
``<cache>/registry/apicurio-registry-<version>/`` (:func:`cdc_sink.kafka.jars.cache_root`,
the same cache as the Kafka jars). A marker written after a complete unpack, holding the
pom's SHA-256, makes the next run skip Maven and the network; an exclusive file lock
keeps two processes from unpacking into the same directory at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cdc_sink.errors import CdcSinkError
from cdc_sink.kafka.jars import (
    JarResolutionError,
    cache_root,
    exclusive_lock,
    find_mvn,
    run_maven,
)

__all__ = [
    "JAVA_ENV",
    "POM_PATH",
    "Java",
    "RegistryStartError",
    "Release",
    "choose_release",
    "find_javas",
    "release_versions",
    "resolve_release",
]

log = logging.getLogger(__name__)

POM_PATH = Path(__file__).with_name("pom.xml")
JAVA_ENV = "CDC_SINK_REGISTRY_JAVA"
"""A ``java`` executable to run the registry with (else the newest one found)."""
_POM_NS = "{http://maven.apache.org/POM/4.0.0}"
_MARKER = ".cdc_sink-unpacked.json"
_JVM_DIRS = (Path("/usr/lib/jvm"), Path("/usr/java"), Path("/opt/java"))
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


class RegistryStartError(CdcSinkError, RuntimeError):
    """The schema registry could not be resolved or started (the message says why)."""


@dataclass(frozen=True)
class Java:
    """A Java runtime: its ``java`` executable and feature version (17, 21, 25...)."""

    path: str
    major: int


@dataclass(frozen=True)
class Release:
    """An Apicurio Registry release, unpacked: how to run it.

    Attributes:
        version: ``3.3.3`` or ``2.6.13.Final``.
        directory: Where it was unpacked.
        jar: The jar to run with ``java -jar``.
        java: The runtime chosen for it.
    """

    version: str
    directory: Path
    jar: Path
    java: Java

    @property
    def major(self) -> int:
        """The release's major version (3 or 2): the names of its settings differ."""
        return int(self.version.split(".", 1)[0])


@lru_cache(maxsize=1)
def release_versions() -> dict[int, str]:
    """The Apicurio version of each profile of ``pom.xml``: ``{3: "3.3.3", 2: ...}``."""
    root = ET.parse(POM_PATH).getroot()
    props = root.find(f"{_POM_NS}properties")
    assert props is not None
    values = {c.tag.removeprefix(_POM_NS): (c.text or "").strip() for c in props}
    return {3: values["apicurio3.version"], 2: values["apicurio2.version"]}


def _java_major(java: str) -> int | None:
    """The feature version of a ``java`` executable: the JDK's ``release`` file, else
    ``java -version`` (None: not a working Java)."""
    home = Path(java).resolve().parent.parent
    try:
        text = (home / "release").read_text()
        m = re.search(r'JAVA_VERSION="(\d+)(?:\.(\d+))?', text)
        if m:
            return _major(m)
    except OSError:
        pass
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _VERSION.search(out.stderr + out.stdout)
    return None if m is None else _major(m)


def _major(m: re.Match[str]) -> int:
    first = int(m.group(1))
    return int(m.group(2) or 0) if first == 1 else first  # "1.8" is Java 8


def find_javas() -> list[Java]:
    """Every Java runtime found: ``$CDC_SINK_REGISTRY_JAVA``, ``$JAVA_HOME``, ``java`` on
    PATH and the JDKs of the usual JVM directories, newest first (the override first)."""
    candidates: list[str] = []
    override = os.environ.get(JAVA_ENV)
    if override:
        candidates.append(override)
    home = os.environ.get("JAVA_HOME")
    if home:
        candidates.append(str(Path(home) / "bin" / "java"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    for d in _JVM_DIRS:
        if d.is_dir():
            candidates.extend(str(p / "bin" / "java") for p in sorted(d.iterdir()))
    found: dict[str, Java] = {}
    for c in candidates:
        real = str(Path(c).resolve())
        if real in found or not Path(c).is_file() or not os.access(c, os.X_OK):
            continue
        major = _java_major(c)
        if major is not None:
            found[real] = Java(path=c, major=major)
    javas = list(found.values())
    first = javas[:1] if override and javas and javas[0].path == override else []
    rest = sorted((j for j in javas if j not in first), key=lambda j: -j.major)
    return first + rest


def choose_release(javas: list[Java]) -> tuple[int, Java]:
    """The release to run and its Java: 3.x on the first Java 21+, else 2.x on Java 17+.

    Raises:
        RegistryStartError: No Java 17 or newer was found.
    """
    for j in javas:
        if j.major >= 21:
            return 3, j
    for j in javas:
        if j.major >= 17:
            return 2, j
    seen = ", ".join(f"{j.path} ({j.major})" for j in javas) or "none"
    raise RegistryStartError(
        f"the schema registry needs Java 17 or newer (21+ for Apicurio 3); found: {seen}. "
        f"Install one, or set {JAVA_ENV} to a java executable"
    )


def resolve_release() -> Release:
    """The registry to run here: chosen by the Java found (``$CDC_SINK_REGISTRY_JAVA``
    alone when set), unpacked once and cached.

    Raises:
        RegistryStartError: No suitable Java.
        MavenNotFound: Maven is needed (nothing cached yet) and not installed.
        JarResolutionError: Maven could not fetch or unpack the release.
    """
    javas = find_javas()
    if os.environ.get(JAVA_ENV):
        javas = javas[:1]  # the override alone decides the release
    major, java = choose_release(javas)
    version = release_versions()[major]
    directory = cache_root() / "registry" / f"apicurio-registry-{version}"
    unpack(f"apicurio-{major}", directory)
    jar = directory / "quarkus-run.jar"
    if major == 2:
        jar = next(directory.glob("*-runner.jar"), directory / "missing-runner.jar")
    if not jar.is_file():
        raise JarResolutionError(f"{directory} holds no {jar.name}: remove it and retry")
    return Release(version=version, directory=directory, jar=jar, java=java)


def _digest() -> str:
    return hashlib.sha256(POM_PATH.read_bytes()).hexdigest()


def _unpacked(directory: Path, profile: str, digest: str) -> bool:
    try:
        data = json.loads((directory / _MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (
        isinstance(data, dict)
        and data.get("pom_sha256") == digest
        and data.get("profile") == (profile)
    )


def unpack(profile: str, directory: Path) -> None:
    """Unpacks the archive of ``profile`` into ``directory`` unless already there.

    Raises:
        MavenNotFound: Maven is needed and not installed.
        JarResolutionError: Maven failed.
    """
    digest = _digest()
    if _unpacked(directory, profile, digest):
        return
    with exclusive_lock(directory.with_name(directory.name + ".lock")):
        if _unpacked(directory, profile, digest):
            return
        if directory.exists():
            shutil.rmtree(directory)
        _run_maven(profile, directory)
        record = {"pom_sha256": digest, "profile": profile}
        tmp = directory / (_MARKER + ".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(directory / _MARKER)


def _run_maven(profile: str, directory: Path) -> None:
    goals = [
        f"-P{profile}",
        "dependency:unpack-dependencies",
        "-DincludeScope=runtime",
        "-DexcludeTransitive=true",
        f"-DoutputDirectory={directory}",
    ]
    error = run_maven(
        POM_PATH, goals, mvn=find_mvn("the schema registry"), what="the schema registry"
    )
    if error is not None:
        shutil.rmtree(directory, ignore_errors=True)
        raise JarResolutionError(error)
