"""Micro-benchmark of the JSON decoders (native ``json`` and ``debezium``), median of runs.

Run with ``python -m tests.formats.bench_json [--rows N] [--runs R] [--format F]``. Uses the
ten-column schema of :mod:`tests.formats.bench_rowv2`. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from cdc_sink.batch import ChangeBatch
from cdc_sink.formats import Decoded, Decoder, _jsonscan
from cdc_sink.formats.debezium import DebeziumDecoder, encode_debezium
from cdc_sink.formats.native_json import JsonDecoder, encode_json
from cdc_sink.schema import TableSchema
from tests.formats.bench_rowv2 import SCHEMA, random_row


def make_values(fmt: str, rows: int, *, distinct: int = 20_000, seed: int = 7) -> pa.BinaryArray:
    """``rows`` message values of format ``fmt``: ``distinct`` events repeated."""
    rnd = random.Random(seed)
    encoded = []
    for i in range(distinct):
        key = {"id": rnd.randrange(-(2**40), 2**40)}
        row = random_row(rnd, i)
        if fmt == "json":
            encoded.append(
                encode_json(
                    {"op": "upsert", "key": key, "set": row, "ts_ms": 1_718_000_000_000 + i}
                )
            )
        else:
            encoded.append(
                encode_debezium(
                    "u",
                    None,
                    {**key, **row},
                    SCHEMA,
                    envelope=fmt == "debezium-envelope",
                    source_ts_ms=1_718_000_000_000 + i,
                )
            )
    reps = -(-rows // distinct)
    return pa.array((encoded * reps)[:rows], pa.binary())


class PythonJsonBaseline(Decoder):
    """Reference point, not a decoder to use: ``json.loads`` per event + from_events."""

    name = "json"

    def decode_with_meta(
        self,
        values: pa.BinaryArray | pa.LargeBinaryArray,
        schema: TableSchema,
        *,
        position: np.ndarray | None = None,
    ) -> Decoded:
        events = [json.loads(v) for v in values.to_pylist()]
        batch, rejects = ChangeBatch.from_events(events, schema, position=position)
        return Decoded(batch, rejects)


DECODERS: dict[str, Callable[[], Decoder]] = {
    "python-json-baseline": PythonJsonBaseline,
    "json": JsonDecoder,
    "json-nostrict": lambda: JsonDecoder(strict=False),
    "debezium": DebeziumDecoder,
    "debezium-envelope": DebeziumDecoder,
}


def main() -> None:
    """Prints decode throughput in rows/s (median of the runs) per format."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--format",
        choices=sorted(DECODERS),
        action="append",
        help="repeatable; default: every format but the Python baseline",
    )
    parser.add_argument(
        "--scan",
        choices=["compiled", "numpy"],
        default="compiled",
        help="the structural scan: the compiled pass (the default when built) or numpy alone",
    )
    args = parser.parse_args()
    if args.scan == "numpy":
        _jsonscan._cscan = None
    elif _jsonscan._cscan is None:
        parser.error("the compiled scan is not built (pip install -e . with a C compiler)")
    default = [f for f in DECODERS if f != "python-json-baseline"]
    for fmt in args.format or default:
        values = make_values(
            fmt.removesuffix("-nostrict").removeprefix("python-").removesuffix("-baseline"),
            args.rows,
        )
        decoder = DECODERS[fmt]()
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            batch, rejects = decoder.decode(values, SCHEMA)
            times.append(time.perf_counter() - t0)
            assert len(batch) == args.rows and len(rejects) == 0, rejects.reasons[:3]
        med = statistics.median(times)
        print(
            f"{fmt} decode ({args.scan} scan): {args.rows} events x 10 columns, "
            f"{values.nbytes / args.rows:.0f} B/event; median {med:.3f} s of {args.runs}"
            f" -> {args.rows / med:,.0f} events/s"
        )


if __name__ == "__main__":
    main()
