"""Bad configuration is a clear CdcSinkError, found when the store is opened and before
anything of a table is written: unknown scheme, malformed URL, missing bucket, wrong
credentials, an unknown option, and an endpoint that does not honour conditional creates
(refused outright, or silently ignored)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cdc_sink.errors import CdcSinkError
from cdc_sink.storage.objectstore import (
    BucketNotFound,
    ConditionalWritesUnsupported,
    StoreAccessDenied,
    StoreConfigError,
    store_for,
)
from cdc_sink.storage.objectstore.cloud import PROBE_PREFIX, ObstoreStore
from cdc_sink.storage.objectstore.local import LocalStore
from cdc_sink.storage.objectstore.urls import parse_store_url
from cdc_sink.utils.extras import MissingExtra
from cdc_sink_testkit.s3 import SeaweedS3
from tests.objectstore.proxy import IgnoringConditionalPuts

# ---------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    ("url", "kind", "bucket", "prefix"),
    [
        ("s3://bkt/some/table", "s3", "bkt", "some/table"),
        ("s3a://bkt/t/", "s3", "bkt", "t"),
        ("s3://bkt", "s3", "bkt", ""),
        ("gs://gbkt/t", "gcs", "gbkt", "t"),
        ("az://container/deep/t", "azure", "container", "deep/t"),
        ("abfss://container@account.dfs.core.windows.net/t", "azure", "container", "t"),
    ],
)
def test_object_store_urls_name_their_service_bucket_and_prefix(
    url: str, kind: str, bucket: str, prefix: str
) -> None:
    parsed = parse_store_url(url)
    assert (parsed.kind, parsed.bucket, parsed.prefix) == (kind, bucket, prefix)


def test_plain_paths_and_file_urls_open_a_local_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for url, root in [
        (str(tmp_path / "a"), tmp_path / "a"),
        ("rel/b", tmp_path / "rel" / "b"),
        (f"file://{tmp_path}/c", tmp_path / "c"),
        (f"file://localhost{tmp_path}/d", tmp_path / "d"),
    ]:
        store = store_for(url)
        assert isinstance(store, LocalStore)
        assert store.root == str(root)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("hdfs://namenode/t", "unknown URL scheme 'hdfs'"),
        ("http://example.invalid/t", "unknown URL scheme 'http'"),
        ("s3:///no-bucket", "no bucket"),
        ("gs://", "no bucket"),
        ("file://otherhost/t", "not on host 'otherhost'"),
        ("", "empty table URL"),
    ],
)
def test_a_url_cdc_sink_cannot_open_is_a_store_config_error(url: str, words: str) -> None:
    with pytest.raises(StoreConfigError, match=words) as err:
        store_for(url)
    assert isinstance(err.value, CdcSinkError)


def test_storage_options_for_a_local_path_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="apply to object stores only"):
        store_for(str(tmp_path), {"endpoint": "http://127.0.0.1:1"})


def test_an_object_store_url_without_obstore_names_the_s3_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "obstore", None)
    monkeypatch.delitem(sys.modules, "cdc_sink.storage.objectstore.cloud")
    with pytest.raises(MissingExtra, match=r"cdc_sink\[s3\]") as err:
        store_for("s3://bucket/t", {"region": "us-east-1"})
    assert err.value.extra == "s3"


# ---------------------------------------------------------------- the real server


def test_a_missing_bucket_is_bucket_not_found_at_open(s3_server: SeaweedS3) -> None:
    with pytest.raises(BucketNotFound, match="no-such-bucket"):
        store_for(s3_server.url("t", bucket="no-such-bucket"), s3_server.storage_options())


def test_wrong_credentials_are_store_access_denied_at_open(s3_server: SeaweedS3) -> None:
    secret = "not-the-secret-key"
    options = s3_server.storage_options(secret_access_key=secret)
    with pytest.raises(StoreAccessDenied, match="refused the credentials") as err:
        store_for(s3_server.url("t"), options)
    assert secret not in str(err.value)


def test_an_unknown_option_is_a_store_config_error_without_its_value(
    s3_server: SeaweedS3,
) -> None:
    options = {**s3_server.storage_options(), "acess_key_idd": "s3cr3t-value"}
    with pytest.raises(StoreConfigError, match="acess_key_idd") as err:
        store_for(s3_server.url("t"), options)
    assert "s3cr3t-value" not in str(err.value)


def test_an_endpoint_honouring_conditional_creates_passes_the_probe(
    s3_server: SeaweedS3,
) -> None:
    url = s3_server.url("probe-ok")
    store = store_for(url, s3_server.storage_options())
    assert isinstance(store, ObstoreStore)
    opened = store.counters.snapshot()  # the probe: create, create again, delete
    assert (opened.requests["PUT"], opened.requests["DELETE"]) == (2, 1)
    assert store.list(PROBE_PREFIX) == []  # the probe object is gone


def test_an_endpoint_refusing_conditional_creates_is_refused(s3_server: SeaweedS3) -> None:
    options = s3_server.storage_options(conditional_put="disabled")
    with pytest.raises(ConditionalWritesUnsupported, match="refusing to write"):
        store_for(s3_server.url("t"), options)


def test_an_endpoint_ignoring_conditional_creates_is_refused_before_any_write(
    s3_server: SeaweedS3,
) -> None:
    prefix = "ignoring-endpoint"
    with IgnoringConditionalPuts(s3_server.endpoint) as proxy:
        options = s3_server.storage_options(endpoint=proxy.endpoint)
        with pytest.raises(ConditionalWritesUnsupported, match="second conditional create"):
            store_for(s3_server.url(prefix), options)
        assert len(proxy.lied) == 1
    direct = store_for(s3_server.url(prefix), s3_server.storage_options())
    assert direct.list("") == []  # nothing is left behind, the probe included
