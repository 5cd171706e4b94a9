"""Driver mode splits each decoded Arrow batch by bucket as it arrives, then joins the
pieces per bucket (``cdc_sink.spark._driver``). The result must be exactly what joining
the pieces first and splitting the whole micro-batch gives: the same events per bucket in
the same order with the same positions, the same rejects, op counts and producer times.
No Spark needed: the pieces are decoded here, as the driver does."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.batch import ChangeBatch
from cdc_sink.formats import TS_MISSING, get_decoder
from cdc_sink.schema import TableSchema
from cdc_sink.spark._batch import op_counts
from cdc_sink.spark._driver import _Joined, _Piece
from tests.fixtures import ID_A_B_SEQ


def _schema(buckets: int) -> TableSchema:
    return TableSchema.from_dict({**ID_A_B_SEQ, "num_buckets": buckets})


def _message(rng: random.Random, i: int) -> bytes:
    r = rng.random()
    if r < 0.03:
        return b'{"op": "upsert", "key": '  # malformed: refused by the decoder
    if r < 0.05:
        return json.dumps({"op": "truncate"}).encode()
    event: dict[str, Any] = {
        "op": rng.choice(["insert", "upsert", "update", "delete"]),
        "key": {"id": rng.randrange(50)},
        "seq": i,
    }
    if event["op"] != "delete":
        event["set"] = {"a": i} if rng.random() < 0.5 else {"b": f"s{i}", "a": None}
    if rng.random() < 0.5:
        event["ts_ms"] = 1_700_000_000_000 + i
    return json.dumps(event).encode()


@pytest.mark.parametrize("buckets", [1, 3, 8])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_split_pieces_join_like_the_whole_batch_split(buckets: int, seed: int) -> None:
    schema = _schema(buckets)
    rng = random.Random(seed)
    sizes = [rng.randrange(0, 60) for _ in range(7)]
    values = [_message(rng, i) for i in range(sum(sizes))]
    kafka_ms = np.arange(len(values), dtype=np.int64) + 1_600_000_000_000
    raw = pa.table({"value": pa.array(values, pa.binary()), "__kafka_ms": kafka_ms})
    dec = get_decoder("json", allow_truncate=True)
    starts = np.cumsum([0, *sizes[:-1]]).tolist()
    decoded = [
        dec.decode_with_meta(
            raw.column("value").combine_chunks().slice(s, n),
            schema,
            position=np.arange(n, dtype=np.int64),
        )
        for s, n in zip(starts, sizes, strict=True)
    ]
    joined = _Joined.of([(s, _Piece.of(d)) for s, d in zip(starts, decoded, strict=True)], raw)

    whole = ChangeBatch.concat(
        [
            replace(d.batch, position=d.batch.positions + s)
            for s, d in zip(starts, decoded, strict=True)
        ]
    )
    expected = sorted(whole.split_by_bucket().items())
    assert [b for b, _ in joined.parts] == [b for b, _ in expected]
    for (_, got), (_, want) in zip(joined.parts, expected, strict=True):
        assert got.to_arrow().equals(want.to_arrow())
        assert got.positions.tolist() == want.positions.tolist()
    assert joined.events == len(whole)
    assert joined.ops == op_counts(whole)
    assert sorted(joined.refused.as_dict().items()) == sorted(
        (int(p) + s, r)
        for s, d in zip(starts, decoded, strict=True)
        for p, r in zip(d.rejects.positions, d.rejects.reasons, strict=True)
    )
    own = np.concatenate(
        [
            np.full(len(d.batch), TS_MISSING, np.int64) if d.ts_ms is None else d.ts_ms
            for d in decoded
        ]
    )
    want_ts = np.where(own != TS_MISSING, own, kafka_ms[whole.positions])
    assert joined.ts.tolist() == want_ts.tolist()
    assert len(joined.refused) and whole.has_truncate  # the cases that need care occur
