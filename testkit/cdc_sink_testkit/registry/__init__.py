"""A real schema registry for tests and benchmarks: Apicurio Registry from Maven Central.

    from cdc_sink_testkit.registry import start_registry
    registry = start_registry()          # Java 21+: Apicurio 3, else 2 on Java 17
    ... registry.url ...                 # Confluent's API: http://127.0.0.1:<p>/apis/ccompat/v7
    registry.stop()

:mod:`.dist` picks the release by the Java found and unpacks it once into the user's cache
(through Maven, like the Kafka broker's jars); :mod:`.server` runs it
(:class:`LocalRegistry`).
"""

from __future__ import annotations

from cdc_sink_testkit.registry.dist import (
    Java,
    RegistryStartError,
    Release,
    choose_release,
    find_javas,
    resolve_release,
)
from cdc_sink_testkit.registry.server import CCOMPAT_PATH, LocalRegistry, start_registry

__all__ = [
    "CCOMPAT_PATH",
    "Java",
    "LocalRegistry",
    "RegistryStartError",
    "Release",
    "choose_release",
    "find_javas",
    "resolve_release",
    "start_registry",
]
