"""Fixtures shared by every test folder (the others live beside their tests)."""

from tests.avro.registry import schema_registry
from tests.objectstore.server import s3_server

__all__ = ["s3_server", "schema_registry"]
