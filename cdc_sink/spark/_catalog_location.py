"""A table named in SQL through the session catalog, read by the Python data source.

``CREATE TABLE t USING cdc_sink LOCATION '…'`` (or ``OPTIONS (path '…')``) has Spark ask
the source for the schema with the table's location among the options; a later ``SELECT
… FROM t`` then gives the source's reader no options at all, only the schema the catalog
stored. So the schema handed to the catalog carries the location in the metadata of its
first field, and a reader without a path takes it from there. Only the location goes
there: storage options (keys, endpoints) never reach the catalog; a read of a table on an
object store takes them from the session's configuration, as any read of it does.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.types import StructField, StructType

__all__ = ["LOCATION_KEY", "location_of", "with_location", "without_location"]

LOCATION_KEY = "cdc_sink.location"
"""Metadata key of the first field of a catalog table's schema: the table's location."""


def with_location(schema: StructType, options: Mapping[str, str]) -> StructType:
    """``schema`` with the table's location in its first field's metadata when
    ``options`` are those of a catalog table's creation (they name a ``location``);
    ``schema`` itself otherwise."""
    opts = {str(k).lower(): v for k, v in options.items()}
    location = opts.get("location")
    if not location or not schema.fields:
        return schema
    first = schema.fields[0]
    tagged = StructField(
        first.name, first.dataType, first.nullable, {**first.metadata, LOCATION_KEY: location}
    )
    return StructType([tagged, *schema.fields[1:]])


def location_of(schema: StructType) -> str | None:
    """The location :func:`with_location` put in ``schema``, or None."""
    if not schema.fields:
        return None
    value = schema.fields[0].metadata.get(LOCATION_KEY)
    return None if value is None else str(value)


def without_location(schema: StructType) -> StructType:
    """``schema`` without the location :func:`with_location` put there."""
    if location_of(schema) is None:
        return schema
    first = schema.fields[0]
    meta = {k: v for k, v in first.metadata.items() if k != LOCATION_KEY}
    return StructType(
        [StructField(first.name, first.dataType, first.nullable, meta), *schema.fields[1:]]
    )
