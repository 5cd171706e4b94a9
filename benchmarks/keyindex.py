"""Key index benchmark: one tablet's KeyIndex alone (cdc_sink/tablet/keyindex.py).

Measures, on one core, with the routing hash (Spark ``xxhash64``) computed beforehand as
a tablet has it from its batch:
  * growth: ``--rows`` random int64 keys inserted in batches of ``--batch`` into an index
    that starts small (every growth rebuilds);
  * bulk insert: the same keys in one insert into an index sized for them (a load);
  * lookup: ``--lookups`` int64 keys, half present;
  * string lookup: as many string keys (5-20 characters) in an index of as many;
  * reload: ``KeyIndex.load`` of the stored row hashes, keys and slots (a snapshot load);
  * flood: ``--flood`` int64 keys computed so that their *unsalted* index hashes share
    the top 16 bits (every one aims at slot 0 of the index they fill), inserted in
    batches of 1,000 (each looked up first, as a tablet's apply does), then looked up
    all at once; with the C extension and without it (numpy places the rows and, in a
    salted index, hashes the keys).

The index is salted with a random seed when this cdc_sink's KeyIndex takes one (the
flood keys then collide only under the unsalted hash); an older KeyIndex is unsalted.
Every phase runs ``--repeat`` times; the medians are printed (and written to ``--json``).

Run:  .venv/bin/python benchmarks/keyindex.py [--rows 2000000] [--lookups 1000000]
      [--flood 20000] [--repeat 5] [--json out.json]
Before/after: PYTHONPATH=<checkout> .venv/bin/python benchmarks/keyindex.py ...
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import secrets
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

import cdc_sink
from cdc_sink.bucketing import spark_xxhash64
from cdc_sink.tablet import keyindex
from cdc_sink.tablet.keyindex import KeyIndex

try:  # the salted hash's module (absent before the salt)
    from cdc_sink.tablet import keyhash
except ImportError:
    keyhash = None

M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (
    0x9E3779B185EBCA87,
    0xC2B2AE3D27D4EB4F,
    0x165667B19E3779F9,
    0x85EBCA77C2B2AE63,
    0x27D4EB2F165667C5,
)
MIX1, MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
SALTED = "seed" in inspect.signature(KeyIndex).parameters


def new_index(capacity: int, seed: int | None = None) -> KeyIndex:
    """An index of int64 keys: salted (with ``seed``, or a random one) where KeyIndex
    takes a seed."""
    if SALTED:
        return KeyIndex([pa.int64()], capacity, seed=secrets.randbits(64) if seed is None else seed)
    return KeyIndex([pa.int64()], capacity)


def _u(x: int) -> np.uint64:
    return np.uint64(x & M64)


def _unshift(x: np.ndarray, r: int) -> np.ndarray:
    """Inverse of ``x ^= x >> r``."""
    y = x.copy()
    s = r
    while s < 64:
        y ^= x >> _u(s)
        s += r
    return y


def _rotr(x: np.ndarray, r: int) -> np.ndarray:
    return (x >> _u(r)) | (x << _u(64 - r))


def unhash(hm: np.ndarray) -> np.ndarray:
    """The int64 keys whose unsalted index hash (splitmix64 of Spark's ``xxhash64`` of one
    long, seed 42) is ``hm``: both are bijections on 64 bits, undone step by step."""
    inv = [_u(pow(c, -1, 1 << 64)) for c in (MIX1, MIX2, P1, P2, P3)]
    with np.errstate(over="ignore"):
        x = _unshift(hm.astype(np.uint64), 31) * inv[1]  # splitmix64 backwards
        x = _unshift(x, 27) * inv[0]
        h = _unshift(x, 30)  # Spark's xxhash64 of the key
        h = _unshift(h, 32) * inv[4]  # XXH64's avalanche backwards
        h = _unshift(h, 29) * inv[3]
        h = _unshift(h, 33)
        h = _rotr((h - _u(P4)) * inv[2], 27) ^ _u(42 + P5 + 8)  # the 8-byte step
        k = _rotr(h * inv[2], 31) * inv[3]
    return k.view(np.int64)


def flood_keys(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` distinct int64 keys whose unsalted index hashes have 16 zero top bits."""
    low = rng.choice(1 << 48, n, replace=False).astype(np.uint64)
    keys = unhash(low)
    arr = pa.array(keys)
    check = keyindex.mix64(np.asarray(spark_xxhash64([arr])))
    assert np.array_equal(check, low), "the inversion does not match the index hash"
    return keys


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def growth(keys: pa.Array, h: np.ndarray, batch: int) -> KeyIndex:
    ix = new_index(1024)
    for lo in range(0, len(keys), batch):
        ix.insert(h[lo : lo + batch], [keys.slice(lo, batch)])
    return ix


