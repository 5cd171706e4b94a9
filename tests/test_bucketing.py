"""Unit tests of cdc_sink.xxhash64 and cdc_sink.bucketing: Spark's xxhash64 and pmod
bucket ids, without Spark.

The known vectors below were captured from real Spark 4.3.0 (pyspark 4.3.0, OpenJDK 17,
``master local[1]``, ``spark.sql.session.timeZone=UTC``) by running
``spark.sql("select xxhash64(<literal>), ...").collect()`` for each literal shown in the
table; ``tests/integration/test_bucketing_spark.py`` re-checks everything against a live
Spark on random data. The reference ``ref_xxh64`` is the ``xxhash`` package's XXH64 (Spark's
``org.apache.spark.sql.catalyst.expressions.XXH64.hashUnsafeBytes`` is standard XXH64).
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_sink import xxhash64
from cdc_sink.bucketing import (
    SUPPORTED_TYPES,
    bucket_ids,
    bucket_partitions,
    check_hashable,
    spark_xxhash64,
)

# ------------------------------------------------------------------ reference XXH64
M64 = (1 << 64) - 1


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def ref_xxh64(data: bytes, seed: int = 42) -> int:
    """XXH64 of ``data`` (signed 64-bit result, as Spark's), by the ``xxhash`` package."""
    return _signed(xxhash.xxh64_intdigest(data, seed=seed & M64))


def ref_hash_int(v: int, seed: int = 42) -> int:
    return ref_xxh64(struct.pack("<i", v), seed)


def ref_hash_long(v: int, seed: int = 42) -> int:
    return ref_xxh64(struct.pack("<q", v), seed)


def ref_big_decimal_bytes(unscaled: int) -> bytes:
    """Java's ``BigInteger.toByteArray()``: minimal big-endian two's complement."""
    bit_length = (unscaled if unscaled >= 0 else ~unscaled).bit_length()
    return unscaled.to_bytes(bit_length // 8 + 1, "big", signed=True)


def ref_hash_row(values: Sequence[Any], types: Sequence[pa.DataType], seed: int = 42) -> int:
    """Spark's xxhash64 of one row (only the value kinds the tests below use)."""
    h = seed
    for v, t in zip(values, types, strict=True):
        if v is None:
            continue
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            h = ref_xxh64(v.encode("utf-8"), h)
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
            h = ref_xxh64(v, h)
        elif pa.types.is_int64(t):
            h = ref_hash_long(v, h)
        elif pa.types.is_integer(t):
            h = ref_hash_int(v, h)
        elif pa.types.is_boolean(t):
            h = ref_hash_int(int(v), h)
        elif pa.types.is_decimal(t):
            unscaled = int(v.scaleb(t.scale, context=EXACT))
            if t.precision <= 18:
                h = ref_hash_long(unscaled, h)
            else:
                h = ref_xxh64(ref_big_decimal_bytes(unscaled), h)
        else:
            raise AssertionError(f"no reference for {t}")
    return h


def test_reference_matches_published_xxh64_vectors() -> None:
    # The XXH64 reference values of the xxHash project, seed 0.
    assert ref_xxh64(b"", 0) & M64 == 0xEF46DB3751D8E999
    assert ref_xxh64(b"a", 0) & M64 == 0xD24EC4F1A98C6E5B
    assert ref_xxh64(b"abc", 0) & M64 == 0x44BC2CF5AD770999


# ------------------------------------------------------------------------- known vectors
D = decimal.Decimal
EXACT = decimal.Context(prec=100)


def dec(unscaled: int, scale: int) -> decimal.Decimal:
    """The decimal ``unscaled * 10**-scale``, exactly (no rounding to 28 digits)."""
    return D(unscaled).scaleb(-scale, context=EXACT)


UTC = dt.timezone.utc

# (Spark SQL literal, Arrow array of one value, Spark's xxhash64 of it)
SPARK_VECTORS: list[tuple[str, pa.Array, int]] = [
    ("cast(1 as int)", pa.array([1], pa.int32()), -6698625589789238999),
    ("cast(-1 as int)", pa.array([-1], pa.int32()), 2017008487422258757),
    ("cast(0 as int)", pa.array([0], pa.int32()), 3614696996920510707),
    ("cast(-128 as tinyint)", pa.array([-128], pa.int8()), 4160238337661960656),
    ("cast(-32768 as smallint)", pa.array([-32768], pa.int16()), -904511417458573795),
    ("cast(2147483647 as int)", pa.array([2147483647], pa.int32()), 1508894993788531228),
    ("cast(-2147483648 as int)", pa.array([-2147483648], pa.int32()), 2073849959933241805),
    ("cast(1 as bigint)", pa.array([1], pa.int64()), -7001672635703045582),
    ("cast(-1 as bigint)", pa.array([-1], pa.int64()), 3858142552250413010),
    ("bigint max", pa.array([2**63 - 1], pa.int64()), -3246596055638297850),
    ("bigint min", pa.array([-(2**63)], pa.int64()), -8619748838626508300),
    ("true", pa.array([True]), -6698625589789238999),
    ("false", pa.array([False]), 3614696996920510707),
    ("cast(1.5 as float)", pa.array([1.5], pa.float32()), 6163473420726370430),
    ("cast(-0.0 as float)", pa.array([-0.0], pa.float32()), 3614696996920510707),
    ("cast(0.0 as float)", pa.array([0.0], pa.float32()), 3614696996920510707),
    ("cast('NaN' as float)", pa.array([float("nan")], pa.float32()), 2692338816207849720),
    ("cast(1.5 as double)", pa.array([1.5], pa.float64()), 7738255526519901366),
    ("cast(-0.0 as double)", pa.array([-0.0], pa.float64()), -5252525462095825812),
    ("cast('NaN' as double)", pa.array([float("nan")], pa.float64()), -3127944061524951246),
    ("cast('-Infinity' as double)", pa.array([float("-inf")]), 5326262080505358431),
    ("''", pa.array([""]), -7444071767201028348),
    ("'a'", pa.array(["a"]), -8582455328737087284),
    ("'abcd'", pa.array(["abcd"]), -6810745876291105281),
    ("'abcdefgh'", pa.array(["abcdefgh"]), 2470326616177429180),
    ("'hello world'", pa.array(["hello world"], pa.large_string()), 7620854247404556961),
    ("'Grüße, 世界 🌍'", pa.array(["Grüße, 世界 🌍"]), -4620278235296315928),
    (
        "'The quick brown fox jumps over the lazy dog'",
        pa.array(["The quick brown fox jumps over the lazy dog"]),
        -6152153990451020481,
    ),
    ("repeat('0123456789', 10)", pa.array(["0123456789" * 10]), 6379203369694145893),
    ("X''", pa.array([b""]), -7444071767201028348),
    ("X'00'", pa.array([b"\x00"], pa.large_binary()), -8959994473701255385),
    ("X'DEADBEEF01'", pa.array([b"\xde\xad\xbe\xef\x01"]), 930631726830336120),
    ("date'1970-01-01'", pa.array([dt.date(1970, 1, 1)]), 3614696996920510707),
    ("date'2024-02-29'", pa.array([dt.date(2024, 2, 29)]), 4183429117450946631),
    ("date'1900-01-01'", pa.array([dt.date(1900, 1, 1)]), 87636426632586988),
    (
        "timestamp'1970-01-01 00:00:00' (UTC session)",
        pa.array([0], pa.timestamp("us", tz="UTC")),
        -5252525462095825812,
    ),
    (
        "timestamp'2024-02-29 12:34:56.789012' (UTC session)",
        pa.array([dt.datetime(2024, 2, 29, 12, 34, 56, 789012, tzinfo=UTC)]),
        -2021281541725647388,
    ),
    ("cast(12345678.90 as decimal(10,2))", pa.array([D("12345678.90")]), 2532582574420288163),
    (
        "cast(-1.23 as decimal(10,2))",
        pa.array([D("-1.23")], pa.decimal128(10, 2)),
        -2573642654262063070,
    ),
    ("cast(0 as decimal(38,6))", pa.array([D(0)], pa.decimal128(38, 6)), -8959994473701255385),
    (
        "cast(-1.5 as decimal(38,6))",
        pa.array([D("-1.5")], pa.decimal128(38, 6)),
        -6683885711916990053,
    ),
    (
        "cast(0.000128 as decimal(38,6))",
        pa.array([D("0.000128")], pa.decimal128(38, 6)),
        6715097930120473301,
    ),
    (
        "cast(-0.000128 as decimal(38,6))",
        pa.array([D("-0.000128")], pa.decimal128(38, 6)),
        -7898411661632158123,
    ),
    (
        "cast(-0.000129 as decimal(38,6))",
        pa.array([D("-0.000129")], pa.decimal128(38, 6)),
        -6459515886037897956,
    ),
    (
        "cast('12345678901234567890123456789012.123456' as decimal(38,6))",
        pa.array([D("12345678901234567890123456789012.123456")], pa.decimal128(38, 6)),
        5724760807551324748,
    ),
    (
        "cast('-99999999999999999999999999999999.999999' as decimal(38,6))",
        pa.array([D("-99999999999999999999999999999999.999999")], pa.decimal128(38, 6)),
        -2254039905620870768,
    ),
    ("null", pa.array([None], pa.string()), 42),
    ("null (void)", pa.nulls(1), 42),
]


@pytest.mark.parametrize(
    ("literal", "array", "expected"), SPARK_VECTORS, ids=[v[0] for v in SPARK_VECTORS]
)
def test_spark_vectors(literal: str, array: pa.Array, expected: int) -> None:
    got = spark_xxhash64([array])
    assert got.dtype == np.int64
    assert got.tolist() == [expected], literal


def test_spark_composite_vectors() -> None:
    one = pa.array([1], pa.int32())
    a = pa.array(["a"])
    # xxhash64(cast(1 as int), 'a'), xxhash64('a', cast(1 as int))
    assert spark_xxhash64([one, a]).tolist() == [8205864924878002737]
    assert spark_xxhash64([a, one]).tolist() == [-4810547614043336770]
    # xxhash64(cast(1 as int), cast(null as string), 'a'): a null leaves the hash as is
    assert spark_xxhash64([one, pa.array([None], pa.string()), a]).tolist() == [8205864924878002737]
    # xxhash64(cast(7 as bigint), 'key', date'2020-01-01')
    cols = [pa.array([7]), pa.array(["key"]), pa.array([dt.date(2020, 1, 1)])]
    assert spark_xxhash64(cols).tolist() == [-6732070339839543038]


def test_spark_pmod_vectors() -> None:
    # pmod(xxhash64('a'), 7), pmod(xxhash64(cast(1 as bigint)), 7),
    # pmod(xxhash64(cast(1 as int)), 16)
    assert bucket_ids([pa.array(["a"])], 7).tolist() == [3]
    assert bucket_ids([pa.array([1], pa.int64())], 7).tolist() == [5]
    assert bucket_ids([pa.array([1], pa.int32())], 16).tolist() == [9]


# ------------------------------------------------------------------ semantics, edge cases
def test_all_null_row_hashes_to_the_seed() -> None:
    cols = [pa.array([None, 1], pa.int64()), pa.array([None, None], pa.string())]
    got = spark_xxhash64(cols)
    assert got[0] == 42
    assert got[1] == ref_hash_long(1)
    assert spark_xxhash64(cols, seed=-5)[0] == -5


def test_nulls_leave_running_hash_unchanged_in_every_type() -> None:
    arrays = [
        pa.array([None, 3], pa.int8()),
        pa.array([None, 3], pa.int16()),
        pa.array([None, 3], pa.int32()),
        pa.array([None, 3], pa.int64()),
        pa.array([None, 1.0], pa.float32()),
        pa.array([None, 1.0], pa.float64()),
        pa.array([None, True]),
        pa.array([None, "x"]),
        pa.array([None, b"x"]),
        pa.array([None, dt.date(2000, 1, 1)]),
        pa.array([None, 5], pa.timestamp("us", tz="UTC")),
        pa.array([None, D("1.25")], pa.decimal128(10, 2)),
        pa.array([None, D("1.25")], pa.decimal128(30, 2)),
    ]
    key = pa.array(["k", "k"])
    for arr in arrays:
        got = spark_xxhash64([key, arr, key])
        expect_null = spark_xxhash64([pa.array(["k"]), pa.array(["k"])])[0]
        assert got[0] == expect_null, arr.type
        assert got[1] != expect_null, arr.type


def test_small_ints_widen_like_java() -> None:
    for typ in (pa.int8(), pa.int16(), pa.int32()):
        info = np.iinfo(typ.to_pandas_dtype())
        vals = [int(info.min), -1, 0, 1, int(info.max)]
        got = spark_xxhash64([pa.array(vals, typ)]).tolist()
        assert got == [ref_hash_int(v) for v in vals]
    assert (
        spark_xxhash64([pa.array([-7], pa.int8())])[0]
        == spark_xxhash64([pa.array([-7], pa.int32())])[0]
    )


def test_float_normalisation() -> None:
    nan_payloads = np.array([0x7FC00001, 0xFFC00000, 0x7F800001], dtype=np.uint32).view(np.float32)
    f32 = pa.array(np.concatenate([nan_payloads, np.array([np.nan, -0.0, 0.0], np.float32)]))
    got = spark_xxhash64([f32])
    assert set(got[:4].tolist()) == {2692338816207849720}
    assert got[4] == got[5] == 3614696996920510707
    nan64 = np.array([0x7FF8000000000001, 0xFFF8000000000000], dtype=np.uint64).view(np.float64)
    got64 = spark_xxhash64([pa.array(np.concatenate([nan64, [np.nan, -0.0, 0.0]]))])
    assert set(got64[:3].tolist()) == {-3127944061524951246}
    assert got64[3] == got64[4] == -5252525462095825812


def test_empty_and_unicode_strings() -> None:
    vals = ["", "é", "日本", "🙂", "a" * 7, "ü" * 16, "𝔘𝔫𝔦𝔠𝔬𝔡𝔢" * 5, "\x00", "a\x00b"]
    got = spark_xxhash64([pa.array(vals)])
    assert got.tolist() == [ref_xxh64(v.encode()) for v in vals]
    assert spark_xxhash64([pa.array(vals, pa.large_string())]).tolist() == got.tolist()
    as_binary = pa.array([v.encode() for v in vals], pa.binary())
    assert spark_xxhash64([as_binary]).tolist() == got.tolist()


def test_long_strings_cross_the_stripe_loop() -> None:
    rng = np.random.default_rng(7)
    lengths = [*range(0, 200), 255, 256, 257, 1000, 4096, 10_007]
    vals = [bytes(rng.integers(0, 256, n, dtype=np.uint8)) for n in lengths]
    rng.shuffle(vals)  # skewed lengths in no particular order
    got = spark_xxhash64([pa.array(vals, pa.large_binary())])
    assert got.tolist() == [ref_xxh64(v) for v in vals]


def test_decimal_byte_array_boundaries() -> None:
    edges = [0, 1, -1, 127, 128, -128, -129, 255, 256, -256, -257, 32767, 32768, -32768, -32769]
    edges += [2**k + d for k in range(8, 127) for d in (-1, 0, 1)]
    edges += [-(2**k) + d for k in range(8, 127) for d in (-1, 0, 1)]
    edges += [10**38 - 1, -(10**38) + 1]
    edges = [e for e in edges if abs(e) < 10**38]
    arr = pa.array([dec(e, 6) for e in edges], pa.decimal128(38, 6))
    got = spark_xxhash64([arr]).tolist()
    assert got == [ref_xxh64(ref_big_decimal_bytes(e)) for e in edges]
    # the type's precision decides, not the value's: 1.5 hashes differently at p=18 / p=19
    small = spark_xxhash64([pa.array([D("1.5")], pa.decimal128(18, 1))])[0]
    big = spark_xxhash64([pa.array([D("1.5")], pa.decimal128(19, 1))])[0]
    assert small == ref_hash_long(15)
    assert big == ref_xxh64(b"\x0f")


def test_other_decimal_widths_match_decimal128() -> None:
    vals = [D("1.25"), D("-99.99"), None, D("0")]
    expected = spark_xxhash64([pa.array(vals, pa.decimal128(6, 2))])
    for typ in (pa.decimal32(6, 2), pa.decimal64(6, 2), pa.decimal256(6, 2)):
        assert spark_xxhash64([pa.array(vals, typ)]).tolist() == expected.tolist()
    big = [D("12345678901234567890.5"), D("-1"), None]
    assert (
        spark_xxhash64([pa.array(big, pa.decimal256(38, 1))]).tolist()
        == spark_xxhash64([pa.array(big, pa.decimal128(38, 1))]).tolist()
    )


def test_timestamps_hash_utc_micros_whatever_the_zone() -> None:
    micros = [0, -1, 1_700_000_000_123_456, None]
    utc = spark_xxhash64([pa.array(micros, pa.timestamp("us", tz="UTC"))])
    berlin = spark_xxhash64([pa.array(micros, pa.timestamp("us", tz="Europe/Berlin"))])
    naive = spark_xxhash64([pa.array(micros, pa.timestamp("us"))])
    longs = spark_xxhash64([pa.array(micros, pa.int64())])
    assert utc.tolist() == berlin.tolist() == naive.tolist() == longs.tolist()


def test_dictionary_and_view_arrays_hash_their_values() -> None:
    plain = pa.array(["x", None, "yy", "x", "a" * 40])
    expected = spark_xxhash64([plain]).tolist()
    assert spark_xxhash64([plain.dictionary_encode()]).tolist() == expected
    assert spark_xxhash64([plain.cast(pa.string_view())]).tolist() == expected
    assert spark_xxhash64([plain.cast(pa.binary_view())]).tolist() == expected


def _all_types_columns(n: int, seed: int) -> list[pa.Array]:
    rng = np.random.default_rng(seed)
    nulls = rng.random(n) < 0.2
    strs = ["é" * int(k) + str(i) for i, k in enumerate(rng.integers(0, 30, n))]
    ints = rng.integers(-(2**31), 2**31, n)
    return [
        pa.array(ints.astype(np.int8), mask=nulls),
        pa.array(ints.astype(np.int16)),
        pa.array(ints.astype(np.int32), mask=np.roll(nulls, 1)),
        pa.array(ints * 977, mask=np.roll(nulls, 2)),
        pa.array(ints.astype(np.float32) / 7, mask=np.roll(nulls, 3)),
        pa.array(ints / 3.0),
        pa.array(ints % 2 == 0, mask=np.roll(nulls, 4)),
        pa.array(strs, mask=np.roll(nulls, 5)),
        pa.array([s.encode() for s in strs], pa.large_binary()),
        pa.array(ints % 100_000, mask=np.roll(nulls, 6)).cast(pa.int32()).cast(pa.date32()),
        pa.array(ints * 1_000_003, pa.timestamp("us", tz="UTC")),
        pa.array([dec(int(i), 2) for i in ints], pa.decimal128(12, 2)),
        pa.array([dec(int(i) * 10**20, 6) for i in ints], pa.decimal128(38, 6)),
        pa.nulls(n),
    ]


def test_sliced_arrays_honour_their_offset() -> None:
    cols = _all_types_columns(300, seed=1)
    for col in cols:
        full = spark_xxhash64([col])
        for start in (1, 3, 8, 13, 64):
            part = col.slice(start, 100)
            assert spark_xxhash64([part]).tolist() == full[start : start + 100].tolist(), col.type


def test_chunked_arrays_match_contiguous_ones() -> None:
    cols = _all_types_columns(257, seed=2)
    expected = spark_xxhash64(cols)
    chunked: list[pa.Array | pa.ChunkedArray] = []
    for i, col in enumerate(cols):  # every column chunked differently, some empty chunks
        cuts = sorted({0, 257, *((np.arange(1, 6) * (17 + 11 * i)) % 257).tolist()})
        chunks = [col.slice(a, b - a) for a, b in itertools.pairwise(cuts)]
        chunked.append(pa.chunked_array([col.slice(0, 0), *chunks], type=col.type))
    assert spark_xxhash64(chunked).tolist() == expected.tolist()
    assert bucket_ids(chunked, 5).tolist() == bucket_ids(cols, 5).tolist()


def test_row_blocks_do_not_change_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    cols = _all_types_columns(500, seed=3)
    chunked = [pa.chunked_array([c.slice(0, 123), c.slice(123)]) for c in cols]
    expected = spark_xxhash64(cols)
    monkeypatch.setattr(xxhash64, "_BLOCK_ROWS", 7)
    assert spark_xxhash64(cols).tolist() == expected.tolist()
    assert spark_xxhash64(chunked).tolist() == expected.tolist()


def test_composite_keys_match_reference_rows() -> None:
    rows = [
        (1, "a", None, D("1.00"), b"\x01"),
        (None, None, None, None, None),
        (-(2**63), "", True, D("-0.01"), b""),
        (2**63 - 1, "x" * 33, False, None, b"\xff" * 40),
        (0, None, True, D("99999999.99"), None),
    ]
    types = [pa.int64(), pa.string(), pa.bool_(), pa.decimal128(10, 2), pa.binary()]
    cols = [pa.array([r[i] for r in rows], t) for i, t in enumerate(types)]
    got = spark_xxhash64(cols).tolist()
    assert got == [ref_hash_row(r, types) for r in rows]
    large_types = [pa.int16(), pa.large_string(), pa.int8(), pa.decimal128(30, 4)]
    rows2 = [(5, "k", -3, D("-123.4567")), (None, "日本", 0, D("1e20"))]
    cols2 = [pa.array([r[i] for r in rows2], t) for i, t in enumerate(large_types)]
    assert spark_xxhash64(cols2).tolist() == [ref_hash_row(r, large_types) for r in rows2]


def test_zero_rows() -> None:
    out = spark_xxhash64([pa.array([], pa.string()), pa.array([], pa.int64())])
    assert out.dtype == np.int64
    assert out.shape == (0,)
    assert bucket_ids([pa.array([], pa.int32())], 3).dtype == np.int32


def test_seed_parameter() -> None:
    arr = pa.array(["abc", "x" * 50])
    for seed in (0, -1, 2**63 - 1, -(2**63)):
        assert spark_xxhash64([arr], seed=seed).tolist() == [
            ref_xxh64(b"abc", seed),
            ref_xxh64(b"x" * 50, seed),
        ]
    with pytest.raises(ValueError):
        spark_xxhash64([arr], seed=2**63)
    with pytest.raises(TypeError):
        spark_xxhash64([arr], seed=1.5)  # type: ignore[arg-type]


def test_argument_validation() -> None:
    with pytest.raises(ValueError, match="at least one"):
        spark_xxhash64([])
    with pytest.raises(ValueError, match="same length"):
        spark_xxhash64([pa.array([1, 2]), pa.array([1])])
    with pytest.raises(TypeError):
        spark_xxhash64(pa.array([1, 2]))
    with pytest.raises(TypeError):
        spark_xxhash64([[1, 2]])


# ----------------------------------------------------------------------------- buckets
def test_bucket_ids_are_pmod_of_the_hash() -> None:
    arr = pa.array(np.arange(-5000, 5000, dtype=np.int64))
    hashes = spark_xxhash64([arr])
    for n in (1, 2, 7, 16, 1000, 2**31 - 1):
        ids = bucket_ids([arr], n)
        assert ids.dtype == np.int32
        assert ids.min() >= 0
        assert ids.max() < n
        # Java: ((h % n) + n) % n with truncating %
        expected = [((int(np.fmod(h, n)) + n) % n) for h in hashes.tolist()]
        assert ids.tolist() == expected
    assert len(set(bucket_ids([arr], 16).tolist())) == 16


@pytest.mark.parametrize("bad", [0, -1, 2**31])
def test_num_buckets_out_of_range(bad: int) -> None:
    with pytest.raises(ValueError, match="num_buckets"):
        bucket_ids([pa.array([1])], bad)


@pytest.mark.parametrize("bad", [True, 2.0, "4", None])
def test_num_buckets_wrong_type(bad: Any) -> None:
    with pytest.raises(TypeError, match="num_buckets"):
        bucket_ids([pa.array([1])], bad)


# ----------------------------------------------------------------------- type checking
@pytest.mark.parametrize(
    "typ",
    [
        pa.uint8(),
        pa.uint64(),
        pa.float16(),
        pa.date64(),
        pa.timestamp("ns", tz="UTC"),
        pa.timestamp("ms"),
        pa.time64("us"),
        pa.duration("us"),
        pa.decimal256(40, 2),
        pa.list_(pa.int32()),
        pa.struct([("a", pa.int32())]),
        pa.map_(pa.string(), pa.int32()),
        pa.binary(4),
        pa.dictionary(pa.int32(), pa.uint16()),
    ],
    ids=str,
)
def test_unsupported_types_raise_type_error(typ: pa.DataType) -> None:
    with pytest.raises(TypeError, match="cannot hash Arrow type") as err:
        check_hashable(typ)
    assert str(typ.value_type if pa.types.is_dictionary(typ) else typ) in str(err.value)
    with pytest.raises(TypeError, match="cannot hash"):
        spark_xxhash64([pa.array([1, 2], pa.int64()), pa.nulls(2, typ)])


def test_supported_types_pass_check() -> None:
    for typ in [
        pa.null(),
        pa.bool_(),
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.large_string(),
        pa.string_view(),
        pa.binary(),
        pa.large_binary(),
        pa.binary_view(),
        pa.date32(),
        pa.timestamp("us", tz="UTC"),
        pa.timestamp("us"),
        pa.decimal128(10, 2),
        pa.decimal128(38, 6),
        pa.dictionary(pa.int32(), pa.string()),
    ]:
        check_hashable(typ)
    assert "int64" in SUPPORTED_TYPES
    with pytest.raises(TypeError):
        check_hashable("int64")


# ---------------------------------------------------------------------------- hypothesis
_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(
    st.lists(st.one_of(st.none(), st.text(max_size=90)), max_size=60),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([pa.string(), pa.large_string()]),
    st.integers(0, 5),
)
def test_vectorized_string_hash_equals_scalar_reference(
    values: list[str | None], seed: int, typ: pa.DataType, offset: int
) -> None:
    arr = pa.array(["pad"] * offset + values, typ).slice(offset)
    got = spark_xxhash64([arr], seed=seed).tolist()
    assert got == [seed if v is None else ref_xxh64(v.encode("utf-8"), seed) for v in values]


@_SETTINGS
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=40), st.integers(0, 2**64 - 1))
def test_vectorized_binary_hash_equals_scalar_reference(values: list[bytes], seed: int) -> None:
    seed = _signed(seed)
    got = spark_xxhash64([pa.array(values, pa.binary())], seed=seed).tolist()
    assert got == [ref_xxh64(v, seed) for v in values]


