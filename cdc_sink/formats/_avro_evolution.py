"""Schema evolution from the registry: what a table must gain to take new schemas (private).

:class:`RegistryEvolution` is the :class:`~cdc_sink.formats._base.SchemaEvolution` of the
``debezium-avro`` decoder with ``schema_evolution="add_columns"``
(:meth:`~cdc_sink.formats.debezium_avro.DebeziumAvroDecoder.evolution`): the sink hands it
the distinct 5-byte headers (magic byte, schema id) of a batch's messages, and it returns
the columns the schemas they name add.

For :meth:`~cdc_sink.formats.debezium_avro.DebeziumAvroDecoder.schema_changes`: given the
envelope schemas of a batch's messages, the optional fields of their rows the table does
not have yet become columns to add (the Arrow type their Avro type and Debezium logical
type map to, nullable). A change the table cannot take raises
:class:`SchemaEvolutionError` naming the schema (its subjects and versions), the field and
why: a field whose type the column does not take (a type change), a key column missing
from the rows, a new required field, a field of no column type.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Protocol

import pyarrow as pa

from cdc_sink.errors import SchemaEvolutionError
from cdc_sink.formats._avro_schema import Node
from cdc_sink.formats._avro_values import type_name
from cdc_sink.formats._base import SchemaEvolution
from cdc_sink.formats.avro_wire import (
    HEADER_BYTES,
    RegistrySettings,
    SchemaLookup,
    SchemaRegistryUnavailable,
)
from cdc_sink.formats.value_ranges import UNIT_DAYS, UNIT_TIME_OF_DAY
from cdc_sink.schema import TableSchema, parse_type

__all__ = ["RegistryEvolution", "SchemaEvolutionError", "column_type", "schema_changes"]


class _ChangesByIds(Protocol):
    def schema_changes(self, ids: Iterable[int], schema: TableSchema) -> list[tuple[str, str]]:
        """The columns the schemas ``ids`` add to ``schema``."""


class RegistryEvolution(SchemaEvolution):
    """Schema evolution from the schema registry, for a decoder in Confluent's wire format.

    Args:
        decoder: The decoder (its ``schema_changes`` reads the registry and raises
            :class:`SchemaEvolutionError` for a change the table cannot take).
    """

    prefix_bytes: ClassVar[int] = HEADER_BYTES

    def __init__(self, decoder: _ChangesByIds) -> None:
        self.decoder = decoder

    def columns_to_add(
        self, prefixes: pa.BinaryArray | pa.LargeBinaryArray, schema: TableSchema
    ) -> list[tuple[str, str]]:
        """The columns the schemas named by the headers ``prefixes`` add (a prefix whose
        magic byte is not 0 names none: its events are refused when decoded).

        Raises:
            SchemaRegistryUnavailable: The registry could not be reached.
            SchemaEvolutionError: A change the table cannot take.
        """
        return self.decoder.schema_changes(wire_ids(prefixes), schema)


def wire_ids(prefixes: pa.BinaryArray | pa.LargeBinaryArray) -> list[int]:
    """The schema ids of the distinct message headers ``prefixes`` in Confluent's wire
    format (magic byte 0, then the id, 4 bytes big-endian); others are left out. A loop
    over distinct headers (a few per batch), never over messages."""
    out = set()
    for p in prefixes.to_pylist():
        if p is not None and len(p) >= HEADER_BYTES and p[0] == 0:
            out.add(int.from_bytes(p[1:HEADER_BYTES], "big"))
    return sorted(out)


def column_type(node: Node) -> str | None:
    """The column type (as :func:`~cdc_sink.schema.parse_type` spells it) a field of this
    Avro type becomes (None: no column type holds it)."""
    from cdc_sink.formats._avro_values import ts_unit

    kind, cname = node.kind, node.connect_name
    if kind == "int" and node.connect_type in ("int8", "int16"):
        return node.connect_type
    if kind in ("int", "long"):
        unit = ts_unit(node, -1)
        if unit == UNIT_DAYS:
            return "date32"
        if unit == UNIT_TIME_OF_DAY or unit < 0:
            return "int32" if kind == "int" else "int64"
        return "timestamp[us, UTC]"
    if kind == "string" and cname == "io.debezium.time.ZonedTimestamp":
        return "timestamp[us, UTC]"
    if kind in ("bytes", "fixed") and (node.logical == "decimal" or cname.endswith("Decimal")):
        precision = node.precision if 0 < node.precision <= 38 else 38
        return f"decimal128({precision}, {node.scale})"
    simple = {
        "float": "float32",
        "double": "float64",
        "boolean": "bool",
        "string": "string",
        "enum": "string",
        "bytes": "binary",
        "fixed": "binary",
    }
    if kind in simple:
        return simple[kind]
    if kind == "record" and cname.startswith("io.debezium.data.geometry."):
        return "binary"
    return None


def _takes(target: pa.DataType, node: Node) -> bool:
    """Whether a column of type ``target`` takes the values of an Avro field ``node``."""
    kind = node.kind
    if pa.types.is_integer(target):
        return kind in ("int", "long")
    if pa.types.is_floating(target):
        return kind in ("float", "double", "int", "long")
    if pa.types.is_boolean(target):
        return kind == "boolean"
    if pa.types.is_string(target):
        return kind in ("string", "enum")
    if pa.types.is_binary(target):
        return column_type(node) == "binary"
    if pa.types.is_date32(target):
        return kind == "string" or column_type(node) == "date32"
    if pa.types.is_timestamp(target):
        return kind == "string" or column_type(node) in ("timestamp[us, UTC]", "date32", "int64")
    if pa.types.is_decimal(target):
        return kind in ("string", "float", "double", "int", "long") or (
            (column_type(node) or "").startswith("decimal")
            or node.connect_name == "io.debezium.data.VariableScaleDecimal"
        )
    return False


def _row(node: Node) -> Node | None:
    after = node.field("after") if node.kind == "record" else None
    row = None if after is None else after.nonnull()
    return row if row is not None and row.kind == "record" else None


def _where(settings: RegistrySettings, sid: int) -> str:
    """``schema id 7 (subject orders-value version 2)`` (best effort)."""
    try:
        got = settings.get(f"/schemas/ids/{sid}/versions")
    except SchemaRegistryUnavailable:
        got = None
    items = got if isinstance(got, list) else []
    names = [
        f"subject {i.get('subject')} version {i.get('version')}"
        for i in items
        if isinstance(i, dict)
    ]
    return f"schema id {sid}" + (f" ({', '.join(names)})" if names else "")


def schema_changes(
    settings: RegistrySettings,
    lookups: dict[int, SchemaLookup],
    ids: Iterable[int],
    schema: TableSchema,
) -> list[tuple[str, str]]:
    """The columns (name, type) to add so that ``schema`` takes the rows of ``ids``
    (older ids first; a field's first appearance decides its type).

    Raises:
        SchemaEvolutionError: A change the table cannot take.
    """
    added: dict[str, str] = {}
    for sid in sorted(set(ids)):
        found = lookups.get(sid)
        row = None if found is None or found.node is None else _row(found.node)
        if row is None:
            continue  # not an envelope: its events are refused, the table is not changed
        names = {name for name, _ in row.fields}
        for key in schema.primary_key:
            if key not in names:
                raise SchemaEvolutionError(
                    f"{_where(settings, sid)}: key column {key!r} is not a field of its rows"
                )
        for name, field in row.fields:
            node = field.nonnull()
            if schema.has_column(name):
                if not _takes(schema.column(name).type, node):
                    raise SchemaEvolutionError(
                        f"{_where(settings, sid)}: field {name!r} is Avro {type_name(node)}, "
                        f"which column {name!r} ({schema.column(name).type}) does not take"
                    )
                continue
            if name in added:
                continue
            ctype = column_type(node)
            if ctype is None:
                raise SchemaEvolutionError(
                    f"{_where(settings, sid)}: new field {name!r} is Avro {type_name(node)}, "
                    "which no column type holds"
                )
            if node is field:  # not a union with null
                raise SchemaEvolutionError(
                    f"{_where(settings, sid)}: new field {name!r} is required; only "
                    "optional fields are added to the table"
                )
            parse_type(ctype)
            added[name] = ctype
    return list(added.items())
