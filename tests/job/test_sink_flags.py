"""The job's sink flags are made from SinkOptions' fields: every field (nested decode and
table options included) has a flag, the flag's value reaches that field and no other,
today's flag names stay, and the settings file and the environment set them too; so a new
option cannot be forgotten by the job or ``cdc-sink run``."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

from cdc_sink import cli
from cdc_sink.job import build_parser, parse_args
from cdc_sink.job.runner import _sink_options
from cdc_sink.job.sink_flags import OptionFlag, _flag, option_flags, sink_options
from cdc_sink.kafka.properties import ClientProperties
from cdc_sink.spark import DecodeOptions, SinkOptions

REQUIRED = ["--bootstrap-servers", "k:9092", "--topic", "orders", "--table-path", "/data/o"]


def _leaf_fields(cls: type[Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every leaf field of an options dataclass, nested option dataclasses walked into."""
    hints = typing.get_type_hints(cls)
    out: set[tuple[str, ...]] = set()
    for f in dataclasses.fields(cls):
        nested = [
            t
            for t in (hints[f.name], *typing.get_args(hints[f.name]))
            if dataclasses.is_dataclass(t)
        ]
        if nested:
            out |= _leaf_fields(typing.cast(type, nested[0]), (*prefix, f.name))
        else:
            out.add((*prefix, f.name))
    return out


def _at(options: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        options = getattr(options, name)
    return options


def _with(options: Any, path: tuple[str, ...], value: Any) -> Any:
    """``options`` with the field ``path`` set to ``value`` (nested values rebuilt)."""
    if len(path) == 1:
        return dataclasses.replace(options, **{path[0]: value})
    inner = getattr(options, path[0])
    return dataclasses.replace(options, **{path[0]: _with(inner, path[1:], value)})


def _another_value(flag: OptionFlag) -> tuple[list[str], Any]:
    """Flags that set the field to a value other than its default, and that value."""
    if flag.kind == "choice":
        text = next(c for c in flag.choices if c != (flag.default or "none"))
        return [flag.flag, text], None if text == "none" else text
    if flag.kind == "bool":
        return ([flag.flag] if not flag.default else [f"--no-{flag.flag[2:]}"]), not flag.default
    if flag.kind == "int":
        value = 7 if flag.default is None else flag.default + 1
        return [flag.flag, str(value)], value
    if flag.kind == "float":
        value = 2.5 if flag.default is None else flag.default + 2.5
        return [flag.flag, str(value)], value
    if flag.kind == "str":
        return [flag.flag, "some-value"], "some-value"
    return [flag.flag, "region=eu-1", flag.flag, "endpoint=http://e"], {
        "region": "eu-1",
        "endpoint": "http://e",
    }


def test_every_field_of_the_options_has_a_flag() -> None:
    paths = [f.path for f in option_flags()]
    assert set(paths) == _leaf_fields(SinkOptions)
    assert len(paths) == len(set(paths))
    flags = [f.flag for f in option_flags()]
    assert len(flags) == len(set(flags))  # no two fields share a flag


def test_the_job_parser_has_every_sink_flag() -> None:
    options = {o for a in build_parser()._actions for o in a.option_strings}
    assert {f.flag for f in option_flags()} <= options


@pytest.mark.parametrize("flag", option_flags(), ids=lambda f: f.flag)
def test_each_flag_reaches_its_field_and_no_other(flag: OptionFlag) -> None:
    default = sink_options(build_parser().parse_args(REQUIRED))
    argv, value = _another_value(flag)
    got = sink_options(build_parser().parse_args([*REQUIRED, *argv]))
    assert _at(got, flag.path) == value
    assert got == _with(default, flag.path, value)


def test_without_flags_the_options_are_the_defaults() -> None:
    got = sink_options(build_parser().parse_args(REQUIRED))
    from cdc_sink.table import TableOptions

    assert got == SinkOptions(table=TableOptions())


@pytest.mark.parametrize(
    "flag",
    [
        "--format",
        "--app-id",
        "--apply-mode",
        "--json-decoder",
        "--decoder-option",
        "--decode-processes",
        "--decode-in",
        "--storage-option",
        "--page-compression",
        "--wal-compression",
        "--retain-versions",
        "--retain-seconds",
    ],
)
def test_the_flags_the_job_had_keep_their_names(flag: str) -> None:
    assert flag in {f.flag for f in option_flags()}


def test_the_help_is_the_fields_docstring() -> None:
    flags = {f.flag: f for f in option_flags()}
    assert flags["--page-rows"].help == "Rows per page (fixed at creation)"
    assert flags["--stats-limit"].help == "How many per-batch stats SinkFunction.stats keeps"
    assert all(f.help for f in option_flags())  # every field has its docstring
    text = " ".join(build_parser().format_help().split())
    assert "Rows per page (fixed at creation) (default 65536)" in text
    assert "(default 0o640)" in text  # --file-mode shown as permission bits


def test_the_environment_and_the_settings_file_set_sink_flags(tmp_path: Path) -> None:
    config = tmp_path / "job.toml"
    config.write_text("tablet-compact-every = 5\n[decoder-option]\nstrict = false\n")
    args = parse_args(
        [*REQUIRED, "--config", str(config)],
        environ={"CDC_SINK_BUCKET_PARTITIONED": "true", "CDC_SINK_PAGE_COMPRESSION": "none"},
    )
    got = sink_options(args)
    assert got.bucket_partitioned is True
    assert got.table is not None and got.table.page_compression is None
    assert got.table.compact_every == 5
    assert dict(got.decode.options) == {"strict": False}


def test_a_bad_value_names_its_flag() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*REQUIRED, "--decode-processes", "two"])
    with pytest.raises(ValueError, match="--storage-option secret_access_key"):
        sink_options(
            build_parser().parse_args([*REQUIRED, "--storage-option", "secret_access_key=s"])
        )


