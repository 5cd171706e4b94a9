"""The JVM decode of native JSON (``from_json``, ``json_decoder="jvm"``) against the Python
decoders, on every JSON case of ``tests/formats/test_wide_values.py``.

Each case must give on the JVM path what it gives on the Python decoders: the same
accept or reject, the same stored value (type and scale included) and the same reject
reason. Spark's ``from_json`` reads a number with a point or an exponent as a double before
Spark has its text (:func:`test_from_json_reads_numbers_with_a_point_as_doubles`), so
the JVM decoder reads such a member's token from the message itself; the other tests
pin where it finds that token, and where it refuses to guess, on value and key columns.
All run in the session's one local Spark, one Spark job per test (or module fixture).
"""

from __future__ import annotations

import decimal
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.formats import get_decoder
from cdc_sink.schema import TableSchema
from cdc_sink.spark._batch import to_change_batch
from cdc_sink.spark.decode import NOT_READ, decode_native_json
from tests.formats.test_wide_values import DECIMAL_TEXT, JSON_CASES, SCHEMA, Case, _json_event

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

Outcome = tuple[str, Any]
"""``("stored", value)`` or ``("rejected", reason)``."""


def _outcomes(
    batch: ChangeBatch, rejects: Rejects, schema: TableSchema, columns: Sequence[str]
) -> list[Outcome]:
    """Per event ``i``, its stored value of ``columns[i]`` or its reject reason."""
    reasons = rejects.as_dict()
    rows = {p: i for i, p in enumerate(batch.positions.tolist())}
    out: list[Outcome] = []
    for pos, name in enumerate(columns):
        if pos in reasons:
            out.append(("rejected", reasons[pos]))
            continue
        cid = schema.column(name).id
        if name in schema.primary_key:
            column = batch.keys[schema.primary_key.index(name)]
        else:
            assert batch.present[cid][rows[pos]], (pos, name)
            column = batch.values[cid]
        out.append(("stored", column[rows[pos]].as_py()))
    return out


def _python(messages: list[bytes], schema: TableSchema, columns: Sequence[str]) -> list[Outcome]:
    batch, rejects = get_decoder("json").decode(pa.array(messages, pa.binary()), schema)
    return _outcomes(batch, rejects, schema, columns)


def _jvm(
    spark: SparkSession, messages: list[bytes], schema: TableSchema, columns: Sequence[str]
) -> list[Outcome]:
    ts = pa.scalar(0, pa.timestamp("ms")).as_py()
    df = spark.createDataFrame(
        [(m, "t", 0, i, ts) for i, m in enumerate(messages)],
        "value binary, topic string, partition int, offset long, timestamp timestamp",
    )
    wire = decode_native_json(df, schema).orderBy("__offset").toArrow()
    batch, rejects, _ = to_change_batch(wire, schema)
    return _outcomes(batch, rejects, schema, columns)


def _same(got: Outcome, want: Outcome) -> bool:
    """Equal outcomes; stored values of the same type, decimals at the same scale."""
    if got != want or type(got[1]) is not type(want[1]):
        return False
    if isinstance(got[1], decimal.Decimal):
        return bool(got[1].as_tuple().exponent == want[1].as_tuple().exponent)
    return True


def test_from_json_reads_numbers_with_a_point_as_doubles(spark: SparkSession) -> None:
    """Why the JVM decoder reads tokens from the message: a string field of ``from_json``
    (and a ``map<string,string>`` value, and ``get_json_object``) gives Jackson's text
    of a double for a number with a point or an exponent, not the number's own text."""
    from pyspark.sql import functions as F

    texts = ["1E-500", "1e400", "0." + "9" * 38, "12.50"]
    df = spark.createDataFrame([(f'{{"a":{t}}}',) for t in texts], "v string")
    rows = df.select(
        F.from_json("v", "struct<a:string>")["a"].alias("field"),
        F.from_json("v", "map<string,string>")["a"].alias("map"),
        F.get_json_object("v", "$.a").alias("path"),
    ).collect()
    doubles = [float(t) for t in texts]
    jackson = ['"Infinity"' if d == float("inf") else repr(d).replace("e", "E") for d in doubles]
    for row, text, want in zip(rows, texts, jackson, strict=True):
        assert (row.field, row.map, row.path) == (want, want, want), text
        assert want != text


