"""One place for the connection settings of Kafka and of the schema registry.

A deployment keeps them in one Java-style properties file, the ``client.properties`` that
Kafka's own tools, Confluent's clients and Debezium take (``security.protocol``,
``sasl.mechanism``, ``sasl.username``/``sasl.password`` or ``sasl.jaas.config``,
``ssl.ca.location`` or ``ssl.truststore.location``..., and ``schema.registry.url``,
``basic.auth.user.info``, ``schema.registry.ssl.ca.location``...). The job names it with
``--client-properties`` or the environment variable :data:`PROPERTIES_ENV`;
:class:`ClientProperties` reads it and gives each client its own spelling of the same
settings:

- :meth:`ClientProperties.confluent_config`: librdkafka's names (the producer SDK and the
  Kafka dead-letter sink with confluent-kafka);
- :meth:`ClientProperties.kafka_python_config`: kafka-python's keyword names;
- :meth:`ClientProperties.spark_options`: the Java client's names prefixed ``kafka.``, for
  Spark's Kafka source (a ``sasl.jaas.config`` is built from a user name and password; a
  PEM CA file becomes a PEM trust store);
- :meth:`ClientProperties.registry_options`: the ``debezium-avro`` decoder's and
  encoder's ``registry_*`` options.

The CA a TLS client trusts may be written either way: librdkafka's ``ssl.ca.location``
(a PEM file) or ``ssl.ca.pem`` (the certificates themselves), or Java's
``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` (a PEM file) or
``ssl.truststore.certificates`` (the certificates themselves). Each client gets its own
spelling of it; a Java trust store of another type (JKS, PKCS12) is only Spark's, so the
Python clients then need ``ssl.ca.location`` beside it. Java's empty
``ssl.endpoint.identification.algorithm`` (no host name check) is librdkafka's ``none``,
and the other way round.

Secrets stay out of the file and off the command line with Kafka's config-provider
placeholders, resolved when the file is read: ``${env:NAME}`` (an environment
variable), ``${file:PATH:KEY}`` (a key of another properties file, Kafka's
``FileConfigProvider``) and ``${dir:DIR:NAME}`` (a whole file, as Kubernetes mounts
secrets; Kafka's ``DirectoryConfigProvider``). ``repr`` of the settings masks every
secret by the one rule of :mod:`cdc_sink.utils.redact` (by name, and by value: a private key, a
URL's user info, an OAuth configuration), and no error shows a value: a malformed line,
an unreadable or non-UTF-8 file, an unresolved placeholder are named by file and line.

The file is read by ``java.util.Properties``' rules (:func:`parse_properties`), so a file
Kafka's tools read gives the same entries here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc_sink.errors import InvalidOption
from cdc_sink.utils.redact import masked_mapping

__all__ = ["PROPERTIES_ENV", "ClientProperties", "parse_properties", "pem_lines"]

PROPERTIES_ENV = "CDC_SINK_CLIENT_PROPERTIES"
"""Environment variable naming the client properties file when no option names one."""

_PLACEHOLDER = re.compile(r"\$\{(env|file|dir):([^}]*)\}")
_REGISTRY_PREFIX = "schema.registry."
_REGISTRY_KEYS = frozenset(
    {
        "schema.registry.url",
        "basic.auth.user.info",
        "basic.auth.credentials.source",
        "schema.registry.basic.auth.user.info",
        "schema.registry.basic.auth.credentials.source",
        "schema.registry.ssl.ca.location",
        "schema.registry.ssl.certificate.location",
        "schema.registry.ssl.key.location",
        "schema.registry.request.timeout.ms",
    }
)
_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_JAAS_FIELD = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_LIBRDKAFKA_CA = ("ssl.ca.location", "ssl.ca.pem")
_JAVA_TRUST = ("ssl.truststore.location", "ssl.truststore.certificates")
_ENDPOINT_CHECK = "ssl.endpoint.identification.algorithm"
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)


def pem_lines(text: str) -> str:
    """PEM blocks as OpenSSL reads them: header, base64 in lines of 64, footer.

    A properties file may give certificates on one line, its continuation lines joined
    (Java's parser of ``ssl.truststore.certificates`` takes that; OpenSSL does not).
    """

    def block(m: re.Match[str]) -> str:
        body = "".join(m.group(2).split())
        lines = [body[i : i + 64] for i in range(0, len(body), 64)]
        return "\n".join([f"-----BEGIN {m.group(1)}-----", *lines, f"-----END {m.group(1)}-----"])

    return "\n".join(block(m) for m in _PEM_BLOCK.finditer(text)) + "\n"


# librdkafka name -> kafka-python keyword
_KAFKA_PYTHON = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
}


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BLANK = " \t\f"  # Java's white space in a properties file
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|u|.)", re.DOTALL)


@dataclass(frozen=True)
class _Entry:
    """One entry of a properties file, and where it is (for errors: never its text)."""

    key: str
    value: str
    where: str


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """The logical lines of a properties file with the number of each one's first
    natural line, as Java's ``Properties.load`` reads them: lines end at ``\\n``,
    ``\\r`` or ``\\r\\n``; leading white space is skipped; a line whose first character
    is ``#`` or ``!`` is a comment (even if it ends in a backslash); an odd run of
    backslashes at the end continues the line on the next one (an even run is escaped
    backslashes), whose leading white space is skipped; a blank line ends a continued
    line; a continuation at the end of the file is dropped, not its entry."""
    parts: list[str] = []
    first = 0
    for number, raw in enumerate(re.split(r"\r\n|\r|\n", text), 1):
        line = raw.lstrip(_BLANK)
        if not parts:
            if not line or line[0] in "#!":
                continue
            first = number
        elif not line:  # a blank line after a continuation ends the logical line
            yield first, "".join(parts)
            parts = []
            continue
        run = len(line) - len(line.rstrip("\\"))
        if run % 2:
            parts.append(line[:-1])
            continue
        parts.append(line)
        yield first, "".join(parts)
        parts = []
    if parts:
        yield first, "".join(parts)


def _split_entry(line: str) -> tuple[str, str, bool]:
    """A logical line's raw key and value (escapes kept), as Java splits them: the key
    ends at the first unescaped ``=``, ``:`` or white space; white space, one ``=`` or
    ``:``, and white space again separate it from the value. Also whether there was a
    separator (or a value after white space)."""
    escaped = False
    end = len(line)
    for i, c in enumerate(line):
        if not escaped and (c in "=:" or c in _BLANK):
            end = i
            break
        escaped = c == "\\" and not escaped
    rest = line[end:].lstrip(_BLANK)
    separated = rest[:1] in ("=", ":")
    if separated:
        rest = rest[1:].lstrip(_BLANK)
    return line[:end], rest, separated or bool(rest)


def _unescape(text: str, where: str) -> str:
    """Java's escapes of a properties key or value: ``\\t`` ``\\n`` ``\\r`` ``\\f``,
    ``\\uXXXX``, and a backslash before any other character keeps that character.

    Raises:
        InvalidOption: A ``\\u`` without four hex digits (Java refuses it too).
    """

    def one(m: re.Match[str]) -> str:
        c = m.group(1)
        if c == "u":
            raise InvalidOption(
                f"{where}: malformed \\uXXXX escape (four hex digits expected)",
                option="client_properties",
            )
        if len(c) == 5:
            return chr(int(c[1:], 16))
        return _ESCAPES.get(c, c)

    return _ESCAPE.sub(one, text)


def _entries(text: str, source: str) -> list[_Entry]:
    """The entries of the properties ``text`` read from ``source`` (see
    :func:`parse_properties`).

    Raises:
        InvalidOption: A line has a key and nothing else, or a malformed ``\\u`` escape
            (the error names ``source`` and the line, never the line's text).
    """
    out: list[_Entry] = []
    for number, line in _logical_lines(text):
        where = f"{source} line {number}"
        key, value, separated = _split_entry(line)
        if not separated:
            raise InvalidOption(
                f"{where} has no '=' or ':' (a key with an empty value is written "
                "'key='; a ${file:PATH:KEY} placeholder reads a key of a properties file, "
                "${dir:DIR:NAME} a whole file)",
                option="client_properties",
            )
        out.append(_Entry(_unescape(key, where), _unescape(value, where).strip(), where))
    return out


def parse_properties(text: str, *, source: str = "client properties") -> dict[str, str]:
    """The entries of a Java properties file, read by ``java.util.Properties``' rules
    (``key=value``, ``key: value`` or ``key value``; ``#`` and ``!`` comments; an odd
    number of trailing backslashes continues a line; Java's backslash escapes; the last
    of a repeated key wins), each value trimmed as Kafka's clients trim them. No
    placeholder is resolved.

    One difference from Java: a line with a key and nothing else (which Java reads as an
    empty value) is refused, since a line of a secret file would otherwise become a key
    name and be shown as one.

    Args:
        text: The file's text.
        source: What ``text`` is, for errors (e.g. ``client properties /etc/c.properties``).

    Raises:
        InvalidOption: A line has a key and nothing else, or a malformed ``\\u`` escape.
            The error names ``source`` and the line number, never the line's text.
    """
    return {e.key: e.value for e in _entries(text, source)}


_PROPERTY_NAME = re.compile(r"[a-z][a-z0-9_-]*(?:\.[a-z0-9_-]+)+")


def _named(key: str) -> str:
    """``key`` for an error: quoted when it reads as a property name (lower-case words
    joined by dots, as every Kafka and registry setting is named), else not shown: a
    stray line of a secret, continued into the next, becomes a key."""
    return repr(key) if _PROPERTY_NAME.fullmatch(key) else "(not shown: no property name)"


def _read_text(path: Path, what: str, option: str) -> str:
    """The UTF-8 text of ``path``.

    Raises:
        InvalidOption: It cannot be read, or it is not UTF-8 (the error names ``what``
            and the line of the first bad byte, not the byte).
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidOption(f"{what}: cannot read {path}: {exc.strerror}", option=option) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InvalidOption(
            f"{what}: {path} is not UTF-8 text (line {line})", option=option
        ) from None


def _resolve(key: str, value: str, environ: Mapping[str, str], where: str = "") -> str:
    """``value`` with its ``${env:…}``, ``${file:…:…}`` and ``${dir:…:…}`` replaced.

    Raises:
        InvalidOption: A placeholder cannot be resolved: the error names the key, where it
            is (``where``), the variable or the file, never a value.
    """
    what = f"client property {_named(key)}" + (f" ({where})" if where else "")

    def one(m: re.Match[str]) -> str:
        kind, arg = m.group(1), m.group(2)
        if kind == "env":
            if arg not in environ:
                raise InvalidOption(f"{what}: environment variable {arg!r} is not set", option=key)
            return environ[arg]
        path, sep, name = arg.rpartition(":")
        if not sep or not path:
            raise InvalidOption(f"{what}: ${{{kind}:PATH:NAME}} expected", option=key)
        if kind == "dir":
            return _read_text(Path(path) / name, what, key).rstrip("\n")
        try:
            props = parse_properties(_read_text(Path(path), what, key), source=f"{what}: {path}")
        except InvalidOption as exc:
            raise InvalidOption(str(exc), option=key) from None
        if name not in props:
            raise InvalidOption(f"{what}: {path} has no key {name!r}", option=key)
        return props[name]

    return _PLACEHOLDER.sub(one, value)


@dataclass(frozen=True)
class ClientProperties:
    """The Kafka and schema-registry settings of a deployment (module docstring).

    Attributes:
        kafka: The Kafka client entries, as written (placeholders resolved).
        registry: The schema registry's entries (``schema.registry.*``, ``basic.auth.*``).
        source: Where they were read from (a path, or ``""``).
    """

    kafka: Mapping[str, str] = field(default_factory=dict)
    registry: Mapping[str, str] = field(default_factory=dict)
    source: str = ""

    def __repr__(self) -> str:
        # every value through the one secret rule: by name and by what it holds
        return (
            f"ClientProperties(kafka={masked_mapping(self.kafka)}, "
            f"registry={masked_mapping(self.registry)}, source={self.source!r})"
        )

    @classmethod
    def from_mapping(
        cls, entries: Mapping[str, str], *, environ: Mapping[str, str] | None = None
    ) -> ClientProperties:
        """Settings from ``entries`` (placeholders resolved against ``environ``).

        Raises:
            InvalidOption: A placeholder cannot be resolved.
        """
        return cls._resolved([_Entry(k, str(v), "") for k, v in entries.items()], environ)

    @classmethod
    def _resolved(
        cls, entries: list[_Entry], environ: Mapping[str, str] | None, source: str = ""
    ) -> ClientProperties:
        """Settings from parsed entries, their placeholders resolved."""
        env = os.environ if environ is None else environ
        resolved = {e.key: _resolve(e.key, e.value, env, e.where) for e in entries}
        registry = {
            k: v
            for k, v in resolved.items()
            if k in _REGISTRY_KEYS or k.startswith(_REGISTRY_PREFIX)
        }
        kafka = {k: v for k, v in resolved.items() if k not in registry}
        return cls(kafka=kafka, registry=registry, source=source)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
    ) -> ClientProperties:
        """The settings of the file ``path`` (default: the one :data:`PROPERTIES_ENV`
        names; none: empty settings).

        Raises:
            InvalidOption: The file cannot be read or is not UTF-8, a line is malformed
                (:func:`parse_properties`), or a placeholder cannot be resolved. The
                error names the file and the line, never a value.
        """
        env = os.environ if environ is None else environ
        chosen = os.fspath(path) if path is not None else env.get(PROPERTIES_ENV, "")
        if not chosen:
            return cls()
        text = _read_text(Path(chosen), "client properties", "client_properties")
        entries = _entries(text, f"client properties {chosen}")
        return cls._resolved(entries, env, chosen)

    # -- Kafka -------------------------------------------------------------------------

    def _credentials(self) -> tuple[str | None, str | None]:
        """The SASL user name and password: librdkafka's keys, else the JAAS config's."""
        user, password = self.kafka.get("sasl.username"), self.kafka.get("sasl.password")
        jaas = self.kafka.get("sasl.jaas.config")
        if (user is None or password is None) and jaas:
            found = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_FIELD.findall(jaas)}
            user = user if user is not None else found.get("username")
            password = password if password is not None else found.get("password")
        return user, password

    def _mechanism(self) -> str:
        return self.kafka.get("sasl.mechanism", self.kafka.get("sasl.mechanisms", "PLAIN")).upper()

    def confluent_config(self) -> dict[str, str]:
        """The Kafka settings in librdkafka's names (confluent-kafka).

        Raises:
            InvalidOption: A Java trust store librdkafka cannot read (not PEM) and no
                ``ssl.ca.location`` beside it.
        """
        out = {
            k: v
            for k, v in self.kafka.items()
            if k != "sasl.jaas.config" and not k.startswith("ssl.truststore.")
        }
        user, password = self._credentials()
        if user is not None:
            out["sasl.username"] = user
        if password is not None:
            out["sasl.password"] = password
        out.update(self._librdkafka_ca())
        if "ssl.ca.pem" in out:
            out["ssl.ca.pem"] = pem_lines(out["ssl.ca.pem"])
        if out.get(_ENDPOINT_CHECK, "none").strip() == "":  # Java's "no host name check"
            out[_ENDPOINT_CHECK] = "none"
        return out

    def _librdkafka_ca(self) -> dict[str, str]:
        """The CA in librdkafka's names when the file gives it in Java's only."""
        k = self.kafka
        if any(name in k for name in _LIBRDKAFKA_CA) or not any(n in k for n in _JAVA_TRUST):
            return {}
        kind = k.get("ssl.truststore.type", "JKS").strip().upper()  # Java's default type
        if kind != "PEM":
            raise InvalidOption(
                f"ssl.truststore.type {kind}: librdkafka (the connection check, the producer, "
                "the Kafka dead-letter sink) reads PEM certificates only: use "
                "ssl.truststore.type=PEM, or add ssl.ca.location=<the CA as a PEM file> "
                f"beside the {kind} trust store (Spark's Kafka source keeps using that)",
                option="ssl.truststore.type",
            )
        if "ssl.truststore.location" in k:
            return {"ssl.ca.location": k["ssl.truststore.location"]}
        return {"ssl.ca.pem": k["ssl.truststore.certificates"]}

    def kafka_python_config(self) -> dict[str, Any]:
        """The Kafka settings as kafka-python's keyword arguments.

        Raises:
            InvalidOption: A setting kafka-python cannot take.
        """
        out: dict[str, Any] = {}
        for key, value in self.confluent_config().items():
            if key == _ENDPOINT_CHECK:
                out["ssl_check_hostname"] = value.strip().lower() == "https"
            elif key == "ssl.ca.pem":
                raise InvalidOption(
                    "kafka-python reads the CA from a file only: give ssl.ca.location (or "
                    "ssl.truststore.location), not the certificates themselves "
                    "(ssl.ca.pem, ssl.truststore.certificates)",
                    option="ssl.truststore.certificates"
                    if "ssl.truststore.certificates" in self.kafka
                    else "ssl.ca.pem",
                )
            elif key in _KAFKA_PYTHON:
                out[_KAFKA_PYTHON[key]] = value
            elif key == "sasl.mechanisms":
                out["sasl_mechanism"] = value
            else:
                raise InvalidOption(
                    f"client property {_named(key)} has no kafka-python equivalent", option=key
                )
        return out

    def spark_options(self) -> dict[str, str]:
        """The Kafka settings as Spark Kafka source options (``kafka.`` + Java names).

        A Java trust store the file names (``ssl.truststore.location`` or
        ``ssl.truststore.certificates``) is Spark's; else librdkafka's CA
        (``ssl.ca.location``, ``ssl.ca.pem``) becomes a PEM trust store.
        """
        out: dict[str, str] = {}
        for key, value in self.kafka.items():
            if key in ("sasl.username", "sasl.password", "sasl.mechanisms", *_LIBRDKAFKA_CA):
                continue
            if key == _ENDPOINT_CHECK and value.strip().lower() == "none":
                value = ""  # librdkafka's "no host name check" is Java's empty value
            out[f"kafka.{key}"] = value
        if not any(name in self.kafka for name in _JAVA_TRUST):
            if "ssl.ca.location" in self.kafka:
                out["kafka.ssl.truststore.type"] = "PEM"
                out["kafka.ssl.truststore.location"] = self.kafka["ssl.ca.location"]
            elif "ssl.ca.pem" in self.kafka:
                out["kafka.ssl.truststore.type"] = "PEM"
                out["kafka.ssl.truststore.certificates"] = self.kafka["ssl.ca.pem"]
        protocol = self.kafka.get("security.protocol", "PLAINTEXT").upper()
        if protocol.startswith("SASL"):
            out["kafka.sasl.mechanism"] = self._mechanism()
            user, password = self._credentials()
            if "sasl.jaas.config" not in self.kafka and user is not None:
                module = _JAAS_MODULES.get(self._mechanism())
                if module is None:
                    raise InvalidOption(
                        f"sasl.mechanism {self._mechanism()!r} needs an explicit "
                        "sasl.jaas.config for Spark's Kafka source",
                        option="sasl.mechanism",
                    )
                esc = (password or "").replace("\\", "\\\\").replace('"', '\\"')
                out["kafka.sasl.jaas.config"] = (
                    f'{module} required username="{user}" password="{esc}";'
                )
        return out

    # -- schema registry ---------------------------------------------------------------

    def registry_options(self) -> dict[str, Any]:
        """The ``registry_*`` options of the ``debezium-avro`` decoder and encoder (empty
        when no ``schema.registry.url`` is set).

        Raises:
            InvalidOption: ``schema.registry.request.timeout.ms`` is not a number.
        """
        r = self.registry
        if "schema.registry.url" not in r:
            return {}
        out: dict[str, Any] = {"registry_url": r["schema.registry.url"].split(",")[0].strip()}
        auth = r.get("basic.auth.user.info", r.get("schema.registry.basic.auth.user.info"))
        if auth:
            out["registry_auth"] = auth
        ssl = {
            name: r[f"schema.registry.ssl.{name.replace('_', '.')}"]
            for name in ("ca_location", "certificate_location", "key_location")
            if f"schema.registry.ssl.{name.replace('_', '.')}" in r
        }
        if ssl:
            out["registry_ssl"] = ssl
        if "schema.registry.request.timeout.ms" in r:
            try:
                out["registry_timeout"] = int(r["schema.registry.request.timeout.ms"]) / 1000.0
            except ValueError:
                raise InvalidOption(
                    "schema.registry.request.timeout.ms must be milliseconds",
                    option="schema.registry.request.timeout.ms",
                ) from None
        return out
