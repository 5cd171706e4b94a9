"""Tables from the source's schema: a Debezium event's schema as a :class:`TableSchema`.

One job can sink many tables: a Debezium connector writes one topic per table, and every
message carries its table's schema, either the Kafka Connect schema of JsonConverter's
envelope ``{"schema": S, "payload": P}`` or the Avro writer schema a schema registry
holds; the message *key*'s schema names the primary key. :func:`schema_from_connect` and
:func:`schema_from_avro` build the table the first event of an unknown table creates;
:func:`schema_change` classifies a later schema against the table
(:class:`SchemaChange`: columns to add, columns to widen, columns the source no longer
sends, or why the table cannot take it).

Each field of the row (``after``, else ``before``) becomes a column of the type
:func:`connect_column_type` gives, the column the decoders
(:mod:`cdc_sink.formats.debezium`, :mod:`cdc_sink.formats.debezium_avro`) decode that
field's values into (docs/compatibility.md, "Tables created from the source's schema",
has the table of every Debezium type):

- Kafka Connect ``int8`` .. ``int64``, ``float32``/``float64``, ``boolean``, ``string``,
  ``bytes``: the column type of the same width (``bytes``: ``binary``); so are the
  Debezium types that only name such a type (``Json``, ``Uuid``, ``Enum``, ``Xml``,
  ``Bits``, ``Year``, ``MicroDuration``...);
- ``Decimal``: ``decimal128(p, s)`` (``p`` from ``connect.decimal.precision``; a missing
  one, or one beyond 38, is 38: wider values are rejected when decoded, never cut);
  ``VariableScaleDecimal``: ``decimal128(38, variable_scale)`` (:data:`VARIABLE_SCALE`);
- dates (``Date``) ``date32``; timestamps (``Timestamp``, ``MicroTimestamp``,
  ``NanoTimestamp``: floored to the microsecond, ``ZonedTimestamp``, ``IsoTimestamp``)
  ``timestamp[us, UTC]``; times of day keep their integer (``int32`` milliseconds for
  ``Time``, ``int64`` microseconds or nanoseconds for ``MicroTime``/``NanoTime``);
- ``Geometry``/``Geography``: ``binary`` (the WKB);
- arrays, maps and other structs (``Point``, ``Structured*`` times...): no column type
  holds them, as no decoder decodes them; the table is refused naming the field
  (:class:`~cdc_sink.errors.SchemaError`), or with ``skip_unsupported=True`` the field
  is left out (decode with ``ignore_unknown_columns=True`` then).

Nullability is the field's (``optional``); key columns are never nullable. A field's
default (Connect's ``default``, Avro's field ``default``) becomes the column's default
when a column value holds it, else the column has none.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from cdc_sink.errors import BadAvroSchema, NoPrimaryKey, SchemaError
from cdc_sink.formats._avro_schema import Node, _small_int, parse_schema
from cdc_sink.formats._avro_values import _GEOMETRY, _VARIABLE_SCALE
from cdc_sink.formats._debezium_schema import CONNECT_DECIMAL, _BadSchema, key_fields, row_fields
from cdc_sink.formats.value_ranges import (
    TS_UNIT_BY_NAME,
    UNIT_DAYS,
    UNIT_MS,
    UNIT_NS,
    UNIT_TIME_OF_DAY,
    UNIT_US,
)
from cdc_sink.schema import Column, TableSchema, is_widening, parse_type, type_to_str
from cdc_sink.utils.values import CONVERSION_ERRORS, coerce

__all__ = [
    "VARIABLE_SCALE",
    "AddedColumn",
    "SchemaChange",
    "connect_column_type",
    "schema_change",
    "schema_from_avro",
    "schema_from_connect",
]

VARIABLE_SCALE = 18
"""Scale of the column of a ``VariableScaleDecimal`` field (PostgreSQL ``NUMERIC``
without precision): ``decimal128(38, 18)``, Spark's default decimal. A value with more
digits after the point, or more than 20 before it, is rejected when decoded."""

TIMESTAMP_STRINGS = ("io.debezium.time.ZonedTimestamp", "io.debezium.time.IsoTimestamp")
"""ISO 8601 timestamp strings (with their offset, or ``Z``)."""

_INTS = ("int8", "int16", "int32", "int64")
_PRIMITIVES = {
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "float32": "float32",
    "float": "float32",
    "float64": "float64",
    "double": "float64",
    "boolean": "bool",
    "string": "string",
    "bytes": "binary",
}
_TS = "timestamp[us, UTC]"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_PER_SECOND = {UNIT_MS: 10**3, UNIT_US: 10**6, UNIT_NS: 10**9}
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_DEFAULT_ERRORS: tuple[type[Exception], ...] = (*CONVERSION_ERRORS, KeyError)
"""What converting a default that no column value holds raises."""


class _Unsupported(Exception):
    """A field no column type holds (the message says what it is)."""


# ---------------------------------------------------------------------- the mapping
def connect_column_type(
    type_: str,
    name: str = "",
    parameters: Mapping[str, Any] | None = None,
    *,
    variable_scale: int = VARIABLE_SCALE,
) -> str:
    """The column type (as :func:`~cdc_sink.schema.parse_type` spells it) of a field of
    Kafka Connect type ``type_`` (``int32``, ``bytes``, ``struct``...) and schema name
    ``name`` (``io.debezium.time.MicroTimestamp``...; ``""``: none).

    Args:
        type_: The Connect schema type.
        name: The Connect schema name.
        parameters: The schema's parameters (a decimal's ``scale`` and
            ``connect.decimal.precision``).
        variable_scale: The scale of a ``VariableScaleDecimal`` column.

    Raises:
        SchemaError: No column type holds the field's values (an array, a map, a struct
            other than a decimal or a geometry, a decimal scale outside 0..38).
    """
    try:
        return _column_type(type_, name, parameters or {}, variable_scale)
    except _Unsupported as exc:
        raise SchemaError(str(exc)) from None


def _column_type(t: str, name: str, params: Mapping[str, Any], variable_scale: int) -> str:
    what = f"{t} {name}" if name else t
    if name == CONNECT_DECIMAL and t == "bytes":
        scale = _small_int(params.get("scale"), -1)
        if not 0 <= scale <= 38:
            raise _Unsupported(f"{what} with scale {params.get('scale')!r} (need 0..38)")
        precision = _small_int(params.get("connect.decimal.precision"), 0)
        p = precision if 1 <= precision <= 38 else 38
        return f"decimal128({max(p, scale, 1)}, {scale})"
    if name == _VARIABLE_SCALE and t == "struct":
        return f"decimal128(38, {variable_scale})"
    if name in _GEOMETRY and t == "struct":  # the structs the decoders read the wkb of
        return "binary"
    unit = TS_UNIT_BY_NAME.get(name)
    if unit is not None and t in _INTS:
        if unit == UNIT_DAYS:
            return "date32"
        if unit == UNIT_TIME_OF_DAY:
            return t
        return _TS
    if name in TIMESTAMP_STRINGS and t == "string":
        return _TS
    if t in _PRIMITIVES:
        return _PRIMITIVES[t]
    raise _Unsupported(f"{what}: no column type holds it (no decoder reads it)")


# ---------------------------------------------------------------------- fields
@dataclass(frozen=True)
class _Field:
    """One field of the source's row, read from its schema."""

    name: str
    type: str  # column type
    nullable: bool
    default: Any  # the schema's form (None: no default)
    unit: int | None  # of an integer timestamp or date
    scale: int  # of a fixed-scale decimal
    latin1: bool  # bytes defaults as Avro's code points 0..255 (else base64)


