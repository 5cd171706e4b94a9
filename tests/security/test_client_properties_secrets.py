"""Issue 49, findings 1, 2 and 12: the client properties file is read by Java's
``Properties`` rules, its errors name the file and the line and never a value, and its
``repr`` masks a secret by what it is as well as by its name."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_sink.errors import InvalidOption
from cdc_sink.kafka.properties import ClientProperties, parse_properties

SECRET = "hunter2-SECRET-pw"


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- finding 1: errors


def test_a_file_placeholder_on_a_raw_secret_file_names_the_file_and_line_not_the_secret(
    tmp_path: Path,
) -> None:
    secret_file = _write(tmp_path / "kafka-password", SECRET + "\n")
    main = _write(
        tmp_path / "client.properties",
        f"security.protocol=SASL_SSL\nsasl.password=${{file:{secret_file}:password}}\n",
    )
    with pytest.raises(InvalidOption) as err:
        ClientProperties.load(main, environ={})
    text = str(err.value)
    assert SECRET not in text
    assert str(secret_file) in text and "line 1" in text  # the secret file's line
    assert "'sasl.password'" in text and f"{main} line 2" in text  # and whose placeholder
    assert err.value.option == "sasl.password"


def test_a_malformed_line_of_the_main_file_names_the_file_and_line_not_the_line(
    tmp_path: Path,
) -> None:
    main = _write(tmp_path / "client.properties", f"a=1\n\n# note\n{SECRET}\nb=2\n")
    with pytest.raises(InvalidOption) as err:
        ClientProperties.load(main, environ={})
    assert SECRET not in str(err.value)
    assert f"client properties {main} line 4" in str(err.value)


def test_a_malformed_unicode_escape_names_the_line_not_the_value(tmp_path: Path) -> None:
    main = _write(tmp_path / "client.properties", f"a=1\nsasl.password={SECRET}\\u12\n")
    with pytest.raises(InvalidOption, match=r"line 2: malformed \\uXXXX") as err:
        ClientProperties.load(main, environ={})
    assert SECRET not in str(err.value)


# ---------------------------------------------------------------- finding 1: Java's rules


def test_a_trailing_backslash_on_the_last_line_keeps_its_entry() -> None:
    assert parse_properties("a=1\nb=two\\") == {"a": "1", "b": "two"}
    assert parse_properties("a=1\nb=two\\\n") == {"a": "1", "b": "two"}


def test_an_odd_run_of_backslashes_continues_the_line_and_an_even_one_does_not() -> None:
    three = parse_properties("a=x\\\\\\\n   y\nb=2")  # a=x\\\ + newline
    assert three == {"a": "x\\y", "b": "2"}
    two = parse_properties("a=x\\\\\nb=2")  # a=x\\ : an escaped backslash, no continuation
    assert two == {"a": "x\\", "b": "2"}


def test_comments_blank_lines_and_continuations_follow_java() -> None:
    text = (
        "! a comment\n"
        "   # an indented comment ending in a backslash does not continue \\\n"
        "a=1\n"
        "b=one \\\n"
        "  # not a comment on a continuation line\n"
        "c=x\\\n"
        "\n"  # a blank line ends a continued line
        "d=4\r"  # old Mac line ends
        "e\\=f\\ g = v\r\n"  # escaped separators belong to the key
        "h:\\u00e9\\t\n"
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "one # not a comment on a continuation line",
        "c": "x",
        "d": "4",
        "e=f g": "v",
        "h": "\u00e9",  # (the value trimmed, as Kafka's clients trim it)
    }


# ---------------------------------------------------------------- finding 2: repr


def test_repr_masks_secrets_by_what_they_are() -> None:
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQ\n"
    props = ClientProperties.from_mapping(
        {
            "security.protocol": "SASL_SSL",
            "ssl.key.pem": pem,
            "ssl.keystore.key": "MIIEvQIBADANBgkq-keystore-key",
            "sasl.oauthbearer.config": "clientId=svc clientSecret=oauth-SECRET scope=x",
            "schema.registry.url": "https://reg-user:reg-SECRET@registry.example:8081",
        },
        environ={},
    )
    text = repr(props)
    for secret in ("MIIEvQIBADANBgkq", "oauth-SECRET", "reg-SECRET", "reg-user"):
        assert secret not in text
    assert "SASL_SSL" in text and "registry.example:8081" in text  # the rest stays readable


# ---------------------------------------------------------------- finding 12: encodings


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_a_placeholder_on_a_file_that_is_not_utf8_names_the_key_and_the_file(
    tmp_path: Path, kind: str
) -> None:
    target = tmp_path / "secret"
    target.write_bytes(b"password=caf\xe9-SECRET\n")  # Latin-1
    ref = f"${{file:{target}:password}}" if kind == "file" else f"${{dir:{tmp_path}:secret}}"
    main = _write(tmp_path / "client.properties", f"sasl.password={ref}\n")
    with pytest.raises(InvalidOption) as err:
        ClientProperties.load(main, environ={})
    text = str(err.value)
    assert "'sasl.password'" in text and str(target) in text and "not UTF-8" in text
    assert "SECRET" not in text and "codec" not in text and "0xe9" not in text


def test_a_main_file_that_is_not_utf8_names_the_file_and_the_line(tmp_path: Path) -> None:
    main = tmp_path / "client.properties"
    main.write_bytes(b"a=1\nsasl.password=caf\xe9-SECRET\n")
    with pytest.raises(InvalidOption, match=r"is not UTF-8 text \(line 2\)") as err:
        ClientProperties.load(main, environ={})
    assert "SECRET" not in str(err.value) and str(main) in str(err.value)
