"""One format, two readers: the JVM reader (``io.cdcsink.format``) equals ``Table.read``.

Tables are written by the Python writer (both apply modes: ``Table.apply``, and buckets
prepared by a second ``Table`` as executors do, committed by the first), covering every
column type of docs/format.md §5.4, schema changes (add, drop, rename, widen), deletes,
truncates, upserts, partial updates, tables with and without a sequence column,
snapshots and compaction mid-history, bulk loads, GC with checkpoints, several buckets,
and the format-1 WAL fixture. The jar's ``DumpTable`` dumps every retained version of
every table in one JVM; each version's rows must equal ``Table.read(version=v)`` (sorted
by key, compared as Arrow tables with their types). Tampered files must make both
readers fail, the JVM naming the file.

Needs ``java`` and ``jvm/target/cdc-sink-spark.jar`` (``make install`` builds it).
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyspark
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.batch import ChangeBatch
from cdc_sink.engine import core_of
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.strategies import WIDER, events, key_pool, schemas, type_name

REPO = Path(__file__).resolve().parents[2]
JAR = REPO / "jvm" / "target" / "cdc-sink-spark.jar"
FIXTURES = [
    REPO / "tests" / "storage" / "data" / "wal_v1",
    REPO / "tests" / "tablet" / "data" / "unsalted_v2",
]
UTC = dt.timezone.utc
#: Random tables of the hypothesis-driven test (more for a longer local run).
EXAMPLES = int(os.environ.get("CDC_SINK_JVM_EXAMPLES", "30"))
#: Set: random examples (not the fixed derandomized ones).
SEEDED = "CDC_SINK_JVM_RANDOM" in os.environ


def _classpath() -> str:
    if not JAR.exists():
        pytest.fail(f"{JAR} is missing: run `make install` (it builds the JVM reader's jar)")
    if shutil.which("java") is None:
        pytest.fail("java is not on PATH: the JVM reader's cross-check needs a JDK 17")
    jars = Path(pyspark.__file__).parent / "jars"
    return f"{JAR}{os.pathsep}{jars}/*"


def dump(jobs: Sequence[tuple[Any, ...]]) -> subprocess.CompletedProcess[str]:
    """Runs DumpTable once (one JVM) over ``(table, out_dir, versions, *filters)`` jobs
    (a filter: ``"col,op,json"``)."""
    listing = jobs[0][1].parent / f"{jobs[0][1].name}.jobs"
    listing.write_text("".join("\t".join(str(x) for x in job) + "\n" for job in jobs))
    return run_jvm("io.cdcsink.format.DumpTable", f"@{listing}")


def run_jvm(main: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs class ``main`` of the connector's jar with ``args`` (Spark's jars on the
    classpath, as Arrow needs ``java.nio`` open); its output captured."""
    cmd = ["java", "--add-opens=java.base/java.nio=ALL-UNNAMED", "-cp", _classpath(), main, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def _sorted(t: pa.Table, keys: Sequence[str]) -> pa.Table:
    return t.sort_by([(k, "ascending") for k in keys]).combine_chunks()


def assert_same_versions(table: Path, out: Path) -> int:
    """Every retained version of ``table`` read by Python equals the JVM's dump."""
    assert not (out / "error.txt").exists(), (out / "error.txt").read_text()
    t = open_table(table)
    versions = [h["version"] for h in t.versions()]
    assert sorted(int(p.stem) for p in out.glob("*.arrow")) == versions, "retained versions differ"
    for v in versions:
        want = t.read(version=v)
        got = ipc.open_file(out / f"{v}.arrow").read_all()
        keys = t.schema_at(v).primary_key
        assert got.schema == want.schema, f"{table} v{v}: {got.schema} != {want.schema}"
        assert _sorted(got, keys).equals(_sorted(want, keys)), f"{table} v{v}: rows differ"
    return len(versions)


# ------------------------------------------------------------------ scripted tables

ALL_TYPES = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "i8", "type": "int8"},
        {"name": "i16", "type": "int16", "default": -3},
        {"name": "i32", "type": "int32"},
        {"name": "i64", "type": "int64", "nullable": False, "default": 42},
        {"name": "f32", "type": "float32"},
        {"name": "f64", "type": "float64"},
        {"name": "b", "type": "bool", "default": True},
        {"name": "s", "type": "string", "default": "dflt"},
        {"name": "bin", "type": "binary"},
        {"name": "d", "type": "date32", "default": "2024-02-29"},
        {"name": "ts", "type": "timestamp[us, UTC]", "default": "2024-01-01T00:00:00+00:00"},
        {"name": "dec", "type": "decimal128(10, 2)"},
        {"name": "dec30", "type": "decimal128(30, 4)", "default": "-1.2345"},
        {"name": "seq", "type": "int64"},
    ],
    "primary_key": ["id"],
    "num_buckets": 3,
    "sequence_column": "seq",
}


