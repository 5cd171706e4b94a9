"""Crashes around the write of the change feed's pre-images (``change_images``): the
durability workload's driver (tests/durability/crash_driver.py, whose options store them)
is killed by ``SIGKILL`` at each of the write's fault points (its first, a middle and its
last hit of a clean run), the table is reopened and checked, and so is its change feed:
the changes of every retained version, read cold (from the pre-images its entry names,
never from those of an attempt that did not commit), equal the diff of the snapshots
around it. Then the driver runs again to the end, and after GC no pre-images are left
but those of the retained versions above the horizon."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

import cdc_sink
from cdc_sink.storage import faults
from cdc_sink.storage.layout import CHANGE_DATA_DIR
from cdc_sink.table import Table, open_table
from tests.changefeed.diff import feed_records, reference_feed
from tests.durability import checks, workload
from tests.durability.checks import DriverServer

POINTS = ("change_images.encoded", "change_images.written")
SEED = 23
BATCHES = 10


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DriverServer]:
    srv = DriverServer(tmp_path_factory.mktemp("images-driver"))
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture(scope="module")
def hits(server: DriverServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """How often a clean run of the driver reaches each fault point."""
    path = tmp_path_factory.mktemp("images-hits") / "t"
    cdc_sink.create_table(path, workload.schema(), options=workload.options())
    res = server.run(path, SEED, BATCHES, "--count-hits", crash={faults.CRASH_AT_ENV: "-"})
    assert res.returncode == 0, res.stderr
    counted: dict[str, int] = checks.driver_lines(res.stdout)[-1]["hits"]
    return counted


def _check_feed(table: Table) -> None:
    """Every retained version's changes, read cold, equal the diff of its snapshots."""
    names = workload.schema().names
    for v in range(table.oldest_version + 1, table.version + 1):
        got = sorted(feed_records(table.changes(v - 1, v), names), key=repr)
        assert got == reference_feed(table, v - 1, v, names), f"version {v}"


def _images_left(table: Table) -> set[str]:
    root = Path(table.root)
    return {p.relative_to(root).as_posix() for p in (root / CHANGE_DATA_DIR).rglob("*.arrow")}


@pytest.mark.parametrize("which", ["first", "middle", "last"])
@pytest.mark.parametrize("point", POINTS)
def test_a_crash_around_the_images_write_leaves_a_feed_equal_to_the_diff(
    point: str, which: str, hits: dict[str, int], server: DriverServer, tmp_path: Path
) -> None:
    total = hits.get(point, 0)
    assert total >= 3, f"the driver reaches {point} {total} times"
    nth = {"first": 1, "middle": (total + 1) // 2, "last": total}[which]
    path = tmp_path / "t"
    cdc_sink.create_table(path, workload.schema(), options=workload.options())
    res = server.run(path, SEED, BATCHES, crash={faults.CRASH_AT_ENV: f"{point}:{nth}"})
    assert res.returncode == -signal.SIGKILL, (res.returncode, res.stderr)
    assert re.search(rf"crash injected at fault point {re.escape(point)} \(hit {nth}\)", res.stderr)
    crashed = open_table(path, options=workload.options())
    committed = checks.check_table(crashed, SEED)
    _check_feed(crashed)
    res = server.run(path, SEED, BATCHES)
    assert res.returncode == 0, res.stderr
    checks.check_replay(checks.driver_lines(res.stdout), committed)
    table = open_table(path, options=workload.options())
    assert checks.check_table(table, SEED) == BATCHES
    _check_feed(table)
    table.gc(dry_run=False)
    horizon = table.oldest_version
    named = {
        r.images
        for v in range(horizon + 1, table.version + 1)
        for r in table.log.read(v).buckets.values()
    }
    assert None not in named  # the workload has no truncate: every version stores them
    assert _images_left(table) == named
    _check_feed(open_table(path, options=workload.options()))
