"""An event decodes the same whatever its neighbours: valid or not, its values and its
reject reason do not depend on the events around it in the batch.

The decoders index and convert all the events of a run at once, so a bug that lets one
event's bytes leak into the next (a backslash ending an event that escaped the next
event's first quote did) shows up only here: each fuzzed batch is decoded as it is and
again shuffled, and every message must come out the same both times. The JSON decoders
run with and without their compiled passes (the numpy scanner is where runs of events
are indexed together).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_sink.formats import _jsonflat, _jsonscan, get_decoder
from cdc_sink.formats._base import Decoded
from tests.formats.fuzz_decoders import PLAIN, Case, ci_settings, mutations, valid_cases

SETTINGS = ci_settings(15)
HOSTILE = [
    b'{"a":"\\',
    b"\\",
    b'"',
    b'{"a":"',
    b"{",
    b"[",
    b'{"a":',
    b"\\u",
    b'"\\"',
    b"\x00",
    b" ",
]


def _by_message(d: Decoded, order: list[int]) -> tuple[dict[int, str], dict[int, Any]]:
    """Reasons and decoded rows keyed by the index of the message in the original list
    (``order[i]``: the original index of the message at position ``i``)."""
    reasons = {
        order[p]: r for p, r in zip(d.rejects.positions.tolist(), d.rejects.reasons, strict=True)
    }
    rows = d.batch.to_arrow().to_pylist()  # positions are not among the columns
    decoded = {
        order[int(p)]: _canonical(r) for p, r in zip(d.batch.positions.tolist(), rows, strict=True)
    }
    return reasons, decoded


def _canonical(row: dict[str, Any]) -> Any:
    """A row with floats as their bits (NaN equals NaN, -0.0 is not 0.0)."""
    return {
        k: np.float64(v).tobytes() if isinstance(v, float) else v for k, v in sorted(row.items())
    }


@pytest.mark.parametrize("fmt", ["json", "debezium", "rowv2"])
@pytest.mark.parametrize("compiled", [True, False])
def test_an_event_decodes_the_same_whatever_its_neighbours(
    fmt: Any, compiled: bool, monkeypatch: Any
) -> None:
    if not compiled:
        monkeypatch.setattr(_jsonscan, "_cscan", None)
        monkeypatch.setattr(_jsonflat, "_cflat", None)

    @SETTINGS
    @given(case=valid_cases(fmt), seed=st.integers(0, 2**32))
    def run(case: Case, seed: int) -> None:
        rng = random.Random(seed)
        msgs = list(case.messages)
        msgs += [m for msg in case.messages for m in mutations(fmt, msg, rng, 8)]
        n = len(msgs)
        order = list(range(n))
        rng.shuffle(order)
        # shuffled, and each message after a hostile fragment (an open string, a trailing
        # backslash, an open object, ...) that must not leak into it
        mixed: list[bytes] = []
        where: list[int] = []
        for k, i in enumerate(order):
            mixed += [HOSTILE[k % len(HOSTILE)], msgs[i]]
            where += [n + k, i]
        first = case.decoder.decode_with_meta(pa.array(msgs, pa.binary()), case.schema)
        mixed.append(b" ")  # a blank tail after the last message
        where.append(2 * n)
        second = case.decoder.decode_with_meta(pa.array(mixed, pa.binary()), case.schema)
        r1, d1 = _by_message(first, list(range(n)))
        r2, d2 = _by_message(second, where)
        for i in range(n):
            assert r1.get(i) == r2.get(i), (msgs[i][:300], r1.get(i), r2.get(i))
        assert d1 == {i: r for i, r in d2.items() if i < n}

    run()


EVENTS = [
    b'{"op":"upsert","key":{"id":1},"set":{"s":"x"',  # ends in a string
    b'{"op":"upsert","key":{"id":1},"set":{"s":"\\',  # ends in a backslash
    b'"x"',
    b'{"op":"upsert","key":{"id":1}}',
    b"",
]


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("after", HOSTILE + EVENTS)
def test_what_follows_an_event_does_not_change_it(
    after: bytes, compiled: bool, monkeypatch: Any
) -> None:
    """Each of :data:`EVENTS` followed by a fragment, the fragment last in the data (a
    backslash ending an event once escaped the next one's quote; blanks after a final
    string once read past the end of the data)."""
    if not compiled:
        monkeypatch.setattr(_jsonscan, "_cscan", None)
        monkeypatch.setattr(_jsonflat, "_cflat", None)
    decoder = get_decoder("json")
    for event in EVENTS:
        alone = decoder.decode_with_meta(pa.array([event], pa.binary()), PLAIN)
        pair = decoder.decode_with_meta(pa.array([event, after], pa.binary()), PLAIN)
        want = alone.rejects.reasons
        got = [
            r
            for p, r in zip(pair.rejects.positions.tolist(), pair.rejects.reasons, strict=True)
            if p == 0
        ]
        assert got == want, (event, after)
