"""Avro schemas as the Avro decoders read them (private).

:func:`parse_schema` turns an Avro schema (its JSON text, as a schema registry serves it)
into a tree of :class:`Node`: named types resolved (with their namespaces), and for each
node what the Debezium decoder needs to map it to a column: the Avro ``logicalType``
(``decimal`` with its ``precision``/``scale``, ``date``, ``timestamp-millis``...) and Kafka
Connect's metadata that Confluent's and Apicurio's Avro converters keep
(``connect.name``: ``io.debezium.time.MicroTimestamp``, ``io.debezium.data.Json``...;
``connect.type``: ``int8``/``int16``; ``connect.parameters``: a decimal's ``scale``).

Named types are resolved once: a type used in many places is one :class:`Node`, and each
node knows the size of its expansion (:attr:`Node.expanded`) and the bytes its values
take when that is fixed (:attr:`Node.width`), which the reader (:mod:`._avro_read`) uses
to skip what takes no bytes, or a fixed number, at once.

A schema that is not valid Avro, is nested deeper than :data:`MAX_DEPTH`, refers to
itself (a recursive type, which no Debezium envelope has) or expands to more than
:data:`MAX_EXPANDED` types (named types reused level after level, a "billion laughs"
schema) raises :class:`BadAvroSchema`: the decoder refuses every event written with it,
with the reason (the registry client keeps the refusal, so the schema is parsed once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cdc_sink.errors import BadAvroSchema
from cdc_sink.formats._schema_json import SchemaTextError, load_schema_json

__all__ = ["MAX_DEPTH", "BadAvroSchema", "Node", "parse_schema"]

MAX_DEPTH = 64
"""Deepest nesting of a schema the decoder accepts (Debezium's are a handful deep)."""
MAX_EXPANDED = 100_000
"""Most types a schema may expand to (named types written out where they are used). A
Debezium envelope of a table of 4,096 columns expands to about 25,000; a schema that
reuses named types level after level ("billion laughs") expands past any bound and is
refused when it is loaded, before any message is read with it."""
_WIDTHS = {"null": 0, "boolean": 1, "float": 4, "double": 8}
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_COMPLEX = frozenset({"record", "error", "enum", "array", "map", "fixed"})


@dataclass(eq=False)
class Node:
    """One Avro type of a parsed schema.

    Attributes:
        kind: ``null``, ``boolean``, ``int``, ``long``, ``float``, ``double``, ``bytes``,
            ``string``, ``record``, ``enum``, ``array``, ``map``, ``union`` or ``fixed``.
        name: The full name of a named type (record, enum, fixed), else ``""``.
        logical: The ``logicalType`` (``""``: none).
        connect_name: Kafka Connect's schema name (``connect.name``; ``""``: none).
        connect_type: Kafka Connect's type where Avro has none (``int8``, ``int16``).
        params: Kafka Connect's ``connect.parameters``.
        scale: A decimal's scale (the ``scale`` attribute, else its Connect parameter).
        precision: A decimal's precision (0: not given).
        size: A ``fixed``'s size in bytes.
        fields: A record's fields, in order: (name, type).
        branches: A union's branches.
        items: An array's items, a map's values.
        symbols: An enum's symbols.
        expanded: How many types the node is once every named type it uses is written
            out where it is used (what reading a value walks; at most
            :data:`MAX_EXPANDED`).
        width: The bytes every value of the type takes (``null``: 0, ``double``: 8, a
            record of such fields: their sum), -1 where it varies by value.
    """

    kind: str
    name: str = ""
    logical: str = ""
    connect_name: str = ""
    connect_type: str = ""
    params: dict[str, str] = field(default_factory=dict)
    scale: int = 0
    precision: int = 0
    size: int = 0
    fields: list[tuple[str, Node]] = field(default_factory=list)
    branches: list[Node] = field(default_factory=list)
    items: Node | None = None
    symbols: list[str] = field(default_factory=list)
    expanded: int = 1
    width: int = -1

    def field(self, name: str) -> Node | None:
        """The type of the record field ``name`` (None: no such field)."""
        for fname, node in self.fields:
            if fname == name:
                return node
        return None

    def nonnull(self) -> Node:
        """The type itself, or the one non-null branch of a ``["null", T]`` union."""
        if self.kind == "union":
            rest = [b for b in self.branches if b.kind != "null"]
            if len(rest) == 1:
                return rest[0]
        return self


def parse_schema(text: str | bytes) -> Node:
    """Parses an Avro schema from its JSON text.

    Raises:
        BadAvroSchema: Not JSON, not a valid Avro schema, too deep, or recursive.
    """
    try:
        obj = load_schema_json(text, MAX_DEPTH)
    except SchemaTextError as exc:
        raise BadAvroSchema(str(exc)) from None
    return _Parser().parse(obj, "")


class _Parser:
    def __init__(self) -> None:
        self.named: dict[str, Node] = {}
        self.open: set[str] = set()  # named types being defined (a reference = recursion)

    def parse(self, s: Any, namespace: str) -> Node:
        node = self._parse(s, namespace)
        if node.expanded > MAX_EXPANDED:
            raise BadAvroSchema(
                f"expands to more than {MAX_EXPANDED} types (its named types used over "
                "and over): refused, as reading it would cost more than its messages' bytes"
            )
        return node

    def _parse(self, s: Any, namespace: str) -> Node:
        if isinstance(s, str):
            return self._reference(s, namespace)
        if isinstance(s, list):
            node = Node("union", branches=[self.parse(b, namespace) for b in s])
            node.expanded = 1 + sum(b.expanded for b in node.branches)
            kinds = [b.kind for b in node.branches if b.kind not in ("record", "enum", "fixed")]
            if len(kinds) != len(set(kinds)) or "union" in kinds:
                raise BadAvroSchema("a union repeats a type or holds a union")
            return node
        if not isinstance(s, dict):
            raise BadAvroSchema(f"a type is a JSON {type(s).__name__}")
        kind = s.get("type")
        if isinstance(kind, (dict, list)):  # {"type": {...}} wraps a type
            return self.parse(kind, namespace)
        if not isinstance(kind, str):
            raise BadAvroSchema("a type has no 'type'")
        if kind in _PRIMITIVES:
            return self._annotate(Node(kind, width=_WIDTHS.get(kind, -1)), s)
        if kind not in _COMPLEX:
            return self._reference(kind, namespace)
        if kind in ("array", "map"):
            key = "items" if kind == "array" else "values"
            items = self.parse(s.get(key), namespace)
            return Node(kind, items=items, expanded=1 + items.expanded)
        return self._named(kind, s, namespace)

    def _reference(self, name: str, namespace: str) -> Node:
        if name in _PRIMITIVES:
            return Node(name, width=_WIDTHS.get(name, -1))
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        for candidate in (full, name):
            if candidate in self.open:
                raise BadAvroSchema(f"recursive type {candidate!r} (not supported)")
            if candidate in self.named:
                return self.named[candidate]
        raise BadAvroSchema(f"unknown type {name[:80]!r}")

    def _named(self, kind: str, s: dict[str, Any], namespace: str) -> Node:
        name, ns = s.get("name"), s.get("namespace")
        if not isinstance(name, str) or not name:
            raise BadAvroSchema(f"a {kind} has no name")
        if ns is not None and not isinstance(ns, str):
            raise BadAvroSchema(f"{name[:80]!r}: namespace is not a string")
        if "." in name:
            full = name
            ns = name.rsplit(".", 1)[0]
        else:
            ns = namespace if ns is None else ns
            full = f"{ns}.{name}" if ns else name
        if full in self.named or full in self.open:
            raise BadAvroSchema(f"type {full[:80]!r} is defined twice")
        node = self._annotate(Node("record" if kind == "error" else kind, name=full), s)
        if kind == "fixed":
            size = s.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size < 1 << 20:
                raise BadAvroSchema(f"fixed {full[:80]!r}: bad size")
            node.size = node.width = size
        elif kind == "enum":
            symbols = s.get("symbols")
            if not isinstance(symbols, list) or not all(isinstance(x, str) for x in symbols):
                raise BadAvroSchema(f"enum {full[:80]!r}: symbols is not a list of strings")
            node.symbols = list(symbols)
        else:
            self._fields(node, s, ns)
        self.named[full] = node
        if ns and full != name:
            self.named.setdefault(name, node)  # also found by its short name
        return node

    def _fields(self, node: Node, s: dict[str, Any], ns: str) -> None:
        """A record's fields (the record is open meanwhile: a reference is recursion)."""
        full = node.name
        self.open.add(full)
        fields = s.get("fields")
        if not isinstance(fields, list):
            raise BadAvroSchema(f"record {full[:80]!r}: fields is not a list")
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                raise BadAvroSchema(f"record {full[:80]!r}: a field has no name")
            node.fields.append((f["name"], self.parse(f.get("type"), ns)))
        self.open.discard(full)
        node.expanded = 1 + sum(t.expanded for _, t in node.fields)
        widths = [t.width for _, t in node.fields]
        node.width = -1 if -1 in widths else sum(widths)

    @staticmethod
    def _annotate(node: Node, s: dict[str, Any]) -> Node:
        """The logical type and Kafka Connect metadata of a type."""
        logical = s.get("logicalType")
        node.logical = logical if isinstance(logical, str) else ""
        cname = s.get("connect.name")
        node.connect_name = cname if isinstance(cname, str) else ""
        ctype = s.get("connect.type")
        node.connect_type = ctype if isinstance(ctype, str) else ""
        params = s.get("connect.parameters")
        if isinstance(params, dict):
            node.params = {str(k): str(v) for k, v in params.items()}
        scale = s.get("scale", node.params.get("scale"))
        precision = s.get("precision", node.params.get("connect.decimal.precision"))
        node.scale = _small_int(scale, 0)
        node.precision = _small_int(precision, 0)
        decimal = node.logical == "decimal" or node.connect_name.endswith("connect.data.Decimal")
        if decimal and not 0 <= node.scale <= 38:
            raise BadAvroSchema(f"decimal scale {str(scale)[:20]!r} is not in 0..38")
        return node


def _small_int(v: Any, default: int) -> int:
    """An int attribute given as a number or as digits (Connect parameters are strings);
    -1 when it is neither."""
    if v is None:
        return default
    if isinstance(v, str) and v.strip().lstrip("-").isdigit() and len(v) < 10:
        return int(v)
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 1 << 31:
        return v
    return -1
