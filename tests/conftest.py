"""Fixtures shared by every test folder (the others live beside their tests)."""

from tests.avro.registry import schema_registry

__all__ = ["schema_registry"]