def _default_value(f: _Field) -> Any:
    """The field's default as a value of its column (None: none, or none a column value
    holds)."""
    raw = f.default
    if raw is None:
        return None
    t = parse_type(f.type)
    try:
        v = _convert_default(raw, f, t)
        v = coerce(v, t, strict=True)
        pa.scalar(v, type=t)
    except _DEFAULT_ERRORS:
        return None
    return v


def _raw_bytes(raw: Any, latin1: bool) -> bytes:
    if isinstance(raw, bytes):
        return raw
    if not isinstance(raw, str):
        raise TypeError(f"{raw!r} is not bytes")
    return raw.encode("latin-1") if latin1 else base64.b64decode(raw, validate=True)


def _convert_default(raw: Any, f: _Field, t: pa.DataType) -> Any:
    """A default in the schema's form (Connect JSON or Avro JSON) as a Python value."""
    if pa.types.is_floating(t) and isinstance(raw, str):
        return _FLOAT_WORDS[raw]
    if pa.types.is_binary(t):
        if isinstance(raw, Mapping):  # a geometry's default: its wkb
            return _raw_bytes(raw.get("wkb"), f.latin1)
        return _raw_bytes(raw, f.latin1)
    if pa.types.is_date32(t) and isinstance(raw, int) and not isinstance(raw, bool):
        return dt.date(1970, 1, 1) + dt.timedelta(days=raw)
    if pa.types.is_timestamp(t) and isinstance(raw, int) and not isinstance(raw, bool):
        if f.unit == UNIT_DAYS:
            return _EPOCH + dt.timedelta(days=raw)
        micros = raw * 10**6 // _PER_SECOND.get(f.unit or UNIT_US, 10**6)
        return _EPOCH + dt.timedelta(microseconds=micros)
    if pa.types.is_decimal(t):
        if isinstance(raw, Mapping):  # VariableScaleDecimal {"scale", "value"}
            unscaled = int.from_bytes(_raw_bytes(raw.get("value"), f.latin1), "big", signed=True)
            return decimal.Decimal(unscaled).scaleb(-int(raw["scale"]))
        if isinstance(raw, str):  # the bytes of a Connect Decimal (JSON: base64)
            unscaled = int.from_bytes(_raw_bytes(raw, f.latin1), "big", signed=True)
            return decimal.Decimal(unscaled).scaleb(-f.scale)
        return decimal.Decimal(str(raw))
    return raw