@_SETTINGS
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
            st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
            st.one_of(st.none(), st.integers(-(10**38) + 1, 10**38 - 1)),
            st.one_of(st.none(), st.binary(max_size=70)),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_composite_rows_equal_scalar_reference(rows: list[tuple[Any, ...]]) -> None:
    types = [pa.int64(), pa.int32(), pa.decimal128(38, 0), pa.binary()]
    cols = [pa.array([r[i] for r in rows], t) for i, t in enumerate(types)]
    decimal_rows = [(a, b, None if c is None else D(c), d) for a, b, c, d in rows]
    expected = [ref_hash_row(r, types) for r in decimal_rows]
    assert spark_xxhash64(cols).tolist() == expected


@pytest.mark.parametrize("partitions", [1, 2, 3, 7])
def test_bucket_partitions_put_each_bucket_on_one_partition(partitions: int) -> None:
    keys = [pa.array(range(-500, 500), pa.int64()), pa.array([f"k{i % 17}" for i in range(1000)])]
    buckets = bucket_ids(keys, 8)
    parts = bucket_partitions(keys, 8, partitions)
    assert parts.dtype == np.int32
    assert (parts == buckets % partitions).all()
    owner: dict[int, set[int]] = {}
    for b, p in zip(buckets.tolist(), parts.tolist(), strict=True):
        owner.setdefault(b, set()).add(p)
    assert all(len(ps) == 1 for ps in owner.values())


@pytest.mark.parametrize(("bad", "error"), [(0, ValueError), (-2, ValueError), (2.0, TypeError)])
def test_bucket_partitions_refuses_a_bad_partition_count(bad: Any, error: type) -> None:
    with pytest.raises(error, match="num_partitions"):
        bucket_partitions([pa.array([1], pa.int64())], 4, bad)
