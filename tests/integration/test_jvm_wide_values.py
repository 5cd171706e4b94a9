"""The JVM decode of native JSON (``from_json``, ``json_decoder="jvm"``) on the values of
``tests/formats/test_wide_values.py``: each is rejected naming its column, or stored
exactly as the Python decoders store it, except where the JVM path cannot tell.

``from_json`` reads ``set`` as ``map<string,string>``, and Jackson turns a number with a
point or an exponent into a double before Spark sees its text: ``1e400`` arrives as
``Infinity``, ``1E-500`` as ``0.0``, 38 nines after the point as ``1.0``. Those cases
(:data:`JVM_CANNOT_TELL`) are skipped here and named in docs/design-notes.md; so are the
forms the JVM path never took (day and microsecond numbers, text with blanks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from cdc_sink.spark._batch import to_change_batch
from cdc_sink.spark.decode import decode_native_json
from tests.formats.test_wide_values import JSON_CASES, REJECT, SCHEMA, Case, _json_event

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

JVM_CANNOT_TELL = {
    ("f64", "1e400"),  # Jackson: Infinity
    ("f64", "-1e400"),
    ("f64", "1.8e308"),
    ("f32", "1e400"),
    ("dec", "1E-500"),  # Jackson: 0.0
    ("wide", "9" * 38 + ".000"),  # Jackson: 1.0E38
    ("frac", "0." + "9" * 38),  # Jackson: 1.0
    ("frac", "-0." + "9" * 38),
    ("dec", '" 1"'),  # Spark's cast trims blanks
}
"""Values whose text the JVM path never sees (a double of it instead), or forms it
reads more loosely than the Python decoders."""


def _jvm_case(c: Case) -> bool:
    if (c.column, c.text) in JVM_CANNOT_TELL:
        return False
    # day and microsecond numbers: the JVM path takes ISO text only
    return not (c.column in ("day", "at") and not str(c.text).startswith('"'))


CASES = [c for c in JSON_CASES if _jvm_case(c)]


def test_jvm_decode_rejects_or_stores_exactly(spark: SparkSession) -> None:
    rows = [
        (_json_event(c), "t", 0, i, pa.scalar(0, pa.timestamp("ms")).as_py())
        for i, c in enumerate(CASES)
    ]
    df = spark.createDataFrame(
        rows, "value binary, topic string, partition int, offset long, timestamp timestamp"
    )
    wire = decode_native_json(df, SCHEMA).orderBy("__offset").toArrow()
    batch, rejects, _ = to_change_batch(wire, SCHEMA)
    reasons = rejects.as_dict()
    stored = {p: i for i, p in enumerate(batch.positions.tolist())}
    wrong: list[tuple[str, Any]] = []
    for pos, c in enumerate(CASES):
        cid = SCHEMA.column(c.column).id
        if c.want is REJECT:
            if pos not in reasons or f"'{c.column}'" not in reasons[pos]:
                got = batch.values[cid][stored[pos]].as_py() if pos in stored else None
                wrong.append((str(c), got))
            continue
        got = batch.values[cid][stored[pos]].as_py() if pos in stored else reasons.get(pos)
        if got != c.want or type(got) is not type(c.want):
            wrong.append((str(c), got))
    assert not wrong, wrong
