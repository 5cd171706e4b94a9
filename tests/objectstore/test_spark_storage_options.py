"""How the Spark sink, the ``cdc_sink`` source and the job carry an object store's
``storage_options``: a value that pickles and hashes but never shows a value in a
``repr``; reader options prefixed ``storage.``; the job's ``--storage-option``, which
refuses secrets (they come from the environment)."""

from __future__ import annotations

import pickle

import pytest
from pyspark import cloudpickle  # what Spark pickles tasks and Connect's functions with

from cdc_sink.errors import InvalidArgument
from cdc_sink.job.args import parse_args, parse_storage_options
from cdc_sink.spark._tables import storage_options_from
from cdc_sink.spark.options import SinkOptions, StorageOptions
from cdc_sink.spark.writer import default_app_id

SECRET = "s3cr3t-value-never-shown"


def test_storage_options_repr_names_keys_only() -> None:
    opts = SinkOptions(storage_options={"secret_access_key": SECRET, "endpoint": "http://e"})
    assert isinstance(opts.storage_options, StorageOptions)
    assert SECRET not in repr(opts) and "http://e" not in repr(opts)
    assert "secret_access_key" in repr(opts.storage_options)


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_storage_options_pickle_and_hash_as_their_items(dumps: object) -> None:
    opts = SinkOptions(storage_options={"region": "r", "endpoint": "http://e"})
    back = pickle.loads(dumps(opts))  # type: ignore[operator]
    assert back == opts and dict(back.storage_options) == {"region": "r", "endpoint": "http://e"}
    assert hash(back.storage_options) == hash(
        StorageOptions({"endpoint": "http://e", "region": "r"})
    )


def test_storage_options_take_str_only() -> None:
    with pytest.raises(InvalidArgument, match="'allow_http' does not"):
        StorageOptions({"allow_http": True})  # type: ignore[dict-item]


def test_reader_options_prefixed_storage_are_storage_options() -> None:
    got = storage_options_from({"path": "s3://b/t", "STORAGE.Region": "r", "storage.": "x"})
    assert dict(got) == {"region": "r"}


def test_the_default_app_id_of_a_url_is_the_url() -> None:
    assert default_app_id("s3://bucket/t/") == "cdc_sink:s3://bucket/t"


def test_job_storage_options_from_flags_and_a_settings_table(tmp_path: object) -> None:
    from pathlib import Path

    config = Path(str(tmp_path)) / "job.toml"
    config.write_text('[storage-option]\nregion = "r"\nallow_http = true\n')
    args = parse_args(
        [
            "--config",
            str(config),
            "--bootstrap-servers=b",
            "--topic=t",
            "--table-path=s3://b/t",
            "--storage-option",
            "Endpoint=http://e",
        ],
        environ={},
    )
    assert parse_storage_options(args.storage_option) == {
        "region": "r",
        "allow_http": "true",
        "endpoint": "http://e",
    }


@pytest.mark.parametrize(
    "key", ["secret_access_key", "aws_session_token", "service_account_key", "account_key"]
)
def test_job_refuses_a_secret_storage_option_without_showing_it(key: str) -> None:
    with pytest.raises(ValueError, match=f"--storage-option {key}: a secret") as info:
        parse_storage_options([f"{key}={SECRET}"])
    assert SECRET not in str(info.value)
