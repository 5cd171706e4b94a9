"""Unit tests of cdc_sink.tablet.keyindex (hash index) and keystore (key columns by row id)."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.bucketing import spark_xxhash64
from cdc_sink.tablet import keyhash, keyindex
from cdc_sink.tablet.keyindex import KeyIndex, mix64
from cdc_sink.tablet.keystore import KeyStore

REPO_ROOT = Path(__file__).resolve().parents[2]
KeyMaker = Callable[[np.ndarray], list[pa.Array]]
#: how rows are put into slots: the C extension (row by row) or numpy (sort, probing rounds)
PLACEMENTS = ["c", "numpy"]
#: the index hash: unsalted (tables created before the salt) or salted with a table's seed
SEEDS = [None, 0xA5A5_0123_4567_89AB]
SEED_IDS = ["unsalted", "salted"]


@contextlib.contextmanager
def _placement(kind: str) -> Iterator[None]:
    """Runs the block with the index placing rows (and computing salted hashes) in C or
    in numpy."""
    saved = keyindex._cslots
    if saved is None:
        pytest.fail("cdc_sink.tablet._cslots is not built (make install builds it)")
    keyindex._cslots = keyhash._cslots = saved if kind == "c" else None
    try:
        yield
    finally:
        keyindex._cslots = keyhash._cslots = saved


def _decimal(ids: np.ndarray) -> list[pa.Array]:
    vals = [decimal.Decimal(int(i) * 7 - 5000).scaleb(-3) for i in ids]
    return [pa.array(vals, pa.decimal128(20, 3))]


def _timestamp(ids: np.ndarray) -> list[pa.Array]:
    base = np.int64(1_700_000_000_000_000)
    return [pa.array(base + ids.astype(np.int64) * 1_000_001).cast(pa.timestamp("us", "UTC"))]


# Each maker turns distinct non-negative ints into distinct keys of one key type.
KEY_TYPES: dict[str, tuple[list[pa.DataType], KeyMaker]] = {
    "int64": ([pa.int64()], lambda ids: [pa.array(ids.astype(np.int64) * 3 - 10**6)]),
    "int32": ([pa.int32()], lambda ids: [pa.array(ids.astype(np.int32) - 1000, pa.int32())]),
    "string": ([pa.string()], lambda ids: [pa.array([f"key-{i}" for i in ids])]),
    "unicode": (
        [pa.string()],
        lambda ids: [pa.array([f"é{i}日本" * (i % 4) + str(i) for i in ids])],
    ),
    "binary": (
        [pa.binary()],
        lambda ids: [
            pa.array([int(i).to_bytes(4, "little") + b"\x00" * (i % 3) for i in ids], pa.binary())
        ],
    ),
    "decimal": ([pa.decimal128(20, 3)], _decimal),
    "date": (
        [pa.date32()],
        lambda ids: [pa.array(ids.astype(np.int32) - 500, pa.int32()).cast(pa.date32())],
    ),
    "timestamp": ([pa.timestamp("us", "UTC")], _timestamp),
    "composite": (
        [pa.int32(), pa.string()],
        lambda ids: [
            pa.array((ids % 7).astype(np.int32), pa.int32()),
            pa.array([f"s{i // 7}" for i in ids]),
        ],
    ),
}


def keys_of(kind: str, ids: np.ndarray) -> tuple[np.ndarray, list[pa.Array]]:
    keys = KEY_TYPES[kind][1](np.asarray(ids, dtype=np.int64))
    return spark_xxhash64(keys), keys


def new_index(kind: str, capacity: int = 16, seed: int | None = None) -> KeyIndex:
    return KeyIndex(KEY_TYPES[kind][0], capacity=capacity, seed=seed)


def test_binary_key_maker_is_injective():
    ids = np.arange(3000)
    vals = KEY_TYPES["binary"][1](ids)[0].to_pylist()
    assert len(set(vals)) == len(vals)


# --------------------------------------------------------------------------- lookup/insert
@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
@pytest.mark.parametrize("kind", list(KEY_TYPES))
def test_inserted_keys_are_found_with_their_row_ids_and_others_are_absent(
    kind: str, seed: int | None
):
    rng = np.random.default_rng(1)
    ids = rng.permutation(1500)
    ix = new_index(kind, seed=seed)
    expected = {}
    for chunk in np.split(ids[:1000], [1, 10, 300]):
        h, keys = keys_of(kind, chunk)
        rows = ix.insert(h, keys)
        assert rows.tolist() == list(range(ix.count - len(chunk), ix.count))
        expected.update(zip(chunk.tolist(), rows.tolist(), strict=True))
    assert ix.count == 1000
    query = rng.permutation(ids)  # present and absent keys mixed
    h, keys = keys_of(kind, query)
    got = ix.lookup(h, keys)
    assert got.dtype == np.int64
    assert got.tolist() == [expected.get(i, -1) for i in query.tolist()]


@pytest.mark.parametrize("kind", ["int64", "string", "composite"])
def test_lookup_of_an_empty_index_or_no_keys_finds_nothing(kind: str):
    ix = new_index(kind)
    h, keys = keys_of(kind, np.arange(5))
    assert ix.lookup(h, keys).tolist() == [-1] * 5
    h0, keys0 = keys_of(kind, np.arange(0))
    assert ix.insert(h0, keys0).tolist() == [] and ix.count == 0
    ix.insert(h, keys)
    assert ix.lookup(h0, keys0).tolist() == []


@pytest.mark.parametrize("kind", ["int64", "string"])
def test_keys_from_sliced_arrow_arrays_are_stored_and_looked_up(kind: str):
    ix = new_index(kind)
    h, keys = keys_of(kind, np.arange(100))
    ix.insert(h[10:20], [k.slice(10, 10) for k in keys])
    got = ix.lookup(h[5:25], [k.slice(5, 20) for k in keys])
    assert got.tolist() == [-1] * 5 + list(range(10)) + [-1] * 5


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
@pytest.mark.parametrize(
    ("kind", "total"), [("int64", 200_000), ("string", 60_000), ("composite", 30_000)]
)
def test_growth_across_many_resizes_keeps_every_key_at_its_row_id(
    kind: str, total: int, seed: int | None
):
    rng = np.random.default_rng(2)
    ids = rng.permutation(total * 2)[:total]
    ix = new_index(kind, capacity=16, seed=seed)
    sizes = [1, 2, 3, 17, 100, 999, 4096, 12345, 33333]
    start = 0
    step = 0
    while start < total:
        chunk = ids[start : start + sizes[step % len(sizes)]]
        h, keys = keys_of(kind, chunk)
        rows = ix.insert(h, keys)
        assert rows[0] == start
        start += len(chunk)
        step += 1
        if step % 5 == 0:  # earlier keys stay findable after each growth
            h_all, keys_all = keys_of(kind, ids[:start])
            assert (ix.lookup(h_all, keys_all) == np.arange(start)).all()
    assert ix.count == total
    h, keys = keys_of(kind, ids)
    assert (ix.lookup(h, keys) == np.arange(total)).all()
    absent = np.setdiff1d(np.arange(total * 2), ids)[:5000]
    h, keys = keys_of(kind, absent)
    assert (ix.lookup(h, keys) == -1).all()
    assert ix.nbytes > 0


# --------------------------------------------------------------------------- truncate
@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
@pytest.mark.parametrize("kind", ["int64", "string", "composite", "decimal"])
def test_truncate_makes_later_keys_absent_and_they_can_be_inserted_again(
    kind: str, seed: int | None
):
    ix = new_index(kind, seed=seed)
    h, keys = keys_of(kind, np.arange(100))
    ix.insert(h, keys)
    ix.truncate(60)
    assert ix.count == 60
    got = ix.lookup(h, keys)
    assert got.tolist() == list(range(60)) + [-1] * 40
    # Re-insert the forgotten keys in another order, plus new ones.
    again = np.r_[np.arange(99, 59, -1), np.arange(200, 210)]
    h2, keys2 = keys_of(kind, again)
    assert ix.insert(h2, keys2).tolist() == list(range(60, 110))
    assert ix.lookup(h2, keys2).tolist() == list(range(60, 110))
    assert ix.lookup(h, keys)[:60].tolist() == list(range(60))
    for k in ix.keys:
        assert k.length == 110


def test_truncate_at_or_beyond_the_count_changes_nothing():
    ix = new_index("int64")
    h, keys = keys_of("int64", np.arange(10))
    ix.insert(h, keys)
    ix.truncate(10)
    ix.truncate(50)
    assert ix.count == 10 and ix.lookup(h, keys).tolist() == list(range(10))
    ix.truncate(0)
    assert ix.count == 0 and ix.lookup(h, keys).tolist() == [-1] * 10


def test_repeated_insert_truncate_cycles_then_growth_keep_keys_findable():
    ix = new_index("int64", capacity=16)
    for r in range(20):
        h, keys = keys_of("int64", np.arange(r * 3, r * 3 + 3))
        ix.insert(h, keys)
        ix.truncate(0)
    h, keys = keys_of("int64", np.arange(1000, 3000))
    ix.insert(h, keys)
    assert ix.lookup(h, keys).tolist() == list(range(2000))


_ROLLBACK_HANG = textwrap.dedent("""
    import numpy as np, pyarrow as pa
    from cdc_sink.tablet.keyindex import KeyIndex
    from cdc_sink.bucketing import spark_xxhash64
    ix = KeyIndex([pa.int64()], capacity=16, seed=None)  # 32 slots
    for r in range(200):                               # 200 rolled-back versions
        k = pa.array(np.arange(r * 5, r * 5 + 5, dtype=np.int64))
        ix.insert(spark_xxhash64([k]), [k])
        ix.truncate(0)
    k = pa.array([10**9], pa.int64())
    ix.insert(spark_xxhash64([k]), [k])
    q = pa.array([10**9 + 1], pa.int64())
    print(ix.lookup(spark_xxhash64([q]), [q]).tolist())
