"""How far one operation walks through the package: modules visited, calls into another
module ("climbs") and returns to another module.

A structural measure, not a speed one: it traces (``sys.setprofile``) the Python calls
of one operation on a small table and counts, among cdc_sink's modules only,

* rooms: the distinct modules whose code runs;
* climbs: calls from one module's code into another module's;
* returns: returns from one module's code to another module's caller.

Operations: ``prepare`` (one batch's ``Transaction.prepare`` over 4 buckets, with a WAL
segment per bucket), ``commit`` (its ``Transaction.commit``), ``changes`` (a cold
``Table.changes`` of one version, from a freshly opened table).

Run:  .venv/bin/python benchmarks/walks.py [--json out.json]
(against another checkout: ``PYTHONPATH=<checkout> .venv/bin/python benchmarks/walks.py``)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from types import FrameType
from typing import Any

import cdc_sink

SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "a", "type": "string"},
        {"name": "b", "type": "int64"},
    ],
    "primary_key": ["id"],
    "num_buckets": 4,
}


def _events(start: int, n: int) -> list[dict[str, Any]]:
    return [
        {"op": "upsert", "key": {"id": k}, "set": {"a": f"v{k}", "b": k}}
        for k in range(start, start + n)
    ]


def _module(frame: FrameType | None) -> str | None:
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name == "cdc_sink" or name.startswith("cdc_sink."):
            return str(name)
        frame = frame.f_back
    return None


def walk(fn: Callable[[], Any]) -> dict[str, Any]:
    """Rooms, climbs and returns of ``fn()`` among cdc_sink's modules."""
    rooms: set[str] = set()
    counts = {"climbs": 0, "returns": 0}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        here = frame.f_globals.get("__name__", "")
        if not (here == "cdc_sink" or here.startswith("cdc_sink.")):
            return
        rooms.add(here)
        other = _module(frame.f_back)
        if other is not None and other != here:
            counts["climbs" if event == "call" else "returns"] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return {"rooms": len(rooms), **counts, "modules": sorted(rooms)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures (and the modules) here")
    args = ap.parse_args()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        t = cdc_sink.create_table(f"{d}/t", SCHEMA)
        t.apply(_events(0, 1000))
        txn = t.transaction(app_id="walk", batch_id=1)
        from cdc_sink.table import Table  # noqa: F401  (the facade is loaded already)

        batch, _ = _batch(t, txn)
        parts = sorted(batch.split_by_bucket().items())
        out["prepare"] = walk(lambda: txn.prepare(parts))
        out["commit"] = walk(lambda: txn.commit(events=len(batch)))
        cold = cdc_sink.open_table(f"{d}/t")
        out["changes"] = walk(lambda: cold.changes(1, 2))
    for name, w in out.items():
        print(
            f"{name:8s} rooms {w['rooms']:3d}  climbs {w['climbs']:4d}  returns {w['returns']:4d}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


def _batch(t: Any, txn: Any) -> Any:
    """The next batch's events as a ChangeBatch of the transaction's schema."""
    import importlib

    for name in ("cdc_sink.batch", "cdc_sink.batch"):  # the module's name before and after
        try:
            mod = importlib.import_module(name)
            break
        except ImportError:
            continue
    return mod.ChangeBatch.from_events(_events(500, 1000), txn.schema)


if __name__ == "__main__":
    main()
