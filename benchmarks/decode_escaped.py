"""Native JSON events as Python's ``json.dumps`` writes them, decoded two ways.

``json.dumps`` (``ensure_ascii``, its default) escapes every non-ASCII character, and
each character outside the BMP (an emoji) as a surrogate pair. Such events need the two
steps Arrow's JSON reader used to do for the decoders: the grammar check of events the
structural scan could not verify (surrogate escapes), and the unescaping of strings.
``compiled`` runs them in the C extension (``_cgrammar.h``, the default); ``arrow`` runs
them through Arrow's JSON reader, as the decoders did before and still do without the
extension. Both decode the same batch (checked). Prints us per event, the median of
``--runs`` passes of each, interleaved.

Run::

    NUMPY_MADVISE_HUGEPAGE=0 .venv/bin/python benchmarks/decode_escaped.py [--events 200000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cdc_sink.formats import _jsonarrow, _jsongrammar, _jsonscan, get_decoder, native_json
from tests.formats.fuzz_decoders import ID_KEY, keyed_schema

SCHEMA = keyed_schema(
    ID_KEY,
    [
        {"name": "name", "type": "string"},
        {"name": "city", "type": "string"},
        {"name": "qty", "type": "int64"},
    ],
)
NAMES = ["Zoë", "José Muñoz", "山田太郎", "Ana 🙂", "plain", "Łukasz", "Ørsted 🚀", "Smith"]
CITIES = ["Kraków", "São Paulo", "東京", "Zürich", "Paris", "Reykjavík"]


def events(n: int) -> pa.Array:
    rng = np.random.default_rng(1)
    names, cities = rng.integers(0, len(NAMES), n), rng.integers(0, len(CITIES), n)
    msgs = []
    for i in range(n):
        new = {"name": NAMES[names[i]], "city": CITIES[cities[i]], "qty": int(i)}
        msgs.append(json.dumps({"op": "upsert", "key": {"id": i}, "set": new}).encode())
    return pa.array(msgs, pa.binary())


def _arrow_check(parts: Any, check: np.ndarray, reasons: np.ndarray) -> None:
    saved, _jsonscan._cscan = _jsonscan._cscan, None
    try:
        _jsongrammar.check_grammar(parts, check, reasons)
    finally:
        _jsonscan._cscan = saved


@contextmanager
def arrow_steps() -> Iterator[None]:
    """The grammar check and the unescaping by Arrow's JSON reader (the scan compiled)."""
    saved = native_json.check_grammar, _jsonarrow._unescape_compiled
    native_json.check_grammar = _arrow_check  # type: ignore[assignment]
    _jsonarrow._unescape_compiled = lambda d, s, e: _jsonarrow._unescape(d, s - 1, e + 1)
    try:
        yield
    finally:
        native_json.check_grammar, _jsonarrow._unescape_compiled = saved


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    assert _jsonscan._cscan is not None, "the C extension is not built (make install)"
    values = events(args.events)
    decoder = get_decoder("json")
    times: dict[str, list[float]] = {"compiled": [], "arrow": []}
    for _ in range(args.runs):
        t, fast = timed(lambda: decoder.decode_with_meta(values, SCHEMA))
        times["compiled"].append(t)
        with arrow_steps():
            t, slow = timed(lambda: decoder.decode_with_meta(values, SCHEMA))
        times["arrow"].append(t)
        assert fast.batch.values.keys() == slow.batch.values.keys()
        for cid, arr in fast.batch.values.items():
            assert arr.equals(slow.batch.values[cid]), cid
        assert len(fast.rejects) == len(slow.rejects) == 0
    for name, ts in times.items():
        print(f"{name:9s} {statistics.median(ts) / args.events * 1e6:.3f} us/event")


if __name__ == "__main__":
    main()
