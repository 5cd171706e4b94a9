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
secrets; Kafka's ``DirectoryConfigProvider``). ``repr`` of the settings never shows a
secret's value, and no error names one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc_sink.errors import InvalidOption

__all__ = ["PROPERTIES_ENV", "ClientProperties", "parse_properties"]

PROPERTIES_ENV = "CDC_SINK_CLIENT_PROPERTIES"
"""Environment variable naming the client properties file when no option names one."""

_SECRET_KEYS = re.compile(r"password|secret|jaas|user\.info|token|credentials", re.IGNORECASE)
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


def _pem_lines(text: str) -> str:
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


def _unescape(text: str) -> str:
    """Java's escapes of a properties value: ``\\t`` ``\\n`` ``\\r`` ``\\f``,
    ``\\uXXXX``, and a backslash before any other character keeps that character."""

    def one(m: re.Match[str]) -> str:
        c = m.group(1)
        if c.startswith("u") and len(c) == 5:
            return chr(int(c[1:], 16))
        return _ESCAPES.get(c, c)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, text)


def parse_properties(text: str) -> dict[str, str]:
    """The entries of a Java properties file (``key=value`` or ``key: value``; ``#`` and
    ``!`` comments; a trailing backslash continues a line; Java's backslash escapes; no
    placeholder resolved).

    Raises:
        InvalidOption: A line has a key and no separator.
    """
    out: dict[str, str] = {}
    logical: list[str] = []
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical.append(line[:-1])
            continue
        logical.append(line)
        entry, logical = "".join(logical), []
        m = re.match(r"([^=:\s]+)\s*[=:]\s*(.*)$", entry) or re.match(r"(\S+)\s+(.*)$", entry)
        if m is None:
            raise InvalidOption(
                f"client properties: line {entry.split()[0]!r} has no '=' or ':'",
                option="client_properties",
            )
        out[_unescape(m.group(1))] = _unescape(m.group(2).strip())
    return out


def _resolve(key: str, value: str, environ: Mapping[str, str]) -> str:
    """``value`` with its ``${env:…}``, ``${file:…:…}`` and ``${dir:…:…}`` replaced."""

    def one(m: re.Match[str]) -> str:
        kind, arg = m.group(1), m.group(2)
        if kind == "env":
            if arg not in environ:
                raise InvalidOption(
                    f"client property {key!r}: environment variable {arg!r} is not set",
                    option=key,
                )
            return environ[arg]
        path, sep, name = arg.rpartition(":")
        if not sep or not path:
            raise InvalidOption(
                f"client property {key!r}: ${{{kind}:PATH:NAME}} expected", option=key
            )
        try:
            if kind == "file":
                props = parse_properties(Path(path).read_text(encoding="utf-8"))
                if name not in props:
                    raise InvalidOption(
                        f"client property {key!r}: {path!r} has no key {name!r}", option=key
                    )
                return props[name]
            return (Path(path) / name).read_text(encoding="utf-8").rstrip("\n")
        except OSError as exc:
            raise InvalidOption(
                f"client property {key!r}: cannot read {exc.filename!r}: {exc.strerror}",
                option=key,
            ) from None

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
        def shown(entries: Mapping[str, str]) -> dict[str, str]:
            return {k: ("***" if _SECRET_KEYS.search(k) else v) for k, v in entries.items()}

        return (
            f"ClientProperties(kafka={shown(self.kafka)}, registry={shown(self.registry)}, "
            f"source={self.source!r})"
        )

    @classmethod
    def from_mapping(
        cls, entries: Mapping[str, str], *, environ: Mapping[str, str] | None = None
    ) -> ClientProperties:
        """Settings from ``entries`` (placeholders resolved against ``environ``).

        Raises:
            InvalidOption: A placeholder cannot be resolved.
        """
        env = os.environ if environ is None else environ
        resolved = {k: _resolve(k, str(v), env) for k, v in entries.items()}
        registry = {
            k: v
            for k, v in resolved.items()
            if k in _REGISTRY_KEYS or k.startswith(_REGISTRY_PREFIX)
        }
        kafka = {k: v for k, v in resolved.items() if k not in registry}
        return cls(kafka=kafka, registry=registry)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
    ) -> ClientProperties:
        """The settings of the file ``path`` (default: the one :data:`PROPERTIES_ENV`
        names; none: empty settings).

        Raises:
            InvalidOption: The file cannot be read, or a placeholder cannot be resolved.
        """
        env = os.environ if environ is None else environ
        chosen = os.fspath(path) if path is not None else env.get(PROPERTIES_ENV, "")
        if not chosen:
            return cls()
        try:
            text = Path(chosen).read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidOption(
                f"client properties {chosen!r}: {exc.strerror}", option="client_properties"
            ) from None
        props = cls.from_mapping(parse_properties(text), environ=env)
        return cls(kafka=props.kafka, registry=props.registry, source=chosen)

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
            out["ssl.ca.pem"] = _pem_lines(out["ssl.ca.pem"])
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
                    f"client property {key!r} has no kafka-python equivalent", option=key
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
