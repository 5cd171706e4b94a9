"""The project's Docker images, built once per machine and reused.

Four images, each tagged with a digest of everything it is built from, so an image is
rebuilt exactly when one of its inputs changes (``docker image inspect`` first):

* ``cdc-sink/base:bookworm-<digest>`` - Debian bookworm + Python 3.11, made locally by
  ``docker/build_base.sh`` (debootstrap + ``docker import``): the stand-in for
  ``python:3.11-slim-bookworm`` where no image registry is reachable. Also tagged
  ``cdc-sink/base:bookworm``.
* ``cdc-sink/kafka:<digest>`` - ``docker/kafka/Dockerfile``: a KRaft broker from the
  Maven Central jars of ``testkit/cdc_sink_testkit/kafka/pom.xml``.
* ``cdc-sink/job:<digest>`` - ``docker/Dockerfile``: the streaming job.
* ``cdc-sink/registry:<digest>`` - ``docker/registry/Dockerfile``: a schema registry
  (Apicurio 2, Confluent's API) for the compose stack's ``avro`` profile, from the Maven
  Central archive of ``testkit/cdc_sink_testkit/registry/pom.xml``.

Builds use host networking (``docker build --network host``) and the classic builder's
layer cache, so a change of the project's code rebuilds only the job image's last layer.
``python docker/images.py`` (from the repository root, with the test kit installed: it
starts the Docker engine with :func:`cdc_sink_testkit.docker_engine.ensure_engine`)
builds what is missing and prints tags, build times and sizes. The test kit's container
broker and ``tests/docker`` import this file through
:func:`cdc_sink_testkit.checkout.docker_images`. It is not part of the ``cdc_sink``
package.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cdc_sink.errors import CdcSinkError

__all__ = [
    "BASE_REPO",
    "JOB_REPO",
    "KAFKA_REPO",
    "REGISTRY_REPO",
    "BuiltImage",
    "ImageBuildError",
    "base_image_tag",
    "ensure_base_image",
    "ensure_job_image",
    "ensure_kafka_image",
    "ensure_registry_image",
    "image_exists",
    "image_size",
    "inputs_digest",
    "kafka_image_tag",
    "main",
    "repo_root",
    "run_docker",
]

BASE_REPO = "cdc-sink/base"
KAFKA_REPO = "cdc-sink/kafka"
JOB_REPO = "cdc-sink/job"
REGISTRY_REPO = "cdc-sink/registry"
_BUILD_TIMEOUT_S = 3600.0

# What each image is built from (relative to the repository root).
_BASE_INPUTS = ("docker/build_base.sh",)
_KAFKA_INPUTS = ("docker/kafka", "testkit/cdc_sink_testkit/kafka/pom.xml", ".dockerignore")
_REGISTRY_INPUTS = ("docker/registry", "testkit/cdc_sink_testkit/registry/pom.xml", ".dockerignore")
_JOB_INPUTS = (
    "docker/Dockerfile",
    "docker/entrypoint.sh",
    "docker/healthcheck.py",
    "docker/produce_orders.py",
    "docker/avro.properties",
    ".dockerignore",
    "pyproject.toml",
    "README.md",
    "cdc_sink",
    "testkit/pyproject.toml",
    "testkit/cdc_sink_testkit",
    "streaming_jobs",
)


class ImageBuildError(CdcSinkError, RuntimeError):
    """An image could not be built (the message ends with the build's output tail)."""


@dataclass(frozen=True)
class BuiltImage:
    """An image that exists locally.

    Attributes:
        tag: Its tag (``repo:digest``).
        seconds: Wall time of the build this call ran, ``0.0`` when it already existed.
        built: Whether this call built it.
    """

    tag: str
    seconds: float
    built: bool


def repo_root() -> Path | None:
    """The checkout this file belongs to, when it holds ``docker/Dockerfile`` (else None)."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "docker" / "Dockerfile").is_file() else None


def _files(root: Path, rel: str) -> Iterable[Path]:
    path = root / rel
    if path.is_file():
        yield path
        return
    for p in sorted(path.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".so"):
            yield p


def inputs_digest(root: Path, inputs: Sequence[str], extra: Iterable[str] = ()) -> str:
    """SHA-256 (hex, 12 digits) of the files under ``inputs`` (names and bytes) and ``extra``.

    Raises:
        FileNotFoundError: An input does not exist.
    """
    h = hashlib.sha256()
    for rel in inputs:
        if not (root / rel).exists():
            raise FileNotFoundError(root / rel)
        for p in _files(root, rel):
            h.update(p.relative_to(root).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(p.read_bytes()).digest())
    for item in extra:
        h.update(item.encode() + b"\0")
    return h.hexdigest()[:12]


def run_docker(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Runs ``docker args...`` (no stdin, output captured as text, never raises on a
    non-zero exit)."""
    return subprocess.run(
        ["docker", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def image_exists(tag: str) -> bool:
    """True when ``docker image inspect tag`` finds the image."""
    return run_docker("image", "inspect", tag).returncode == 0


def image_size(tag: str) -> int:
    """The image's size in bytes (``docker image inspect``'s ``Size``)."""
    out = run_docker("image", "inspect", "-f", "{{.Size}}", tag)
    if out.returncode != 0:
        raise ImageBuildError(f"no image {tag}: {out.stderr.strip()}")
    return int(out.stdout.strip())


def _image_id(tag: str) -> str:
    out = run_docker("image", "inspect", "-f", "{{.Id}}", tag)
    if out.returncode != 0:
        raise ImageBuildError(f"no image {tag}: {out.stderr.strip()}")
    return out.stdout.strip()


def _run_build(cmd: list[str], what: str, cwd: Path) -> float:
    env = dict(os.environ, DOCKER_BUILDKIT="0")  # the classic builder: no plugin needed
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            timeout=_BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ImageBuildError(f"building {what} timed out after {_BUILD_TIMEOUT_S:.0f}s") from exc
    if proc.returncode != 0:
        raise ImageBuildError(
            f"building {what} failed ({proc.returncode}): {' '.join(cmd)}\n"
            f"{(proc.stdout + proc.stderr)[-6000:]}"
        )
    return time.monotonic() - t0


def _prune_older(tag: str) -> None:
    """Removes the other tags of ``tag``'s repository (earlier builds; their shared layers
    stay). An image a container still uses is kept (``docker rmi`` refuses it)."""
    repo = tag.rsplit(":", 1)[0]
    out = run_docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", repo)
    for other in out.stdout.split():
        if other != tag and not other.endswith(":bookworm"):
            run_docker("rmi", other)


def _docker_build(root: Path, dockerfile: str, tag: str, build_args: Mapping[str, str]) -> float:
    cmd = [
        "docker",
        "build",
        "--network",
        "host",
        "--force-rm",
        "-f",
        str(root / dockerfile),
        "-t",
        tag,
    ]
    for k, v in build_args.items():
        cmd += ["--build-arg", f"{k}={v}"]
    cmd.append(str(root))
    return _run_build(cmd, tag, root)


def ensure_base_image(root: Path) -> BuiltImage:
    """The local Debian bookworm + Python base (``docker/build_base.sh``), built if missing.

    Raises:
        ImageBuildError: debootstrap or ``docker import`` failed.
    """
    tag = base_image_tag(root)
    if image_exists(tag):
        return BuiltImage(tag, 0.0, False)
    seconds = _run_build(["bash", str(root / "docker" / "build_base.sh"), tag], tag, root)
    _prune_older(tag)
    run_docker("tag", tag, f"{BASE_REPO}:bookworm")
    return BuiltImage(tag, seconds, True)


def _extra_ca_certificates() -> list[str]:
    ca_dir = Path(os.environ.get("EXTRA_CA_DIR", "/usr/local/share/ca-certificates"))
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(ca_dir.glob("*.crt"))]


def base_image_tag(root: Path) -> str:
    """The tag of the local base image of this checkout (whether it exists or not): a
    digest of ``docker/build_base.sh`` and of the extra CA certificates it copies."""
    return f"{BASE_REPO}:bookworm-{inputs_digest(root, _BASE_INPUTS, _extra_ca_certificates())}"


def kafka_image_tag(root: Path, base: str | None = None) -> str | None:
    """The tag :func:`ensure_kafka_image` gives the Kafka image on ``base`` (default: the
    local base), or None when that base image does not exist yet."""
    base = base or base_image_tag(root)
    if not image_exists(base):
        return None
    return _tag_on_base(root, KAFKA_REPO, _KAFKA_INPUTS, base)


def ensure_kafka_image(root: Path, base: str | None = None) -> BuiltImage:
    """The KRaft broker image (``docker/kafka/Dockerfile``), built if missing.

    Args:
        root: The repository root (the build context).
        base: The ``BASE`` image; by default the local base (built if missing).

    Raises:
        ImageBuildError: The build failed.
    """
    return _ensure_on_base(root, base, KAFKA_REPO, _KAFKA_INPUTS, "docker/kafka/Dockerfile")


def ensure_job_image(root: Path, base: str | None = None) -> BuiltImage:
    """The streaming job's image (``docker/Dockerfile``), built if missing; arguments and
    errors as :func:`ensure_kafka_image`'s."""
    return _ensure_on_base(root, base, JOB_REPO, _JOB_INPUTS, "docker/Dockerfile")


def ensure_registry_image(root: Path, base: str | None = None) -> BuiltImage:
    """The schema registry's image (``docker/registry/Dockerfile``), built if missing;
    arguments and errors as :func:`ensure_kafka_image`'s."""
    return _ensure_on_base(
        root, base, REGISTRY_REPO, _REGISTRY_INPUTS, "docker/registry/Dockerfile"
    )


def _tag_on_base(root: Path, repo: str, inputs: tuple[str, ...], base: str) -> str:
    """The tag of an image of ``repo`` built from ``inputs`` on the existing image ``base``."""
    return f"{repo}:{inputs_digest(root, inputs, [_image_id(base)])}"


def _ensure_on_base(
    root: Path, base: str | None, repo: str, inputs: tuple[str, ...], dockerfile: str
) -> BuiltImage:
    """The image of ``repo`` from ``dockerfile`` on ``base`` (default: the local base, built
    if missing), built if missing."""
    base = base or ensure_base_image(root).tag
    return _ensure_built(root, dockerfile, _tag_on_base(root, repo, inputs, base), base)


def _ensure_built(root: Path, dockerfile: str, tag: str, base: str) -> BuiltImage:
    """``tag`` as it is, or built from ``dockerfile`` on ``base`` (older tags removed)."""
    if image_exists(tag):
        return BuiltImage(tag, 0.0, False)
    seconds = _docker_build(root, dockerfile, tag, {"BASE": base})
    _prune_older(tag)
    return BuiltImage(tag, seconds, True)


def main(argv: Sequence[str] | None = None) -> int:
    """Builds the missing images; prints each tag, its build time and its size."""
    p = argparse.ArgumentParser(
        prog="python docker/images.py",
        description="Build cdc_sink's Docker images (cached).",
    )
    p.add_argument("--root", default=None, help="repository root (default: this checkout)")
    p.add_argument(
        "--only",
        choices=("base", "kafka", "job", "registry"),
        action="append",
        default=None,
        help="build only these images (repeatable)",
    )
    args = p.parse_args(argv)
    root = Path(args.root) if args.root else repo_root()
    if root is None:
        p.error("no docker/Dockerfile in this checkout: pass --root")
    from cdc_sink_testkit.docker_engine import ensure_engine

    ensure_engine()
    wanted = args.only or ["base", "kafka", "job"]
    base = ensure_base_image(root)
    built = {"base": base}
    if "kafka" in wanted:
        built["kafka"] = ensure_kafka_image(root, base.tag)
    if "job" in wanted:
        built["job"] = ensure_job_image(root, base.tag)
    if "registry" in wanted:
        built["registry"] = ensure_registry_image(root, base.tag)
    for name in wanted:
        img = built[name]
        how = f"built in {img.seconds:.1f}s" if img.built else "cached"
        print(f"{name:8} {img.tag:40} {how:>18}  {image_size(img.tag) / 1e6:8.1f} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
