"""The wheel of this checkout, built as a user builds it (``pip wheel --no-deps .``), for
the tests that install it somewhere else: tests/job/test_wheel.py (an empty virtual
environment) and tests/cluster/test_run_on_cluster.py (an environment packed for a Spark
cluster's executors)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["REPO", "build_wheel", "run"]

REPO = Path(__file__).resolve().parents[2]


def run(
    cmd: list[str], cwd: Path, timeout: float = 900, env: Mapping[str, str] | None = None
) -> str:
    """``cmd``'s output, run in ``cwd`` (not the checkout: ``python -c`` would import it);
    a failure names the command and shows its output's tail."""
    done = subprocess.run(
        cmd,
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def build_wheel(dest: Path) -> Path:
    """``pip wheel --no-deps`` of the checkout (its C extensions compiled) into ``dest``;
    the wheel's path."""
    run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), str(REPO)],
        dest.parent,
    )
    (wheel,) = dest.glob("cdc_sink-*.whl")
    return wheel
