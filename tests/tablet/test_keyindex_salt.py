"""The salted key index (issue 38): a random seed per table, kept in its metadata, reaches
every tablet (created, reopened, reloaded from a snapshot, built in another process), and
keys computed to collide under the unsalted hash spread out under a salted one.

``data/unsalted_v2`` is a table written by cdc_sink before the salt (commit cead0e4, by
``data/make_unsalted_v2.py``): no seed in ``_table.json``, snapshots with unsalted row
hashes and slots, WAL segments after them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.batch import ChangeBatch
from cdc_sink.bucketing import spark_xxhash64
from cdc_sink.engine import core_of
from cdc_sink.errors import WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.storage import snapshot
from cdc_sink.storage.pages import PageLoc, PageReader
from cdc_sink.storage.snapshot import (
    PAGE_FORMAT,
    UNSALTED_PAGE_FORMAT,
    load_snapshot,
    read_manifest,
)
from cdc_sink.table import Table, TableOptions, create_table, open_table
from cdc_sink.tablet import MemTablet, TabletOptions, keyhash, keyindex
from cdc_sink.tablet.keyhash import siphash
from cdc_sink.tablet.keyindex import (
    KeyIndex,
    mix64,
    salted_hash,
    seed_from_json,
    seed_to_json,
)
from tests.tablet.test_keyindex import KEY_TYPES

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parent / "data" / "unsalted_v2"
PLACEMENTS = ["c", "numpy"]
#: fixed seeds: the flood tests' outcome does not depend on the draw
FLOOD_SEEDS = [0x0123_4567_89AB_CDEF, 0xFEDC_BA98_7654_3210, 1]
SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "qty", "type": "int64"},
    ],
    "primary_key": ["id"],
    "num_buckets": 2,
}
#: tiny pages, no snapshot unless asked (compact), no bulk snapshot
OPTIONS = TableOptions(page_rows=16, snapshot_every=10**9, compact_every=10**9, bulk_events=10**9)
P1, P2 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F
M64 = (1 << 64) - 1


@contextlib.contextmanager
def placement(kind: str) -> Iterator[None]:
    """Runs the block with the index placing rows and computing salted hashes in C or in
    numpy."""
    saved = keyindex._cslots
    if saved is None:
        pytest.fail("cdc_sink.tablet._cslots is not built (make install builds it)")
    keyindex._cslots = keyhash._cslots = saved if kind == "c" else None
    try:
        yield
    finally:
        keyindex._cslots = keyhash._cslots = saved


def upserts(keys: range | list[int], qty: int = 1) -> list[dict[str, Any]]:
    return [{"op": "upsert", "key": {"id": k}, "set": {"qty": k * qty}} for k in keys]


def table_seed(root: Path) -> Any:
    return json.loads((root / "_table.json").read_text()).get("index_seed")


def manifests(root: Path) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, f), root)
        for d, _, fs in os.walk(root / "_snapshots")
        for f in fs
        if f.endswith(".manifest")
    )


def newest_manifests(root: Path) -> list[str]:
    """The newest snapshot manifest of each bucket."""
    newest: dict[str, str] = {}
    for rel in manifests(root):
        newest[os.path.dirname(rel)] = rel  # names sort by version
    return sorted(newest.values())


def stored_array(root: Path, locs: list[PageLoc]) -> np.ndarray:
    reader = PageReader(str(root))
    return np.concatenate([np.asarray(reader.array(loc)) for loc in locs])


def rows_of(t: Table) -> list[tuple[int, int]]:
    return sorted((r["id"], r["qty"]) for r in t.read().to_pylist())


# ----------------------------------------------------------------------------- the seed
def test_two_tables_get_different_random_seeds_and_their_tablets_use_them(
    tmp_path: Path,
) -> None:
    a = create_table(str(tmp_path / "a"), SCHEMA, options=OPTIONS)
    b = create_table(str(tmp_path / "b"), SCHEMA, options=OPTIONS)
    sa, sb = table_seed(tmp_path / "a"), table_seed(tmp_path / "b")
    assert isinstance(sa, str) and isinstance(sb, str) and sa != sb
    for t, s in ((a, sa), (b, sb)):
        t.apply(upserts(range(40)))
        for bucket in range(2):
            assert core_of(t).tablet(bucket).index.seed == int(s, 16)


def test_the_seed_survives_a_reopen_and_a_snapshot_reload_which_trusts_its_slots(
    tmp_path: Path,
) -> None:
    root = tmp_path / "t"
    t = create_table(str(root), SCHEMA, options=OPTIONS)
    seed = int(table_seed(root), 16)
    t.apply(upserts(range(300)))
    t.compact()  # a snapshot of each bucket, with row hashes and slots
    t.apply(upserts(range(250, 330), qty=2))  # segments after the snapshots
    want = rows_of(t)
    fresh = open_table(str(root))
    assert rows_of(fresh) == want
    state = core_of(fresh)
    for rel in manifests(root):
        m = read_manifest(str(root), rel)
        assert m.index_seed == seed and m.page_format == PAGE_FORMAT == 3
        assert m.index_slots is not None
        tab = load_snapshot(
            str(root),
            m,
            state.schema_of(m.schema_id),
            lambda v, b=m.bucket: state.empty_tablet(b, v),
        )
        assert tab.index.seed == seed
        # Built with the same seed: the stored hashes and slots are used as they are.
        assert np.array_equal(tab.index.slots, stored_array(root, [m.index_slots]))
        keys = tab.index.keys[0].slice(0, tab.index.count)
        assert np.array_equal(tab.index.row_hashes(), salted_hash([keys], seed))
    for b in range(2):  # the tablets the reopened table writes: its snapshot + segments
        assert state.tablet(b).index.seed == seed
    got = fresh.get(list(range(0, 400, 7)))
    assert sorted(got.column("id").to_pylist()) == list(range(0, 330, 7))


_OTHER_PROCESS = textwrap.dedent("""
    import json, sys
    from cdc_sink.engine import core_of
    from cdc_sink.table import open_table
    t = open_table(sys.argv[1])
    t.apply([{"op": "upsert", "key": {"id": k}, "set": {"qty": -k}} for k in range(0, 400, 2)])
    seeds = sorted({core_of(t).tablet(b).index.seed for b in range(2)})
    print(json.dumps(seeds))
