"""The schema registry of the test session (a real Apicurio Registry, see
:mod:`cdc_sink_testkit.registry`): started on first use, once per session, stopped at its
end. ``tests/conftest.py`` exposes :func:`schema_registry` to every test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdc_sink_testkit.registry import LocalRegistry


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[LocalRegistry]:
    """A running registry (``.url``: Confluent's API; ``.register(subject, schema)``)."""
    registry = LocalRegistry().start()
    try:
        yield registry
    finally:
        registry.stop()