def _connect_field(f: Mapping[str, Any], variable_scale: int) -> _Field:
    t, name = f.get("type"), f.get("name") or ""
    params = f.get("parameters") or {}
    ctype = _column_type(str(t), str(name), params, variable_scale)
    return _Field(
        name=str(f.get("field")),
        type=ctype,
        nullable=bool(f.get("optional", False)),
        default=f.get("default"),
        unit=TS_UNIT_BY_NAME.get(str(name)),
        scale=max(_small_int(params.get("scale"), 0), 0),
        latin1=False,
    )


# ---------------------------------------------------------------------- Avro
_AVRO_CONNECT = {
    "int": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "boolean": "boolean",
    "string": "string",
    "enum": "string",
    "bytes": "bytes",
    "fixed": "bytes",
    "record": "struct",
    "array": "array",
    "map": "map",
}
_AVRO_LOGICAL = {
    "decimal": CONNECT_DECIMAL,
    "date": "org.apache.kafka.connect.data.Date",
    "timestamp-millis": "io.debezium.time.Timestamp",
    "timestamp-micros": "io.debezium.time.MicroTimestamp",
    "timestamp-nanos": "io.debezium.time.NanoTimestamp",
    "local-timestamp-millis": "io.debezium.time.Timestamp",
    "local-timestamp-micros": "io.debezium.time.MicroTimestamp",
    "time-millis": "io.debezium.time.Time",
    "time-micros": "io.debezium.time.MicroTime",
}


def _avro_connect(node: Node) -> tuple[str, str, dict[str, Any]]:
    """The Kafka Connect (type, name, parameters) of an Avro type, as Confluent's
    converter writes Connect's types in Avro (``connect.type``, ``connect.name``,
    ``connect.parameters``) and logical types."""
    t = node.connect_type if node.connect_type in ("int8", "int16") else ""
    t = t or _AVRO_CONNECT.get(node.kind, node.kind)
    name = node.connect_name or _AVRO_LOGICAL.get(node.logical, "")
    params: dict[str, Any] = dict(node.params)
    if name == CONNECT_DECIMAL or node.logical == "decimal":
        name = CONNECT_DECIMAL
        params["scale"] = node.scale
        params["connect.decimal.precision"] = node.precision
    return t, name, params


