"""Which source table each Debezium message names: routing one topic set to many tables.

A Debezium connector writes one topic per table, and each change event's ``source``
block names its table (``source.db``, ``source.schema``, ``source.table``). One job that
reads many topics routes each message to its table with :func:`route`, which reads only
what it needs of every message of a micro-batch, vectorized (numpy/pyarrow; Python runs
per distinct table and per distinct schema, never per message):

=================================  =========================================================
message value                      :class:`Routed`
=================================  =========================================================
change event (``op`` ``c``/``r``   :data:`ROW`, its table (a truncate, ``op`` ``t``, too: its
/``u``/``d``/``t``)                ``source`` names the table)
null or empty (tombstone), or the  :data:`TOMBSTONE`, no table, no reason
JSON ``null`` (or a null payload)
heartbeat (schema                  :data:`HEARTBEAT`, no table, no reason
``io.debezium.connector.common.
Heartbeat``; ``{"ts_ms": n}``)
transaction metadata (schema       :data:`TRANSACTION`, no table, no reason
``...TransactionMetadataValue``;
``status``, ``id``...)
schema change (schema              :data:`SCHEMA_CHANGE`, no table, no reason
``...SchemaChangeValue``;
``ddl``/``tableChanges``, no op)
logical decoding message           :data:`MESSAGE`, no table, no reason (Debezium documents
(PostgreSQL, ``op`` ``m``)         that their ``source.schema`` and ``source.table`` are
                                   empty strings: a message belongs to no table)
anything else                      :data:`OTHER`, no table, and the reason (no ``source``
                                   block, a ``source`` that names no table, not JSON, not
                                   Confluent's wire format, an unknown schema id...)
=================================  =========================================================

A message whose ``source`` names a table is routed to it whatever else it holds: the
table's decoder then decodes it or rejects it with its own reason (a bad column value, no
``op``...). An empty ``source.db`` or ``source.schema`` is read as absent (MySQL has no
schema; PostgreSQL's messages give ``""``); an empty ``source.table`` names no table.

Formats: ``debezium`` (Kafka Connect's JsonConverter, with or without the
``{"schema", "payload"}`` envelope, mixed freely; the envelope schema is cut off the
events that repeat it, as the decoder does) and ``debezium-avro`` (Confluent's wire
format; the schemas come from the registry of the decoder options, through the
decoder's cache: a registry that cannot be reached raises, as decoding does). Heartbeats,
transaction metadata and schema changes are told by their schema name (the envelope's,
or the Avro record's) and, without a schema, by their members.

:attr:`Routed.schema_rows` gives, per table, one message of each distinct value schema
the batch holds for it (JSON: distinct envelope ``schema`` bytes, the events without an
envelope counting as one more; Avro: distinct writer schema ids), so a caller can read
each schema once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.errors import InvalidArgument
from cdc_sink.formats._arrays import (
    Parts,
    binary_parts,
    cast_rows,
    key_parts,
    new_reasons,
    no_reason,
    refuse,
    scatter,
    spans,
    sub_parts,
)
from cdc_sink.formats._arrays_runs import event_ranges
from cdc_sink.formats._avro_read import Reader, padded
from cdc_sink.formats._avro_rows import text_field
from cdc_sink.formats._base import FormatName
from cdc_sink.formats._debezium_events import (
    ENVELOPE_MEMBERS,
    MEMBERS_PER_COLUMN,
    UPSTREAM_COLUMNS,
    Body,
    event_body,
)
from cdc_sink.formats._debezium_schema import (
    _MAX_SCHEMA_DEPTH,
    ENVELOPE,
    Shared,
    strip_shared_schema,
)
from cdc_sink.formats._jsonmembers import (
    children,
    column_array,
    index_top,
    member_kind,
    named_members,
    string_codes,
)
from cdc_sink.formats._jsonscan import (
    KIND_NULL,
    KIND_OBJECT,
    KIND_STRING,
    RUN_BYTES,
    Budget,
    Members,
    scan,
)
from cdc_sink.formats._schema_json import SchemaTextError, load_schema_json
from cdc_sink.formats.avro_wire import HEADER_BYTES, SchemaLookup, wire_headers
from cdc_sink.formats.debezium import _is_null_literal
from cdc_sink.formats.debezium_avro import RUN_BYTES as AVRO_RUN_BYTES
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder, _mask, _record
from cdc_sink.schema import Column

__all__ = [
    "HEARTBEAT",
    "KIND_NAMES",
    "MESSAGE",
    "OTHER",
    "ROW",
    "SCHEMA_CHANGE",
    "TOMBSTONE",
    "TRANSACTION",
    "Routed",
    "SourceTable",
    "route",
]

ROW = 0
"""A change event naming its table (:attr:`Routed.kinds`)."""
TOMBSTONE = 1
"""A null or empty value (Debezium's tombstone after a delete), or a null payload."""
HEARTBEAT = 2
"""A Debezium heartbeat (``io.debezium.connector.common.Heartbeat``)."""
TRANSACTION = 3
"""Transaction metadata (``io.debezium.connector.common.TransactionMetadataValue``)."""
OTHER = 4
"""A message that names no table and is none of the kinds above: see its reason."""
MESSAGE = 5
"""A PostgreSQL logical decoding message (``op`` ``m``): it belongs to no table."""
SCHEMA_CHANGE = 6
"""A schema change event (``io.debezium.connector.<connector>.SchemaChangeValue``)."""
KIND_NAMES = ("row", "tombstone", "heartbeat", "transaction", "other", "message", "schema change")
"""The name of each kind, by its code."""

_HEARTBEAT_NAME = "io.debezium.connector.common.Heartbeat"
_TRANSACTION_NAME = "io.debezium.connector.common.TransactionMetadataValue"
_SCHEMA_CHANGE_SUFFIX = ".SchemaChangeValue"
_SOURCE = ("db", "schema", "table")
_EXTRA = ("status", "id", "ddl", "tableChanges", "before", "after")
"""Members that tell events without an ``op`` apart (transactions, schema changes)."""
_BUDGET = Budget(
    members=ENVELOPE_MEMBERS + MEMBERS_PER_COLUMN * UPSTREAM_COLUMNS,
    depth=_MAX_SCHEMA_DEPTH + 1,
    what="invalid envelope schema or payload: nested",
)
_NO_TABLE = "source block names no table"
_NO_SOURCE = "event has no source block"
_TEXT = Column(0, "source", pa.string())


@dataclass(frozen=True)
class SourceTable:
    """A source table named by Debezium's source block.

    Attributes:
        db: ``source.db`` (the MySQL database; the PostgreSQL database name), or None.
        schema: ``source.schema`` (the PostgreSQL or SQL Server schema; None for MySQL).
        table: ``source.table``.
    """

    db: str | None
    schema: str | None
    table: str

    def qualified(self) -> str:
        """``db.table`` or ``db.schema.table`` (the parts that are None left out)."""
        return ".".join(p for p in (self.db, self.schema, self.table) if p is not None)


@dataclass
class Routed:
    """The source table of each message of a batch (see :func:`route`).

    Attributes:
        codes: Per message (int32): its index in :attr:`tables`, or -1 when it names no
            table.
        tables: The distinct tables, in the order of their first message.
        reasons: Per message (object): None, or why it names no table (kind
            :data:`OTHER`).
        kinds: Per message (int8): :data:`ROW`, :data:`TOMBSTONE`, :data:`HEARTBEAT`,
            :data:`TRANSACTION`, :data:`MESSAGE`, :data:`SCHEMA_CHANGE` or :data:`OTHER`.
        schema_rows: Per table: the positions of one message of each distinct value
            schema of the table's messages (JSON: the envelope ``schema`` bytes, the
            messages without one counting as one more; Avro: the writer schema id),
            first occurrence first.
        schema_keys: Per message (int64): equal for messages of the same value schema
            within this result (-1: none); what :attr:`schema_rows` picks from.
        schema_texts: JSON: the envelope ``schema`` bytes of each schema key (what a
            reader of the schema parses, without the rest of the message). Avro: empty
            (the keys are the writer schema ids).
    """

    codes: np.ndarray
    tables: list[SourceTable]
    reasons: np.ndarray
    kinds: np.ndarray
    schema_rows: list[np.ndarray]
    schema_keys: np.ndarray
    schema_texts: dict[int, bytes] = field(default_factory=dict)


@dataclass
class _Found:
    """What a run of messages names: per message, its kind, reason, source strings and
    a schema key (equal for messages of the same value schema; -1: none)."""

    kinds: np.ndarray
    reasons: np.ndarray
    db: pa.Array
    schema: pa.Array
    table: pa.Array
    schema_key: np.ndarray


def route(
    format: str,
    values: pa.Array | pa.ChunkedArray,
    keys: pa.Array | pa.ChunkedArray | None,
    *,
    decoder_options: Mapping[str, Any] | None = None,
) -> Routed:
    """Finds the source table of every message of a batch (module docstring).

    Never raises for message content: a message that cannot be read is :data:`OTHER`
    with a reason (an exception that still escapes the vectorized reading is isolated by
    bisection to the messages that raise it).

    Args:
        format: ``"debezium"`` or ``"debezium-avro"``.
        values: The Kafka message values (binary or string; nulls are tombstones).
        keys: The Kafka message keys aligned with ``values``, or None (only their count is
            checked: a tombstone is one whether or not it has a key).
        decoder_options: The options of the format's decoder; ``debezium-avro`` reads its
            registry options (``registry_url``...) to fetch the schemas the messages name.

    Returns:
        Per message its table code, kind and reason, and the distinct tables.

    Raises:
        InvalidArgument: ``format`` is not a Debezium format, or ``values`` is not a
            binary array.
        InvalidOption: A decoder option is unknown or invalid; ``debezium-avro`` messages
            without ``registry_url``.
        ValueError: ``keys`` does not have one entry per value.
        SchemaRegistryUnavailable: The registry could not be reached (nothing is routed).
        TooManySchemaIds: The batch names too many new schema ids.
    """
    if format not in ("debezium", "debezium-avro"):
        raise InvalidArgument(
            f"routing by source table needs a Debezium format ('debezium' or "
            f"'debezium-avro'), got {format!r}"
        )
    try:
        parts = binary_parts(values)
    except TypeError as exc:
        raise InvalidArgument(str(exc)) from None
    key_parts(keys, parts.n)
    from cdc_sink.formats import get_decoder  # the registry of formats imports this module

    dec = get_decoder(cast(FormatName, format), **dict(decoder_options or {}))  # checks the options
    if isinstance(dec, DebeziumAvroDecoder):
        lookups = dec.schema_lookups(parts, None)  # the decoder's registry lookups and checks
        return _routed(_in_runs(parts, AVRO_RUN_BYTES, _AvroRun(parts, lookups)), {})
    # runs of about one scan chunk once shared envelope schemas are cut off
    live = np.flatnonzero(parts.valid & (parts.lengths > 10))
    at = int(parts.starts[live[0]]) if len(live) else 0
    enveloped = len(live) and parts.data[at : at + 10].tobytes() == b'{"schema":'
    run = _JsonRun(parts)
    found = _in_runs(parts, RUN_BYTES * (4 if enveloped else 1), run)
    return _routed(found, {k: text for text, k in run.schema_keys.items()})


# ---------------------------------------------------------------------- runs
RunFn = Callable[[int, int], _Found]


def _in_runs(parts: Parts, run_bytes: int, run: RunFn) -> _Found:
    """Reads the messages in runs of about ``run_bytes`` and joins the runs."""
    pieces = [p for lo, hi in event_ranges(parts, run_bytes) for p in _guarded(run, lo, hi)]
    if not pieces:
        return run(0, 0)
    if len(pieces) == 1:
        return pieces[0]
    return _Found(
        kinds=np.concatenate([p.kinds for p in pieces]),
        reasons=np.concatenate([p.reasons for p in pieces]),
        db=pa.concat_arrays([p.db for p in pieces]),
        schema=pa.concat_arrays([p.schema for p in pieces]),
        table=pa.concat_arrays([p.table for p in pieces]),
        schema_key=np.concatenate([p.schema_key for p in pieces]),
    )


def _guarded(run: RunFn, lo: int, hi: int) -> list[_Found]:
    """``run(lo, hi)``; if it raises, the messages that make it raise are found by
    bisection and given the exception as their reason."""
    try:
        return [run(lo, hi)]
    except Exception as exc:  # message content never raises out of route()
        if hi - lo <= 1:
            text = str(exc).splitlines()[0][:200] if str(exc) else ""
            found = _nothing(hi - lo)
            found.reasons[:] = f"unreadable message ({type(exc).__name__}: {text})"
            return [found]
    mid = (lo + hi) // 2
    return _guarded(run, lo, mid) + _guarded(run, mid, hi)


def _nothing(n: int) -> _Found:
    """``n`` messages of kind :data:`OTHER` naming nothing (reasons to be given)."""
    none = pa.nulls(n, pa.string())
    return _Found(
        kinds=np.full(n, OTHER, dtype=np.int8),
        reasons=new_reasons(n),
        db=none,
        schema=none,
        table=none,
        schema_key=np.full(n, -1, dtype=np.int64),
    )


def _finish(found: _Found) -> _Found:
    """Normalizes a run's result: empty db/schema are absent; a message of kind
    :data:`ROW` without a table (or with a reason) is :data:`OTHER` with its reason."""
    db = pc.if_else(pc.equal(found.db, ""), pa.scalar(None, pa.string()), found.db)
    schema = pc.if_else(pc.equal(found.schema, ""), pa.scalar(None, pa.string()), found.schema)
    has_table = np.asarray(pc.fill_null(pc.not_equal(found.table, ""), False), dtype=bool)
    row = found.kinds == ROW
    refuse(found.reasons, row & ~has_table, _NO_TABLE)
    named = row & has_table & no_reason(found.reasons)
    found.kinds[~no_reason(found.reasons)] = OTHER
    keep = pa.array(named)
    nothing = pa.scalar(None, pa.string())
    found.db = pc.if_else(keep, db, nothing)
    found.schema = pc.if_else(keep, schema, nothing)
    found.table = pc.if_else(keep, found.table, nothing)
    return found


# ---------------------------------------------------------------------- JSON
class _JsonRun:
    """Reads runs of Debezium JSON messages; the envelope schemas' keys are shared by
    the runs (one per distinct schema text)."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.schema_keys: dict[bytes, int] = {}
        self.schema_kinds: list[int] = []  # per schema key: the kind its name says, or -1

    def __call__(self, lo: int, hi: int) -> _Found:
        parts, shared = strip_shared_schema(sub_parts(self.parts, lo, hi))
        n = parts.n
        found = _nothing(n)
        reasons = found.reasons
        tomb = ~parts.valid | (parts.lengths == 0) | _is_null_literal(parts)
        sc = scan(parts, ~tomb, max_level=3, budget=_BUDGET)
        m, (schema_m, payload_m) = index_top(parts, sc, ENVELOPE, reasons)
        body, tomb = event_body(parts, m, schema_m, payload_m, tomb, reasons)
        found.schema_key = self._schema_keys(parts, m, schema_m, shared)
        named_kind = np.asarray([*self.schema_kinds, -1], dtype=np.int8)[found.schema_key]
        unnamed = _unnamed_kinds(parts, m, body, payload_m)
        kinds = np.where(named_kind >= 0, named_kind, np.where(unnamed >= 0, unnamed, ROW))
        kinds = kinds.astype(np.int8)
        op_code = string_codes(parts, m, body.op_m, ("m",))
        kinds[(kinds == ROW) & (op_code == 0)] = MESSAGE
        kinds[tomb] = TOMBSTONE
        reasons[tomb] = None
        source_kind = member_kind(m, body.source_m)
        rows = kinds == ROW
        refuse(reasons, rows & (source_kind != KIND_OBJECT), _NO_SOURCE)
        db_m, schema_m2, table_m = named_members(
            parts, m, children(m, body.source_m), _SOURCE, reasons, what="source member"
        )
        live = rows & no_reason(reasons)
        found.db = _texts(parts, m, np.where(live, db_m, -1), reasons, "source.db")
        found.schema = _texts(parts, m, np.where(live, schema_m2, -1), reasons, "source.schema")
        found.table = _texts(parts, m, np.where(live, table_m, -1), reasons, "source.table")
        found.kinds = kinds
        return _finish(found)

    def _schema_keys(
        self, parts: Parts, m: Members, schema_m: np.ndarray, shared: Shared | None
    ) -> np.ndarray:
        """The key of each message's envelope schema (-1: none), by its bytes."""
        key = np.full(parts.n, -1, dtype=np.int64)
        has = np.flatnonzero(member_kind(m, schema_m) == KIND_OBJECT)
        if len(has):
            sm = schema_m[has]
            enc = pc.dictionary_encode(spans(parts, m.value_start[sm], m.value_end[sm]))
            local = [self._key(bytes(t)) for t in enc.dictionary.cast(pa.binary()).to_pylist()]
            idx = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
            key[has] = np.asarray(local, dtype=np.int64)[idx]
        if shared is not None:
            mask = shared.mask
            keys = np.asarray([self._key(t) for t in shared.schemas], dtype=np.int64)
            key[mask] = keys[shared.ids[mask]]
        return key

    def _key(self, text: bytes) -> int:
        """The key of one envelope schema text (its kind read from its name once)."""
        k = self.schema_keys.get(text)
        if k is None:
            k = self.schema_keys[text] = len(self.schema_keys)
            self.schema_kinds.append(_schema_kind(text))
        return k


def _unnamed_kinds(parts: Parts, m: Members, body: Body, payload_m: np.ndarray) -> np.ndarray:
    """The kinds of the events that their members tell when no schema name does (-1:
    none): transaction metadata (``status`` and ``id``, no change), schema changes
    (``ddl`` or ``tableChanges``, no ``op``), heartbeats (``ts_ms`` alone)."""
    envelope = member_kind(m, payload_m) == KIND_OBJECT
    l1 = np.flatnonzero(m.level == 1)
    members = np.concatenate([l1[~envelope[m.event[l1]]], children(m, payload_m, level=2)])
    members.sort()
    scratch = new_reasons(len(payload_m))  # a repeated member is no matter here
    status_m, id_m, ddl_m, changes_m, before_m, after_m = named_members(
        parts, m, members, _EXTRA, scratch
    )
    no_op = body.op_m < 0
    no_change = no_op & (body.source_m < 0) & (before_m < 0) & (after_m < 0)
    count = np.bincount(m.event[members], minlength=len(payload_m))
    kinds = np.full(len(payload_m), -1, dtype=np.int8)
    kinds[no_change & (body.ts_m >= 0) & (count == 1)] = HEARTBEAT
    kinds[no_op & ((ddl_m >= 0) | (changes_m >= 0))] = SCHEMA_CHANGE
    kinds[no_change & (status_m >= 0) & (id_m >= 0)] = TRANSACTION
    return kinds


def _texts(parts: Parts, m: Members, idx: np.ndarray, reasons: np.ndarray, what: str) -> pa.Array:
    """The string value of member ``idx`` of each event (null: none, or ``null``); a
    value of another kind, or not valid UTF-8, refuses the event."""
    kind = member_kind(m, idx)
    refuse(
        reasons,
        (kind >= 0) & (kind != KIND_STRING) & (kind != KIND_NULL),
        f"{what} is not a string",
    )
    sel = idx[kind == KIND_STRING]
    scratch = new_reasons(parts.n)
    out = column_array(parts, m, sel, _TEXT, pa.string(), parts.n, scratch)
    refuse(reasons, ~no_reason(scratch), f"{what} is not a valid string")
    return out


@functools.lru_cache(maxsize=2048)
def _schema_kind(text: bytes) -> int:
    """The kind an envelope schema's name says (-1: none), read once per distinct text:
    a table's events repeat their schema in every batch."""
    return _named_kind(_schema_name(text))


def _schema_name(text: bytes) -> str | None:
    """The ``name`` of an envelope schema (None: none, or not a readable schema)."""
    try:
        s = load_schema_json(text, _MAX_SCHEMA_DEPTH)
    except SchemaTextError:
        return None
    name = s.get("name") if isinstance(s, dict) else None
    return name if isinstance(name, str) else None


def _named_kind(name: str | None) -> int:
    """The kind a value schema's name says (-1: a change event's, or no name)."""
    if not name:
        return -1
    if name.endswith(_HEARTBEAT_NAME):
        return HEARTBEAT
    if name.endswith(_TRANSACTION_NAME):
        return TRANSACTION
    if name.endswith(_SCHEMA_CHANGE_SUFFIX):
        return SCHEMA_CHANGE
    return -1


# ---------------------------------------------------------------------- Avro
class _AvroRun:
    """Reads runs of Debezium Avro messages, schema group by schema group."""

    def __init__(self, parts: Parts, lookups: dict[int, SchemaLookup]) -> None:
        self.parts = parts
        self.data = padded(parts.data)
        self.lookups = lookups

    def __call__(self, lo: int, hi: int) -> _Found:
        parts = sub_parts(self.parts, lo, hi)
        n = parts.n
        found = _nothing(n)
        tomb = ~parts.valid | (parts.lengths == 0)
        ids = wire_headers(parts, ~tomb, found.reasons)
        found.schema_key = ids
        found.kinds[:] = ROW
        found.kinds[tomb] = TOMBSTONE
        db: list[tuple[np.ndarray, pa.Array]] = []
        schema: list[tuple[np.ndarray, pa.Array]] = []
        table: list[tuple[np.ndarray, pa.Array]] = []
        for sid in np.unique(ids[ids >= 0]).tolist():
            rows = np.flatnonzero((ids == sid) & no_reason(found.reasons))
            texts = self._group(parts, rows, sid, found)
            if texts is not None:
                db.append((rows, texts[0]))
                schema.append((rows, texts[1]))
                table.append((rows, texts[2]))
        found.db, found.schema, found.table = (_placed(p, n) for p in (db, schema, table))
        return _finish(found)

    def _group(
        self, parts: Parts, rows: np.ndarray, sid: int, found: _Found
    ) -> tuple[pa.Array, pa.Array, pa.Array] | None:
        """The source strings of the messages ``rows``, all of schema ``sid`` (None: the
        schema says they name no table; their kind or reason is set)."""
        at = _mask(parts.n, rows)
        node = self.lookups[sid].node
        if node is None:
            refuse(found.reasons, at, f"malformed event: {self.lookups[sid].error}")
            return None
        kind = _named_kind(node.connect_name or node.name) if node.kind == "record" else -1
        if kind >= 0:
            found.kinds[rows] = kind
            return None
        if node.kind != "record" or node.field("source") is None:
            refuse(
                found.reasons,
                at,
                f"schema id {sid} is not a Debezium change event envelope (no 'source' field)",
            )
            return None
        g = len(rows)
        greasons = new_reasons(g)
        val = Reader(
            self.data, parts.starts[rows] + HEADER_BYTES, parts.ends[rows], greasons
        ).read_record(node)
        if node.field("op") is not None:
            found.kinds[rows[_op_m(val, g, parts)]] = MESSAGE
        src = _record(val, "source")
        out = tuple(
            _utf8(text_field(src, name, g, parts), greasons, f"source.{name}") for name in _SOURCE
        )
        bad = ~no_reason(greasons)
        found.reasons[rows[bad]] = greasons[bad]
        return out[0], out[1], out[2]


def _op_m(val: Any, g: int, parts: Parts) -> np.ndarray:
    """Which records' ``op`` is ``m`` (a logical decoding message)."""
    ops = text_field(val, "op", g, parts)
    return np.asarray(pc.fill_null(pc.equal(ops, "m"), False), dtype=bool)


def _utf8(arr: pa.Array, reasons: np.ndarray, what: str) -> pa.Array:
    """``arr`` (strings not yet checked) with its invalid UTF-8 values refused."""
    out, bad = cast_rows(arr.cast(pa.binary()), pa.string())
    refuse(reasons, bad, f"{what} is not valid UTF-8")
    return out


def _placed(pieces: list[tuple[np.ndarray, pa.Array]], n: int) -> pa.Array:
    """One string array of ``n`` messages from the groups' (rows, values)."""
    if not pieces:
        return pa.nulls(n, pa.string())
    rows = np.concatenate([r for r, _ in pieces])
    return scatter(pa.concat_arrays([v for _, v in pieces]), rows, n)


# ---------------------------------------------------------------------- tables
def _codes(arr: pa.Array) -> tuple[np.ndarray, list[Any]]:
    """Dictionary codes of a string array (-1: null) and its dictionary."""
    enc = pc.dictionary_encode(arr)
    codes = np.asarray(enc.indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    return codes, enc.dictionary.to_pylist()


def _routed(found: _Found, texts: dict[int, bytes]) -> Routed:
    """The distinct tables of the messages and each message's code (vectorized: one
    dictionary encoding per source member, one ``unique`` over their combined codes)."""
    n = len(found.kinds)
    (dc, dd), (sc, sd), (tc, td) = (_codes(a) for a in (found.db, found.schema, found.table))
    named = tc >= 0
    _, pair = np.unique((dc + 1) * (len(sd) + 1) + (sc + 1), return_inverse=True)
    key = pair.reshape(-1).astype(np.int64) * (len(td) + 1) + tc  # at most n * (n + 1)
    codes = np.full(n, -1, dtype=np.int32)
    tables: list[SourceTable] = []
    schema_rows: list[np.ndarray] = []
    if named.any():
        at = np.flatnonzero(named)
        _, first, inverse = np.unique(key[at], return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # by first appearance
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        codes[at] = rank[inverse.reshape(-1)]
        for u in order.tolist():
            r = int(at[first[u]])
            tables.append(
                SourceTable(
                    db=None if dc[r] < 0 else dd[dc[r]],
                    schema=None if sc[r] < 0 else sd[sc[r]],
                    table=td[tc[r]],
                )
            )
        schema_rows = _schema_rows(codes, found.schema_key, len(tables))
    kinds = found.kinds.astype(np.int8)
    return Routed(
        codes=codes,
        tables=tables,
        reasons=found.reasons,
        kinds=kinds,
        schema_rows=schema_rows,
        schema_keys=np.asarray(found.schema_key, dtype=np.int64),
        schema_texts=texts,
    )


def _schema_rows(codes: np.ndarray, schema_key: np.ndarray, k: int) -> list[np.ndarray]:
    """Per table, the first message of each distinct schema key, in message order."""
    at = np.flatnonzero(codes >= 0)
    _, sk = np.unique(schema_key[at], return_inverse=True)
    pair = codes[at].astype(np.int64) * (int(sk.max(initial=0)) + 1) + sk.reshape(-1)
    _, first = np.unique(pair, return_index=True)
    reps = np.sort(at[first])
    owner = codes[reps]
    return [reps[owner == t] for t in range(k)]
