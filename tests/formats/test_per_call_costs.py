"""What the decoders keep across calls, and the phases they skip, give the same results.

A whole-database router decodes each table's few events of a batch in a call of its
own, so what does not depend on the events is computed once: an envelope schema's
field hints are parsed once per distinct schema text (:func:`_parsed_fields`), a
decoder class's option names are read once, and the base64 decimals at the column's
scale take no cast. A run whose first schema is shared by few of its events (one table's
among many tables') is not copied to cut it off.
"""

from __future__ import annotations

import base64
import copy
import decimal
import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.errors import InvalidOption
from cdc_sink.formats import get_decoder
from cdc_sink.formats._arrays import binary_parts
from cdc_sink.formats._debezium_schema import _parsed_fields, strip_shared_schema
from cdc_sink.formats._jsonvalues import unscaled_decimals
from tests.formats.support import binary
from tests.formats.test_debezium import CUSTOMERS, DEC, SAMPLE_SCHEMA, rows_of, sample


def _renamed(name: str) -> bytes:
    """An enveloped event whose schema differs from :func:`sample`'s in its name only."""
    doc = json.loads(sample(True))
    doc["schema"] = copy.deepcopy(SAMPLE_SCHEMA)
    doc["schema"]["name"] = name
    return json.dumps(doc).encode()


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(-(10**14), 10**14), min_size=1, max_size=20),
    st.integers(1, 14),
    st.integers(0, 4),
)
def test_decimals_at_the_column_scale_agree_with_decimals_cast_from_another_scale(
    unscaled: list[int], precision: int, scale: int
):
    """All values at the column's scale take no cast: the same values and refusals as
    the cast path (the same values one digit of scale further), those with more digits
    than the precision out of range."""
    scale = min(scale, precision)
    target = pa.decimal128(precision, scale)

    def blob(v: int) -> bytes:  # Kafka Connect's Decimal in JSON: base64 of the bytes
        return base64.b64encode(v.to_bytes((v.bit_length() + 8) // 8, "big", signed=True))

    direct = pa.array([blob(v) for v in unscaled], pa.binary())
    finer = pa.array([blob(v * 10) for v in unscaled], pa.binary())
    arr, bad, oor = unscaled_decimals(direct, np.full(len(unscaled), scale), target)
    arr2, bad2, oor2 = unscaled_decimals(finer, np.full(len(unscaled), scale + 1), target)
    assert arr.equals(arr2)
    assert bad.tolist() == bad2.tolist()
    fits = [abs(v) < 10**precision for v in unscaled]
    assert (~bad).tolist() == fits
    assert (~oor).tolist() == fits  # beyond the precision: out of range
    assert not (oor2 & ~bad2).any()
    assert arr.to_pylist() == [
        decimal.Decimal(v).scaleb(-scale) if ok else None
        for v, ok in zip(unscaled, fits, strict=True)
    ]


def test_a_schema_shared_by_few_events_of_a_run_is_not_cut_off():
    """Cutting copies the run: only worth it when the shared schemas are a good part of
    its bytes; decoding gives the same batch either way."""
    mine = sample(True)
    others = [_renamed(f"other{i}.Envelope") for i in range(20)]
    few = [mine, *others, mine]
    parts, shared = strip_shared_schema(binary_parts(binary(few)))
    assert shared is None and parts.n == len(few)
    many = [mine] * 10 + others[:2]
    _, shared = strip_shared_schema(binary_parts(binary(many)))
    assert shared is not None and shared.mask.tolist() == [True] * 10 + [False] * 2
    batch, rejects = DEC.decode(binary(few), CUSTOMERS)
    assert len(rejects) == 0 and len(batch) == len(few)
    assert rows_of(batch) == rows_of(DEC.decode(binary([mine] * len(few)), CUSTOMERS)[0])


def test_an_envelope_schema_is_parsed_once_across_calls_and_its_refusal_kept():
    text_event = _renamed("parsed-once.Envelope")
    bad = json.dumps(
        {"schema": {"type": "struct", "fields": 7}, "payload": {"op": "c", "after": {"id": 1}}}
    )
    before = _parsed_fields.cache_info()
    for _ in range(3):  # a router's calls: a new decoder each, the same schemas
        dec = get_decoder("debezium")
        batch, rejects = dec.decode(binary([text_event, bad.encode(), text_event]), CUSTOMERS)
        assert batch.positions.tolist() == [0, 2]
        assert rejects.positions.tolist() == [1]
        assert "invalid envelope schema" in rejects.reasons[0]
        assert "fields is not an array" in rejects.reasons[0]
    after = _parsed_fields.cache_info()
    assert after.misses - before.misses <= 2  # the two texts, once each
    assert after.hits - before.hits >= 4


def test_decoder_options_are_still_checked_on_every_call():
    for _ in range(2):
        with pytest.raises(InvalidOption, match="no_such_option"):
            get_decoder("debezium", no_such_option=1)
        assert get_decoder("debezium", timestamp_unit="ms").timestamp_unit == "ms"
