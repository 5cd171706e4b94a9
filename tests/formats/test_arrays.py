"""The vectorized helpers shared by the decoders."""

from __future__ import annotations

import base64
import pickle

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.formats import FORMATS, get_decoder
from cdc_sink.formats._arrays import (
    b64decode,
    binary_parts,
    cast_rows,
    decimal_fits,
    scatter,
    spans,
    unaligned,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=30))
def test_b64decode_matches_the_standard_library(blobs: list[bytes | None]):
    encoded = pa.array([None if b is None else base64.b64encode(b) for b in blobs], pa.binary())
    out, bad = b64decode(encoded)
    assert not bad.any()
    assert out.to_pylist() == blobs


@pytest.mark.parametrize(
    "text", [b"A", b"AB=", b"A===", b"AB=C", b"AB\nC", b"A*==", b"=AAA", b"AAAA=AAA"]
)
def test_b64decode_flags_only_the_invalid_values(text: bytes):
    out, bad = b64decode(pa.array([b"QQ==", text, b""], pa.binary()))
    assert bad.tolist() == [False, True, False]
    assert out.to_pylist() == [b"A", None, b""]


def test_decimal_fits_checks_the_digit_count_of_128_bit_values():
    values = [
        0,
        1,
        -1,
        10**38 - 1,
        -(10**38 - 1),
        10**38,
        -(10**38),
        2**127 - 1,
        -(2**127),
        999,
        1000,
        -999,
        -1000,
    ]
    raw = np.frombuffer(
        b"".join(v.to_bytes(16, "little", signed=True) for v in values), np.uint8
    ).reshape(-1, 16)
    assert decimal_fits(raw, 38).tolist() == [True] * 5 + [False] * 4 + [True] * 4
    assert decimal_fits(raw, 3).tolist()[-4:] == [True, False, True, False]


SCATTER_TYPES = [pa.int8(), pa.uint16(), pa.int32(), pa.int64(), pa.float32(), pa.float64()]
SCATTER_TYPES += [pa.string(), pa.bool_(), pa.date32()]  # the take path


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    t=st.sampled_from(SCATTER_TYPES),
    n=st.integers(0, 40),
    offset=st.integers(0, 3),
)
def test_scatter_puts_each_value_at_its_row_and_nulls_elsewhere(
    data: st.DataObject, t: pa.DataType, n: int, offset: int
):
    """Rows in any order, values with nulls and a slice offset, every kind of type."""
    rows = data.draw(st.permutations(range(n)))[: data.draw(st.integers(0, n))]
    k = len(rows)
    py = data.draw(st.lists(st.one_of(st.none(), st.integers(0, 100)), min_size=k, max_size=k))
    conv = {pa.string(): str, pa.bool_(): bool}.get(t, lambda x: x)
    values = [None if v is None else conv(v) for v in py]
    arr = pa.array([values[0] if values else None] * offset + values, t).slice(offset)
    out = scatter(arr, np.array(rows, dtype=np.int64), n)
    want: list[object] = [None] * n
    for r, v in zip(rows, arr.to_pylist(), strict=True):
        want[r] = v
    assert out.type == t
    assert out.to_pylist() == want


def test_spans_of_short_long_and_buffer_end_ranges():
    values = pa.array([b"x" * 30, b"hello", b"", b"abcdefghijklmnop", b"end!"], pa.binary())
    parts = binary_parts(values)
    got = spans(parts, parts.starts, parts.ends).cast(pa.binary()).to_pylist()
    assert got == values.to_pylist()
    inner = spans(parts, parts.starts + 1, parts.ends - 1, valid=parts.lengths > 2)
    assert inner.cast(pa.binary()).to_pylist() == [
        b"x" * 28,
        b"ell",
        None,
        b"bcdefghijklmno",
        b"nd",
    ]


def test_unaligned_views_read_little_endian_values_at_any_byte():
    data = np.frombuffer(b"\x01\x02\x03\x04\x05\x06\x07\x08\x09", np.uint8)
    assert unaligned(data, "<u2")[1] == 0x0302
    assert unaligned(data, "<i8")[1] == int.from_bytes(
        b"\x02\x03\x04\x05\x06\x07\x08\x09", "little"
    )
    assert len(unaligned(data[:3], "<u4")) == 0


def test_cast_rows_refuses_only_the_rows_that_do_not_convert():
    arr = pa.array(["1", "x", None, "3", "99999999999999999999", "-4"])
    out, bad = cast_rows(arr, pa.int64())
    assert out.to_pylist() == [1, None, None, 3, None, -4]
    assert bad.tolist() == [False, True, False, False, True, False]


@pytest.mark.parametrize("name", [f for f in FORMATS if f != "debezium-avro"])
def test_decoders_pickle(name: str):
    dec = get_decoder(name)
    assert type(pickle.loads(pickle.dumps(dec))) is type(dec)
