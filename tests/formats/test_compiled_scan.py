"""The compiled JSON scan (``cdc_sink/formats/_cscan.c``) against the numpy scanner and
Arrow's parser.

The compiled pass is trusted for two things only, and each is checked here on every
fuzzed message the decoder fuzz tests make (valid native JSON and Debezium messages,
their truncations, byte flips and structural mutations), at every member depth the
decoders index:

- **the index**: when it accepts a chunk, its members equal the numpy scanner's, field
  by field, and the numpy scanner finds no structure reason in that chunk;
- **the grammar**: an event it marks verified is one Arrow's JSON parser accepts (so
  skipping Arrow's check for it changes nothing).

And whole decodes with and without the compiled pass are equal: the same batch, the same
rejects with the same reasons.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_sink.formats import _jsonscan, get_decoder
from cdc_sink.formats._arrays import binary_parts, new_reasons, no_reason
from cdc_sink.formats._jsonarrow import arrow_grammar
from cdc_sink.formats._jsonscan import Members, compiled_chunk, numpy_chunk
from tests.formats.fuzz_decoders import PLAIN, Case, ci_settings, mutations, valid_cases

SETTINGS = ci_settings(10)
LEVELS = (1, 2, 4)  # the depths the decoders index (schema probe, native JSON, Debezium)


def test_the_compiled_pass_is_built() -> None:
    """The dev install (``make install``, with the C compiler it installs) builds it;
    without it every decode silently takes the slower numpy path."""
    assert _jsonscan._cscan is not None


def _same_members(got: Members, want: Members) -> None:
    for name in Members.__dataclass_fields__:
        g, w = getattr(got, name), getattr(want, name)
        assert g.dtype == w.dtype, name
        np.testing.assert_array_equal(g, w, err_msg=name)


def _arrow_accepts(msg: bytes) -> bool:
    parts = binary_parts(pa.array([msg], pa.binary()))
    reasons = new_reasons(1)
    arrow_grammar(parts, np.zeros(1, dtype=np.int64), reasons)
    return bool(no_reason(reasons)[0])


class Tally:
    """How often each outcome was seen (so the differential checks are not vacuous)."""

    def __init__(self) -> None:
        self.accepted = self.fallback = self.verified = self.unverified = 0


def check_messages(msgs: list[bytes], tally: Tally) -> None:
    """Checks the compiled pass on ``msgs``, one chunk of all of them and one chunk per
    message (a chunk falls back as a whole, so single messages test every one)."""
    parts = binary_parts(pa.array(msgs, pa.binary()))
    groups = [np.arange(len(msgs))] + [np.array([i]) for i in range(len(msgs))]
    for events in groups:
        for level in LEVELS:
            found = compiled_chunk(parts, events, level)
            reasons = new_reasons(parts.n)
            want = numpy_chunk(parts, events, level, reasons)
            if found is None:
                tally.fallback += 1
                continue
            tally.accepted += 1
            members, verified = found
            assert no_reason(reasons[events]).all(), [msgs[i] for i in events]
            _same_members(members, want)
            if len(events) == 1:
                msg = msgs[int(events[0])]
                if verified[0]:
                    tally.verified += 1
                    assert _arrow_accepts(msg), msg
                else:
                    tally.unverified += 1


def _fuzzed(case: Case, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out: list[bytes] = []
    for msg in case.messages:
        out.append(msg)
        out += mutations(case.fmt, msg, rng, 15)
    return out


@pytest.mark.parametrize("fmt", ["json", "debezium"])
def test_index_and_grammar_on_fuzzed_messages(fmt: Any) -> None:
    tally = Tally()

    @SETTINGS
    @given(case=valid_cases(fmt), seed=st.integers(0, 2**32))
    def run(case: Case, seed: int) -> None:
        check_messages(_fuzzed(case, seed), tally)

    run()
    assert tally.accepted and tally.fallback and tally.verified and tally.unverified, vars(tally)


VERIFIED = [  # the compiled pass accepts the structure and verifies the grammar
    b'{"a":1}',
    b' \t{ "a" : -0.5e+10 , "b" : [1, {"c": null}] }\r\n',
    b'{"a":{"b":{"c":{"d":{"e":[]}}}},"f":{}}',
    b'{"k":"\\u00e9\\"\\\\\\/\\b\\f\\n\\r\\t","n\\u0041":true}',
    '{"k":"é日本🙂"}'.encode(),
    b'{"a":[{"b":1},{"c":{"d":2}}],"e":[[[]]]}',
    b'{"a":1e300,"b":' + b"9" * 300 + b"}",
]
UNVERIFIED = [  # structure accepted; the grammar is left to Arrow
    b'{"a":01}',  # leading zero
    b'{"a":1.}',
    b'{"a":-}',
    b'{"a":NaN}',
    b'{"a":Infinity}',
    b'{"a":tru}',
    b'{"a":nulls}',
    b'{"a":"\\x"}',  # bad escape
    b'{"a":"\\u12"}',
    b'{"a":"\\ud83d\\ude42"}',  # surrogates: left to Arrow
    b'{"a":"\x01"}',  # control character
    b'{"a":"\xff"}',  # not UTF-8
    b'{"a":"\xed\xa0\x80"}',  # an encoded surrogate
    b'{"a":"\xc0\xaf"}',  # overlong
    b'{"a":-1e400}',  # too big for a double: Arrow refuses it
    b'{"a":1e-400}',  # far exponents are left to Arrow either way
    b'{"a":' + b"9" * 301 + b"}",
]
REFUSED = [  # the chunk goes to the numpy scanner, which gives the reason
    b'{"a":1,}',
    b'{"a" 1}',
    b'{"a":1 "b":2}',
    b'{"a":[1,]}',
    b'{"a":[1}',
    b'{"a":1}}',
    b'{"a":1} x',
    b'[{"a":1}]',
    b'{"a":"x\ny"}',  # raw line break: numpy's own reason
    b'{"a":"x}',
    b'{"a":x}',
    b'{"a":1\\}',
    b"{" * 300 + b"}" * 300,  # deeper than the compiled pass's stack
]
HAND = (  # (message, structure accepted, grammar verified)
    [(m, True, True) for m in VERIFIED]
    + [(m, True, False) for m in UNVERIFIED]
    + [(m, False, False) for m in REFUSED]
)


@pytest.mark.parametrize(("msg", "accepted", "verified"), HAND)
def test_hand_written_messages(msg: bytes, accepted: bool, verified: bool) -> None:
    parts = binary_parts(pa.array([msg], pa.binary()))
    found = compiled_chunk(parts, np.array([0]), 4)
    assert (found is not None) == accepted
    if found is not None:
        assert bool(found[1][0]) == verified
        assert not verified or _arrow_accepts(msg)
    check_messages([msg], Tally())


def test_a_bad_event_sends_only_its_own_chunk_to_numpy(monkeypatch: Any) -> None:
    """Chunks are scanned separately: one malformed event leaves the others compiled."""
    monkeypatch.setattr(_jsonscan, "_CHUNK_BYTES", 1)  # one event per chunk
    good = b'{"op":"upsert","key":{"id":1},"set":{"i8":1}}'
    msgs = [good] * 10 + [b'{"op":"upsert"'] + [good] * 10
    calls: list[int] = []
    real = _jsonscan.numpy_chunk

    def spy(parts: Any, events: np.ndarray, *a: Any) -> Members:
        calls.append(len(events))
        return real(parts, events, *a)

    monkeypatch.setattr(_jsonscan, "numpy_chunk", spy)
    parts = binary_parts(pa.array(msgs, pa.binary()))
    sc = _jsonscan.scan(parts, np.ones(len(msgs), dtype=bool), 2)
    assert calls == [1]
    assert sc.reasons[10] is not None and no_reason(np.delete(sc.reasons, 10)).all()
    assert sc.verified.sum() == 20 and not sc.verified[10]


def _decode_both(fmt: Any, case: Case, msgs: list[bytes], monkeypatch: Any) -> None:
    values = pa.array(msgs, pa.binary())
    fast = case.decoder.decode_with_meta(values, case.schema)
    with monkeypatch.context() as m:
        m.setattr(_jsonscan, "_cscan", None)
        slow = case.decoder.decode_with_meta(values, case.schema)
    assert fast.batch.to_arrow().equals(slow.batch.to_arrow())
    assert fast.rejects.positions.tolist() == slow.rejects.positions.tolist()
    assert fast.rejects.reasons == slow.rejects.reasons


@pytest.mark.parametrize("fmt", ["json", "debezium"])
def test_decodes_equal_with_and_without_the_compiled_pass(fmt: Any, monkeypatch: Any) -> None:
    @SETTINGS
    @given(case=valid_cases(fmt), seed=st.integers(0, 2**32))
    def run(case: Case, seed: int) -> None:
        _decode_both(fmt, case, _fuzzed(case, seed), monkeypatch)

    run()


def test_hand_written_messages_decode_equal(monkeypatch: Any) -> None:
    case = Case("json", PLAIN, get_decoder("json"), [])
    _decode_both("json", case, [m for m, _, _ in HAND], monkeypatch)