def _avro_field(
    name: str, field: Node, raw: Mapping[str, Any] | None, variable_scale: int
) -> _Field:
    node = field.nonnull()
    t, cname, params = _avro_connect(node)
    return _Field(
        name=name,
        type=_column_type(t, cname, params, variable_scale),
        nullable=node is not field or field.kind == "null",
        default=None if raw is None else raw.get("default"),
        unit=TS_UNIT_BY_NAME.get(cname),
        scale=node.scale,
        latin1=True,
    )


def _raw_records(s: Any, out: dict[str, Mapping[str, Any]], ns: str = "") -> None:
    """Every record defined in an Avro schema's JSON, by full and short name."""
    if isinstance(s, list):
        for b in s:
            _raw_records(b, out, ns)
        return
    if not isinstance(s, Mapping):
        return
    kind = s.get("type")
    if kind in ("record", "error") and isinstance(s.get("name"), str):
        name = s["name"]
        ns = name.rpartition(".")[0] if "." in name else str(s.get("namespace") or ns)
        full = name if "." in name or not ns else f"{ns}.{name}"
        out.setdefault(full, s)
        out.setdefault(full.rpartition(".")[2], s)
        for f in s.get("fields") or []:
            if isinstance(f, Mapping):
                _raw_records(f.get("type"), out, ns)
    elif isinstance(kind, (Mapping, list)):
        _raw_records(kind, out, ns)
    else:
        for k in ("items", "values"):
            _raw_records(s.get(k), out, ns)


def _load_avro(schema: str | bytes | Mapping[str, Any], where: str) -> tuple[Node, Any]:
    """The parsed Avro schema and its JSON."""
    text = schema if isinstance(schema, (str, bytes)) else json.dumps(schema)
    try:
        node = parse_schema(text)
    except BadAvroSchema as exc:
        raise SchemaError(f"{where}: not a valid Avro schema: {exc}") from None
    return node, json.loads(text)


# ---------------------------------------------------------------------- the table
def _where(source: str) -> str:
    return f"source table {source!r}" if source else "the source table"


def _table(
    fields: list[_Field],
    key_names: Sequence[str],
    *,
    num_buckets: int,
    key_columns: Sequence[str] | None,
    source: str,
) -> TableSchema:
    where = _where(source)
    if not fields:
        raise SchemaError(f"{where}: its schema has no row fields (before/after)")
    key = list(key_columns) if key_columns is not None else list(key_names)
    if not key:
        raise NoPrimaryKey(
            f"{where} has no primary key: its message key names no fields and no "
            "key_columns were given"
        )
    names = {f.name for f in fields}
    missing = [k for k in key if k not in names]
    if missing:
        raise SchemaError(f"{where}: key column(s) {missing} are not fields of its rows")
    cols = []
    for i, f in enumerate(fields):
        t = parse_type(f.type)
        cols.append(
            Column(
                id=i,
                name=f.name,
                type=t,
                nullable=f.nullable and f.name not in key,
                default=pa.scalar(_default_value(f), type=t),
            )
        )
    try:
        return TableSchema(columns=tuple(cols), primary_key=tuple(key), num_buckets=num_buckets)
    except SchemaError as exc:
        raise SchemaError(f"{where}: {exc}") from None


_F = TypeVar("_F")


def _mapped(
    items: Iterable[tuple[str, _F]],
    convert: Callable[[str, _F], _Field],
    skip_unsupported: bool,
    where: str,
) -> list[_Field]:
    """The fields ``items`` converted; one no column type holds raises, or is left out."""
    out = []
    for name, f in items:
        try:
            out.append(convert(name, f))
        except _Unsupported as exc:
            if not skip_unsupported:
                raise SchemaError(
                    f"{where}: field {name!r} is {exc}; pass skip_unsupported=True to leave "
                    "it out of the table"
                ) from None
    return out