""")


def test_a_table_opened_by_another_process_salts_its_tablets_with_the_same_seed(
    tmp_path: Path,
) -> None:
    """As Spark executor tasks do: another process opens the table by its path, builds
    the tablets it prepares from the snapshots and segments, and writes; the writer's
    process then sees the same keys (updates, no duplicates)."""
    root = tmp_path / "t"
    t = create_table(str(root), SCHEMA, options=OPTIONS)
    seed = int(table_seed(root), 16)
    t.apply(upserts(range(300)))
    t.compact()
    out = subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESS, str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [seed]
    want = sorted({**{k: k for k in range(300)}, **{k: -k for k in range(0, 400, 2)}}.items())
    assert rows_of(t) == want
    assert rows_of(open_table(str(root))) == want


def test_an_index_loaded_with_another_seed_is_rebuilt_from_its_keys_not_trusted() -> None:
    keys = pa.array(np.arange(5000, dtype=np.int64) * 31)
    built = KeyIndex([pa.int64()], seed=FLOOD_SEEDS[0])
    built.insert(None, [keys])
    for other in (FLOOD_SEEDS[1], None):
        loaded = KeyIndex([pa.int64()], seed=other)
        loaded.load(built.row_hashes().copy(), [keys], built.slots, seed=FLOOD_SEEDS[0])
        want = (
            mix64(np.asarray(spark_xxhash64([keys])))
            if other is None
            else salted_hash([keys], other)
        )
        assert np.array_equal(loaded.row_hashes(), want)
        assert np.array_equal(loaded.lookup(None, [keys]), np.arange(5000))
        assert not np.array_equal(loaded.slots, built.slots)


def test_a_snapshot_of_another_seed_is_rebuilt_and_the_next_one_records_the_table_seed(
    tmp_path: Path,
) -> None:
    """A manifest whose seed is not the table's (here: the table's metadata names a
    different seed): the tablet rehashes its keys instead of missing every one (updates
    would then make duplicates), and its next snapshot writes row hashes of its own
    seed instead of reusing the old pages."""
    root = tmp_path / "t"
    t = create_table(str(root), SCHEMA, options=OPTIONS)
    t.apply(upserts(range(200)))
    t.compact()
    old = int(table_seed(root), 16)
    new = old ^ 0x5555_5555_5555_5555
    meta = json.loads((root / "_table.json").read_text())
    (root / "_table.json").write_text(json.dumps({**meta, "index_seed": seed_to_json(new)}))
    t2 = open_table(str(root), options=OPTIONS)
    t2.apply(upserts(range(150, 260), qty=3))
    assert rows_of(t2) == sorted({k: k * (3 if k >= 150 else 1) for k in range(260)}.items())
    t2.compact()
    for rel in newest_manifests(root):
        m = read_manifest(str(root), rel)
        assert m.index_seed == new
        tab = core_of(t2).tablet(m.bucket)
        keys = tab.index.keys[0].slice(0, tab.index.count)
        assert np.array_equal(tab.index.row_hashes(), salted_hash([keys], new))
        # Written anew, not the old seed's pages reused: the stored hashes are new's.
        assert np.array_equal(stored_array(root, m.row_hash), salted_hash([keys], new))
    assert rows_of(open_table(str(root))) == rows_of(t2)


def test_seeds_round_trip_through_metadata_and_bad_ones_are_refused(tmp_path: Path) -> None:
    for seed in (0, 1, 2**63, 2**64 - 1, 0x0123_4567_89AB_CDEF):
        text = seed_to_json(seed)
        assert text is not None and len(text) == 16
        assert seed_from_json(text) == seed
    assert seed_to_json(None) is None and seed_from_json(None) is None
    for bad in ("12", "zzzzzzzzzzzzzzzz", 12345, "0x23456789abcdef"):
        with pytest.raises(ValueError, match="16 hex digits"):
            seed_from_json(bad)
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        KeyIndex([pa.int64()], seed=2**64)
    with pytest.raises(TypeError, match="an int or None"):
        KeyIndex([pa.int64()], seed=True)
    root = tmp_path / "t"
    create_table(str(root), SCHEMA, options=OPTIONS)
    meta = json.loads((root / "_table.json").read_text())
    (root / "_table.json").write_text(json.dumps({**meta, "index_seed": "not a seed"}))
    with pytest.raises(WalCorruption, match="16 hex digits"):
        open_table(str(root))


# ----------------------------------------------------------------------------- the hash
#: SipHash-2-4 under the key 00 01 .. 0f (the reference's vectors): of no bytes, and of
#: the 15 bytes 00 01 .. 0e (the example of the SipHash paper)
REFERENCE_KEY = (0x0706050403020100, 0x0F0E0D0C0B0A0908)
REFERENCE = {0: 0x726FDB47DD0E0E31, 15: 0xA129CA6149BE45E5}


@pytest.mark.parametrize("where", PLACEMENTS)
def test_siphash_matches_the_reference_vectors(where: str) -> None:
    with placement(where):
        for length, want in REFERENCE.items():
            data = np.arange(length, dtype=np.uint8)
            got = siphash(*REFERENCE_KEY, data, None, length, 1, rounds=(2, 4))
            assert int(got[0]) == want
            offs = np.array([0, length], dtype=np.int64)
            assert int(siphash(*REFERENCE_KEY, data, offs, 0, 1, rounds=(2, 4))[0]) == want


def test_the_c_and_numpy_hashes_agree_on_every_key_type_and_length() -> None:
    rng = np.random.default_rng(5)
    lens = rng.integers(0, 80, 40_000)  # numpy hashes blocks of 16,384 rows: three
    offs = np.r_[0, np.cumsum(lens)].astype(np.int64)
    data = rng.integers(0, 256, int(offs[-1]), dtype=np.uint8)
    cases: list[list[pa.Array]] = [KEY_TYPES[kind][1](rng.permutation(3000)) for kind in KEY_TYPES]
    cases.append([pa.array([1.5, -0.0, 0.0, float("nan"), None, 2.0], pa.float64())])
    cases.append([pa.array([1, None, 3, None], pa.int64()).slice(1)])
    for seed in FLOOD_SEEDS:
        got = {}
        for where in PLACEMENTS:
            with placement(where):
                got[where] = (
                    siphash(seed, 3, data, offs, 0, len(lens)),
                    siphash(seed, 3, data, None, 7, len(data) // 7),
                    [salted_hash(keys, seed) for keys in cases],
                )
        c, numpy_ = got["c"], got["numpy"]
        assert np.array_equal(c[0], numpy_[0]) and np.array_equal(c[1], numpy_[1])
        for a, b in zip(c[2], numpy_[2], strict=True):
            assert a.dtype == np.uint64 and np.array_equal(a, b)


def test_equal_keys_hash_equal_and_the_seed_decides_the_hash() -> None:
    s = FLOOD_SEEDS[0]
    zeros = salted_hash([pa.array([0.0, -0.0, float("nan"), -float("nan")])], s)
    assert zeros[0] == zeros[1] and zeros[2] == zeros[3] and zeros[0] != zeros[2]
    words = ["a", "", "ü日", "x" * 100]
    h = salted_hash([pa.array(words)], s)
    assert np.array_equal(h, salted_hash([pa.array(words, pa.large_string())], s))
    assert np.array_equal(h, salted_hash([pa.chunked_array([words[:1], words[1:]])], s))
    assert np.array_equal(h[1:3], salted_hash([pa.array(words).slice(1, 2)], s))
    keys = [pa.array(np.arange(1000, dtype=np.int64))]
    by_seed = [salted_hash(keys, seed) for seed in FLOOD_SEEDS]
    assert len({tuple(b.tolist()) for b in by_seed}) == len(FLOOD_SEEDS)
    assert all(len(np.unique(b)) == 1000 for b in by_seed)
    # A key of two columns is not the key of their values in another split.
    two = salted_hash([pa.array(["ab", "a"]), pa.array(["c", "bc"])], s)
    assert two[0] != two[1]


def test_the_compiled_hash_refuses_bad_arguments_instead_of_reading_out_of_bounds() -> None:
    cs = keyhash._cslots
    if cs is None:
        pytest.fail("cdc_sink.tablet._cslots is not built (make install builds it)")
    data = np.zeros(10, np.uint8)
    out = np.empty(3, np.uint64)
    with pytest.raises(ValueError, match="width"):
        cs.siphash(1, 2, 1, 3, data, None, 4, out)  # 12 bytes of rows, 10 of data
    with pytest.raises(ValueError, match="n \\+ 1"):
        cs.siphash(1, 2, 1, 3, data, np.zeros(3, np.int64), 0, out)
    with pytest.raises(ValueError, match="outside the data"):
        cs.siphash(1, 2, 1, 3, data, np.array([0, 4, 11, 11], np.int64), 0, out)
    with pytest.raises(ValueError, match="outside the data"):
        cs.siphash(1, 2, 1, 3, data, np.array([0, 4, 2, 8], np.int64), 0, out)
    with pytest.raises(ValueError, match="rounds"):
        cs.siphash(1, 2, 0, 3, data, None, 1, out)
    with pytest.raises(ValueError, match="uint64"):
        cs.siphash(1, 2, 1, 3, data, None, 1, np.empty(3, np.uint32))


# ----------------------------------------------------------------------------- old tables
def _rows(t: Table) -> list[dict[str, Any]]:
    return sorted(t.read().to_pylist(), key=lambda r: (r["id"], r["name"]))


def test_a_table_written_before_the_salt_reads_the_same_and_keeps_the_unsalted_hash(
    tmp_path: Path,
) -> None:
    root = tmp_path / "old"
    shutil.copytree(FIXTURE, root)
    expected = json.loads((root / "expected.json").read_text())
    t = open_table(str(root))
    assert t.version == expected["version"]
    assert _rows(t) == expected["rows"]
    old_manifests = manifests(root)
    assert old_manifests and all(
        read_manifest(str(root), rel).index_seed is None for rel in old_manifests
    )
    for b in range(2):
        tab = core_of(t).tablet(b)
        assert tab.index.seed is None
        keys = [k.slice(0, tab.index.count) for k in tab.index.keys]
        assert np.array_equal(tab.index.row_hashes(), mix64(np.asarray(spark_xxhash64(keys))))
    some = [{"id": r["id"], "name": r["name"]} for r in expected["rows"][::9]]
    assert len(t.get(some)) == len(some)
    # Updates of its keys find them (no duplicates), and its new snapshots stay readable
    # by the cdc_sink that wrote it: unsalted, page format 2, no seed.
    t.apply([{"op": "upsert", "key": k, "set": {"qty": 0}} for k in some])
    assert len(t.read()) == len(expected["rows"])
    t.compact()
    for rel in set(manifests(root)) - set(old_manifests):
        m = read_manifest(str(root), rel)
        assert m.index_seed is None and m.page_format == UNSALTED_PAGE_FORMAT == 2
        assert b"index_seed" not in (root / rel).read_bytes()
    want = {(r["id"], r["name"]): r["qty"] for r in expected["rows"]}
    want.update({(k["id"], k["name"]): 0 for k in some})
    got = {(r["id"], r["name"]): r["qty"] for r in _rows(open_table(str(root)))}
    assert got == want
    assert table_seed(root) is None


def test_a_table_whose_metadata_has_no_seed_works_unsalted(tmp_path: Path) -> None:
    """The same with a table made here, its seed removed from ``_table.json`` before any
    tablet was built (what a table created before the salt has)."""
    root = tmp_path / "t"
    create_table(str(root), SCHEMA, options=OPTIONS)
    meta = json.loads((root / "_table.json").read_text())
    del meta["index_seed"]
    (root / "_table.json").write_text(json.dumps(meta))
    t = open_table(str(root), options=OPTIONS)
    t.apply(upserts(range(200)))
    t.compact()
    t.apply(upserts(range(100, 250), qty=5))
    want = rows_of(t)
    for rel in manifests(root):
        assert read_manifest(str(root), rel).page_format == UNSALTED_PAGE_FORMAT
    fresh = open_table(str(root))
    assert rows_of(fresh) == want
    assert all(core_of(fresh).tablet(b).index.seed is None for b in range(2))


def test_a_reader_from_before_the_salt_refuses_a_salted_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its newest page format was 2: a salted manifest says 3, which it refuses
    ("upgrade cdc_sink") instead of taking the salted row hashes for unsalted ones."""
    root = tmp_path / "t"
    t = create_table(str(root), SCHEMA, options=OPTIONS)
    t.apply(upserts(range(50)))
    t.compact()
    rel = manifests(root)[0]
    doc = json.loads(read_manifest(str(root), rel).to_json())
    assert doc["page_format"] == 3 > UNSALTED_PAGE_FORMAT and "index_seed" in doc
    monkeypatch.setattr(snapshot, "PAGE_FORMAT", UNSALTED_PAGE_FORMAT)  # the old reader
    with pytest.raises(WalCorruption, match="page format 3, newer"):
        read_manifest(str(root), rel)


