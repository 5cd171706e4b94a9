"""The JVM decoder of native JSON (``json_decoder="jvm"``, Spark's ``from_json``) gates
``{"op": "truncate"}`` as the Python decoder does: rejected with the same reason unless
``allow_truncate``. (The Python paths: tests/formats/test_truncate_gate.py.)"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import pytest

from cdc_sink.formats import get_decoder
from cdc_sink.formats.native_json import TRUNCATE_REFUSED
from cdc_sink.spark.decode import decode_native_json
from tests.formats.support import binary
from tests.formats.test_truncate_gate import MESSAGES, SCHEMA, TRUNCATES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _jvm_reasons(spark: SparkSession, allow_truncate: bool) -> tuple[list[str], dict[int, str]]:
    """The ``__op`` of every record and the ``__reason`` of the refused ones, by offset."""
    at = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    rows = [(v, "t", 0, i, at) for i, v in enumerate(MESSAGES)]
    df = spark.createDataFrame(
        rows, "value binary, topic string, partition int, offset bigint, timestamp timestamp"
    )
    out = decode_native_json(df, SCHEMA, allow_truncate=allow_truncate).toArrow()
    offsets = out.column("__offset").to_pylist()
    reasons = out.column("__reason").to_pylist()
    ops = [op for _, op in sorted(zip(offsets, out.column("__op").to_pylist(), strict=True))]
    return ops, {o: r for o, r in zip(offsets, reasons, strict=True) if r is not None}


@pytest.mark.parametrize("allow_truncate", [False, True])
def test_the_jvm_decoder_gates_truncates_as_the_python_decoder(
    spark: SparkSession, allow_truncate: bool
) -> None:
    ops, jvm = _jvm_reasons(spark, allow_truncate)
    _, rejects = get_decoder("json", allow_truncate=allow_truncate).decode(binary(MESSAGES), SCHEMA)
    assert jvm == rejects.as_dict()
    assert jvm == ({} if allow_truncate else {i: TRUNCATE_REFUSED for i in TRUNCATES})
    assert [i for i, op in enumerate(ops) if op == "truncate"] == TRUNCATES
