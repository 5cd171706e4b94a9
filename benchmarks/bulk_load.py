"""Bulk load and cold read of the peer benchmark's table, for before/after comparisons.

Usage::

    [PYTHONPATH=<other checkout>] .venv/bin/python benchmarks/bulk_load.py
        [--data /tmp/cdc_bulk_data] [--rows 1000000] [--batches 2] [--table /tmp/cdc_bulk_t]

Loads ``load.arrow`` of the peer workload (generated into ``--data`` if missing: 1M
rows x 20 columns, seed 11, as ``benchmarks/peers.py``) into a new one-bucket table
with default options, applies ``--batches`` micro-batches of 50,000 events, then opens
the table again and reads the version after the last batch. Prints one JSON line:
wall and CPU seconds (``time.process_time``) of the load and of the read, rows read
and bytes on disk. The read runs in the same process as the load (its allocator is
warm), so it is cheaper than ``peers.py``'s cold read in a fresh process; use it to
compare two versions of the code, alternately, not against the peers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))

from workload import generate, read_ipc  # noqa: E402


def main() -> None:
    """Runs one load and one read (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/cdc_bulk_data")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--table", default=f"/tmp/cdc_bulk_t_{os.getpid()}")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.data, "expected.json")):
        generate(args.data, args.rows, max(args.batches, 1), 50_000, 1, 11)
    from cdc_sink_worker import CdcSink

    import cdc_sink

    load = read_ipc(os.path.join(args.data, "load.arrow"))
    shutil.rmtree(args.table, ignore_errors=True)
    try:
        s = CdcSink(args.table)
        t0, c0 = time.perf_counter(), time.process_time()
        s.load(load)
        load_s, load_cpu = time.perf_counter() - t0, time.process_time() - c0
        v = 1
        for i in range(args.batches):
            v = s.apply(read_ipc(os.path.join(args.data, f"batch_{i:03d}.arrow")))
        s.close()
        r = CdcSink(args.table)
        t0, c0 = time.perf_counter(), time.process_time()
        got = r.read(v)
        read_s, read_cpu = time.perf_counter() - t0, time.process_time() - c0
        disk = sum(
            os.path.getsize(os.path.join(p, f)) for p, _, fs in os.walk(args.table) for f in fs
        )
        print(
            json.dumps(
                {
                    "code": os.path.dirname(os.path.dirname(os.path.abspath(cdc_sink.__file__))),
                    "load_s": round(load_s, 2),
                    "load_cpu_s": round(load_cpu, 2),
                    "read_s": round(read_s, 2),
                    "read_cpu_s": round(read_cpu, 2),
                    "rows": got.num_rows,
                    "disk_mb": round(disk / 2**20),
                    "load_avg": round(os.getloadavg()[0], 1),
                }
            )
        )
    finally:
        shutil.rmtree(args.table, ignore_errors=True)


if __name__ == "__main__":
    main()