def _row(i: int) -> dict[str, Any]:
    return {
        "i8": (i % 200) - 100,
        "i16": i * 7 - 3000,
        "i32": i * 1000 - 5,
        "f32": i / 4,
        "f64": i * 1.5 - 0.25,
        "b": i % 3 == 0,
        "s": f"row {i} ünï",
        "bin": bytes([i % 256, 0, 255]),
        "d": dt.date(2000, 1, 1) + dt.timedelta(days=i),
        "ts": dt.datetime(2020, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=i * 1_000_003),
        "dec": decimal.Decimal(i * 37 - 500) / 100,
        "dec30": decimal.Decimal(10**20 + i) / 10**4 if i % 2 else decimal.Decimal(i),
    }


def _executors_apply(driver: Table, worker: Table, evs: list[dict[str, Any]]) -> None:
    """Executors mode: a second Table prepares each bucket, the driver commits them."""
    batch, _ = ChangeBatch.from_events(evs, driver.schema)
    txn = driver.transaction()
    prepared = [
        core_of(worker).prepare_bucket(b, txn.version, part)
        for b, part in sorted(batch.split_by_bucket().items())
    ]
    txn.add_prepared(prepared)
    txn.commit(events=len(batch))


def write_all_types(path: Path, *, executors: bool, options: TableOptions) -> None:
    t = create_table(path, ALL_TYPES, options=options)
    worker = open_table(path, options=options) if executors else None

    def apply(evs: list[dict[str, Any]]) -> None:
        if worker is None:
            t.apply(evs)
        else:
            _executors_apply(t, worker, evs)

    apply([{"op": "insert", "key": {"id": i}, "set": _row(i), "seq": 10} for i in range(60)])
    apply(
        [
            {"op": "update", "key": {"id": i}, "set": {"s": None, "f64": -0.0}, "seq": 11}
            for i in range(0, 60, 5)
        ]
        + [{"op": "delete", "key": {"id": i}, "seq": 12} for i in range(1, 60, 7)]
        + [{"op": "upsert", "key": {"id": 1000 + i}, "set": {"i8": 1}, "seq": 1} for i in range(5)]
        + [{"op": "update", "key": {"id": 2}, "set": {"i32": 9}, "seq": 5}]  # stale
        + [{"op": "update", "key": {"id": 5000}, "set": {"i32": 9}, "seq": 50}]  # rejected
        + [{"op": "delete", "key": {"id": 7000}, "seq": 70}]  # tombstone
    )
    apply(
        [
            {"op": "insert", "key": {"id": 1}, "set": {"s": "back"}, "seq": 13},  # fresh values
            {"op": "insert", "key": {"id": 7000}, "set": {"i8": 5}, "seq": 69},  # stale
            {"op": "upsert", "key": {"id": 8}, "set": {"i16": 1}, "seq": 12},  # equal seq applies
        ]
    )
    t.compact()
    t.widen_column("i8", "int32")
    t.widen_column("f32", "float64")
    t.widen_column("dec", "decimal128(20, 2)")
    apply(
        [
            {
                "op": "upsert",
                "key": {"id": i},
                "set": {"i8": 100000 + i, "dec": decimal.Decimal("123456789012.5")},
                "seq": 20,
            }
            for i in range(0, 60, 3)
        ]
    )
    t.add_column("added", "string", default="new")
    t.rename_column("s", "s_renamed")
    apply(
        [{"op": "update", "key": {"id": 3}, "set": {"added": "set", "s_renamed": "r"}, "seq": 30}]
    )
    t.drop_column("bin")
    apply([{"op": "truncate"}, {"op": "insert", "key": {"id": 3}, "set": {}, "seq": 31}])
    apply(
        [
            {
                "op": "upsert",
                "key": {"id": i},
                "set": _row(i) | {"i8": i, "dec": decimal.Decimal(i)},
                "seq": 40,
            }
            for i in range(0, 200, 2)
            if True
        ]
    )
    t.compact()
    apply([{"op": "delete", "key": {"id": i}, "seq": 41} for i in range(0, 200, 10)])


