"""Page codecs benchmark (issue 11): bytes and CPU of a snapshot page blob per codec, with
and without the byte stream split of fixed-width values (cdc_sink.storage.byte_split).

Data: the peer benchmark's bulk load (benchmarks/peers/workload.py: ``id``, 8 int64,
5 float64, 3 string, 2 decimal128(18, 2), 1 timestamp column; seeded), --rows rows, each
column one page. For each codec (none, lz4, zstd), each column is encoded as a page blob
the way cdc_sink writes it (``pages.page_blob``: split when compressed) and as a plain
Arrow IPC blob of the same array with the same codec (what cdc_sink wrote before the
split), and decoded with ``pages.page_array``; the decoded page must equal the column.
Times are CPU seconds of the process (Arrow compresses a page's buffers in its own
threads), the best of --repeat, summed over the columns.

Run:  .venv/bin/python benchmarks/page_codecs.py [--rows 1000000] [--repeat 3]
      [--seed 11] [--per-column]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))

from workload import Model

from cdc_sink.storage.pages import PAGE_CODECS, PageCompression, page_array, page_blob


def plain_blob(arr: pa.Array, codec: PageCompression) -> pa.Buffer:
    """The page blob without the split: one Arrow IPC stream, body compressed."""
    sink = pa.BufferOutputStream()
    batch = pa.RecordBatch.from_arrays([arr], names=["v"])
    with pa.ipc.new_stream(
        sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression=codec)
    ) as w:
        w.write_batch(batch)
    return sink.getvalue()


def best(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """The least CPU time of ``repeat`` calls, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--per-column", action="store_true")
    args = ap.parse_args()
    table = Model(args.rows, args.rows + 1, np.random.default_rng(args.seed)).table()
    columns = [table.column(c).combine_chunks() for c in table.column_names]
    print(f"{args.rows:,} rows x {len(columns)} columns, {table.nbytes / 1e6:.1f} MB in memory")
    print("| codec | split | MB | encode, CPU s | decode, CPU s |")
    print("|---|---|---|---|---|")
    for codec in PAGE_CODECS:
        for split, encode in (("no", plain_blob), ("yes", page_blob)):
            if codec is None and split == "yes":
                continue  # an uncompressed page is never split
            size = enc_s = dec_s = 0.0
            for name, arr in zip(table.column_names, columns, strict=True):
                e, blob = best(functools.partial(encode, arr, codec), args.repeat)
                assert isinstance(blob, pa.Buffer)
                d, back = best(functools.partial(page_array, blob), args.repeat)
                assert isinstance(back, pa.Array) and back.equals(arr), name
                size, enc_s, dec_s = size + blob.size, enc_s + e, dec_s + d
                if args.per_column:
                    print(
                        f"  {codec} split={split} {name}: {blob.size / 1e6:.2f} MB,"
                        f" encode {e * 1e3:.0f} ms, decode {d * 1e3:.0f} ms"
                    )
            print(f"| {codec or 'none'} | {split} | {size / 1e6:.1f} | {enc_s:.3f} | {dec_s:.3f} |")


if __name__ == "__main__":
    main()