# ----------------------------------------------------------------------------- flooding
def colliding_int64_keys(n: int, bits: int) -> np.ndarray:
    """``n`` distinct random int64 keys whose *unsalted* index hashes share their top
    ``bits`` bits (so they share a home slot in any index of up to ``2**bits`` slots),
    found by search: what a producer who knows the unsalted hash can compute."""
    rng = np.random.default_rng(38)
    found: list[np.ndarray] = []
    have = 0
    while have < n:
        cand = rng.integers(-(2**63), 2**63 - 1, 1 << 21, dtype=np.int64)
        home = mix64(np.asarray(spark_xxhash64([pa.array(cand)]))) >> np.uint64(64 - bits)
        hit = cand[home == 0]
        found.append(hit)
        have += len(hit)
    keys = np.unique(np.concatenate(found))[:n]
    assert len(keys) == n
    return keys


def colliding_binary_keys(n: int) -> pa.Array:
    """``n`` distinct 64-byte keys whose unsalted 64-bit hashes (Spark's ``xxhash64``,
    seed 42) are all *equal*: XXH64's first lane accumulator after stripe 1 differs per
    key, and stripe 2's first lane is chosen to bring it back to one value."""
    rng = np.random.default_rng(83)
    acc0 = (42 + P1 + P2) & M64
    inv_p2 = pow(P2, -1, 1 << 64)

    def lane(acc: int, x: int) -> int:
        acc = (acc + x * P2) & M64
        return ((((acc << 31) | (acc >> 33)) & M64) * P1) & M64

    fill = bytes(range(1, 25))
    keys = []
    for x in rng.choice(2**62, n, replace=False).tolist():
        acc1 = lane(acc0, x)
        y = (-acc1 * inv_p2) & M64  # acc1 + y * P2 == 0: one accumulator after stripe 2
        keys.append(x.to_bytes(8, "little") + fill + y.to_bytes(8, "little") + fill)
    arr = pa.array(keys, pa.binary())
    assert len(set(keys)) == n
    return arr


