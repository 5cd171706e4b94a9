"""``put_if_absent`` has exactly one winner: 16 processes race to create each of several
keys at once, on each backend (a local directory; a real S3 server's conditional PUT)."""

from __future__ import annotations

from collections import Counter

from tests.objectstore.conftest import Target
from tests.objectstore.racers import payload, race_put_if_absent, run_race

RACERS = 16
KEYS = [f"_log/{v:020d}.json" for v in range(5)]


def test_exactly_one_of_16_racing_processes_creates_each_key(target: Target) -> None:
    store = target.open()  # on S3 the probe runs once here, not in every racer
    outcomes = run_race(race_put_if_absent, target.url, target.options or None, KEYS, RACERS)
    errors = [o for o in outcomes if o[2] not in ("won", "lost")]
    assert not errors
    for key in KEYS:
        per_key = Counter(o[2] for o in outcomes if o[0] == key)
        assert per_key == {"won": 1, "lost": RACERS - 1}, key
        (winner,) = [o[1] for o in outcomes if o[0] == key and o[2] == "won"]
        assert store.get(key) == payload(winner)
    assert [i.key for i in store.list("_log")] == KEYS