def flood(keys: pa.Array, h: np.ndarray) -> tuple[float, float]:
    """Inserts of 1,000 keys (each batch looked up first), then one lookup of all."""
    ix = new_index(1024)
    t0 = time.perf_counter()
    for lo in range(0, len(keys), 1000):
        part, hp = keys.slice(lo, 1000), h[lo : lo + 1000]
        assert (ix.lookup(hp, [part]) < 0).all()
        ix.insert(hp, [part])
    t_insert = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert np.array_equal(ix.lookup(h, [keys]), np.arange(len(keys)))
    return t_insert, time.perf_counter() - t0


def index_round(
    keys: pa.Array, h: np.ndarray, probe: pa.Array, hp: np.ndarray, strs: pa.Array, hs: np.ndarray
) -> dict[str, float]:
    """One repeat of the bulk insert, lookup, reload and string lookup phases."""
    out = {}
    big = new_index(len(keys))
    out["bulk_insert_s"] = timed(lambda: big.insert(h, [keys]))
    out["lookup_s"] = timed(lambda: big.lookup(hp, [probe]))
    reloaded = new_index(1024, big.seed if SALTED else None)  # same seed: stored slots used
    stored = big.row_hashes().copy()
    if SALTED:
        out["reload_s"] = timed(lambda: reloaded.load(stored, [keys], big.slots, seed=big.seed))
    else:
        out["reload_s"] = timed(lambda: reloaded.load(stored, [keys], big.slots))
    sx = (
        KeyIndex([pa.string()], len(strs), seed=secrets.randbits(64))
        if SALTED
        else KeyIndex([pa.string()], len(strs))
    )
    sx.insert(hs, [strs])
    out["string_lookup_s"] = timed(lambda: sx.lookup(hs, [strs]))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    n, q = args.rows, args.lookups
    ints = rng.choice(np.int64(1) << np.int64(62), n + q // 2, replace=False).astype(np.int64)
    keys = pa.array(ints[:n])
    h = np.asarray(spark_xxhash64([keys]))
    probe_vals = np.concatenate([rng.choice(ints[:n], q - q // 2), ints[n:]])
    probe = pa.array(rng.permutation(probe_vals))
    hp = np.asarray(spark_xxhash64([probe]))
    lens = rng.integers(5, 21, q)
    chars = rng.integers(97, 123, int(lens.sum()), dtype=np.uint8).tobytes().decode()
    offs = np.r_[0, np.cumsum(lens)]
    strs = pa.array([chars[offs[i] : offs[i + 1]] + str(i) for i in range(q)])
    hs = np.asarray(spark_xxhash64([strs]))
    fk = pa.array(flood_keys(args.flood, rng))
    hf = np.asarray(spark_xxhash64([fk]))

    times: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        times.setdefault(name, []).append(seconds)

    saved = keyindex._cslots
    # The numpy runs: slots placed and (where salted) keys hashed without the extension.
    modules = [keyindex] + ([keyhash] if keyhash is not None else [])
    for _ in range(args.repeat):
        add("growth_s", timed(lambda: growth(keys, h, args.batch)))
        for name, seconds in index_round(keys, h, probe, hp, strs, hs).items():
            add(name, seconds)
        for placement in ("c", "numpy"):
            for m in modules:
                m._cslots = saved if placement == "c" else None
            try:
                ins, look = flood(fk, hf)
            finally:
                for m in modules:
                    m._cslots = saved
            add(f"flood_insert_{placement}_s", ins)
            add(f"flood_lookup_{placement}_s", look)
    return {
        "cdc_sink": os.path.dirname(cdc_sink.__file__),
        "salted": SALTED,
        "c_placement": saved is not None,
        "machine": f"{platform.machine()} {os.cpu_count()} cores, "
        f"{platform.python_version()}, numpy {np.__version__}, pyarrow {pa.__version__}",
        "load_average": os.getloadavg(),
        "rows": n,
        "lookups": q,
        "flood": args.flood,
        "repeat": args.repeat,
        "median": {k: statistics.median(v) for k, v in times.items()},
        "runs": times,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--lookups", type=int, default=1_000_000)
    ap.add_argument("--flood", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    pa.set_cpu_count(1)
    out = run(args)
    print(f"{out['cdc_sink']}: salted={out['salted']} C placement={out['c_placement']}")
    print(f"{out['machine']}; load average {out['load_average']}")
    for k, v in out["median"].items():
        per = ", ".join(f"{x:.4f}" for x in out["runs"][k])
        print(f"  {k:24s} median {v:.4f} s   ({per})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
