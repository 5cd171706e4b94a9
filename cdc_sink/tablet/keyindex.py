"""Hash index of one tablet: primary key -> dense row id, vectorized.

In memory (nothing here is on disk; a tablet rebuilds it from its key columns)::

    slots[2**b]      int32   row id, -1 empty, -2 removed (open addressing, linear probing)
    row_hash[rows]   uint64  index hash of each row's key (cheap first comparison)
    keys[k]          KeyStore per key column: the key values by row id (verification)

The index hash is *salted*: each table draws a random 64-bit seed at creation (kept in
its ``_table.json``, :func:`new_seed`), and a key's index hash is SipHash-1-3 of the
key's bytes under that seed (:func:`~cdc_sink.tablet.keyhash.salted_hash`). Which keys
share a home slot then depends on a secret, so a producer cannot compute keys that all
probe one cluster (docs/design-notes.md, "A salted key index"). An index built with
``seed=None`` (the tables created before the salt) uses the unsalted hash: splitmix64
of the key's routing hash (Spark's ``xxhash64``, seed 42, the one that routes events to
buckets; re-mixed because all keys of one bucket share ``hash mod num_buckets``).

A probe compares ``row_hash`` first and then the key values themselves, so a 64-bit
collision never merges two keys. Lookups work on whole arrays: each probing *round* is a
handful of numpy operations over the keys still unresolved, and the number of rounds is
the longest probe sequence (a few at load <= 0.6; :meth:`KeyIndex.probe_stats` measures
the probe distances). Inserts and rebuilds place rows in C (``_cslots.c``: linear
probing row by row, the home slots of the rows ahead prefetched), faster than numpy's
sorted one-pass build, which is the fallback when the extension was not built
(docs/benchmarks-history.md, "zstd pages by default", "The key index in C").

Row ids are dense and assigned in insertion order; :meth:`KeyIndex.truncate` forgets the
rows of a rolled-back version.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from cdc_sink.bucketing import spark_xxhash64
from cdc_sink.tablet.keyhash import salted_hash
from cdc_sink.tablet.keystore import KeyStore, arrow_values_view, fixed_width_dtype
from cdc_sink.utils.arrays import one_array, run_starts

try:  # built from cdc_sink/tablet/_cslots.c at install; optional
    from cdc_sink.tablet import _cslots as _cslots
except ImportError:  # pragma: no cover - no C compiler at install: numpy sorts instead
    _cslots = None  # type: ignore[assignment]

__all__ = [
    "KeyIndex",
    "ProbeStats",
    "mix64",
    "new_seed",
    "salted_hash",
    "seed_from_json",
    "seed_to_json",
]

_EMPTY = -1
_REMOVED = -2
_MAX_LOAD = 0.6
_M64 = (1 << 64) - 1
_HEX = frozenset("0123456789abcdefABCDEF")


def _mix64_inplace(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer over a uint64 array, in place (returns it)."""
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def mix64(h: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer over an int64/uint64 array (returns uint64)."""
    return _mix64_inplace(h.astype(np.uint64, copy=True))


def new_seed() -> int:
    """A random index seed (64 bits from the operating system's secure source)."""
    return secrets.randbits(64)


def seed_to_json(seed: int | None) -> str | None:
    """A seed as metadata stores it: 16 hex digits (exact in any JSON reader), or None
    for the unsalted index."""
    return None if seed is None else f"{_check_seed(seed):016x}"


def seed_from_json(value: object) -> int | None:
    """The seed a metadata value stores (:func:`seed_to_json`); None stays None.

    Raises:
        ValueError: The value is not 16 hex digits.
    """
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != 16 or not set(value) <= _HEX:
        raise ValueError(f"an index seed is 16 hex digits, got {value!r}")
    return int(value, 16)


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"an index seed is an int or None, got {type(seed).__name__}")
    if not 0 <= seed <= _M64:
        raise ValueError(f"an index seed is an unsigned 64-bit integer, got {seed}")
    return seed


class ProbeStats(NamedTuple):
    """How far rows sit from their home slots (:meth:`KeyIndex.probe_stats`).

    Attributes:
        rows: Rows in the index.
        max_distance: The largest distance, in slots, from a row's home slot to its slot
            (a lookup of that key takes this many probes plus one).
        mean_distance: The mean distance (0.0 without rows).
    """

    rows: int
    max_distance: int
    mean_distance: float


class KeyIndex:
    """Vectorized key -> row id index with verified keys (see the module docstring).

    Args:
        key_types: Arrow types of the key columns, in key order.
        capacity: Expected number of keys (sizes the table; it grows as needed).
        seed: The table's index seed (:func:`new_seed`), or None for the unsalted hash
            of the tables created before the salt. Required: every index says which.
    """

    def __init__(
        self, key_types: Sequence[pa.DataType], capacity: int = 1024, *, seed: int | None
    ) -> None:
        self.seed = None if seed is None else _check_seed(seed)
        self.key_types = list(key_types)
        self.keys = [KeyStore(t, capacity) for t in self.key_types]
        self.count = 0
        self._row_hash = np.zeros(max(capacity, 16), dtype=np.uint64)
        bits = max(4, int(np.ceil(np.log2(max(capacity, 8) / _MAX_LOAD))))
        self._alloc(bits)

    # ------------------------------------------------------------------ sizing
    def _alloc(self, bits: int, slots: np.ndarray | None = None) -> None:
        """Sizes the table at ``2**bits`` slots: empty ones, or ``slots`` as they are."""
        self._removed = 0
        self._bits = bits
        self._mask = np.uint64((1 << bits) - 1)
        self._shift = np.uint64(64 - bits)
        self._slots = np.full(1 << bits, _EMPTY, dtype=np.int32) if slots is None else slots

    @property
    def nbytes(self) -> int:
        """Bytes held by the index, its hashes and its key stores."""
        return int(self._slots.nbytes + self._row_hash.nbytes + sum(k.nbytes for k in self.keys))

    def _home(self, hm: np.ndarray) -> np.ndarray:
        return (hm >> self._shift).astype(np.int64)

    def index_hash(self, key_hash: np.ndarray | None, keys: Sequence[pa.Array]) -> np.ndarray:
        """The index hash of each key (uint64): the salted hash of ``keys`` under the
        index's seed (:func:`~cdc_sink.tablet.keyhash.salted_hash`); without a seed,
        splitmix64 of ``key_hash``, the keys' Spark ``xxhash64`` (computed here when
        None)."""
        if self.seed is not None:
            return salted_hash(keys, self.seed)
        if key_hash is None:
            key_hash = np.asarray(spark_xxhash64(keys))
        return mix64(key_hash)

    def _hashes(
        self, key_hash: np.ndarray | None, keys: Sequence[pa.Array], hm: np.ndarray | None
    ) -> np.ndarray:
        """The keys' :meth:`index_hash` (``hm`` when the caller has it), contiguous uint64:
        what :meth:`lookup` probes with and :meth:`insert` places and stores."""
        if hm is None:
            hm = self.index_hash(key_hash, keys)
        return np.ascontiguousarray(hm, np.uint64)

    def _ensure(self, extra: int) -> None:
        need = self.count + extra
        if need > len(self._row_hash):
            grown = np.zeros(max(2 * len(self._row_hash), need), dtype=np.uint64)
            grown[: self.count] = self._row_hash[: self.count]
            self._row_hash = grown
        if need + self._removed > _MAX_LOAD * len(self._slots):
            bits = self._bits
            while need > _MAX_LOAD * (1 << bits):
                bits += 1
            self._alloc(bits)
            self._build(self._row_hash[: self.count])

    # ------------------------------------------------------------------ probing
    def _build(self, hm: np.ndarray) -> None:
        """Puts rows ``0..len(hm)-1`` (hashes ``hm``, distinct keys) into the *empty* slot
        array. With the C extension (``_cslots.place``), row after row by linear probing,
        prefetching the home slots of the rows ahead.
        Otherwise in numpy, in one pass: in order of home slot, each key takes the first
        free slot at or after its home, ``pos[i] = max(home[i], pos[i-1] + 1)``, a
        running maximum; every slot from a key's home to its own is then taken, which is
        all linear probing asks. Runs that reach the end of the array go on from slot 0
        (:meth:`_place`). One sort and a sequential scatter instead of :meth:`_place`'s
        random probing rounds, with three temporaries of the keys' length (both builds
        timed in docs/benchmarks-history.md, "zstd pages by default", "The key index in C"). The
        two place keys differently within a cluster; either is a valid linear-probing
        table."""
        n = len(hm)
        if n == 0:
            return
        if _cslots is not None:
            _cslots.place(np.ascontiguousarray(hm, np.uint64), self._slots, int(self._shift), 0)
            return
        if self._bits > 32:  # the home slot and the row id must share one uint64
            self._place(hm, np.arange(n, dtype=np.int64))
            return
        idx = np.arange(n, dtype=np.uint64)
        packed = hm >> self._shift  # home slot
        packed <<= np.uint64(32)
        packed |= idx
        packed.sort()  # by home slot, then row id: a sort of values, no argsort
        pos = packed >> np.uint64(32)
        ipos, iidx = pos.view(np.int64), idx.view(np.int64)
        ipos -= iidx
        np.maximum.accumulate(ipos, out=ipos)
        ipos += iidx
        packed &= np.uint64(0xFFFFFFFF)  # row ids, in the order of ``pos``
        rows = packed.view(np.int64)
        cut = int(np.searchsorted(ipos, len(self._slots)))  # pos is increasing
        self._slots[ipos[:cut]] = rows[:cut]
        if cut < n:  # wrapped around the end
            wrapped = rows[cut:]
            self._place(hm[wrapped], wrapped.copy(), start=np.zeros(n - cut, np.int64))

    def _place(self, hm: np.ndarray, rows: np.ndarray, start: np.ndarray | None = None) -> None:
        """Puts ``rows`` (hashes ``hm``, keys known absent and distinct) into free slots,
        probing from their home slots (or from ``start``)."""
        pos = self._home(hm) if start is None else start
        active = np.arange(len(rows))
        mask = int(self._mask)
        slots = self._slots
        while active.size:
            p = pos[active]
            free = slots[p] < 0
            cand = active[free]
            if cand.size:
                # Claim free slots by scatter; where several keys aim at one slot the
                # last write stays, and the others see a foreign row id and move on.
                pc_ = p[free]
                slots[pc_] = rows[cand]
                won = np.zeros(len(active), dtype=bool)
                won[np.flatnonzero(free)] = slots[pc_] == rows[cand]
                active = active[~won]
            pos[active] = (pos[active] + 1) & mask

    def lookup(
        self,
        key_hash: np.ndarray | None,
        keys: Sequence[pa.Array],
        *,
        hm: np.ndarray | None = None,
    ) -> np.ndarray:
        """Row id of each key, -1 where the key is not in the index.

        Args:
            key_hash: Spark xxhash64 of each key (int64; the routing hash a batch has),
                or None. Only an unsalted index uses it (and computes it when None).
            keys: The key columns (as long as ``key_hash``).
            hm: The keys' :meth:`index_hash` when the caller has it (then ``key_hash``
                is not read).
        """
        n = len(keys[0])
        out = np.full(n, -1, dtype=np.int64)
        if n == 0 or self.count == 0:
            return out
        hm = self._hashes(key_hash, keys, hm)
        if _cslots is None:
            self._probe(hm, keys, out, np.arange(n))
            return out
        _cslots.probe(hm, self._slots, int(self._shift), self._row_hash, out)
        cand = np.flatnonzero(out >= 0)
        if len(cand):
            ok = self._keys_equal(out[cand], cand, keys)
            if not ok.all():  # another key of the same hash: probe on past it
                miss = cand[~ok]
                out[miss] = -1
                self._probe(hm, keys, out, miss)
        return out

    def _probe(
        self, hm: np.ndarray, keys: Sequence[pa.Array], out: np.ndarray, active: np.ndarray
    ) -> None:
        """Sets ``out[i]`` to the row of key ``i`` for each ``i`` of ``active`` whose key
        is in the index (index hashes ``hm``), probing in rounds of array operations."""
        pos = self._home(hm)
        mask = int(self._mask)
        slots = self._slots
        row_hash = self._row_hash
        while active.size:
            s = slots[pos[active]].astype(np.int64)
            done = s == _EMPTY
            cand = np.flatnonzero(s >= 0)
            if cand.size:
                hit = row_hash[s[cand]] == hm[active[cand]]
                cand = cand[hit]
                if cand.size:
                    ok = self._keys_equal(s[cand], active[cand], keys)
                    cand = cand[ok]
                    out[active[cand]] = s[cand]
                    done[cand] = True
            active = active[~done]
            pos[active] = (pos[active] + 1) & mask

    def _keys_equal(
        self, rows: np.ndarray, which: np.ndarray, keys: Sequence[pa.Array]
    ) -> np.ndarray:
        ok = np.ones(len(rows), dtype=bool)
        for store, col in zip(self.keys, keys, strict=True):
            ok &= store.equals_at(rows, col, which)
        return ok

    def insert(
        self,
        key_hash: np.ndarray | None,
        keys: Sequence[pa.Array],
        *,
        hm: np.ndarray | None = None,
    ) -> np.ndarray:
        """Adds keys that are absent and distinct; returns their new row ids.

        The caller guarantees absence and distinctness (a tablet deduplicates a batch and
        looks keys up first); row ids are ``count, count+1, ...`` in input order.
        ``key_hash`` and ``hm`` are as for :meth:`lookup`.
        """
        k = len(keys[0])
        rows = np.arange(self.count, self.count + k, dtype=np.int64)
        if k == 0:
            return rows
        self._ensure(k)
        hm = self._hashes(key_hash, keys, hm)
        self._row_hash[self.count : self.count + k] = hm
        for store, col in zip(self.keys, keys, strict=True):
            store.append(col)
        if _cslots is not None:  # probes row by row in C, any number of rows
            _cslots.place(hm, self._slots, int(self._shift), self.count)
        elif k >= self.count:  # as many new keys as old: one sequential rebuild of all
            # is cheaper than probing for the new ones (docs/benchmarks-history.md, "Bulk load
            # without probing, sorting or copies", "The key index takes a large insert")
            if self.count or self._removed:
                self._alloc(self._bits)
            self._build(self._row_hash[: self.count + k])
        else:
            self._place(hm, rows)
        self.count += k
        return rows

    def row_hashes(self) -> np.ndarray:
        """The index hash of every row's key (what a snapshot stores, with the seed, to
        rebuild us)."""
        return self._row_hash[: self.count]

    def probe_stats(self) -> ProbeStats:
        """How far the rows sit from their home slots (one vectorized pass over the
        slots): the longest and the mean distance, which bound the probing rounds of a
        lookup of present keys."""
        taken = np.flatnonzero(self._slots >= 0)
        if taken.size == 0:
            return ProbeStats(0, 0, 0.0)
        home = self._home(self._row_hash[self._slots[taken]])
        dist = (taken - home) & int(self._mask)
        return ProbeStats(int(taken.size), int(dist.max()), float(dist.mean()))

    @property
    def slots(self) -> np.ndarray:
        """The slot array (a snapshot stores it so reopening needs no probing)."""
        return self._slots

    def load(
        self,
        row_hash: np.ndarray,
        keys: Sequence[pa.Array],
        slots: np.ndarray | None = None,
        *,
        seed: int | None,
    ) -> None:
        """Rebuilds an empty index from stored row hashes and key columns (row ids
        ``0..len-1``), without rehashing the keys; with the stored ``slots`` array (a
        power-of-two length) without probing either. A ``row_hash`` array that owns its
        writable uint64 memory is taken over, not copied (the caller gives it up).

        ``seed`` is the seed the stored hashes and slots were built with (None:
        unsalted). When it is not the index's own, neither is trusted: the keys are
        hashed again under the index's seed and the slots rebuilt.
        """
        assert self.count == 0
        if seed != self.seed:
            row_hash = self.index_hash(None, keys)
            slots = None
        k = len(row_hash)
        with_slots = False
        if slots is not None and len(slots) & (len(slots) - 1) == 0:
            stored = np.array(slots, dtype=np.int32)
            removed = int(np.count_nonzero(stored == _REMOVED))
            # Usable only if no growth is due (a growth would drop them: rebuild instead).
            if k + removed <= _MAX_LOAD * len(stored):
                with_slots = True
                self._alloc(len(stored).bit_length() - 1, stored)
                self._removed = removed
        adopted = (
            k > len(self._row_hash)
            and row_hash.dtype == np.uint64
            and row_hash.flags.owndata
            and row_hash.flags.writeable
            and row_hash.flags.c_contiguous
        )
        if adopted:
            self._row_hash = row_hash
        self._ensure(k)
        if not adopted:
            self._row_hash[:k] = row_hash
        for store, col in zip(self.keys, keys, strict=True):
            store.append(col)
        if not with_slots:
            self._build(self._row_hash[:k])
        self.count = k

    def truncate(self, n: int) -> None:
        """Removes rows ``n..count-1`` (their keys become absent again)."""
        if n >= self.count:
            return
        rows = np.arange(n, self.count, dtype=np.int64)
        hm = self._row_hash[n : self.count]
        pos = self._home(hm)
        active = np.arange(len(rows))
        mask = int(self._mask)
        while active.size:
            s = self._slots[pos[active]]
            found = s == rows[active]
            self._slots[pos[active[found]]] = _REMOVED
            active = active[~found]
            pos[active] = (pos[active] + 1) & mask
        for store in self.keys:
            store.truncate(n)
        self._removed += len(rows)
        self.count = n
        if self._removed > len(self._slots) // 4:
            # Removed markers only end probes at empty slots; too many make probes long
            # (and a table without empty slots would never end a miss). Rebuild.
            self._alloc(self._bits)
            self._build(self._row_hash[: self.count])

    def group_new(self, key_hash: np.ndarray, keys: Sequence[pa.Array]) -> np.ndarray:
        """Groups equal keys of a batch: returns for each key the index of the first
        occurrence of an equal key (keys compared by value, not only by hash)."""
        n = len(key_hash)
        if n == 0:
            return np.empty(0, dtype=np.int64)
        if _increasing_integers(keys):  # distinct keys, seen without a sort (a load)
            return np.arange(n, dtype=np.int64)
        # A sort of the values, far cheaper than the stable argsort it may skip
        # (docs/benchmarks-history.md, "Page compression and the load path", "Load path").
        sorted_hash = np.sort(key_hash)
        if not (sorted_hash[1:] == sorted_hash[:-1]).any():
            return np.arange(n, dtype=np.int64)  # distinct hashes: distinct keys
        order = np.argsort(key_hash, kind="stable")
        hs = key_hash[order]
        starts = np.flatnonzero(run_starts(hs))
        first_sorted = np.repeat(starts, np.diff(np.append(starts, n)))
        rep = np.empty(n, dtype=np.int64)
        rep[order] = order[first_sorted]  # first occurrence (stable sort keeps input order)
        # Verify: every key equals its representative's key.
        ok = np.ones(n, dtype=bool)
        for col in keys:
            ok &= _equal_at(one_array(col), rep)
        if not ok.all():  # a 64-bit collision inside the batch: exact grouping
            rep = _exact_first_occurrence(keys)
        return rep.astype(np.int64)


def _increasing_integers(keys: Sequence[pa.Array]) -> bool:
    """Whether ``keys`` is one integer column without nulls whose values strictly
    increase (so they are distinct: one pass, where the general check sorts)."""
    if len(keys) != 1 or not pa.types.is_integer(keys[0].type) or keys[0].null_count:
        return False
    v = one_array(keys[0]).to_numpy()
    return len(v) < 2 or bool((v[1:] > v[:-1]).all())


def _equal_at(col: pa.Array, rep: np.ndarray) -> np.ndarray:
    """Whether ``col[rep[i]]`` equals ``col[i]`` (fixed-width columns without nulls in
    numpy; the others through Arrow, a null equal to nothing)."""
    dtype = fixed_width_dtype(col.type)
    if dtype is not None and dtype != np.dtype(bool) and not col.null_count:
        v = arrow_values_view(col, dtype)
        return np.asarray(v[rep] == v, dtype=bool)
    return _equal(col.take(pa.array(rep)), col)


def _equal(a: pa.Array, b: pa.Array) -> np.ndarray:
    import pyarrow.compute as pc

    return np.asarray(pc.equal(a, b).fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _exact_first_occurrence(keys: Sequence[pa.Array]) -> np.ndarray:
    """Index of the first equal key for each row, by exact value (rare collision path)."""
    table = pa.table({f"k{i}": k for i, k in enumerate(keys)})
    table = table.append_column("__i", pa.array(np.arange(table.num_rows)))
    firsts = table.group_by([f"k{i}" for i in range(len(keys))], use_threads=False).aggregate(
        [("__i", "min")]
    )
    joined = table.join(firsts, keys=[f"k{i}" for i in range(len(keys))], use_threads=False)
    joined = joined.sort_by("__i")
    return np.asarray(joined.column("__i_min").to_numpy(), dtype=np.int64)