@pytest.mark.parametrize("where", PLACEMENTS)
def test_int64_keys_colliding_unsalted_spread_out_in_a_salted_index(where: str) -> None:
    n, bits = 2000, 12  # 2,000 keys fill an index of 2**12 slots (load 0.49)
    keys = pa.array(colliding_int64_keys(n, bits))
    with placement(where):
        unsalted = KeyIndex([pa.int64()], capacity=16, seed=None)
        for lo in range(0, n, 250):  # growth from 16 slots, as a tablet's batches
            unsalted.insert(None, [keys.slice(lo, 250)])
        assert len(unsalted.slots) == 1 << bits
        st = unsalted.probe_stats()
        assert st.rows == n and st.max_distance == n - 1  # one cluster: the flood
        for seed in FLOOD_SEEDS:
            ix = KeyIndex([pa.int64()], capacity=16, seed=seed)
            for lo in range(0, n, 250):
                assert (ix.lookup(None, [keys.slice(lo, 250)]) == -1).all()
                ix.insert(None, [keys.slice(lo, 250)])
            assert len(ix.slots) == 1 << bits
            st = ix.probe_stats()
            assert st.rows == n
            assert st.max_distance < 64 and st.mean_distance < 2.0, st
            assert np.array_equal(ix.lookup(None, [keys]), np.arange(n))


