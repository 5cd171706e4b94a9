"""Fast tests of the Docker helpers: image tags follow their inputs, an engine that
cannot be started is reported with the reason (what the container tests skip with), and
the image builder runs as a script of ``docker/``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cdc_sink_testkit import docker_engine
from cdc_sink_testkit.docker_engine import DockerUnavailable, ensure_engine
from tests.docker.engine import IMAGES, REPO

inputs_digest = IMAGES.inputs_digest


def test_the_image_builder_runs_as_a_script_from_the_repository_root() -> None:
    out = subprocess.run(
        [sys.executable, "docker/images.py", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: python docker/images.py")


def test_the_job_image_is_built_from_the_product_and_the_test_kit() -> None:
    # docker/Dockerfile installs both wheels (its producer runs the kit's orders stream),
    # so a change to either must change the job image's tag.
    job_inputs = IMAGES._JOB_INPUTS
    assert "cdc_sink" in job_inputs
    assert {"testkit/pyproject.toml", "testkit/cdc_sink_testkit"} <= set(job_inputs)


def _tree(root: Path) -> None:
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "Dockerfile").write_text("FROM x\n")


def test_digest_changes_with_a_file_and_its_name_but_not_with_bytecode(tmp_path: Path) -> None:
    _tree(tmp_path)
    first = inputs_digest(tmp_path, ["Dockerfile", "pkg"])
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0\1")
    assert inputs_digest(tmp_path, ["Dockerfile", "pkg"]) == first
    (tmp_path / "pkg" / "a.py").write_text("A = 2\n")
    changed = inputs_digest(tmp_path, ["Dockerfile", "pkg"])
    assert changed != first
    (tmp_path / "pkg" / "a.py").rename(tmp_path / "pkg" / "b.py")
    assert inputs_digest(tmp_path, ["Dockerfile", "pkg"]) not in (first, changed)
    assert inputs_digest(tmp_path, ["Dockerfile", "pkg"], ["base-id-2"]) != inputs_digest(
        tmp_path, ["Dockerfile", "pkg"], ["base-id-1"]
    )


def test_digest_of_a_missing_input_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        inputs_digest(tmp_path, ["nothing-here"])


def test_no_engine_and_no_root_is_reported_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(docker_engine, "engine_running", lambda timeout=15.0: False)
    monkeypatch.setattr(docker_engine, "_is_root", lambda: False)
    monkeypatch.setattr(docker_engine, "_missing_packages", lambda: [])
    monkeypatch.setattr(docker_engine.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(docker_engine.Path, "is_file", lambda self: True)
    with pytest.raises(DockerUnavailable, match="starting dockerd needs root"):
        ensure_engine()


def test_missing_packages_without_install_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(docker_engine, "engine_running", lambda timeout=15.0: False)
    monkeypatch.setattr(docker_engine, "_missing_packages", lambda: ["docker.io"])
    with pytest.raises(DockerUnavailable, match=r"not installed: docker\.io"):
        ensure_engine(install=False)


def test_an_unanswering_docker_host_is_not_replaced_by_a_local_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    monkeypatch.setattr(docker_engine, "engine_running", lambda timeout=15.0: False)
    with pytest.raises(DockerUnavailable, match="DOCKER_HOST"):
        ensure_engine()