NO_SEQ = {
    "columns": [
        {"name": "k1", "type": "int32", "nullable": False},
        {"name": "k2", "type": "string", "nullable": False},
        {"name": "v", "type": "int64", "nullable": False},
        {"name": "w", "type": "float64"},
    ],
    "primary_key": ["k1", "k2"],
    "num_buckets": 4,
}


def write_no_seq(path: Path, options: TableOptions) -> None:
    t = create_table(path, NO_SEQ, options=options)
    t.apply(
        [
            {"op": "insert", "key": {"k1": i, "k2": str(i % 3)}, "set": {"v": i, "w": i / 3}}
            for i in range(40)
        ]
    )
    t.apply(
        [
            {"op": "upsert", "key": {"k1": i, "k2": str(i % 3)}, "set": {"w": None}}
            for i in range(0, 50, 4)
        ]
        + [{"op": "upsert", "key": {"k1": 99, "k2": "x"}, "set": {"w": 1.0}}]  # lacks v: rejected
        + [{"op": "delete", "key": {"k1": i, "k2": str(i % 3)}} for i in range(0, 40, 5)]
        + [{"op": "delete", "key": {"k1": 500, "k2": "none"}}]
    )
    t.apply([{"op": "insert", "key": {"k1": 0, "k2": "0"}, "set": {"v": -1}}, {"op": "truncate"}])
    t.apply([{"op": "insert", "key": {"k1": i, "k2": "a"}, "set": {"v": i}} for i in range(10)])
    t.gc(dry_run=False)


SCRIPTED = {
    "all_types_driver": lambda p: write_all_types(
        p, executors=False, options=TableOptions.for_tests()
    ),
    "all_types_executors_lz4": lambda p: write_all_types(
        p,
        executors=True,
        options=TableOptions(
            page_rows=16, snapshot_every=2, page_compression="lz4", wal_compression="zstd"
        ),
    ),
    "all_types_uncompressed": lambda p: write_all_types(
        p,
        executors=False,
        options=TableOptions(
            page_rows=64,
            snapshot_every=100,
            page_compression=None,
            wal_compression=None,
            bulk_events=10,
        ),
    ),
    "no_seq_gc": lambda p: write_no_seq(p, TableOptions.for_tests()),
}


def test_scripted_tables_and_fixtures_read_equal(tmp_path: Path) -> None:
    jobs = []
    for name, write in SCRIPTED.items():
        write(tmp_path / name)
        jobs.append((tmp_path / name, tmp_path / f"{name}.out", "all"))
    for fixture in FIXTURES:
        shutil.copytree(fixture, tmp_path / fixture.name)
        jobs.append((tmp_path / fixture.name, tmp_path / f"{fixture.name}.out", "all"))
    res = dump(jobs)
    assert res.returncode == 0, res.stderr
    for table, out, _ in jobs:
        assert assert_same_versions(table, out) >= 2


# ------------------------------------------------------------------ random tables


def random_steps(
    data: st.DataObject, t: Table, worker: Table | None, keys: Any, steps: int
) -> None:
    """Draws and runs ``steps`` random steps on ``t``: applies of random events (through
    ``worker`` as executors do when given), compactions and schema changes (widen, add,
    rename, drop)."""
    for _ in range(steps):
        step = data.draw(
            st.sampled_from(
                ["apply", "apply", "apply", "compact", "widen", "add", "rename", "drop"]
            )
        )
        s = t.schema
        values = [c.name for c in s.value_columns if c.name != s.sequence_column]
        if step == "compact":
            t.compact()
        elif step == "widen":
            wide = [n for n in values if type_name(s, n) in WIDER]
            if wide:
                n = data.draw(st.sampled_from(wide))
                t.widen_column(n, data.draw(st.sampled_from(WIDER[type_name(s, n)])))
        elif step == "add":
            t.add_column(f"a{s.schema_id}", "int16", default=data.draw(st.sampled_from([None, 5])))
        elif step == "rename" and values:
            t.rename_column(data.draw(st.sampled_from(values)), f"r{s.schema_id}")
        elif step == "drop" and len(values) > 1:
            t.drop_column(data.draw(st.sampled_from(values)))
        else:
            evs = data.draw(events(s, keys, truncates=True))
            if worker is None:
                t.apply(evs)
            else:
                _executors_apply(t, worker, evs)


