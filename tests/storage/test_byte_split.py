"""The byte stream split of compressed pages: every fixed-width type round-trips through a
page blob, with nulls and slices, and the filter is applied exactly where it should be."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.errors import WalCorruption
from cdc_sink.storage import byte_split
from cdc_sink.storage.byte_split import NARROW_KEY, SPLIT_KEY, join_page, split_page
from cdc_sink.storage.framing import encode_file
from cdc_sink.storage.pages import PAGE_CODECS, PageCompression, page_array, page_blob
from cdc_sink.storage.snapshot import PAGE_FORMAT, SNAPSHOT_MAGIC, read_manifest
from cdc_sink.table import TableOptions, create_table, open_table
from tests.fixtures import ID_A_B

_TYPES: list[pa.DataType] = [
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint16(),
    pa.uint64(),
    pa.float32(),
    pa.float64(),
    pa.date32(),
    pa.date64(),
    pa.timestamp("us", tz="UTC"),
    pa.timestamp("ns"),
    pa.time64("us"),
    pa.duration("ms"),
    pa.decimal128(18, 2),
    pa.decimal128(38, 4),
    pa.decimal256(40, 3),
    pa.bool_(),
    pa.string(),
    pa.binary(),
]


def _random_array(type: pa.DataType, n: int, seed: int, null_share: float) -> pa.Array:
    """``n`` random values of ``type`` (any bit pattern the type allows), with nulls."""
    rng = np.random.default_rng(seed)
    mask = rng.random(n) < null_share
    if pa.types.is_boolean(type):
        return pa.array(rng.random(n) < 0.5, mask=mask)
    if pa.types.is_string(type) or pa.types.is_binary(type):
        return pa.array([str(x) for x in rng.integers(0, 1000, n)], mask=mask).cast(type)
    if pa.types.is_decimal(type):
        digits = type.precision
        values = [
            decimal.Decimal(int(x) * 10 ** int(e)).scaleb(-type.scale)
            for x, e in zip(
                rng.integers(-(10**9), 10**9, n), rng.integers(0, digits - 9, n), strict=True
            )
        ]
        return pa.array(values, type, mask=mask)
    width = type.bit_width // 8
    raw = rng.integers(0, 256, n * width, dtype=np.uint8)
    if pa.types.is_floating(type):  # no NaN payloads: equals() would see NaN != NaN
        floats = rng.standard_normal(n).astype(type.to_pandas_dtype())
        raw = floats.view(np.uint8)
    if pa.types.is_date64(type):  # whole days, as Arrow requires
        raw = (rng.integers(-(10**5), 10**5, n) * 86_400_000).view(np.uint8)
    if pa.types.is_time(type):
        raw = rng.integers(0, 86_400 * 10**6, n).view(np.uint8)
    validity = pa.py_buffer(np.packbits(~mask, bitorder="little")) if mask.any() else None
    return pa.Array.from_buffers(
        type, n, [validity, pa.py_buffer(raw.tobytes())], null_count=int(mask.sum())
    )


@settings(max_examples=150, deadline=None)
@given(
    type=st.sampled_from(_TYPES),
    n=st.integers(0, 300),
    seed=st.integers(0, 2**32 - 1),
    null_share=st.sampled_from([0.0, 0.1, 1.0]),
    start=st.integers(0, 20),
    codec=st.sampled_from(PAGE_CODECS),
)
def test_every_type_round_trips_through_a_page_blob(
    type: pa.DataType, n: int, seed: int, null_share: float, start: int, codec: PageCompression
) -> None:
    whole = _random_array(type, n + start, seed, null_share)
    arr = whole.slice(start)  # offsets that are not a multiple of 8 included
    back = page_array(page_blob(arr, codec))
    assert back.type == arr.type
    assert back.equals(arr)
    assert back.null_count == arr.null_count


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_only_compressed_fixed_width_pages_are_split(codec: PageCompression) -> None:
    ints = pa.array(np.arange(1000, dtype=np.int64))
    assert _field_meta(page_blob(ints)) is None
    assert _field_meta(page_blob(ints, codec)) == {SPLIT_KEY: b"8"}
    for unsplit in (pa.array([True, False] * 50), pa.array(["a", "b"]), pa.array([1], pa.int8())):
        assert _field_meta(page_blob(unsplit, codec)) is None
    assert split_page(pa.array([], pa.int64())) is None


def _field_meta(blob: pa.Buffer) -> dict[bytes, bytes] | None:
    return pa.ipc.open_stream(blob).schema.field(0).metadata


def test_decimals_that_fit_in_64_bits_are_split_as_their_low_words() -> None:
    small = pa.array(
        [decimal.Decimal("-12345678901234.56"), None, decimal.Decimal("0.01")],
        pa.decimal128(18, 2),
    )
    carrier, meta = split_page(small) or (None, None)
    assert carrier is not None and carrier.type == pa.int64()
    assert meta == {SPLIT_KEY: b"8", NARROW_KEY: b"18,2"}
    assert join_page(carrier, meta).equals(small)
    # one value past 64 bits: the page is not split (and round-trips as it is)
    wide = pa.array([decimal.Decimal(2**63), decimal.Decimal(-1)], pa.decimal128(38, 0))
    assert split_page(wide) is None
    assert page_array(page_blob(wide, "zstd")).equals(wide)


def test_split_pages_are_smaller_when_the_high_bytes_repeat() -> None:
    rng = np.random.default_rng(3)
    arrays = [
        pa.array(np.round(rng.random(100_000) * 1e6) / 64.0),  # decimal quantities
        pa.array(1_700_000_000_000_000 + rng.integers(0, 10**11, 100_000), pa.timestamp("us")),
    ]
    for arr in arrays:
        assert len(page_blob(arr, "zstd")) < 0.9 * _plain_blob(arr, "zstd").size


def test_a_split_page_with_damaged_metadata_is_refused() -> None:
    arr = pa.array(np.arange(10, dtype=np.int64))
    carrier, meta = split_page(arr) or (None, None)
    assert carrier is not None and meta is not None
    with pytest.raises(ValueError, match="4-byte values"):
        join_page(carrier, {SPLIT_KEY: b"4"})
    with pytest.raises(ValueError):
        join_page(carrier, {SPLIT_KEY: b"8", NARROW_KEY: b"not,a-decimal"})
    assert join_page(carrier, meta).equals(arr)


def test_timestamps_keep_their_time_zone() -> None:
    ts = pa.array([dt.datetime(2026, 11, 28, tzinfo=dt.UTC)] * 3, pa.timestamp("us", "UTC"))
    assert page_array(page_blob(ts, "zstd")).type == pa.timestamp("us", "UTC")


def test_a_table_with_split_pages_reads_back_and_a_newer_page_format_is_refused(
    tmp_path: Path,
) -> None:
    schema = {**ID_A_B, "num_buckets": 1}
    t = create_table(str(tmp_path / "t"), schema, options=TableOptions(page_compression="zstd"))
    t.apply([{"op": "upsert", "key": {"id": k}, "set": {"a": k * 3}} for k in range(5000)])
    t.compact()
    fresh = open_table(str(tmp_path / "t"))
    assert sorted(r["a"] for r in fresh.read().to_pylist()) == [k * 3 for k in range(5000)]
    root = tmp_path / "t"
    (rel,) = [
        os.path.relpath(os.path.join(d, f), root)
        for d, _, fs in os.walk(root / "_snapshots")
        for f in fs
        if f.endswith(".manifest")
    ]
    manifest = read_manifest(str(root), rel)
    assert manifest.page_format == PAGE_FORMAT  # 3 since the salted key index
    doc = json.loads(manifest.to_json())
    doc["page_format"] = PAGE_FORMAT + 1
    (root / rel).write_bytes(encode_file([json.dumps(doc).encode()], magic=SNAPSHOT_MAGIC))
    with pytest.raises(WalCorruption, match=f"page format {PAGE_FORMAT + 1}, newer"):
        read_manifest(str(root), rel)
    del doc["page_format"]  # a manifest written before the split: format 1
    (root / rel).write_bytes(encode_file([json.dumps(doc).encode()], magic=SNAPSHOT_MAGIC))
    assert read_manifest(str(root), rel).page_format == 1


@pytest.mark.parametrize("codec", PAGE_CODECS)
def test_a_page_written_before_the_split_reads_as_it_was_written(codec: PageCompression) -> None:
    """A blob as cdc_sink wrote it before the split: a plain IPC stream, no metadata."""
    arr = pa.array(np.arange(-500, 500, dtype=np.int64) * 7919)
    assert page_array(_plain_blob(arr, codec)).equals(arr)


def _plain_blob(arr: pa.Array, codec: PageCompression) -> pa.Buffer:
    """A page blob without the split: one Arrow IPC stream, body compressed."""
    sink = pa.BufferOutputStream()
    batch = pa.RecordBatch.from_arrays([arr], names=["v"])
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.ipc.new_stream(sink, batch.schema, options=options) as w:
        w.write_batch(batch)
    return sink.getvalue()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 100),
    width=st.sampled_from([2, 4, 8]),
    pad=st.sampled_from([0, 8]),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_compiled_split_equals_numpys(n: int, width: int, pad: int, seed: int) -> None:
    """The C transposes (8x8 blocks, then a tail) against the numpy loops, for every
    width, with and without a stride wider than the values (narrowed decimals)."""
    if byte_split._cbytesplit is None:
        pytest.fail("cdc_sink.storage._cbytesplit is not built (make install builds it)")
    stride = width + pad
    values = np.random.default_rng(seed).integers(0, 256, (n, stride), dtype=np.uint8)
    c_streams = byte_split._split(values, width)
    expected = np.ascontiguousarray(values[:, :width].T)
    assert np.array_equal(c_streams, expected)
    c_values = np.zeros((n, stride), np.uint8)
    byte_split._join(c_streams, c_values, width)
    assert np.array_equal(c_values[:, :width], values[:, :width])
    saved = byte_split._cbytesplit
    try:
        byte_split._cbytesplit = None
        assert np.array_equal(byte_split._split(values, width), expected)
        np_values = np.zeros((n, stride), np.uint8)
        byte_split._join(c_streams, np_values, width)
        assert np.array_equal(np_values, c_values)
    finally:
        byte_split._cbytesplit = saved


def test_the_compiled_split_refuses_short_buffers() -> None:
    cbs = byte_split._cbytesplit
    if cbs is None:
        pytest.fail("cdc_sink.storage._cbytesplit is not built (make install builds it)")
    src = np.zeros(64, np.uint8)
    with pytest.raises(ValueError, match="too short"):
        cbs.join(src, np.zeros(63, np.uint8), 8, 8, 8)
    with pytest.raises(ValueError, match="too short"):
        cbs.split(src[:63], np.zeros(64, np.uint8), 8, 8, 8)
    with pytest.raises(ValueError, match="bad count"):
        cbs.join(src, np.zeros(64, np.uint8), 8, 8, 4)
    with pytest.raises(ValueError, match="bad count"):
        cbs.join(src, np.zeros(64, np.uint8), -1, 8, 8)
