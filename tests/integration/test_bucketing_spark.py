"""cdc_sink.bucketing against a live Spark: xxhash64 and pmod buckets agree on every row.

An Arrow table holding every supported type (random values with nulls, negative numbers,
-0.0, NaN with several payloads, infinities, min/max integers, unicode strings of 0..100
characters, binary, dates, timestamps, decimal(10,2), decimal(38,6), ...) becomes a Spark
DataFrame through ``spark.createDataFrame(pyarrow.Table)``; Spark's ``xxhash64`` and
``pmod(xxhash64(...), 7)`` of single columns and of mixed composite keys must equal
:func:`spark_xxhash64` / :func:`bucket_ids` of the same (chunked) Arrow columns.
"""

from __future__ import annotations

import decimal
import itertools
import random
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.bucketing import bucket_ids, spark_xxhash64

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]

N_ROWS = 3000
NUM_BUCKETS = 7
# The session settings this module needs; restored afterwards when the session is shared.
SESSION_CONF = {
    # a non-UTC zone on purpose: tz-aware timestamps must not depend on it
    "spark.sql.session.timeZone": "America/Los_Angeles",
    # Arrow timestamps without a zone become TimestampNTZType (else TimestampType read
    # as wall-clock time in the session zone, whose hash depends on that zone)
    "spark.sql.timestampType": "TIMESTAMP_NTZ",
}


@pytest.fixture(scope="module")
def bucketing_spark() -> Iterator[SparkSession]:
    """A local Spark session (local[1], no UI, 2 shuffle partitions), stopped at module end.

    It is built by :func:`cdc_sink.spark.session.local_spark`, like every Spark session of
    the suite: the first session of a process launches the JVM, and ``spark.jars`` (the
    Kafka source the streaming tests need) cannot be added to a running JVM later. When
    another test already runs a session in this process (the conftest's session-scoped
    ``spark``), that one is reused, its settings restored afterwards, and it is left
    running for its owner to stop.
    """
    from pyspark.sql import SparkSession

    from cdc_sink.spark.session import local_spark

    active = SparkSession.getActiveSession()
    if active is None:
        session = local_spark(
            "cdc_sink-bucketing-tests",
            master="local[1]",
            extra_conf={"spark.default.parallelism": "1"},
        )
    else:
        session = active
    saved = {key: session.conf.get(key, None) for key in SESSION_CONF}
    for key, value in SESSION_CONF.items():
        session.conf.set(key, value)
    try:
        yield session
    finally:
        if active is None:
            session.stop()
        else:
            for key, old in saved.items():
                if old is None:
                    session.conf.unset(key)
                else:
                    session.conf.set(key, old)


# ------------------------------------------------------------------------------ data
CHARS = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.,;:/\\'\"\t\n"
    "äöüßéèçñÅØæ"  # 2-byte UTF-8
    "€日本語中文한국어ไทย"  # 3-byte UTF-8
    "😀🎉🌍𝔘𝔫𝔦"  # 4-byte UTF-8
    "\x00\x7f"
)


def _strings(rng: random.Random, n: int) -> list[str]:
    out = [rng.choice(["", "a", "ab", "abc", "abcd"]) for _ in range(5)]
    out += ["".join(rng.choices(CHARS, k=rng.randint(0, 100))) for _ in range(n - len(out))]
    return out


def _bytes(rng: random.Random, n: int) -> list[bytes]:
    return [rng.randbytes(rng.randint(0, 100)) for _ in range(n)]


def _ints(nprng: np.random.Generator, dtype: type[np.integer], mask: np.ndarray) -> pa.Array:
    info = np.iinfo(dtype)
    values = nprng.integers(int(info.min), int(info.max), N_ROWS, dtype=dtype, endpoint=True)
    values[:5] = [info.min, info.max, 0, -1, 1]
    small = nprng.random(N_ROWS) < 0.3  # plenty of small magnitudes too
    values[small] = nprng.integers(-300, 300, int(small.sum())).astype(dtype)
    return pa.array(values, mask=mask)