def random_tables(
    tmp_path: Path,
    examples: int,
    options: Callable[[st.DataObject], dict[str, Any]],
    steps: tuple[int, int],
) -> list[Path]:
    """``examples`` random tables under ``tmp_path`` (hypothesis: a random schema and key
    pool, small pages, snapshots every few versions, bulk loads or not, the options
    ``options`` draws, written by the table or by a second ``Table`` as executors do, then
    ``steps`` random steps of :func:`random_steps`); their paths."""
    made: list[Path] = []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=not SEEDED)
    @given(data=st.data())
    def build(data: st.DataObject) -> None:
        schema = data.draw(schemas())
        keys = data.draw(key_pool(schema))
        opts = TableOptions(
            page_rows=data.draw(st.sampled_from([2, 4, 16])),
            snapshot_every=data.draw(st.integers(1, 4)),
            bulk_events=data.draw(st.sampled_from([3, 100_000])),
            **options(data),
        )
        path = tmp_path / f"r{len(made)}"
        shutil.rmtree(path, ignore_errors=True)
        t = create_table(path, schema, options=opts)
        worker = open_table(path, options=opts) if data.draw(st.booleans()) else None
        random_steps(data, t, worker, keys, data.draw(st.integers(*steps)))
        made.append(path)

    build()
    return made


def test_random_tables_read_equal(tmp_path: Path) -> None:
    def compression(data: st.DataObject) -> dict[str, Any]:
        return {"page_compression": data.draw(st.sampled_from(["zstd", "lz4", None]))}

    made = random_tables(tmp_path, EXAMPLES, compression, (1, 6))
    jobs = [(p, p.with_suffix(".out"), "all") for p in made]
    res = dump(jobs)
    assert res.returncode == 0, res.stderr
    for table, out, _ in jobs:
        assert_same_versions(table, out)


# ------------------------------------------------------------------ tampered files


def _flip(path: Path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    i = int(len(data) * at)
    data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def _newest(files: Sequence[Path]) -> Path:
    return sorted(files, key=lambda p: p.name)[-1]


def test_tampered_files_fail_in_both_readers(tmp_path: Path) -> None:
    cases: dict[str, Path] = {}
    for name in ("page", "segment", "entry", "missing"):
        path = tmp_path / name
        at = 0.5
        # No last-checkpoint pointer: it carries the newest entry, which a reader using it
        # does not open (docs/format.md §8.8).
        write_no_seq(path, TableOptions(page_rows=8, snapshot_every=100, checkpoint_every=1000))
        if name == "page":
            open_table(path).compact()
            # The first blob (a value page): the file's tail is the key index's slots,
            # which a reader may ignore (docs/format.md §10.5).
            victim = _newest(list((path / "_pages" / "0").iterdir()))
            at = 0.01
        elif name in ("segment", "missing"):
            victim = _newest(list((path / "_wal" / "1").iterdir()))
        else:  # the newest entry: one the Python reader reads whatever its pointer says
            victim = path / "_log" / f"{open_table(path).version:020d}.json"
        if name == "missing":  # a file a retained version needs is gone: damage
            victim.unlink()
        else:
            _flip(victim, at)
        cases[name] = victim
    jobs = [(tmp_path / n, tmp_path / f"{n}.out", "latest") for n in cases]
    res = dump(jobs)
    assert res.returncode == 2
    for name, victim in cases.items():
        err = (tmp_path / f"{name}.out" / "error.txt").read_text()
        rel = victim.relative_to(tmp_path / name).as_posix()
        assert rel in err, f"{name}: {err}"
        assert rel in res.stderr
        with pytest.raises(Exception):  # noqa: B017 - any of the Python reader's errors
            open_table(tmp_path / name).read()


def gc_collected_table(path: Path) -> int:
    """The scripted table without a sequence column at ``path``, six more versions, a
    compaction and a GC that collected its first versions; the oldest readable version."""
    write_no_seq(path, TableOptions.for_tests())
    t = open_table(path, options=TableOptions.for_tests())
    for i in range(6):
        t.apply([{"op": "upsert", "key": {"k1": i, "k2": "a"}, "set": {"v": -i}}])
    t.compact()
    t.gc(dry_run=False)
    oldest = open_table(path).oldest_version
    assert oldest > 0
    return oldest


def test_a_version_gc_removed_is_refused_naming_the_oldest(tmp_path: Path) -> None:
    path = tmp_path / "t"
    oldest = gc_collected_table(path)
    res = dump([(path, tmp_path / "out", "0")])
    assert res.returncode == 2
    assert "VersionNotRetainedException" in res.stderr
    assert f"oldest readable version is {oldest}" in res.stderr
