"""The typed facade of cdc_sink.spark: lazy exports, argument checks of ``sink`` (one
options value; a removed keyword names the field that replaces it), and the
offsets helpers both apply modes share (no Spark session needed)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cdc_sink.spark
from cdc_sink.errors import InvalidArgument, InvalidOption
from cdc_sink.spark import DecodeOptions, SinkFunction, SinkOptions, sink
from cdc_sink.spark._batch import end_offsets, merge_offsets
from cdc_sink.spark.writer import REMOVED_KEYWORDS, TableWriter

SCHEMA = {
    "columns": [{"name": "id", "type": "int64", "nullable": False}],
    "primary_key": ["id"],
    "num_buckets": 2,
}


def test_importing_the_package_imports_no_pyspark() -> None:
    code = (
        "import sys, cdc_sink.spark as s; assert 'pyspark' not in sys.modules; "
        "s.sink; s.SinkFunction; assert 'pyspark' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_lazy_exports_are_the_real_objects() -> None:
    from cdc_sink.spark import writer

    assert cdc_sink.spark.sink is writer.sink
    assert cdc_sink.spark.SinkFunction is writer.SinkFunction
    assert "sink" in dir(cdc_sink.spark)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cdc_sink.spark.nope  # noqa: B018


def test_sink_creates_the_table_and_returns_a_sink_function(tmp_path: Path) -> None:
    fn = sink(
        tmp_path / "t",
        schema=SCHEMA,
        options=SinkOptions(format="debezium", apply_mode="executors"),
    )
    assert isinstance(fn, SinkFunction)
    assert (fn.format, fn.apply_mode, fn.app_id) == (
        "debezium",
        "executors",
        f"cdc_sink:{tmp_path / 't'}",
    )
    assert fn.table.schema.num_buckets == 2
    assert sink(tmp_path / "t").table.version == fn.table.version  # opened, not created


@pytest.mark.parametrize(
    ("options", "option"),
    [
        (SinkOptions(format="avro"), "format"),  # type: ignore[arg-type]
        (SinkOptions(apply_mode="cluster"), "apply_mode"),  # type: ignore[arg-type]
        (
            SinkOptions(decode=DecodeOptions(json_decoder="jvm", options={"x": 1})),
            "decoder_options",
        ),
    ],
)
def test_bad_options_raise_invalid_option(
    tmp_path: Path, options: SinkOptions, option: str
) -> None:
    with pytest.raises(InvalidOption) as info:
        sink(tmp_path / "t", SCHEMA, options=options)
    assert info.value.option == option
    assert isinstance(info.value, ValueError)  # callers catching ValueError still do


@pytest.mark.parametrize("keyword", sorted(REMOVED_KEYWORDS))
def test_a_removed_keyword_is_a_type_error_naming_the_field_that_replaces_it(
    tmp_path: Path, keyword: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        sink(tmp_path / "t", SCHEMA, **{keyword: None})  # type: ignore[arg-type]
    assert isinstance(info.value, TypeError)  # as Python's own unknown-keyword error
    assert f"{keyword}= is now {REMOVED_KEYWORDS[keyword]}" in str(info.value)
    assert not (tmp_path / "t").exists()  # refused before anything is created


def test_each_removed_keyword_names_a_field_of_the_options() -> None:
    for keyword, instead in REMOVED_KEYWORDS.items():
        path = instead.removeprefix("SinkOptions(").split("=")[0]
        nested = instead.partition("DecodeOptions(")[2].split("=")[0]
        assert path in {f.name for f in fields(SinkOptions)}, keyword
        if path == "decode":
            assert nested in {f.name for f in fields(DecodeOptions)}, keyword


def test_an_unknown_keyword_names_the_arguments_sink_takes(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="sink takes path, schema, dead_letter, options"):
        sink(tmp_path / "t", SCHEMA, dead_letters=None)  # type: ignore[call-arg]


def test_options_of_another_type_are_a_type_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="options must be a SinkOptions, not dict"):
        sink(tmp_path / "t", SCHEMA, options={"format": "json"})  # type: ignore[arg-type]


def test_no_table_and_no_schema_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no table at"):
        sink(tmp_path / "missing")


def test_end_offsets_are_the_offset_after_each_partitions_last_record() -> None:
    got = end_offsets(
        pa.array(["a", "a", "b", "a"]),
        pa.array([0, 1, 0, 0], pa.int32()),
        pa.array([5, 2, 9, 7], pa.int64()),
    )
    assert got == {"a": {"0": 8, "1": 3}, "b": {"0": 10}}
    assert (
        end_offsets(pa.array([], pa.string()), pa.array([], pa.int32()), pa.array([], pa.int64()))
        == {}
    )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", None]),
            st.one_of(st.integers(0, 2), st.none()),
            st.one_of(st.integers(0, 10**12), st.none()),
        ),
        min_size=1,
        max_size=30,
    ),
    st.booleans(),
)
def test_end_offsets_equal_a_plain_reference_whatever_the_records(
    records: list[tuple[str | None, int | None, int | None]], chunked: bool
) -> None:
    """One topic-partition (the numpy path) or several, nulls (left out), chunked
    columns: the offset after each partition's largest."""
    want: dict[str, dict[str, int]] = {}
    for t, p, o in records:
        if t is not None and p is not None and o is not None:
            part = want.setdefault(t, {})
            part[str(p)] = max(part.get(str(p), 0), o + 1)
    t, p, o = zip(*records, strict=True)
    cols = [pa.array(t, pa.string()), pa.array(p, pa.int32()), pa.array(o, pa.int64())]
    if chunked:
        cols = [pa.chunked_array([c.slice(0, 1), c.slice(1)]) for c in cols]
    assert end_offsets(*cols) == want


def test_merge_offsets_keeps_the_larger_offset_of_a_partition() -> None:
    into = {"a": {"0": 8, "1": 3}}
    assert merge_offsets(into, {"a": {"0": 4, "2": 1}, "b": {"0": 2}}) == {
        "a": {"0": 8, "1": 3, "2": 1},
        "b": {"0": 2},
    }


def test_the_sink_routes_each_batch_to_its_one_tables_writer(tmp_path: Path) -> None:
    fn = sink(tmp_path / "t", SCHEMA, options=SinkOptions(app_id="w"))
    assert isinstance(fn.writer, TableWriter)
    batch = object()  # the router does not look into a one-table batch
    assert fn._route(batch) == [(fn.writer, batch)]  # type: ignore[arg-type]
    written: list[tuple[object, int]] = []
    fn.writer.write = lambda df, batch_id: written.append((df, batch_id))  # type: ignore[method-assign]
    fn(batch, 3)  # type: ignore[arg-type]
    assert written == [(batch, 3)]


def test_the_sink_shows_its_writers_state(tmp_path: Path) -> None:
    fn = sink(tmp_path / "t", SCHEMA, options=SinkOptions(app_id="w"))
    w = fn.writer
    assert (fn.path, fn.options, fn.app_id, fn.table) == (w.path, w.options, w.app_id, w.table)
    assert fn.stats is w.stats and fn.gc_floor() == w.gc_floor()

    def observe(st: object) -> None:
        return None

    fn.on_batch = observe
    fn.dead_letters = 2
    assert (w.on_batch, w.dead_letters) == (observe, 2)
