"""Issue 49, findings 4 and 11: a table URL with user info is refused without being
shown, obstore's errors are scrubbed of option values, delta-rs's spellings of the client
keys are accepted, and no pyo3 panic escapes as a ``BaseException``; on a real S3
endpoint, the credentials appear in no repr, error, log record or table file."""

from __future__ import annotations

import argparse
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import obstore
import obstore.store
import pytest

import cdc_sink
from cdc_sink.errors import CdcSinkError
from cdc_sink.job.args import parse_storage_options
from cdc_sink.spark.writer import default_app_id
from cdc_sink.storage.objectstore import (
    ObjectStore,
    StoreAccessDenied,
    StoreConfigError,
    StoreIOError,
    cloud,
    store_for,
)
from cdc_sink.storage.objectstore.urls import parse_store_url
from cdc_sink_testkit.s3 import SeaweedS3
from tests.durability import workload
from tests.security.shown import logged

SECRET = "wJalrXUtnFEMI-K7MDENG-SECRET"


# ---------------------------------------------------------------- finding 4: URLs


@pytest.mark.parametrize(
    "url",
    [
        f"s3://AKIAEXAMPLE:{SECRET}@bucket/t",
        f"s3://AKIAEXAMPLE:{SECRET}/ab+cd@bucket/t",  # AWS secrets hold '/' and '+'
        f"s3://AKIAEXAMPLE:1234/{SECRET}@bucket/t",
        f"s3://AKIAEXAMPLE:p@{SECRET}@bucket/t",
        f"s3://{SECRET}@bucket/t",
        f"gs://svc:{SECRET}@bucket/t",
        f"abfss://user:{SECRET}@account.dfs.core.windows.net/t",
        f"az://container/t?sv=2024&sig={SECRET}",
        f"file://u:{SECRET}@localhost/tmp/t",
    ],
)
def test_a_table_url_with_credentials_is_refused_without_showing_them(url: str) -> None:
    with pytest.raises(StoreConfigError) as err:
        store_for(url, check_conditional_writes=False)
    assert SECRET not in str(err.value) and "AKIAEXAMPLE" not in str(err.value)
    with pytest.raises(StoreConfigError) as err:
        default_app_id(url)  # the writer id of every log entry
    assert SECRET not in str(err.value)


def test_an_abfs_container_at_account_is_no_user_info() -> None:
    where = parse_store_url("abfss://container@account.dfs.core.windows.net/t")
    assert where.bucket == "container"


def test_an_endpoint_with_user_info_is_refused_without_showing_it() -> None:
    with pytest.raises(StoreConfigError, match="no user info") as err:
        store_for(
            "s3://bucket/t",
            {"endpoint": f"http://minio:{SECRET}@127.0.0.1:9000"},
            check_conditional_writes=False,
        )
    assert SECRET not in str(err.value)


@pytest.mark.parametrize(
    "options",
    [
        {"allow_http": SECRET},
        {"timeout": SECRET},
        {"skip_signature": SECRET},
        {"checksum_algorithm": SECRET},
        {"conditional_put": SECRET},
    ],
)
def test_obstore_errors_that_echo_an_option_value_are_scrubbed(options: dict[str, str]) -> None:
    with pytest.raises(StoreConfigError) as err:
        store_for("s3://bucket/t", options, check_conditional_writes=False)
    assert SECRET not in logged(err.value)


# ---------------------------------------------------------------- finding 11: keys, panics


@pytest.mark.parametrize(
    "key", ["AWS_ALLOW_HTTP", "aws_allow_http", "ALLOW_HTTP", "GOOGLE_ALLOW_HTTP"]
)
def test_delta_spellings_of_client_keys_are_accepted(key: str) -> None:
    store = store_for("s3://bucket/t", {key: "true"}, check_conditional_writes=False)
    assert isinstance(store, cloud.ObstoreStore)


def test_a_client_key_obstore_panics_on_is_a_store_config_error() -> None:
    # obstore knows this client key and cdc_sink does not map it: pyo3 panics
    try:
        store_for("s3://bucket/t", {"AWS_HTTP2_MAX_FRAME_SIZE": "1"})
    except Exception as exc:  # the point: `except Exception` sees it
        assert isinstance(exc, StoreConfigError)
        assert "AWS_HTTP2_MAX_FRAME_SIZE" in str(exc)
    else:
        pytest.fail("no error")


