"""The chaos suite's reader process: reads versions while the job is killed and restarted.

Usage::

    python tests/chaos/reader.py <table path or URL> <output .jsonl> <stop file>

(a table on an object store: its options as JSON in ``$CHAOS_STORAGE_OPTIONS``)

Until ``<stop file>`` exists, it reads the latest version and a random retained older
one, over and over (reopening the table now and then, as a new reader would), and
appends one line per read to the output::

    {"v": 12, "digest": "<sha256 of the rows sorted by key>", "rows": 340}
    {"error": "VersionNotFound: ..."}          a read that failed: fine when GC took the
                                               version or the table is not created yet,
                                               a failure of the check for anything else

The parent checks afterwards that a version always reads the same rows (repeatable
reads) and that they are the rows of the reference model at that version's offsets.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pyarrow as pa

from cdc_sink.table import Table, open_table


def rows_digest(table: pa.Table, keys: list[str]) -> str:
    """SHA-256 of ``table``'s rows in key order (one Arrow IPC stream)."""
    if table.num_rows:
        table = table.sort_by([(k, "ascending") for k in keys])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table.combine_chunks())
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def _read_one(table: Table, version: int) -> dict[str, object]:
    data = table.read(version=version)
    keys = list(table.schema_at(version).primary_key)
    return {"v": version, "digest": rows_digest(data, keys), "rows": data.num_rows}


def run(path: str, out_path: str, stop_file: str, *, seed: int = 0) -> None:
    """The read loop (see the module docstring)."""
    rng = random.Random(seed)
    storage = json.loads(os.environ.get("CHAOS_STORAGE_OPTIONS", "{}"))  # an object store's
    table: Table | None = None
    reads = 0
    with open(out_path, "a", encoding="utf-8") as out:
        while not os.path.exists(stop_file):
            try:
                if table is None or reads % 20 == 0:
                    table = open_table(path, storage_options=storage or None)
                latest = table.version
                older = rng.randint(table.oldest_version, latest)
                for v in (latest, older):
                    out.write(json.dumps(_read_one(table, v)) + "\n")
                reads += 1
                time.sleep(0.05)  # leave the CPU to the job: this is a reader, not a load
            except Exception as exc:  # reported; the parent decides what is a failure
                out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
                table = None
                time.sleep(0.2)  # the table may not exist yet
            out.flush()


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], sys.argv[3])
