"""A snapshot's pages (and their statistics) are encoded in parallel and appended in order
(cdc_sink.storage.pages.encoded_pages, PageFileWriter.queue/write_queued): the blobs and
CRCs equal the one-thread encoding whatever the codecs, compressed pages really encode
in overlapping threads, the encoders never run far ahead of the writer, a failed write
encodes nothing more, and a snapshot written in parallel reads back exactly."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.filters import PageStats, page_stats
from cdc_sink.storage import fsutil, pages
from cdc_sink.storage.objectstore import local
from cdc_sink.storage.pages import (
    PAGE_CODECS,
    EncodedPage,
    PageFileWriter,
    PageJob,
    PageReader,
    page_array,
    page_blob,
)
from cdc_sink.table import TableOptions, create_table, open_table
from tests.fixtures import ID_A_B
from tests.model import table_to_rows


@pytest.fixture(autouse=True)
def small_pages_in_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """These pages are small: let them take the threads whatever their size."""
    monkeypatch.setattr(pages, "MIN_PARALLEL_ROWS", 0)


def _jobs(n: int) -> list[PageJob]:
    rng = np.random.default_rng(7)
    arrays: list[pa.Array] = [
        pa.array(rng.integers(0, 1000, 5000)),
        pa.array([None if i % 4 == 0 else f"s{i % 31}" for i in range(3000)]),
        pa.array(rng.random(2000)),
        pa.array([], pa.int32()),
    ]
    return [PageJob(arrays[i % len(arrays)], PAGE_CODECS[i % len(PAGE_CODECS)]) for i in range(n)]


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_parallel_encoding_equals_one_thread_in_order(threads: int) -> None:
    jobs = _jobs(23)
    got = list(pages.encoded_pages(jobs, threads))
    assert len(got) == len(jobs)
    for (arr, codec, _), (blob, crc, _) in zip(jobs, got, strict=True):
        assert blob.to_pybytes() == page_blob(arr, codec).to_pybytes()
        assert crc == google_crc32c.value(blob)
        assert page_array(blob).equals(arr)


def test_compressed_pages_encode_in_overlapping_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    both_in = threading.Barrier(2, timeout=10)  # passes only if two encodes run at once
    names: list[str] = []
    encode = pages._encoded

    def encoded(job: PageJob) -> EncodedPage:
        names.append(threading.current_thread().name)
        if len(names) <= 2:
            both_in.wait()
        return encode(job)

    monkeypatch.setattr(pages, "_encoded", encoded)
    jobs = [PageJob(pa.array([i] * 100), "zstd") for i in range(6)]
    got = [enc.blob for enc in pages.encoded_pages(jobs, 2)]
    assert [page_array(b)[0].as_py() for b in got] == list(range(6))
    assert all(n.startswith("cdc_sink-encode") for n in names)


@pytest.mark.parametrize(
    "codec,stats,min_rows",
    [
        (None, None, 0),  # copies only
        (None, PageStats(0, 1, 0, 1), 0),  # statistics already known: copies only
        ("zstd", None, 1000),  # a small snapshot (100 rows in all)
    ],
)
def test_pages_encode_in_the_calling_thread_when_threads_would_not_pay(
    monkeypatch: pytest.MonkeyPatch, codec: Any, stats: PageStats | None, min_rows: int
) -> None:
    monkeypatch.setattr(pages, "MIN_PARALLEL_ROWS", min_rows)
    names: list[str] = []
    encode = pages._encoded

    def encoded(job: PageJob) -> EncodedPage:
        names.append(threading.current_thread().name)
        return encode(job)

    monkeypatch.setattr(pages, "_encoded", encoded)
    list(pages.encoded_pages([PageJob(pa.array(range(10)), codec, stats) for _ in range(10)], 4))
    assert names == [threading.current_thread().name] * 10


def test_statistics_are_computed_in_the_encoding_threads_and_recorded(tmp_path: Path) -> None:
    names: list[str] = []
    arrays = [pa.array(np.arange(i, i + 50, dtype=np.int64)) for i in range(6)]

    def stats_of(arr: pa.Array) -> PageStats:
        names.append(threading.current_thread().name)
        return page_stats(arr)

    w = PageFileWriter(str(tmp_path), "p/1.pages")
    for arr in arrays:  # uncompressed: only the statistics call for threads
        w.queue(arr, lambda arr=arr: stats_of(arr))
    locs = w.write_queued(2)
    w.finish()
    assert all(n.startswith("cdc_sink-encode") for n in names) and len(names) == 6
    assert [(loc.min, loc.max, loc.null_count) for loc in locs] == [
        (i, i + 49, 0) for i in range(6)
    ]


def test_encoders_stay_a_few_pages_ahead_and_stop_when_the_writer_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[int] = []
    encode = pages._encoded

    def encoded(job: PageJob) -> EncodedPage:
        started.append(job.array[0].as_py())
        return encode(job)

    monkeypatch.setattr(pages, "_encoded", encoded)
    jobs = [PageJob(pa.array([i]), "lz4") for i in range(100)]
    gen = pages.encoded_pages(jobs, 2)
    next(gen)
    assert len(started) <= 2 * pages._AHEAD_PER_THREAD + 1
    gen.close()  # the writer failed: the rest is never encoded
    assert len(started) <= 2 * pages._AHEAD_PER_THREAD + 1


def test_queued_pages_are_written_in_queue_order_and_read_back(tmp_path: Path) -> None:
    w = PageFileWriter(str(tmp_path), "p/0.pages")
    first = w.add(b"raw blob", 1, None)
    jobs = _jobs(9)
    idx = [w.queue(arr, None, codec) for arr, codec, _ in jobs]
    assert idx == list(range(9))
    locs = w.write_queued(2)
    assert w.finish() == (tmp_path / "p/0.pages").stat().st_size
    assert [loc.offset for loc in locs] == sorted(loc.offset for loc in locs)
    assert locs[0].offset == first.length
    reader = PageReader(str(tmp_path))
    for (arr, _, _), loc in zip(jobs, locs, strict=True):
        assert loc.rows == len(arr)
        assert reader.array(loc, check_rows=True).equals(arr)
    assert w.write_queued(2) == []  # the queue was emptied


def test_a_large_page_file_starts_the_writeback_of_each_step_as_it_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer (a local store's new file) asks the kernel to start writing every
    ``WRITEBACK_BYTES`` it appended (consecutive ranges, each at least a step), with the
    real ``sync_file_range``; the file then reads back exactly and its size is what
    ``finish`` reports."""
    monkeypatch.setattr(local, "WRITEBACK_BYTES", 20_000)
    ranges: list[tuple[int, int]] = []

    def recording(file: Any, offset: int, length: int) -> None:
        ranges.append((offset, length))
        fsutil.start_writeback(file, offset, length)

    monkeypatch.setattr(local, "start_writeback", recording)
    w = PageFileWriter(str(tmp_path), "p/0.pages")
    jobs = _jobs(12)
    for arr, codec, _ in jobs:
        w.queue(arr, None, codec)
    locs = w.write_queued(2)
    size = w.finish()
    assert size == (tmp_path / "p/0.pages").stat().st_size
    assert len(ranges) >= 2
    ends = [o + n for o, n in ranges]
    assert [o for o, _ in ranges] == [0, *ends[:-1]]  # consecutive, from the start
    assert all(n >= 20_000 for _, n in ranges) and ends[-1] <= size
    reader = PageReader(str(tmp_path))
    for (arr, _, _), loc in zip(jobs, locs, strict=True):
        assert reader.array(loc, check_rows=True).equals(arr)