@pytest.fixture(scope="module")
def wide_values(spark: SparkSession) -> list[tuple[Case, Outcome, Outcome]]:
    """Every JSON case of the wide-value table: (case, Python decoders, JVM decoder)."""
    messages = [_json_event(c) for c in JSON_CASES]
    columns = [c.column for c in JSON_CASES]
    python = _python(messages, SCHEMA, columns)
    jvm = _jvm(spark, messages, SCHEMA, columns)
    return list(zip(JSON_CASES, python, jvm, strict=True))


def test_the_python_decoders_give_the_wanted_outcomes(
    wide_values: list[tuple[Case, Outcome, Outcome]],
) -> None:
    """The reference: each case's wanted value, or a reject naming its column."""
    for case, python, _ in wide_values:
        if repr(case.want) == "REJECT":
            assert python[0] == "rejected" and f"'{case.column}'" in python[1], (str(case), python)
        else:
            assert _same(python, ("stored", case.want)), (str(case), python)


@pytest.mark.parametrize("index", range(len(JSON_CASES)), ids=[str(c) for c in JSON_CASES])
def test_jvm_decode_equals_the_python_decoders(
    index: int, wide_values: list[tuple[Case, Outcome, Outcome]]
) -> None:
    case, python, jvm = wide_values[index]
    assert _same(jvm, python), (str(case), python, jvm)


def test_generated_code_compiles(spark: SparkSession) -> None:
    """Spark compiles the whole-stage code of the decode of the wide-value table (twelve
    columns of every kind): no method beyond the JVM's 64 KB, so no fallback (which Spark
    logs as an error with the generated code, every micro-batch)."""
    df = spark.createDataFrame(
        [(b"{}", "t", 0, 0, None)],
        "value binary, topic string, partition int, offset long, timestamp timestamp",
    )
    generated = decode_native_json(df, SCHEMA)._jdf.queryExecution().debug().codegenToSeq()
    sizes = [generated.apply(i)._3().maxMethodCodeSize() for i in range(generated.size())]
    assert sizes and all(0 < size < 65_536 for size in sizes), sizes


KEYED = TableSchema.from_dict(
    {
        "columns": [{"name": "k", "type": "decimal128(9, 3)"}, {"name": "v", "type": "int8"}],
        "primary_key": ["k"],
    }
)
KEY_CASES = [c for c in DECIMAL_TEXT if c.column == "dec"]


def test_decimal_keys_equal_the_python_decoders(spark: SparkSession) -> None:
    """The decimal cases as a key column's value (the member of ``key``)."""
    messages = [
        b'{"op":"upsert","key":{"k":%s},"set":{"v":1}}' % str(c.text).encode() for c in KEY_CASES
    ]
    columns = ["k"] * len(messages)
    python = _python(messages, KEYED, columns)
    jvm = _jvm(spark, messages, KEYED, columns)
    wrong = [
        (str(c), p, j) for c, p, j in zip(KEY_CASES, python, jvm, strict=True) if not _same(j, p)
    ]
    assert not wrong, wrong


