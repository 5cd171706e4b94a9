"""The one secret rule (:mod:`cdc_sink.utils.redact`), and issue 49's finding 3: the registry
password in the reprs of the sink options and of the registry settings."""

from __future__ import annotations

import pytest

from cdc_sink.formats.avro_wire import RegistrySettings
from cdc_sink.spark.options import DecodeOptions, SinkOptions
from cdc_sink.utils.redact import MASK, is_secret, is_secret_key, mask_url, masked, scrub

SECRET = "reg-SECRET-pw"


def test_sink_options_repr_masks_the_registry_password() -> None:
    opts = SinkOptions(
        format="debezium-avro",
        decode=DecodeOptions(
            options={
                "registry_url": f"https://svc:{SECRET}@registry.example",
                "registry_auth": f"u:{SECRET}",
                "decimal_handling": "string",
            }
        ),
    )
    text = repr(opts)
    assert SECRET not in text
    assert "decimal_handling': 'string'" in text and "registry.example" in text


def test_registry_settings_repr_masks_the_password_and_url_user_info() -> None:
    settings = RegistrySettings.from_options(
        f"https://svc:{SECRET}@registry.example", 5, f"u:{SECRET}", None
    )
    text = repr(settings)
    assert SECRET not in text and "registry.example" in text and "timeout=5.0" in text
    assert settings.auth == f"u:{SECRET}"  # the value itself is kept for the requests


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("sasl.password", "x"),
        ("ssl.keystore.key", "x"),
        ("ssl.key.pem", "x"),
        ("sasl.oauthbearer.config", "x"),
        ("basic.auth.user.info", "u:p"),
        ("registry_auth", "u:p"),
        ("secret_access_key", "x"),
        ("AZURE_STORAGE_ACCOUNT_KEY", "x"),
        ("sas_token", "x"),
        ("google_service_account_key", "x"),
        ("anything", "-----BEGIN RSA PRIVATE KEY-----\nMIIE"),
        ("anything", "https://user:pw@host/x"),
        ("anything", "https://host/x?sv=1&sig=abc"),
        ("anything", "clientId=a clientSecret=b"),
        ("anything", 'module required username="a" password="b";'),
    ],
)
def test_a_secret_by_name_or_by_value(key: str, value: str) -> None:
    assert is_secret(key, value)


@pytest.mark.parametrize(
    "key",
    [
        "access_key_id",
        "ssl.key.location",
        "ssl.truststore.location",
        "schema.registry.url",
        "basic.auth.credentials.source",
        "sasl.mechanism",
        "endpoint",
        "region",
    ],
)
def test_names_that_are_no_secret(key: str) -> None:
    assert not is_secret_key(key)
    assert masked(key, "plain-value") == "plain-value"


def test_a_url_keeps_all_but_its_user_info_and_signature() -> None:
    assert mask_url("https://u:pw@h.example:1/p?sig=abc&sv=1") == (
        f"https://{MASK}@h.example:1/p?sig={MASK}&sv=1"
    )
    assert mask_url("abfss://container@account.dfs.core.windows.net/t").startswith(
        "abfss://container@"
    )
    assert masked("schema.registry.url", "https://u:pw@h") == f"https://{MASK}@h"


@pytest.mark.parametrize(
    "url",
    [
        "s3://AKIA:wJalr/XUtn+FEMI@bucket/t",  # an unescaped '/' in the password
        "http://user:p@ss@host/x",  # an unescaped '@'
    ],
)
def test_user_info_with_unescaped_characters_is_masked_whole(url: str) -> None:
    shown = mask_url(url)
    assert shown.endswith(("@bucket/t", "@host/x")) and shown.count("@") == 1
    assert "AKIA" not in shown and "user" not in shown


def test_a_port_and_an_at_sign_in_the_path_are_no_user_info() -> None:
    for url in ("http://host:8080/p@x", "s3://bucket/path@x"):
        assert mask_url(url) == url


def test_scrub_removes_each_secret_and_every_url_user_info() -> None:
    text = 'failed to parse "sekrit-value" as boolean (http://u:pw@h/x)'
    assert scrub(text, ["sekrit-value", "x"]) == (
        f'failed to parse "{MASK}" as boolean (http://{MASK}@h/x)'
    )
