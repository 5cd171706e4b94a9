"""Applies micro-batches of the e2e workload to a new table in one process, one line each.

The events of ``benchmarks/e2e.py`` (``--keys`` base inserts, then ``--batches`` batches
of ``--events`` events: 90% partial updates of 2 of 10 columns, 10% inserts), decoded
before the timer, applied with ``Table.apply`` (4 buckets, WAL segments, lz4). Prints each
batch's apply seconds, then pyarrow's allocator and the process's minor page faults: the
measurement behind ``cdc_sink.runtime.arrow_pool``'s choice (compare
``ARROW_DEFAULT_MEMORY_POOL=mimalloc|jemalloc|system``) and behind
``TableOptions.prepare_threads`` (compare ``--prepare-threads 1|2``).

Run::

    NUMPY_MADVISE_HUGEPAGE=0 [ARROW_DEFAULT_MEMORY_POOL=jemalloc] \\
        .venv/bin/python benchmarks/apply_batches.py [--batches 8] [--events 200000] \\
        [--prepare-threads N]
"""

from __future__ import annotations

import resource
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa
from e2e import (
    SCHEMA,
    base_inserts,
    encode_events,
    workload_parser,
)  # benchmarks/ is sys.path[0] when run

from cdc_sink.formats import get_decoder
from cdc_sink.table import TableOptions, create_table


def main() -> None:
    ap = workload_parser(__doc__, events=200_000)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--format", choices=("json", "rowv2"), default="rowv2")
    ap.add_argument(
        "--prepare-threads",
        type=int,
        default=None,
        help="TableOptions.prepare_threads (default: one per CPU)",
    )
    args = ap.parse_args()
    dec = get_decoder(args.format)
    rng = np.random.default_rng(1)

    def decoded(msgs: list[tuple[bytes, bytes]]) -> object:
        batch, rejects = dec.decode(pa.array([v for _, v in msgs], pa.binary()), SCHEMA)
        assert not len(rejects)
        return batch

    base = decoded(base_inserts(args.keys, args.format))
    batches = [
        decoded(
            encode_events(
                args.events,
                args.keys,
                args.keys + i * args.events,
                1 + i * args.events,
                rng,
                None,
                args.format,
            )
        )
        for i in range(args.batches)
    ]
    work = tempfile.mkdtemp(prefix="cdc_apply_batches_")
    try:
        options = TableOptions(prepare_threads=args.prepare_threads)
        table = create_table(f"{work}/t", SCHEMA, options=options)
        table.apply(base)  # type: ignore[arg-type]
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        times = []
        for b in batches:
            t0 = time.perf_counter()
            table.apply(b)  # type: ignore[arg-type]
            times.append(time.perf_counter() - t0)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        print(
            f"apply s per batch of {args.events:,}: "
            + " ".join(f"{t:.3f}" for t in times)
            + f"; pyarrow pool {pa.default_memory_pool().backend_name}; "
            f"minor faults while applying {faults:,}; "
            f"prepare threads {options.threads_for(SCHEMA.num_buckets)}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
