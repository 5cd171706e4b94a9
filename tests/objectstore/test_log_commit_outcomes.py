"""How the version log reads the answer of its commit point, on each backend (through the
test kit's FaultStore): a create reported as taken although it landed (a retried PUT
whose first answer was lost) is this writer's commit; a create taken by another writer
is a CommitConflict; a create whose answer is lost leaves the outcome to a re-read."""

from __future__ import annotations

import pytest

from cdc_sink.errors import CommitConflict
from cdc_sink.storage.objectstore import ObjectExists, StoreIOError
from cdc_sink.storage.version_log import VersionLog
from cdc_sink_testkit.faults import FaultStore
from tests.objectstore.conftest import Target
from tests.objectstore.racers import log_entry


def _log(target: Target) -> tuple[VersionLog, FaultStore]:
    faulty = FaultStore(target.open())
    return VersionLog(target.url, store=faulty), faulty


def _taken(op: str, key: str) -> ObjectExists:
    return ObjectExists(f"{key} exists (after a retry)")


def test_a_create_reported_taken_that_holds_this_entry_is_this_commit(target: Target) -> None:
    log, faulty = _log(target)
    log.commit(log_entry(0, racer=1))
    faulty.fail("put_if_absent", after=True, error=_taken)  # landed, answer says taken
    log.commit(log_entry(1, racer=1))
    assert VersionLog(target.url, store=faulty.inner).read(1) == log_entry(1, racer=1)


def test_a_create_taken_by_another_writer_is_a_commit_conflict(target: Target) -> None:
    log, _ = _log(target)
    other = VersionLog(target.url, store=target.open(check_conditional_writes=False))
    log.commit(log_entry(0, racer=1))
    other.commit(log_entry(1, racer=2))
    with pytest.raises(CommitConflict):
        log.commit(log_entry(1, racer=1))
    assert VersionLog(target.url, store=target.open()).read(1) == log_entry(1, racer=2)


def test_a_lost_answer_leaves_the_outcome_to_a_re_read_of_the_log(target: Target) -> None:
    log, faulty = _log(target)
    log.commit(log_entry(0, racer=1))
    faulty.fail("put_if_absent", after=True)  # landed, then the connection broke
    with pytest.raises(StoreIOError):
        log.commit(log_entry(1, racer=1))
    fresh = VersionLog(target.url, store=faulty.inner)
    assert fresh.latest() == 1
    assert fresh.read(1) == log_entry(1, racer=1)
