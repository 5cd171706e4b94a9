"""Micro-benchmark of the fixed cost of one Debezium JSON decode call (issue 48).

A whole-database router decodes each table's events of a micro-batch in a call of its
own (about 250 events a table at 200 tables and 50,000 events a batch), with a new
decoder each call (``get_decoder``). This takes one measured batch of
``benchmarks/many_tables.py``'s workload (its ``Workload``: the documented MySQL
envelope, ``id`` key, two strings, a Connect ``Decimal(12, 2)``, an int32, a
``Timestamp``), decodes one table's events as the router does, and routes the whole
batch (``route``). CPU time (``time.process_time``) per call, median of ``--runs`` runs
of ``--calls`` calls; the machine is shared, so CPU time is the figure to compare.

Run with ``python -m tests.formats.bench_per_call [--tables 200] [--events 50000]
[--calls 20] [--runs 7]``. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from cdc_sink.formats import get_decoder
from cdc_sink.formats.source_schema import schema_from_connect
from cdc_sink.formats.source_tables import route

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from many_tables import Config, Workload  # benchmarks/ is not a package


def cpu_ms(fn: Callable[[], object], calls: int, runs: int) -> tuple[float, list[float]]:
    """Median over ``runs`` of the CPU milliseconds per call of ``fn`` (and each run's)."""
    fn()
    per_run = []
    for _ in range(runs):
        t0 = time.process_time()
        for _ in range(calls):
            fn()
        per_run.append((time.process_time() - t0) / calls * 1e3)
    return statistics.median(per_run), per_run


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tables", type=int, default=200)
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--runs", type=int, default=7)
    args = p.parse_args(argv)
    work = Workload(Config.parse(f"{args.tables}u-t8"), args.events, seed=1)
    work.batch(warm=True)  # the tables' first keys
    batch = work.batch(warm=False)
    one = batch.filter(pc.equal(batch.column("topic"), work.templates[0].topic))
    values = one.column("value").combine_chunks()
    keys = one.column("key").combine_chunks()
    first_value = json.loads(values[0].as_py())
    first_key = json.loads(keys[0].as_py())
    schema = schema_from_connect(first_value["schema"], first_key["schema"], num_buckets=4)
    position = np.arange(len(values), dtype=np.int64)

    def decode() -> object:
        dec = get_decoder("debezium")
        return dec.decode_with_meta(values, schema, position=position, keys=keys)

    all_values = batch.column("value").combine_chunks()
    all_keys = batch.column("key").combine_chunks()
    med, runs = cpu_ms(decode, args.calls, args.runs)
    print(
        f"decode_with_meta, {len(values)} events of one table: {med:.2f} ms CPU a call "
        f"(runs: {' '.join(f'{r:.2f}' for r in runs)})"
    )
    med, runs = cpu_ms(lambda: route("debezium", all_values, all_keys), 1, 3)
    print(
        f"route, {len(all_values)} events of {args.tables} tables: {med:.0f} ms CPU "
        f"(runs: {' '.join(f'{r:.0f}' for r in runs)})"
    )


if __name__ == "__main__":
    main()