def _panic_class() -> type[BaseException]:
    """pyo3's PanicException, taken from a real panic of obstore."""
    try:
        config: Any = {"AWS_ALLOW_HTTP": "true"}
        obstore.store.from_url("s3://bucket/t", config=config)
    except BaseException as exc:
        assert type(exc).__name__ == "PanicException"
        return type(exc)
    raise AssertionError("obstore no longer panics on AWS_ALLOW_HTTP")


def test_a_panic_during_a_call_is_a_store_io_error(monkeypatch: pytest.MonkeyPatch) -> None:
    panic = _panic_class()
    store = store_for("s3://bucket/t", check_conditional_writes=False)

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise panic(f"boom {SECRET}")

    monkeypatch.setattr(obstore, "get", explode)
    with pytest.raises(StoreIOError, match="outcome of a write is unknown"):
        store.get("k")


def test_only_a_panic_is_caught_not_every_base_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("cdc_sink.storage.objectstore.cloud.from_url", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store_for("s3://bucket/t", check_conditional_writes=False)


# ---------------------------------------------------------------- the scan, on real S3


@pytest.fixture
def captured(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record of every logger, from DEBUG up."""
    with caplog.at_level(logging.DEBUG):
        yield caplog


def _all_bytes(store: ObjectStore) -> Iterator[tuple[str, bytes]]:
    for info in store.list(""):
        yield info.key, store.get(info.key)


def test_the_credentials_appear_in_no_repr_error_log_record_or_table_file(
    s3_server: SeaweedS3, captured: pytest.LogCaptureFixture
) -> None:
    secret = s3_server.storage_options()["secret_access_key"]
    url = s3_server.url(f"t-{uuid.uuid4().hex}")
    options = s3_server.storage_options()
    table = cdc_sink.create_table(url, workload.schema(), storage_options=options)
    for i in range(3):
        table.apply(workload.batch(1, i), app_id=workload.APP_ID, batch_id=i)
    shown = [repr(table), repr(store_for(url, options))]
    for bad in (
        {**options, "secret_access_key": secret + "-wrong"},  # refused credentials
        {**options, "timeout": secret},  # a value obstore echoes
    ):
        with pytest.raises(CdcSinkError) as err:
            cdc_sink.open_table(url, storage_options=bad).apply(
                workload.batch(1, 9), app_id="other", batch_id=0
            )
        assert isinstance(err.value, (StoreAccessDenied, StoreConfigError))
        shown.append(logged(err.value))
    shown += [logging.Formatter().format(r) for r in captured.records]
    assert not [s for s in shown if secret in s]
    files = dict(_all_bytes(store_for(url, options)))
    assert any(k.startswith("_log/") for k in files)
    assert [k for k, data in files.items() if secret.encode() in data] == []


def test_the_job_refuses_a_secret_storage_option_by_name_and_by_value() -> None:
    assert parse_storage_options(["access_key_id=AKIAEXAMPLE", "region=eu-1"]) == {
        "access_key_id": "AKIAEXAMPLE",
        "region": "eu-1",
    }
    for item in (f"secret_access_key={SECRET}", f"endpoint=http://minio:{SECRET}@h:9000"):
        with pytest.raises(ValueError, match="a secret is not taken") as err:
            parse_storage_options([item])
        assert SECRET not in str(err.value)


def test_the_job_refuses_a_checkpoint_url_with_user_info() -> None:
    # the checkpoint names the job's app id, written into every log entry of the table
    from cdc_sink.job.runner import _table_and_checkpoint

    args = argparse.Namespace(
        table_path="s3://bucket/t", checkpoint=f"s3a://AKIA:{SECRET}@bucket/chk", app_id=None
    )
    with pytest.raises(ValueError, match="no user info") as err:
        _table_and_checkpoint(args)
    assert SECRET not in str(err.value)
    args.checkpoint = "s3a://bucket/chk"
    assert _table_and_checkpoint(args)[2] == "cdc_to_tablets:s3a://bucket/chk"
