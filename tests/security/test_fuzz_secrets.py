"""Issue 49: a fuzz of client properties files and storage options (random keys, values,
encodings, placeholders). Whatever the input: no exception but the typed ones, and no
value echoed: every value carries a marker (``ZQ<n>QZ``), and no error, and no repr but
of what is no secret, holds one."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_sink.errors import CdcSinkError, InvalidOption
from cdc_sink.kafka.properties import ClientProperties
from cdc_sink.storage.objectstore import store_for
from cdc_sink.utils.redact import is_secret
from tests.security.shown import logged

_MARK = re.compile(r"ZQ\d+QZ")
_counter = itertools.count()

KAFKA_KEYS = [
    "bootstrap.servers",
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    "sasl.oauthbearer.config",
    "ssl.key.pem",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.ca.location",
    "schema.registry.url",
    "basic.auth.user.info",
]
STORE_KEYS = [
    "access_key_id",
    "secret_access_key",
    "session_token",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ALLOW_HTTP",
    "AWS_S3_ALLOW_UNSAFE_RENAME",
    "AWS_HTTP2_MAX_FRAME_SIZE",
    "allow_http",
    "allow_invalid_certificates",
    "timeout",
    "connect_timeout",
    "proxy_url",
    "skip_signature",
    "conditional_put",
    "checksum_algorithm",
    "max_retries",
    "retry_timeout",
    "account_key",
    "sas_key",
    "google_service_account_key",
    "azure_storage_account_name",
]

# characters that matter to a properties file, and some that do not
_VALUE_CHARS = st.sampled_from(list("ab=:#! \\\t\fu{}$@/é\u2028\r\n0"))
_KEYS = st.one_of(
    st.sampled_from(KAFKA_KEYS), st.text(alphabet="abcdefgh.-_", min_size=1, max_size=8)
)


def _marked(body: str) -> str:
    """``body`` with a fresh marker in it."""
    return f"{body[: len(body) // 2]}ZQ{next(_counter)}QZ{body[len(body) // 2 :]}"


@st.composite
def _properties(draw: st.DrawFn, tmp: Path) -> tuple[bytes, dict[str, str]]:
    """A properties file (its bytes) and an environment; every value marked."""
    env: dict[str, str] = {}
    lines = []
    for i in range(draw(st.integers(0, 8))):
        key = draw(_KEYS)
        value = _marked(draw(st.text(_VALUE_CHARS, max_size=12)))
        kind = draw(st.sampled_from(["plain", "env", "file", "dir", "junk", "comment"]))
        if kind == "env":
            name = f"V{i}"
            if draw(st.booleans()):
                env[name] = _marked("e")
            value = f"${{env:{name}}}"
        elif kind in ("file", "dir"):
            target = tmp / f"t{i}"
            content = _marked(draw(st.text(_VALUE_CHARS, max_size=12)))
            body = f"k={content}" if draw(st.booleans()) else content
            enc = draw(st.sampled_from(["utf-8", "latin-1", "utf-16"]))
            target.write_bytes(body.encode(enc, errors="replace"))
            value = f"${{file:{target}:k}}" if kind == "file" else f"${{dir:{tmp}:t{i}}}"
        sep = draw(st.sampled_from(["=", ":", " ", " = ", "\\\n  ="]))
        lines.append(
            value if kind == "junk" else f"#{value}" if kind == "comment" else key + sep + value
        )
    enc = draw(st.sampled_from(["utf-8", "latin-1", "utf-16"]))
    return "\n".join(lines).encode(enc, errors="replace"), env


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_client_properties_fuzz_echoes_no_value(tmp_path: Path, data: Any) -> None:
    case = tmp_path / f"c{next(_counter)}"
    case.mkdir()
    text, env = data.draw(_properties(case))
    path = case / "client.properties"
    path.write_bytes(text)
    try:
        props = ClientProperties.load(path, environ=env)
    except InvalidOption as exc:
        assert not _MARK.search(logged(exc)), logged(exc)
        return
    shown = repr(props)
    for key, value in {**props.kafka, **props.registry}.items():
        if is_secret(key, value):
            for mark in _MARK.findall(value):
                assert mark not in shown, (key, shown)


_STORE_VALUES = st.text(st.sampled_from(list("aZ09 :/@=.-_\"'\\{}é\t")), min_size=0, max_size=16)


@settings(max_examples=150, deadline=None)
@given(
    url=st.sampled_from(["s3://bucket/t", "gs://bucket/t", "az://container/t"]),
    options=st.dictionaries(
        st.one_of(st.sampled_from(STORE_KEYS), st.text("abcdefgh_", min_size=1, max_size=10)),
        _STORE_VALUES.map(_marked),
        max_size=5,
    ),
)
def test_storage_options_fuzz_raises_only_store_errors_and_echoes_no_value(
    url: str, options: dict[str, str]
) -> None:
    try:
        store = store_for(url, options, check_conditional_writes=False)
    except CdcSinkError as exc:  # a panic or any other exception fails the test
        assert not _MARK.search(logged(exc)), logged(exc)
        return
    assert not _MARK.search(repr(store))