@pytest.mark.skipif(sys.platform != "linux", reason="sync_file_range is Linux's")
def test_start_writeback_calls_the_kernel_and_changes_no_byte(tmp_path: Path) -> None:
    fn = fsutil._sync_file_range()
    assert fn is not None
    path = tmp_path / "f"
    with open(path, "wb") as f:
        f.write(b"x" * 100_000)
        f.flush()
        assert fn(f.fileno(), 0, 100_000, 2) == 0  # the real call succeeds here
        fsutil.start_writeback(f, 0, 100_000)
        f.write(b"y")
    assert path.read_bytes() == b"x" * 100_000 + b"y"


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_bulk_load_written_in_parallel_reads_back_exactly(tmp_path: Path, codec: Any) -> None:
    schema = {**ID_A_B, "num_buckets": 1}
    opts = TableOptions(page_rows=256, bulk_events=1000, page_compression=codec)
    t = create_table(str(tmp_path / "t"), schema, options=opts)
    n = 10_000
    data = pa.table(
        {"id": range(n), "a": [i * 3 for i in range(n)], "b": [f"v{i % 9}" for i in range(n)]}
    )
    events = [
        {"op": "insert", "key": {"id": i}, "set": {"a": i * 3, "b": f"v{i % 9}"}} for i in range(n)
    ]
    v = t.apply(events).version
    assert any((tmp_path / "t" / "_snapshots").rglob("*.manifest"))  # the bulk path wrote it
    want = table_to_rows(data, ["id"])
    assert table_to_rows(t.read(version=v), ["id"]) == want
    assert table_to_rows(open_table(str(tmp_path / "t")).read(version=v), ["id"]) == want