def schema_from_connect(
    value_schema: Mapping[str, Any],
    key_schema: Mapping[str, Any] | None,
    *,
    num_buckets: int,
    key_columns: Sequence[str] | None = None,
    source: str = "",
    variable_scale: int = VARIABLE_SCALE,
    skip_unsupported: bool = False,
) -> TableSchema:
    """The table a Debezium JSON topic's events create, from their Kafka Connect schema.

    Args:
        value_schema: The envelope ``schema`` of a message value (a struct with
            ``before``/``after``/``source``/``op``... fields): the columns are the row
            struct's fields, in order; nullable where ``optional``; their ``default``
            where a column value holds it.
        key_schema: The ``schema`` of a message key (a struct): its fields are the
            primary key, in order. None: the table has no key (Debezium's null key).
        num_buckets: The table's number of buckets.
        key_columns: The primary key, overriding ``key_schema``.
        source: The source table's name, for errors (a topic name).
        variable_scale: The scale of ``VariableScaleDecimal`` columns.
        skip_unsupported: Leave out the fields no column type holds (else they refuse
            the table).

    Raises:
        NoPrimaryKey: Neither ``key_schema`` nor ``key_columns`` names a key.
        SchemaError: The schema is not a Kafka Connect envelope schema, a field is of a
            type no column holds, or the table is not valid (a key column not in the
            rows, a floating-point key...).
    """
    where = _where(source)
    try:
        row = row_fields(value_schema)
        keys = key_fields(key_schema)
    except _BadSchema as exc:
        raise SchemaError(f"{where}: invalid Kafka Connect schema: {exc}") from None
    fields = _mapped(
        row.items(),
        lambda _n, f: _connect_field(f, variable_scale),
        skip_unsupported,
        where,
    )
    return _table(
        fields, list(keys), num_buckets=num_buckets, key_columns=key_columns, source=source
    )


def schema_from_avro(
    value_schema: str | bytes | Mapping[str, Any],
    key_schema: str | bytes | Mapping[str, Any] | None,
    *,
    num_buckets: int,
    key_columns: Sequence[str] | None = None,
    source: str = "",
    variable_scale: int = VARIABLE_SCALE,
    skip_unsupported: bool = False,
) -> TableSchema:
    """The table a Debezium Avro topic's events create, from the registry's writer
    schemas (Confluent's Avro converter's form of the Connect schemas).

    Args:
        value_schema: The value's writer schema (the ``Envelope`` record; JSON text or
            parsed): the columns are the fields of its ``after`` (else ``before``)
            record, in order; nullable where a union with ``null``.
        key_schema: The key's writer schema (a record: its fields are the key), or None.
        num_buckets: The table's number of buckets.
        key_columns: The primary key, overriding ``key_schema``.
        source: The source table's name, for errors.
        variable_scale: The scale of ``VariableScaleDecimal`` columns.
        skip_unsupported: Leave out the fields no column type holds.

    Raises:
        NoPrimaryKey: Neither ``key_schema`` nor ``key_columns`` names a key.
        SchemaError: Not a valid Avro envelope schema, a field of a type no column holds,
            or an invalid table.
    """
    where = _where(source)
    node, raw = _load_avro(value_schema, where)
    row = None
    if node.kind == "record":
        for side in ("after", "before"):
            f = node.field(side)
            if f is not None and f.nonnull().kind == "record":
                row = f.nonnull()
                break
    if row is None:
        raise SchemaError(f"{where}: the value schema is not a Debezium envelope record")
    records: dict[str, Mapping[str, Any]] = {}
    _raw_records(raw, records)
    raw_row = records.get(row.name) or {}
    raw_fields = {f.get("name"): f for f in raw_row.get("fields") or [] if isinstance(f, Mapping)}
    fields = _mapped(
        row.fields,
        lambda n, f: _avro_field(n, f, raw_fields.get(n), variable_scale),
        skip_unsupported,
        where,
    )
    key_names: list[str] = []
    if key_schema is not None:
        knode, _ = _load_avro(key_schema, where)
        if knode.kind != "record":
            raise SchemaError(f"{where}: the key schema is not a record")
        key_names = [n for n, _ in knode.fields]
    return _table(
        fields, key_names, num_buckets=num_buckets, key_columns=key_columns, source=source
    )


