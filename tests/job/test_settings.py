"""The job's settings from a TOML file and ``CDC_SINK_*`` environment variables: every
long flag is a key and a variable, checked as the flag would be; flags win over the
environment, the environment over the file, the file over the defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_sink.job import build_parser, parse_args

REQUIRED = ["--bootstrap-servers", "k:9092", "--topic", "orders", "--table-path", "/data/o"]


def _toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.toml"
    path.write_text(text)
    return str(path)


def test_a_settings_file_gives_every_flag_even_the_required_ones(tmp_path: Path) -> None:
    config = _toml(
        tmp_path,
        'bootstrap-servers = "k1:9092,k2:9092"\n'
        'topic = "orders"\n'
        'table_path = "s3://bucket/orders"\n'
        'format = "debezium-avro"\n'
        "compact-every = 50\n"
        "allow-truncate = false\n"
        'kafka-option = ["kafka.client.id=job-1", "minPartitions=8"]\n'
        'decoder-option = ["schema_evolution=add_columns"]\n',
    )
    args = parse_args(["--config", config], environ={})
    assert args.bootstrap_servers == "k1:9092,k2:9092" and args.topic == "orders"
    assert args.table_path == "s3://bucket/orders" and args.format == "debezium-avro"
    assert args.compact_every == 50 and args.allow_truncate is False
    assert args.kafka_option == ["kafka.client.id=job-1", "minPartitions=8"]
    assert args.decoder_option == ["schema_evolution=add_columns"]
    # what the file does not set keeps the flag's default
    assert args.trigger == build_parser().parse_args(REQUIRED).trigger


def test_flags_win_over_the_environment_which_wins_over_the_file(tmp_path: Path) -> None:
    config = _toml(tmp_path, 'topic = "from-file"\ngc-every = 7\napply-mode = "executors"\n')
    env = {"CDC_SINK_TOPIC": "from-env", "CDC_SINK_GC_EVERY": "9", "CDC_SINK_ALLOW_TRUNCATE": "yes"}
    args = parse_args(
        ["--config", config, "--bootstrap-servers", "k", "--table-path", "/t"], environ=env
    )
    assert args.topic == "from-env" and args.gc_every == 9 and args.apply_mode == "executors"
    assert args.allow_truncate is True
    args = parse_args(
        ["--config", config, "--bootstrap-servers", "k", "--table-path", "/t", "--topic", "cli"],
        environ=env,
    )
    assert args.topic == "cli"


def _error(capsys: pytest.CaptureFixture[str], argv: list[str], env: dict[str, str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv, environ=env)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_bad_values_are_refused_naming_where_they_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad_choice = _toml(tmp_path, 'format = "protobuf"\n')
    err = _error(capsys, ["--config", bad_choice, *REQUIRED], {})
    assert "job.toml', 'format'" in err and "--format must be one of" in err and "protobuf" in err
    err = _error(capsys, REQUIRED, {"CDC_SINK_COMPACT_EVERY": "often"})
    assert "$CDC_SINK_COMPACT_EVERY" in err and "--compact-every" in err
    err = _error(capsys, REQUIRED, {"CDC_SINK_ALLOW_TRUNCATE": "maybe"})
    assert "$CDC_SINK_ALLOW_TRUNCATE" in err and "true or false" in err
    unknown = _toml(tmp_path, 'topik = "orders"\n')
    assert "unknown setting 'topik'" in _error(capsys, ["--config", unknown, *REQUIRED], {})
    broken = _toml(tmp_path, "topic = \n")
    assert "--config" in _error(capsys, ["--config", broken, *REQUIRED], {})
    missing = str(tmp_path / "nope.toml")
    assert "nope.toml" in _error(capsys, ["--config", missing, *REQUIRED], {})


def test_without_file_or_environment_the_required_flags_stay_required(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = _error(capsys, ["--topic", "t", "--table-path", "/x"], {})
    assert "--bootstrap-servers" in err


def test_cdc_sink_run_and_python_m_cdc_sink_job_are_the_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cdc_sink.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["run", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: cdc_to_tablets") and "--client-properties" in out
    assert "--config" in out and "--master" in out