def _floats(nprng: np.random.Generator, dtype: type[np.floating], mask: np.ndarray) -> pa.Array:
    info = np.finfo(dtype)
    exponents = nprng.integers(int(info.minexp), int(info.maxexp) - 1, N_ROWS)
    values = (nprng.standard_normal(N_ROWS) * np.exp2(exponents.astype(np.float64))).astype(dtype)
    if dtype == np.float32:
        nans = np.array([0x7FC00000, 0x7FC00001, 0xFFC00000, 0x7F800001], np.uint32)
    else:
        nans = np.array(
            [0x7FF8000000000000, 0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001],
            np.uint64,
        )
    specials = np.concatenate(
        [
            np.array([0.0, -0.0, np.inf, -np.inf, info.max, info.min, info.tiny], dtype),
            np.array([info.smallest_subnormal, -1.0, 1.0, 1.5], dtype),
            nans.view(dtype),
        ]
    )
    values[: specials.size] = specials
    sprinkle = nprng.integers(specials.size, N_ROWS, 200)
    values[sprinkle] = nprng.choice(specials, sprinkle.size)
    return pa.array(values, mask=mask)


def _decimals(rng: random.Random, precision: int, scale: int, mask: np.ndarray) -> pa.Array:
    exact = decimal.Context(prec=100)
    edges = [0, 1, -1, 127, 128, -128, -129, 255, 256, -256, -257, 10**precision - 1]
    edges += [-(10**precision) + 1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64]
    unscaled = [e for e in edges if abs(e) < 10**precision]
    while len(unscaled) < N_ROWS:  # log-uniform magnitudes: every byte length occurs
        digits = rng.randint(1, precision)
        unscaled.append(rng.choice([-1, 1]) * rng.randrange(10 ** (digits - 1), 10**digits))
    values = [
        None if null else decimal.Decimal(u).scaleb(-scale, context=exact)
        for u, null in zip(unscaled, mask.tolist(), strict=True)
    ]
    return pa.array(values, pa.decimal128(precision, scale))


def _table() -> pa.Table:
    rng = random.Random(20240229)
    nprng = np.random.default_rng(20240229)

    def nulls() -> np.ndarray:
        mask = nprng.random(N_ROWS) < 0.1
        mask[:12] = False  # keep the hand-placed edge values
        return mask

    def masked(values: Sequence[object], typ: pa.DataType) -> pa.Array:
        mask = nulls()
        return pa.array([None if m else v for v, m in zip(values, mask, strict=True)], typ)

    days = nprng.integers(-719162, 2932896, N_ROWS)  # 0001-01-01 .. 9999-12-31
    micros = nprng.integers(-62135596800_000000, 253402300799_999999, N_ROWS)
    micros[:4] = [0, -1, 1, 1_700_000_000_123_456]
    columns = {
        "row_id": pa.array(np.arange(N_ROWS, dtype=np.int64)),
        "i8": _ints(nprng, np.int8, nulls()),
        "i16": _ints(nprng, np.int16, nulls()),
        "i32": _ints(nprng, np.int32, nulls()),
        "i64": _ints(nprng, np.int64, nulls()),
        "f32": _floats(nprng, np.float32, nulls()),
        "f64": _floats(nprng, np.float64, nulls()),
        "b": pa.array(nprng.random(N_ROWS) < 0.5, mask=nulls()),
        "s": masked(_strings(rng, N_ROWS), pa.string()),
        "ls": masked(_strings(rng, N_ROWS), pa.large_string()),
        "bin": masked(_bytes(rng, N_ROWS), pa.binary()),
        "lbin": masked(_bytes(rng, N_ROWS), pa.large_binary()),
        "d": pa.array(days.astype(np.int32), mask=nulls()).cast(pa.date32()),
        "ts": pa.array(micros, mask=nulls()).cast(pa.timestamp("us", tz="UTC")),
        "ts_berlin": pa.array(micros, mask=nulls()).cast(pa.timestamp("us", tz="Europe/Berlin")),
        "ts_ntz": pa.array(micros[::-1].copy(), mask=nulls()).cast(pa.timestamp("us")),
        "dec10": _decimals(rng, 10, 2, nulls()),
        "dec18": _decimals(rng, 18, 4, nulls()),
        "dec19": _decimals(rng, 19, 0, nulls()),
        "dec38": _decimals(rng, 38, 6, nulls()),
        "n": pa.nulls(N_ROWS),
    }
    table = pa.table(columns)
    # uneven record batches: every column is a ChunkedArray of several chunks
    cuts = [0, 1, 700, 701, 2048, N_ROWS]
    batches = [b for a, z in itertools.pairwise(cuts) for b in table.slice(a, z - a).to_batches()]
    return pa.Table.from_batches(batches, schema=table.schema)


EXPECTED_SPARK_TYPES = {
    "i8": "tinyint",
    "i16": "smallint",
    "i32": "int",
    "i64": "bigint",
    "f32": "float",
    "f64": "double",
    "b": "boolean",
    "s": "string",
    "ls": "string",
    "bin": "binary",
    "lbin": "binary",
    "d": "date",
    "ts": "timestamp",
    "ts_berlin": "timestamp",
    "ts_ntz": "timestamp_ntz",
    "dec10": "decimal(10,2)",
    "dec18": "decimal(18,4)",
    "dec19": "decimal(19,0)",
    "dec38": "decimal(38,6)",
    "n": "void",
}
KEY_COLUMNS = list(EXPECTED_SPARK_TYPES)
COMPOSITES: list[tuple[str, ...]] = [
    tuple(KEY_COLUMNS),
    ("i64", "s"),
    ("s", "i64"),
    ("s", "i32", "d"),
    ("dec38", "bin", "f64", "b"),
    ("ts", "ls", "i8", "n"),
    ("i16", "f32", "lbin", "dec10", "ts_ntz"),
    ("dec19", "dec18", "ts_berlin", "s", "s"),
]


def _assert_same(name: str, got: np.ndarray, want: Sequence[int], table: pa.Table) -> None:
    bad = np.flatnonzero(got != np.asarray(want, dtype=np.int64))
    if bad.size:
        i = int(bad[0])
        cols = name.split(",")
        row = {c: table.column(c)[i].as_py() for c in cols if c in table.column_names}
        pytest.fail(
            f"{name}: {bad.size} of {len(want)} rows differ; first row {i}: "
            f"ours {int(got[i])}, Spark {want[i]}, values {row!r}"
        )


def test_xxhash64_and_buckets_match_spark(bucketing_spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    table = _table()
    assert all(table.column(c).num_chunks > 1 for c in KEY_COLUMNS)
    df = bucketing_spark.createDataFrame(table)
    spark_types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert {c: spark_types[c] for c in KEY_COLUMNS} == EXPECTED_SPARK_TYPES

    keys: list[tuple[str, ...]] = [(c,) for c in KEY_COLUMNS] + COMPOSITES
    selects = [F.col("row_id")]
    for i, key in enumerate(keys):
        cols = ", ".join(f"`{c}`" for c in key)
        selects.append(F.xxhash64(*key).alias(f"h{i}"))
        selects.append(F.expr(f"pmod(xxhash64({cols}), {NUM_BUCKETS})").alias(f"p{i}"))
    result = df.select(*selects).toArrow().sort_by("row_id")
    assert result.column("row_id").to_pylist() == list(range(N_ROWS))

    for i, key in enumerate(keys):
        arrays = [table.column(c) for c in key]
        name = ",".join(key)
        _assert_same(name, spark_xxhash64(arrays), result.column(f"h{i}").to_pylist(), table)
        ids = bucket_ids(arrays, NUM_BUCKETS)
        assert ids.dtype == np.int32
        _assert_same(
            f"pmod {name}", ids.astype(np.int64), result.column(f"p{i}").to_pylist(), table
        )


def test_bucket_ids_match_spark_for_many_bucket_counts(bucketing_spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    rng = np.random.default_rng(5)
    keys = pa.array(rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64, endpoint=True))
    words = pa.array([f"user-{i}" for i in rng.integers(0, 10**9, 500)])
    table = pa.table({"row_id": np.arange(500), "k": keys, "w": words})
    counts = [1, 2, 3, 16, 1000, 2**31 - 1]
    df = bucketing_spark.createDataFrame(table).select(
        "row_id", *[F.expr(f"pmod(xxhash64(k, w), {n})").alias(f"b{n}") for n in counts]
    )
    result = df.toArrow().sort_by("row_id")
    for n in counts:
        ours = bucket_ids([table.column("k"), table.column("w")], n)
        assert ours.tolist() == result.column(f"b{n}").to_pylist(), n