# ---------------------------------------------------------------------- changes
@dataclass(frozen=True)
class AddedColumn:
    """A column the source's schema adds (the arguments of
    :meth:`~cdc_sink.schema.TableSchema.add_column`).

    Attributes:
        name: The column's name.
        type: Its type, as :func:`~cdc_sink.schema.parse_type` spells it.
        nullable: Whether it is nullable (a required one has a default).
        default: The value rows written before read (None: null).
    """

    name: str
    type: str
    nullable: bool
    default: Any = None


@dataclass(frozen=True)
class SchemaChange:
    """What a table must do to take a source's schema (:func:`schema_change`).

    Attributes:
        add: New columns: the optional ones, and the required ones with a default
            (rows written before read the default).
        widen: ``(column, new type)`` of the lossless widenings (``int8`` -> ``int16`` ->
            ``int32`` -> ``int64``, ``float32`` -> ``float64``, a decimal's precision up
            at the same scale; :func:`~cdc_sink.schema.is_widening`), key columns
            excepted.
        refused: Why the table cannot take the schema (None: it can): a narrower or
            another type, a widened key column, a new or changed primary key, a required
            new field without a default, a column that became optional while the table's
            is not nullable, a dropped column the table requires.
        dropped: Columns the table has that the source no longer sends (kept: later rows
            set them null); the table's sequence column is never one.
    """

    add: tuple[AddedColumn, ...] = ()
    widen: tuple[tuple[str, str], ...] = ()
    refused: str | None = None
    dropped: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """Whether the table takes the schema as it is (nothing to add or widen)."""
        return not (self.add or self.widen) and self.refused is None


def _refusals(table: TableSchema, source: TableSchema) -> Iterable[str]:
    """Every reason the table cannot take the source's schema."""
    if tuple(source.primary_key) != tuple(table.primary_key):
        yield (
            f"the primary key changed from {list(table.primary_key)} to {list(source.primary_key)}"
        )
    for c in source.columns:
        if not table.has_column(c.name):
            if not c.nullable and not c.has_default:
                yield (
                    f"new column {c.name!r} ({type_to_str(c.type)}) is required and has no "
                    "default: rows written before would have no value"
                )
            continue
        old = table.column(c.name)
        change = f"column {c.name!r} from {type_to_str(old.type)} to {type_to_str(c.type)}"
        if old.type != c.type:
            if not is_widening(old.type, c.type):
                kind = "narrowed" if is_widening(c.type, old.type) else "changed type"
                yield f"{change}: {kind} (only lossless widenings are taken)"
            elif c.name in table.primary_key:
                yield f"key {change}: key columns are never widened"
        if c.nullable and not old.nullable:
            yield f"column {c.name!r} became optional; the table's column is not nullable"
    for c in table.required_columns:
        if not source.has_column(c.name):
            yield (
                f"column {c.name!r} is no longer sent, and the table's column is required "
                "(not nullable, no default)"
            )


def schema_change(table: TableSchema, source: TableSchema) -> SchemaChange:
    """Classifies the source's schema ``source`` (from :func:`schema_from_connect` or
    :func:`schema_from_avro` of a later event) against the table's ``table``.

    Columns are matched by name. A change the table cannot take is described in
    :attr:`SchemaChange.refused` (every reason, naming the column and both types); the
    other fields are then still filled in, for the message.
    """
    add = tuple(
        AddedColumn(
            name=c.name,
            type=type_to_str(c.type),
            nullable=c.nullable,
            default=c.default.as_py(),
        )
        for c in source.columns
        if not table.has_column(c.name) and (c.nullable or c.has_default)
    )
    widen = tuple(
        (c.name, type_to_str(c.type))
        for c in source.columns
        if table.has_column(c.name)
        and c.name not in table.primary_key
        and is_widening(table.column(c.name).type, c.type)
    )
    dropped = tuple(
        c.name
        for c in table.columns
        if not source.has_column(c.name) and c.name != table.sequence_column
    )
    reasons = list(_refusals(table, source))
    return SchemaChange(
        add=add,
        widen=widen,
        refused="; ".join(reasons) if reasons else None,
        dropped=dropped,
    )
