"""Fixtures of the durability tests (helpers live in checks.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.durability.checks import DriverServer, scratch_dir


@pytest.fixture
def durable_dir(tmp_path: Path) -> Iterator[Path]:
    """A path for one table (on tmpfs when available: see ``scratch_dir``), removed
    afterwards. The directory itself does not exist yet."""
    root = scratch_dir()
    if root is None:
        yield tmp_path / "table"
        return
    try:
        yield Path(root) / "table"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def driver_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DriverServer]:
    """The fork server of ``crash_driver.py`` (see :class:`DriverServer`)."""
    server = DriverServer(tmp_path_factory.mktemp("driver-runs"))
    try:
        yield server
    finally:
        server.close()