_DEEP = "[" * 40 + "]" * 40
_NEST14 = "[" * 14 + "]" * 14
_ESCAPES = '"' + '\\"' * 100_000 + '"'
_KEY = '"key":{"id":1}'
SAME = "same"
BOTH_REJECT = "both reject"
NOT_READ_BY_JVM = "not read by the JVM decoder"
LOCATION_CASES: list[tuple[str, str, str]] = [
    # (what, event, expectation); the column judged is "dec" (decimal128(9, 3))
    (
        "blanks around every token",
        '{ "op" : "upsert" , ' + _KEY + ' , "set" : { "dec" : 1E-500 } }',
        SAME,
    ),
    (
        "blanks, a value that fits",
        '{\n"op":"upsert",\t' + _KEY + ',"set":{ "dec" :\r0.5e1 }}',
        SAME,
    ),
    (
        "a 'set' inside an ignored member",
        '{"op":"upsert","m":{"set":{"dec":1.5}},' + _KEY + ',"set":{"dec":1E-500}}',
        SAME,
    ),
    (
        "the member's text inside a string",
        '{"op":"upsert","n":"\\"set\\":{\\"dec\\":1.5}",' + _KEY + ',"set":{"dec":1E-500}}',
        SAME,
    ),
    (
        "members after it",
        '{"op":"upsert","set":{"i8":1,"dec":1.2345,"f64":1e-500},' + _KEY + "}",
        SAME,
    ),
    (
        "a fitting value among others",
        '{"op":"upsert","set":{"i8":1,"dec":-12.5e-2,"f64":1e-500},' + _KEY + "}",
        SAME,
    ),
    (
        "a nested member of its name",
        '{"op":"upsert",' + _KEY + ',"set":{"dec":0.001,"at":null,"wide":[{"dec":9}]}}',
        SAME,
    ),
    (
        "nesting the Python decoders take",
        '{"op":"upsert","x":' + _NEST14 + "," + _KEY + ',"set":{"dec":2.5}}',
        SAME,
    ),
    (
        "a long string of escapes",
        '{"op":"upsert","x":' + _ESCAPES + "," + _KEY + ',"set":{"dec":1E-500}}',
        SAME,
    ),
    (
        "a decimal string with escapes",
        '{"op":"upsert",' + _KEY + ',"set":{"dec":"1\\u002e5"}}',
        SAME,
    ),
    ("an object for a decimal", '{"op":"upsert",' + _KEY + ',"set":{"dec":{"a":1.5}}}', SAME),
    (
        "an integer under an escaped name",
        '{"op":"upsert",' + _KEY + ',"set":{"d\\u0065c":15}}',
        SAME,
    ),
    (
        "nesting beyond the Python decoders",
        '{"op":"upsert","x":' + _DEEP + "," + _KEY + ',"set":{"dec":1.5}}',
        BOTH_REJECT,
    ),
    ("single quotes", "{'op':'upsert','key':{'id':1},'set':{'dec':1E-500}}", BOTH_REJECT),
    (
        "a repeated member",
        '{"op":"upsert",' + _KEY + ',"set":{"dec":1.5,"dec":1E-500}}',
        BOTH_REJECT,
    ),
    (
        "a repeated 'set'",
        '{"op":"upsert",' + _KEY + ',"set":{"dec":1.5},"set":{"dec":1E-500}}',
        BOTH_REJECT,
    ),
    (
        "a point under an escaped name",
        '{"op":"upsert",' + _KEY + ',"set":{"d\\u0065c":1.5}}',
        NOT_READ_BY_JVM,
    ),
]


@pytest.mark.parametrize(
    ("what", "event", "expect"), LOCATION_CASES, ids=[c[0] for c in LOCATION_CASES]
)
def test_where_the_jvm_decoder_reads_a_token(
    what: str, event: str, expect: str, located: dict[str, tuple[Outcome, Outcome]]
) -> None:
    python, jvm = located[what]
    if expect == SAME:
        assert _same(jvm, python), (python, jvm)
    elif expect == BOTH_REJECT:
        assert python[0] == jvm[0] == "rejected", (python, jvm)
    else:  # the Python decoders read the name; the JVM decoder does not guess
        assert python == ("stored", decimal.Decimal("1.500")), python
        assert jvm == ("rejected", f"column 'dec': {NOT_READ} 'dec' of 'set'"), jvm


@pytest.fixture(scope="module")
def located(spark: SparkSession) -> dict[str, tuple[Outcome, Outcome]]:
    """The location cases decoded by both: what -> (Python decoders, JVM decoder)."""
    messages = [event.encode() for _, event, _ in LOCATION_CASES]
    columns = ["dec"] * len(messages)
    python = _python(messages, SCHEMA, columns)
    jvm = _jvm(spark, messages, SCHEMA, columns)
    return {c[0]: (p, j) for c, p, j in zip(LOCATION_CASES, python, jvm, strict=True)}
