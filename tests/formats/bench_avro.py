"""Micro-benchmark of the ``debezium-avro`` decoder against the JSON decoder and fastavro.

Run with ``python -m tests.formats.bench_avro [--rows N] [--runs R]``. Starts the test
kit's schema registry (Apicurio), registers the envelope schema of the ten-column table
of :mod:`tests.formats.bench_rowv2`, and decodes the same change events (``u`` events with
full rows, Debezium's MicroTimestamp/Date/Decimal encodings) as:

- ``avro``: :class:`DebeziumAvroDecoder` (the columnar reader), into a ChangeBatch;
- ``fastavro-loop``: fastavro's ``schemaless_reader`` per message (the floor of a
  per-record decoder: dicts only, no columns, no checks);
- ``fastavro-arrow``: the same loop, then the ``after`` rows into Arrow columns;
- ``json-envelope`` / ``json``: :class:`DebeziumDecoder` on the same events in Debezium
  JSON, with and without the schema envelope.

Prints events/s per decoder (median of the runs). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import fastavro
import pyarrow as pa

from cdc_sink.formats.debezium import DebeziumDecoder, encode_debezium
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder
from cdc_sink_testkit.registry import LocalRegistry
from tests.avro.connect import avro_datum, avro_schema
from tests.formats.bench_rowv2 import SCHEMA, random_row


def events(rows: int, distinct: int = 20_000, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """(JSON with envelope, JSON without) of ``distinct`` events, repeated to ``rows``."""
    rnd = random.Random(seed)
    out = []
    for i in range(distinct):
        row = {"id": rnd.randrange(-(2**40), 2**40), **random_row(rnd, i)}
        env = encode_debezium("u", None, row, SCHEMA, envelope=True, source_ts_ms=1718000000000 + i)
        bare = encode_debezium("u", None, row, SCHEMA, envelope=False, source_ts_ms=1718000000000)
        out.append((env, bare))
    return [out[i % distinct] for i in range(rows)]


def avro_values(registry: LocalRegistry, enveloped: list[bytes]) -> tuple[list[bytes], Any]:
    """The events in Confluent's wire format, the schema registered in ``registry``."""
    connect = json.loads(enveloped[0])["schema"]
    schema = avro_schema(connect)
    sid = registry.register("bench-avro-value", schema)
    parsed = fastavro.parse_schema(schema)
    header = b"\x00" + sid.to_bytes(4, "big")
    cache: dict[bytes, bytes] = {}
    out = []
    for e in enveloped:
        if e not in cache:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, avro_datum(connect, json.loads(e)["payload"]))
            cache[e] = header + buf.getvalue()
        out.append(cache[e])
    return out, parsed


def fastavro_loop(values: pa.BinaryArray, parsed: Any, columns: bool) -> int:
    """fastavro's reader per message (after its 5-byte header); optionally the rows."""
    rows = []
    for v in values.to_pylist():
        rec = fastavro.schemaless_reader(io.BytesIO(v[5:]), parsed, None)
        rows.append(rec["after"])
    if columns:
        table = pa.Table.from_pylist(rows)
        return table.num_rows
    return len(rows)


def timed(fn: Callable[[], int], runs: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    evs = events(args.rows)
    with LocalRegistry() as registry:
        avro, parsed = avro_values(registry, [e for e, _ in evs])
        avro_arr = pa.array(avro, pa.binary())
        env_arr = pa.array([e for e, _ in evs], pa.binary())
        bare_arr = pa.array([b for _, b in evs], pa.binary())
        adec = DebeziumAvroDecoder(registry_url=registry.url)
        jdec = DebeziumDecoder()
        check = adec.decode_with_meta(avro_arr, SCHEMA)
        assert len(check.rejects) == 0 and len(check.batch) == args.rows, check.rejects.reasons[:3]
        cases: dict[str, Callable[[], int]] = {
            "avro": lambda: len(adec.decode_with_meta(avro_arr, SCHEMA).batch),
            "fastavro-loop": lambda: fastavro_loop(avro_arr, parsed, False),
            "fastavro-arrow": lambda: fastavro_loop(avro_arr, parsed, True),
            "json-envelope": lambda: len(jdec.decode_with_meta(env_arr, SCHEMA).batch),
            "json": lambda: len(jdec.decode_with_meta(bare_arr, SCHEMA).batch),
        }
        sizes = {
            "avro": avro_arr.nbytes,
            "json-envelope": env_arr.nbytes,
            "json": bare_arr.nbytes,
        }
        print(
            f"{args.rows} events; bytes/event: "
            + ", ".join(f"{k} {v / args.rows:.0f}" for k, v in sizes.items())
        )
        for name, fn in cases.items():
            med, times = timed(fn, args.runs)
            runs = " / ".join(f"{args.rows / t:,.0f}" for t in times)
            print(f"{name:15s} {args.rows / med:12,.0f} events/s (median; runs: {runs})")


if __name__ == "__main__":
    main()
