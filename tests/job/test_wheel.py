"""The job ships in the wheel: ``pip wheel .`` of this checkout, installed into an empty
virtual environment (the core dependencies from the package index), gives a ``cdc-sink``
whose ``run --help`` and ``python -m cdc_sink.job --help`` describe the job, with the C
extensions importable from the installed package (not from a zip)."""

from __future__ import annotations

import venv
from pathlib import Path

import pytest

from tests.job.wheel import build_wheel
from tests.job.wheel import run as _run

pytestmark = [pytest.mark.integration]


def test_wheel_installs_the_job_into_an_empty_venv(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "wheels")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    _run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], tmp_path
    )
    help_text = _run([str(env_dir / "bin" / "cdc-sink"), "run", "--help"], tmp_path)
    assert help_text.startswith("usage: cdc_to_tablets")
    for flag in ("--bootstrap-servers", "--config", "--client-properties", "--master"):
        assert flag in help_text
    assert _run([str(py), "-m", "cdc_sink.job", "--help"], tmp_path) == help_text
    where = _run(
        [
            str(py),
            "-c",
            "import cdc_sink.formats._cscan as c, cdc_sink.job as j; print(c.__file__); "
            "print(j.__file__)",
        ],
        tmp_path,
    ).split()
    assert all(str(env_dir) in p for p in where), where  # the installed copy, not the checkout
    assert where[0].endswith(".so")
