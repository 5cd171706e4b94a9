"""The sink's one configuration value: ``SinkOptions`` is frozen all the way down,
survives pickling (a Spark Connect server or an executor may carry it), is checked once
with every bad combination refused by a typed error (no Spark session needed)."""

from __future__ import annotations

import pickle
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from cdc_sink.errors import InvalidArgument, InvalidOption
from cdc_sink.spark import DecodeOptions, SinkOptions, sink
from cdc_sink.table import TableOptions
from tests.fixtures import ID_A_B


def test_options_are_frozen_all_the_way_down() -> None:
    opts = SinkOptions(decode=DecodeOptions(options={"strict": False}))
    with pytest.raises(FrozenInstanceError):
        opts.format = "rowv2"  # type: ignore[misc]
    with pytest.raises(TypeError):
        opts.decode.options["strict"] = True  # type: ignore[index]


def test_options_pickle_to_an_equal_value() -> None:
    opts = SinkOptions(
        format="debezium",
        app_id="job",
        apply_mode="executors",
        decode=DecodeOptions(options={"decimal_handling": "string"}),
        table=TableOptions(retain_versions=7),
    ).checked()
    back = pickle.loads(pickle.dumps(opts))
    assert back == opts
    assert dict(back.decode.options) == {"decimal_handling": "string"}


@pytest.mark.parametrize(
    ("options", "resolved"),
    [
        (SinkOptions(), "driver"),
        (SinkOptions(apply_mode="executors"), "executors"),
        (SinkOptions(decode=DecodeOptions(where="executors")), "executors"),
    ],
)
def test_checked_resolves_where_values_are_decoded(options: SinkOptions, resolved: str) -> None:
    checked = options.checked()
    assert checked.decode.where == checked.decode_in == resolved
    assert checked.checked() == checked  # checking twice changes nothing


@pytest.mark.parametrize(
    ("options", "option"),
    [
        (SinkOptions(format="avro"), "format"),  # type: ignore[arg-type]
        (SinkOptions(apply_mode="cluster"), "apply_mode"),  # type: ignore[arg-type]
        (SinkOptions(decode=DecodeOptions(json_decoder="rust")), "json_decoder"),  # type: ignore[arg-type]
        (SinkOptions(bucket_partitioned=True), "bucket_partitioned"),
        (SinkOptions(apply_mode="executors", decode=DecodeOptions(where="driver")), "decode_in"),
        (SinkOptions(decode=DecodeOptions(processes=-1)), "decode_processes"),
        (
            SinkOptions(apply_mode="executors", decode=DecodeOptions(processes=2)),
            "decode_processes",
        ),
        (SinkOptions(decode=DecodeOptions(options={"nope": 1})), "nope"),
        (
            SinkOptions(decode=DecodeOptions(json_decoder="jvm", options={"strict": False})),
            "decoder_options",
        ),
    ],
)
def test_checked_refuses_each_bad_option_by_name(options: SinkOptions, option: str) -> None:
    with pytest.raises(InvalidOption) as e:
        options.checked()
    assert option in (e.value.option, str(e.value)) or option in str(e.value)


def test_a_non_int_process_count_is_a_type_error() -> None:
    with pytest.raises(InvalidArgument, match="decode_processes must be an int"):
        SinkOptions(decode=DecodeOptions(processes="2")).checked()  # type: ignore[arg-type]


def test_the_sink_keeps_the_checked_options_and_names_its_writer(tmp_path: Path) -> None:
    fn = sink(tmp_path / "t", schema=ID_A_B, options=SinkOptions(apply_mode="executors"))
    try:
        assert fn.options.apply_mode == "executors"
        assert fn.options.decode.where == "executors"
        assert fn.options.app_id == fn.app_id == f"cdc_sink:{tmp_path / 't'}"
    finally:
        fn.close()


def test_a_bad_option_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(InvalidOption):
        sink(tmp_path / "t", schema=ID_A_B, options=SinkOptions(apply_mode="cluster"))  # type: ignore[arg-type]
    assert not (tmp_path / "t").exists()
