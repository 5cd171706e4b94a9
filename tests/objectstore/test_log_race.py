"""The version log's commit point on each backend: 16 processes race to commit each of
several versions of one log (on the S3 server: conditional PUTs of the entry); exactly
one wins each version, every other gets CommitConflict, and every reader sees the
winner's entry."""

from __future__ import annotations

from collections import Counter

from cdc_sink.storage.version_log import VersionLog
from tests.objectstore.conftest import Target
from tests.objectstore.racers import log_entry, race_log_commits, run_race

RACERS = 16
VERSIONS = 4


def test_exactly_one_of_16_racing_writers_commits_each_version(target: Target) -> None:
    store = target.open()
    outcomes = run_race(race_log_commits, target.url, target.options or None, VERSIONS, RACERS)
    assert not [o for o in outcomes if o[2] not in ("won", "lost")]
    reader = VersionLog(target.url, store=store)
    assert reader.latest() == VERSIONS - 1
    for version in range(VERSIONS):
        per_version = Counter(o[2] for o in outcomes if o[0] == version)
        assert per_version == {"won": 1, "lost": RACERS - 1}, version
        (winner,) = [o[1] for o in outcomes if o[0] == version and o[2] == "won"]
        assert reader.read(version) == log_entry(version, winner)
    winners = {f"writer-{o[1]}" for o in outcomes if o[2] == "won"}
    assert set(reader.app_transactions()) == winners
    assert store.list_keys("_log") == [VersionLog.entry_key(v) for v in range(VERSIONS)]