@pytest.mark.parametrize("where", PLACEMENTS)
def test_keys_with_equal_unsalted_64_bit_hashes_spread_out_in_a_salted_index(where: str) -> None:
    """No mix *after* a fixed-seed hash could separate these keys: the seed must be in
    the hash of the key bytes, as it is."""
    n = 1500
    keys = colliding_binary_keys(n)
    h = np.asarray(spark_xxhash64([keys]))
    assert (h == h[0]).all()  # one 64-bit hash for all under Spark's seed
    for seed in FLOOD_SEEDS:
        assert len(np.unique(salted_hash([keys], seed))) == n
    with placement(where):
        unsalted = KeyIndex([pa.binary()], capacity=n, seed=None)
        unsalted.insert(h, [keys])
        assert unsalted.probe_stats().max_distance == n - 1
        for seed in FLOOD_SEEDS:
            ix = KeyIndex([pa.binary()], capacity=16, seed=seed)
            for lo in range(0, n, 300):
                ix.insert(h[lo : lo + 300], [keys.slice(lo, 300)])
            st = ix.probe_stats()
            assert st.max_distance < 64 and st.mean_distance < 2.0, st
            assert np.array_equal(ix.lookup(h, [keys]), np.arange(n))


def test_a_tablet_salts_its_index_with_the_seed_of_its_options() -> None:
    """The seed reaches the index through the tablet (and a tablet without one in its
    options draws its own)."""
    schema = TableSchema.from_dict({**SCHEMA, "num_buckets": 1})
    keys = colliding_int64_keys(1000, 12)
    batch, _ = ChangeBatch.from_events(
        [{"op": "upsert", "key": {"id": int(k)}, "set": {"qty": 1}} for k in keys], schema
    )
    stats = {}
    for seed in (None, FLOOD_SEEDS[0]):
        tab = MemTablet(schema, options=TabletOptions(initial_capacity=16, index_seed=seed))
        assert tab.index.seed == seed
        tab.apply(batch, 1)
        tab.commit(1)
        stats[seed] = tab.index.probe_stats()
    assert stats[None].max_distance == 999
    assert stats[FLOOD_SEEDS[0]].max_distance < 64
    a, b = MemTablet(schema).index.seed, MemTablet(schema).index.seed
    assert a is not None and b is not None and a != b