""")


def test_lookup_of_an_absent_key_terminates_after_many_rolled_back_inserts():
    # The bug was an endless probe loop: the bound only tells a hang from a slow start
    # (interpreter and imports take seconds on a loaded machine; the lookup takes ms).
    try:
        out = subprocess.run(
            [sys.executable, "-c", _ROLLBACK_HANG],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO_ROOT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("lookup did not return within 120 s: it loops")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[-1]"


# --------------------------------------------------------------------------- collisions
@pytest.mark.parametrize(
    "kind", ["int64", "int32", "string", "binary", "decimal", "date", "timestamp", "composite"]
)
def test_different_keys_with_the_same_hash_get_distinct_rows_and_are_verified(kind: str):
    ix = new_index(kind)
    _, keys = keys_of(kind, np.array([1, 2]))
    same = np.array([12345, 12345], dtype=np.int64)
    rows = ix.insert(same, keys)
    assert rows.tolist() == [0, 1]
    assert ix.lookup(same, keys).tolist() == [0, 1]
    # A third key with the same hash is not in the index, whatever the hash says.
    _, other = keys_of(kind, np.array([3]))
    assert ix.lookup(same[:1], other).tolist() == [-1]
    # Looking the same keys up in reverse order still verifies each one.
    rev = [k.take(pa.array([1, 0])) for k in keys]
    assert ix.lookup(same, rev).tolist() == [1, 0]


def test_many_keys_sharing_one_hash_survive_growth_and_truncate():
    ix = new_index("string", capacity=16)
    _, keys = keys_of("string", np.arange(300))
    h = np.zeros(300, dtype=np.int64)
    ix.insert(h[:100], [keys[0].slice(0, 100)])
    ix.insert(h[100:], [keys[0].slice(100)])  # forces a resize with a 100-long chain
    assert ix.lookup(h, keys).tolist() == list(range(300))
    ix.truncate(150)
    assert ix.lookup(h, keys).tolist() == list(range(150)) + [-1] * 150
    assert ix.lookup(h[:1], [pa.array(["nope"])]).tolist() == [-1]


def test_mix64_is_a_bijection_on_a_sample_and_spreads_bucket_mates():
    h = np.arange(-5000, 5000, dtype=np.int64) * 4  # all equal mod 4, like one bucket's keys
    m = mix64(h)
    assert m.dtype == np.uint64 and len(np.unique(m)) == len(h)
    assert len(np.unique(m >> np.uint64(60))) == 16


# --------------------------------------------------------------------------- group_new
@pytest.mark.parametrize("forced_hash", [False, True], ids=["real_hash", "equal_hash"])
@pytest.mark.parametrize("kind", ["int64", "string", "decimal", "timestamp", "composite"])
def test_group_new_maps_each_key_to_the_first_equal_key(kind: str, forced_hash: bool):
    ids = np.array([5, 3, 5, 9, 3, 3, 7, 5])
    h, keys = keys_of(kind, ids)
    if forced_hash:
        h = np.full(len(ids), 42, dtype=np.int64)
    ix = new_index(kind)
    rep = ix.group_new(h, keys)
    assert rep.dtype == np.int64
    assert rep.tolist() == [0, 1, 0, 3, 1, 1, 6, 0]


def test_group_new_separates_keys_when_only_some_hashes_collide():
    ids = np.array([1, 2, 3, 1, 2, 4])
    _, keys = keys_of("composite", ids)
    h = np.array([7, 7, 8, 7, 7, 8], dtype=np.int64)  # 1/2 collide, 3/4 collide
    assert new_index("composite").group_new(h, keys).tolist() == [0, 1, 2, 0, 1, 5]


def test_group_new_of_nothing_is_empty():
    h, keys = keys_of("int64", np.arange(0))
    assert new_index("int64").group_new(h, keys).tolist() == []


# --------------------------------------------------------------------------- KeyStore
def test_keystore_slice_of_ints_is_zero_copy_and_survives_growth():
    ks = KeyStore(pa.int64(), capacity=16)
    ks.append(pa.array(np.arange(10, dtype=np.int64)))
    s = ks.slice(2, 8)
    assert s.to_pylist() == list(range(2, 8))
    assert s.buffers()[1].address == ks.numpy()[2:].ctypes.data  # a view, no copy
    ks.append(pa.array(np.arange(10, 1000, dtype=np.int64)))  # grows: new arrays
    assert s.to_pylist() == list(range(2, 8))  # the old slice keeps its buffer alive
    assert ks.slice(995, 2000).to_pylist() == list(range(995, 1000))  # stop clamps
    assert ks.length == 1000


@pytest.mark.parametrize("t", [pa.int32(), pa.date32(), pa.timestamp("us", "UTC")], ids=str)
def test_keystore_slice_keeps_the_column_type(t: pa.DataType):
    ks = KeyStore(t)
    arr = (
        pa.array(np.arange(5, dtype=np.int64))
        .cast(pa.int32() if t != pa.timestamp("us", "UTC") else pa.int64())
        .cast(t)
    )
    ks.append(arr)
    assert ks.slice(0, 5).type == t
    assert ks.slice(0, 5).equals(arr)


def test_keystore_strings_are_correct_after_growth_and_unicode():
    ks = KeyStore(pa.string(), capacity=16)
    words = [f"wörd-{i}-" + "日本" * (i % 5) + "x" * (i % 50) for i in range(5000)]
    for lo, hi in [(0, 1), (1, 20), (20, 3000), (3000, 5000)]:
        ks.append(pa.array(words[lo:hi]))
    assert ks.length == 5000
    assert ks.slice(0, 5000).to_pylist() == words
    s = ks.slice(1234, 1300)
    assert s.type == pa.string() and s.to_pylist() == words[1234:1300]
    assert ks.take(np.array([4999, 0, 77])).to_pylist() == [words[4999], words[0], words[77]]
    ks.append(pa.array(["", "🙂"]))
    assert ks.slice(4999, 5002).to_pylist() == [words[4999], "", "🙂"]


def test_keystore_appends_a_sliced_string_array_and_binary_values():
    ks = KeyStore(pa.binary())
    big = pa.array([b"a", b"", b"\x00\xff", b"xyz", b"q"])
    ks.append(big.slice(1, 3))
    assert ks.slice(0, 3).to_pylist() == [b"", b"\x00\xff", b"xyz"]
    assert ks.slice(3, 3).to_pylist() == []


def test_keystore_truncate_then_append_overwrites_the_forgotten_rows():
    ks = KeyStore(pa.string())
    ks.append(pa.array(["a", "bb", "ccc"]))
    ks.truncate(1)
    ks.append(pa.array(["zz"]))
    assert ks.slice(0, 10).to_pylist() == ["a", "zz"]
    ki = KeyStore(pa.int32())
    ki.append(pa.array([1, 2, 3], pa.int32()))
    ki.truncate(2)
    ki.append(pa.array([9], pa.int32()))
    assert ki.numpy().tolist() == [1, 2, 9]


@pytest.mark.parametrize("kind", ["int64", "string", "decimal", "date", "timestamp"])
def test_keystore_equals_compares_stored_rows_with_query_values(kind: str):
    t = KEY_TYPES[kind][0][0]
    ks = KeyStore(t)
    _, (stored,) = keys_of(kind, np.arange(10))
    ks.append(stored)
    _, (query,) = keys_of(kind, np.array([3, 4, 0]))
    assert ks.equals(np.array([3, 5, 0]), query).tolist() == [True, False, True]


def test_keystore_of_decimals_round_trips_values():
    ks = KeyStore(pa.decimal128(38, 10))
    vals = [decimal.Decimal("-1.0000000001"), decimal.Decimal("12345678901234567890.5")]
    ks.append(pa.array(vals, pa.decimal128(38, 10)))
    assert ks.slice(0, 2).to_pylist() == vals


def test_keystore_of_dates_and_timestamps_round_trips_values():
    ks = KeyStore(pa.date32())
    ks.append(pa.array([dt.date(1969, 12, 31), dt.date(2038, 1, 20)]))
    assert ks.slice(0, 2).to_pylist() == [dt.date(1969, 12, 31), dt.date(2038, 1, 20)]


def _assert_valid_linear_probing(idx: KeyIndex, hm: np.ndarray) -> None:
    """Every row is in exactly one slot, and no slot from a row's home slot (cyclic) up
    to its own is empty (taken, or a removed row's marker, which a probe passes): what a
    probe from the home needs to find it."""
    slots = idx._slots
    size = len(slots)
    taken = slots[slots >= 0]
    assert sorted(taken.tolist()) == list(range(len(hm)))
    where = np.empty(len(hm), dtype=np.int64)
    where[slots[slots >= 0]] = np.flatnonzero(slots >= 0)
    home = idx._home(hm)
    for r in range(len(hm)):
        run = (np.arange(home[r], home[r] + ((where[r] - home[r]) % size) + 1)) % size
        assert (slots[run] != -1).all(), r


@pytest.mark.parametrize("placement", PLACEMENTS)
@settings(max_examples=150, deadline=None)
@given(
    bits=st.integers(4, 9),
    fill=st.floats(0.0, 0.6),
    clustered=st.sampled_from(["random", "end", "one"]),
    seed=st.integers(0, 2**31),
)
def test_building_an_empty_table_in_one_pass_is_valid_linear_probing(
    placement: str, bits: int, fill: float, clustered: str, seed: int
) -> None:
    """``_build`` (rebuilds and loads) against the probing invariant, with homes spread,
    crowded at the end of the array (runs wrap to slot 0) or all equal, placed in C and
    in numpy."""
    rng = np.random.default_rng(seed)
    idx = KeyIndex([pa.int64()], capacity=8, seed=None)
    idx._alloc(bits)
    n = int(fill * (1 << bits))
    hm = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    if clustered == "end":  # the top bits of the hash are the home slot
        top = np.uint64((1 << bits) - 2) << np.uint64(64 - bits)
        hm = top | (hm >> np.uint64(bits))
    elif clustered == "one" and n:
        hm[:] = hm[0]
    with _placement(placement):
        idx._build(hm)
    _assert_valid_linear_probing(idx, hm)


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_grown_index_of_many_keys_finds_every_key_after_the_one_pass_rebuild(
    placement: str, seed: int | None
) -> None:
    keys = pa.array(np.arange(300_000, dtype=np.int64) * 7919)
    h = np.asarray(spark_xxhash64([keys]), dtype=np.int64)
    idx = KeyIndex([pa.int64()], capacity=16, seed=seed)
    with _placement(placement):
        for lo in range(0, 300_000, 60_000):  # every chunk crosses a resize (a rebuild)
            idx.insert(h[lo : lo + 60_000], [keys.slice(lo, 60_000)])
    assert np.array_equal(idx.lookup(h, [keys]), np.arange(300_000))
    _assert_valid_linear_probing(idx, idx.row_hashes())
    absent = pa.array(np.arange(1, 5_000, dtype=np.int64) * 7919 + 1)
    ha = np.asarray(spark_xxhash64([absent]), dtype=np.int64)
    assert (idx.lookup(ha, [absent]) == -1).all()


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
def test_stored_slots_whose_removed_markers_would_force_a_growth_are_rebuilt_not_lost(
    seed: int | None,
) -> None:
    """A snapshot's slot array with removed markers (left by a rolled-back version) that
    put it over the load factor: loading must not keep an empty array (every key would
    then be missing), it rebuilds."""
    keys = pa.array(np.arange(600, dtype=np.int64))
    h = np.asarray(spark_xxhash64([keys]), dtype=np.int64)
    idx = KeyIndex([pa.int64()], capacity=600, seed=seed)
    idx.insert(h, [keys])
    slots = idx.slots.copy()
    assert len(slots) == 1024
    empty = np.flatnonzero(slots == -1)
    slots[empty[:50]] = -2  # markers where a probe goes on anyway: still a valid index
    loaded = KeyIndex([pa.int64()], seed=seed)
    loaded.load(idx.row_hashes().copy(), [keys], slots, seed=seed)
    assert np.array_equal(loaded.lookup(h, [keys]), np.arange(600))
    _assert_valid_linear_probing(loaded, loaded.row_hashes())
    # Within the load factor, the stored array is used as it is.
    ok = KeyIndex([pa.int64()], seed=seed)
    ok.load(idx.row_hashes().copy(), [keys], idx.slots, seed=seed)
    assert np.array_equal(ok.slots, idx.slots)
    assert np.array_equal(ok.lookup(h, [keys]), np.arange(600))


@pytest.mark.parametrize("placement", PLACEMENTS)
@settings(max_examples=120, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["insert", "truncate"]), st.integers(0, 300)),
        min_size=1,
        max_size=12,
    ),
    kind=st.sampled_from(["int64", "string"]),
    seed=st.sampled_from(SEEDS),
)
def test_inserts_of_any_size_after_truncates_find_exactly_the_keys_held(
    placement: str, steps: list[tuple[str, int]], kind: str, seed: int | None
) -> None:
    """Model-based: in numpy, ``insert`` rebuilds the whole slot array in one pass when
    it adds at least as many keys as the index holds, and probes otherwise; in C it
    probes row by row (reusing removed slots). Each, after any truncates (removed
    markers) and growths, keeps exactly the keys the model holds at their row ids, the
    rest absent, and the array valid linear probing."""
    types, make = KEY_TYPES[kind]
    idx = KeyIndex(types, capacity=8, seed=seed)
    held: list[int] = []  # the model: ids by row id
    next_id = 0
    with _placement(placement):
        for what, size in steps:
            if what == "insert":
                ids = np.arange(next_id, next_id + size)
                next_id += size
                keys = make(ids)
                rows = idx.insert(np.asarray(spark_xxhash64(keys), dtype=np.int64), keys)
                assert rows.tolist() == list(range(len(held), len(held) + size))
                held += ids.tolist()
            else:
                idx.truncate(min(size, len(held)))
                del held[size:]
    assert idx.count == len(held)
    everything = np.arange(next_id)
    keys = make(everything)
    want = np.full(next_id, -1, dtype=np.int64)
    want[np.asarray(held, dtype=np.int64)] = np.arange(len(held))
    got = idx.lookup(np.asarray(spark_xxhash64(keys), dtype=np.int64), keys)
    assert got.tolist() == want.tolist()
    _assert_valid_linear_probing(idx, idx.row_hashes())


def test_the_compiled_placement_refuses_bad_arguments_instead_of_writing_out_of_bounds() -> None:
    cs = keyindex._cslots
    if cs is None:
        pytest.fail("cdc_sink.tablet._cslots is not built (make install builds it)")
    hm = np.arange(4, dtype=np.uint64)
    with pytest.raises(ValueError, match="power-of-two"):
        cs.place(hm, np.full(12, -1, np.int32), 61, 0)
    with pytest.raises(ValueError, match="shift"):
        cs.place(hm, np.full(16, -1, np.int32), 59, 0)  # 32 homes for 16 slots
    with pytest.raises(ValueError, match="more rows than slots"):
        cs.place(np.arange(16, dtype=np.uint64), np.full(16, -1, np.int32), 60, 0)
    with pytest.raises(ValueError, match="bad row ids"):
        cs.place(hm, np.full(16, -1, np.int32), 60, 2**31 - 2)
    with pytest.raises(ValueError, match="no free slot"):
        cs.place(hm, np.zeros(16, np.int32), 60, 0)  # every slot holds a row
    slots = np.full(16, -1, np.int32)
    cs.place(np.full(3, 15 << 60, dtype=np.uint64), slots, 60, 7)  # a run wraps to slot 0
    assert slots[[15, 0, 1]].tolist() == [7, 8, 9]
    # The lookup probe: the first row of the same hash from the home slot, past removed
    # slots and across the end; -1 at an empty slot; bad arguments refused.
    row_hash = np.zeros(10, np.uint64)
    row_hash[[7, 8, 9]] = [15 << 60, 14 << 60, 15 << 60]
    slots[14] = -2  # removed
    out = np.zeros(3, np.int64)
    cs.probe(np.array([15 << 60, 14 << 60, 13 << 60], np.uint64), slots, 60, row_hash, out)
    assert out.tolist() == [7, 8, -1]  # 14's passes the removed slot and another hash
    with pytest.raises(ValueError, match="out int64 of n"):
        cs.probe(hm, slots, 60, row_hash, np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="shift"):
        cs.probe(hm, slots, 59, row_hash, np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="no empty slot"):
        cs.probe(hm, np.full(16, 3, np.int32), 60, row_hash, np.zeros(4, np.int64))