def test_a_field_no_flag_reads_is_an_error_not_a_missing_flag() -> None:
    with pytest.raises(TypeError, match="no flag reads SinkOptions field x"):
        _flag(("x",), list[int], [], "")


def test_the_job_adds_its_app_id_and_decoder_options() -> None:
    args = parse_args(
        [*REQUIRED, "--allow-truncate", "--decoder-option", "strict=false", "--format", "json"],
        environ={},
    )
    got = _sink_options(args, "cdc_to_tablets:/ckpt", ClientProperties.load(None, environ={}))
    assert got.app_id == "cdc_to_tablets:/ckpt"
    assert got.decode == DecodeOptions(options={"strict": False, "allow_truncate": True})
    got.checked()  # a value the sink takes


def test_the_demo_takes_the_same_format_apply_mode_and_decoder_flags() -> None:
    args = cli.build_parser().parse_args(
        ["demo", "--format", "debezium", "--apply-mode", "executors", "--decoder-option", "a=1"]
    )
    assert (args.format, args.apply_mode, args.decoder_option) == (
        "debezium",
        "executors",
        ["a=1"],
    )


_WITHOUT_PYSPARK = """
import contextlib, importlib.abc, io, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pyspark":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
from cdc_sink import cli
from cdc_sink.job import build_parser, parse_args
text = " ".join(build_parser().format_help().split())
assert "--bootstrap-servers" in text and "--format" in text, text
assert "pip install 'cdc_sink[spark]'" in text, text
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        parse_args(["--bootstrap-servers", "k", "--topic", "t", "--table-path", "/t"], environ={})
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("the job parsed its flags without pyspark")
assert "cdc_sink[spark]" in err.getvalue(), err.getvalue()
with contextlib.redirect_stderr(err):
    assert cli.main(["demo"]) == 1
print("ok")
"""


def test_without_pyspark_the_help_says_which_extra_the_sink_flags_need() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYSPARK], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr
