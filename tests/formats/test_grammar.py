"""The compiled grammar check (``_cgrammar.h``) against Arrow's JSON reader.

The JSON decoders refuse an event that is not valid JSON with the reason Arrow's JSON
reader gives it. With the compiled pass built, that verdict comes from a transcription
of the RapidJSON reader inside Arrow, so event bytes never reach Arrow's reader (which
can crash the process). Here each document gets both verdicts and they must be the same
message: hand-written documents at every error and at the edges of RapidJSON's number
rules, documents of random JSON tokens, and every fuzz mutation of valid native JSON and
Debezium messages.

Arrow's reader is only ever given documents that start with ``{`` (pyarrow 26 segfaults
on a document that starts with ``null``), which is also all the decoders check: the
structural scan refuses anything else first.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pj
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_sink.formats import _jsonarrow, _jsonscan, get_decoder
from cdc_sink.formats._arrays import binary_parts, new_reasons
from cdc_sink.formats._jsonarrow import arrow_reason
from cdc_sink.formats._jsongrammar import MESSAGES, check_grammar, grammar_codes
from tests.formats.fuzz_decoders import (
    ID_KEY,
    Case,
    ci_settings,
    keyed_schema,
    mutations,
    valid_cases,
)

ONE_VALUE = "invalid JSON: not a single object (1 values)"  # Arrow's reason for a valid doc


def _arrow(doc: bytes) -> str:
    assert doc.lstrip(b" \t\r\n").startswith(b"{"), doc
    return arrow_reason(np.frombuffer(doc, np.uint8))


def _compiled(docs: list[bytes]) -> list[int]:
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    ends = np.cumsum(lengths)
    data = np.frombuffer(b"".join(docs) or b"\0", np.uint8)
    return grammar_codes(data, ends - lengths, ends).tolist()


class Tally:
    """How many documents each verdict was seen on (the checks must not be vacuous)."""

    def __init__(self) -> None:
        self.codes: dict[int, int] = {}


def check_docs(docs: list[bytes], tally: Tally) -> None:
    """Both verdicts on every document that starts with ``{``."""
    docs = [d for d in docs if d.lstrip(b" \t\r\n").startswith(b"{")]
    for doc, code in zip(docs, _compiled(docs), strict=True):
        tally.codes[code] = tally.codes.get(code, 0) + 1
        want = _arrow(doc)
        if code == 0:
            assert want == ONE_VALUE, doc
        elif code == 101:  # more after the first value: Arrow refuses it too (its reason
            assert want != ONE_VALUE, doc  # depends on the rows after; never reached)
        else:
            assert want == f"invalid JSON: {MESSAGES[code]}", doc


def test_the_compiled_check_is_built() -> None:
    assert _jsonscan._cscan is not None


EDGES = [
    # valid
    b"{}",
    b' { "a" : [ 1 , -2.5e-3 , true , false , null , "x" , { } , [ ] ] } \n',
    b'{"a":NaN,"b":-NaN,"c":Inf,"d":-Inf,"e":Infinity,"f":-Infinity}',
    b'{"a":"\\ud83d\\ude42\\u00e9\\"\\\\\\/\\b\\f\\n\\r\\t"}',
    b'{"a":1e308,"b":1E+308,"c":0.1e309,"d":1.5e309,"e":10e308,"f":1e-99999}',
    b'{"a":0.' + b"0" * 400 + b"1e700}",  # leading zeros of a fraction raise the bound
    b'{"a":' + b"9" * 400 + b"}",  # a huge integer is not 'too big' without exponent
    b'{"a":18446744073709551615,"b":18446744073709551616,"c":-9223372036854775809}',
    b'{"a":4294967295,"b":4294967296,"c":-2147483648,"d":-2147483649}',
    b'{"a":9007199254740993.123456789012345678901234e290}',
    b"{" + b'"a":[' * 500 + b"]" * 500 + b"}",
    # every error
    b"{",
    b"{,}",
    b'{"a"}',
    b'{"a":1 "b":2}',
    b'{"a":[1 2]}',
    b'{"a":"\\u12G4"}',
    b'{"a":"\\u12"}',
    b'{"a":"\\ud83d"}',
    b'{"a":"\\ud83dx"}',
    b'{"a":"\\ud83d\\u0041"}',
    b'{"a":"\\ude42"}',
    b'{"a":"\\ud83d\\uZZZZ"}',
    b'{"a":"\\x"}',
    b'{"a":"\\',
    b'{"a":"x\x00"}',
    b'{"a":"x\x01"}',
    b'{"a":"x\ty"}',
    b'{"a":1e309}',
    b'{"a":1e400}',
    b'{"a":1.0e309}',
    b'{"a":1.00e310}',
    b'{"a":1.}',
    b'{"a":1.e5}',
    b'{"a":1e}',
    b'{"a":1e+}',
    b'{"a":-}',
    b'{"a":-x}',
    b'{"a":01}',
    b'{"a":1.2.3}',
    b'{"a":NaN.5}',
    b'{"a":Inf1}',
    b'{"a":Infin}',
    b'{"a":Infinityy}',
    b'{"a":Na}',
    b'{"a":nul}',
    b'{"a":tru}',
    b'{"a":fals}',
    b'{"a":nulll}',
    b'{"a":[1,]}',
    b'{"a":1,}',
    b'{"a":,}',
    b'{"a"::1}',
    b'{"a":[,1]}',
    b'{"a":]}',
    b'{"a":[1}',
    b'{"a":{"b":1]}',
    b'{"a":1}\x00x',
    b'{"a":1\x00}',
    b'{"a":1}  {"b":2}',
    b'{"a":1} 5',
    b'{"a":1} {"b":x}',
    b"{" + b'"a":[' * 500 + b"]" * 499 + b"}",
]


def test_every_error_and_the_number_rules() -> None:
    tally = Tally()
    check_docs(EDGES, tally)
    assert set(tally.codes) >= set(range(16)) - {2} | {101}, tally.codes


_TOKENS = [
    "{", "}", "[", "]", ":", ",", " ", "\n", "\t", "\x00", "\x01", '"', '"a"', '"b":',
    '"\\u00e9"', '"\\ud83d\\ude42"', '"\\ud83d"', '"\\ude42"', '"\\x"', '"\\\\"', '"\\"',
    "\\", "\\u", "0", "01", "-", "-0", "1.5", "1.", ".5", "1e5", "1e", "1e+", "2E-7",
    "1e309", "0.5e309", "9" * 25, "NaN", "-Inf", "Infinity", "Infin", "N", "true", "tru",
    "false", "null", "nul", "x", "é",
]  # fmt: skip


@ci_settings(300)
@given(st.lists(st.sampled_from(_TOKENS), max_size=12), st.booleans())
def test_random_token_documents(tokens: list[str], member: bool) -> None:
    body = "".join(tokens)
    doc = ('{"k":' + body + "}" if member else "{" + body + "}").encode()
    check_docs([doc, doc[:-1], doc + b" "], Tally())


@pytest.mark.parametrize("fmt", ["json", "debezium"])
def test_fuzzed_messages(fmt: Any) -> None:
    tally = Tally()

    @ci_settings(10)
    @given(case=valid_cases(fmt), seed=st.integers(0, 2**32))
    def run(case: Case, seed: int) -> None:
        rng = random.Random(seed)
        for msg in case.messages:
            check_docs([msg, *mutations(case.fmt, msg, rng, 20)], tally)

    run()
    assert tally.codes.get(0) and len(tally.codes) > 3, tally.codes


def test_check_grammar_refuses_with_arrows_reasons_and_keeps_other_reasons() -> None:
    docs = [b'{"a":1}', b'{"a":tru}', b'{"a":"\xff"}', b'{"a":1,}', b'{"a":[1 2]}']
    parts = binary_parts(pa.array(docs, pa.binary()))
    reasons = new_reasons(len(docs))
    reasons[4] = "an earlier reason"
    check_grammar(parts, np.ones(len(docs), dtype=bool), reasons)
    assert reasons.tolist() == [
        None,
        "invalid JSON: Invalid value.",
        "invalid JSON: not valid UTF-8",
        "invalid JSON: Missing a name for object member.",
        "an earlier reason",
    ]


def test_the_decoders_never_give_events_to_arrows_json_reader(monkeypatch: Any) -> None:
    """With the compiled pass built, malformed events are refused, and escaped strings
    unescaped, without Arrow's JSON reader."""

    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("pyarrow.json.read_json was called")

    monkeypatch.setattr(pj, "read_json", refuse)
    schema = keyed_schema(ID_KEY, [{"name": "s", "type": "string"}])
    msgs = [
        b'{"op":"upsert","key":{"id":1},"set":{"s":"x"},"extra":tru}',
        b'{"op":"upsert","key":{"id":2},"set":{"s":"y"},"extra":[1,]}',
        b'{"op":"upsert","key":{"id":3},"set":{"s":"z"},"extra":NaN}',
        b'{"op":"upsert","key":{"id":4},"set":{"s":"w\\u00e9\\ud83d\\ude42\\n"}}',
        b'{"op":"upsert","key":{"id":5},"set":{"s":"\\ud83d"}}',
    ]
    d = get_decoder("json").decode_with_meta(pa.array(msgs, pa.binary()), schema)
    assert d.rejects.positions.tolist() == [0, 1, 4]
    assert d.rejects.reasons[:2] == ["invalid JSON: Invalid value."] * 2
    assert "is not a valid string" in d.rejects.reasons[2], d.rejects.reasons
    assert len(d.batch) == 2
    s_id = schema.column("s").id
    assert d.batch.values[s_id].to_pylist() == ["z", "w\u00e9\U0001f642\n"]


_STRING_PIECES = [
    "a", "é", "\\n", "\\\"", "\\\\", "\\/", "\\b", "\\t", "\\u0000", "\\u00e9",
    "\\u20AC", "\\ud83d\\ude42", "\\ud83d", "\\ude42", "\\ud83d\\u0041", "\\u12",
    "\\uZZZZ", "\\x", "\\", "\x01", "\t", "\x7f", "\\U0041",
]  # fmt: skip


@ci_settings(300)
@given(st.lists(st.lists(st.sampled_from(_STRING_PIECES), max_size=6), min_size=1, max_size=8))
def test_unescape_matches_arrows_reader(strings: list[list[str]]) -> None:
    """The compiled unescape gives the bytes Arrow's reader gives, and refuses the same
    strings (``_unescape`` is the Arrow way, used when the pass is not built)."""
    contents = ["".join(pieces).encode() for pieces in strings]
    toks = [b'"' + c + b'"' for c in contents]
    data = np.frombuffer(b"".join(toks), np.uint8)
    lengths = np.array([len(t) for t in toks], dtype=np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    got, got_bad = _jsonarrow._unescape_compiled(data, starts + 1, ends - 1)
    want, want_bad = _jsonarrow._unescape(data, starts, ends)
    np.testing.assert_array_equal(got_bad, want_bad)
    assert got.to_pylist() == want.cast(pa.binary()).to_pylist(), contents


def test_bad_arguments_raise_instead_of_writing_out_of_bounds() -> None:
    compiled = _jsonscan._cscan
    assert compiled is not None
    data = np.frombuffer(b'"ab"', np.uint8)
    one, three, nine = (np.array([v], np.int64) for v in (1, 3, 9))
    with pytest.raises(ValueError, match="out of the data's bounds"):
        compiled.grammar(data, one, nine, np.zeros(1, np.uint8))
    with pytest.raises(ValueError, match="codes needs 1 items"):
        compiled.grammar(data, one, three, np.zeros(0, np.uint8))
    with pytest.raises(ValueError, match="starts and ends differ"):
        compiled.grammar(data, one, np.array([1, 2], np.int64), np.zeros(1, np.uint8))
    out, bad = np.zeros(1, np.uint8), np.zeros(1, np.uint8)
    with pytest.raises(ValueError, match="out needs 2 items"):
        compiled.unescape(data, one, three, np.zeros(2, np.int32), out, bad)
    with pytest.raises(ValueError, match="offsets needs 2 items"):
        compiled.unescape(data, one, three, np.zeros(1, np.int32), np.zeros(2, np.uint8), bad)
    with pytest.raises(TypeError, match="4 arguments"):
        compiled.grammar(data, one, three)  # type: ignore[call-arg]
