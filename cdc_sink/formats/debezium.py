"""The ``debezium`` format: Debezium change events in JSON.

Accepted message values (both forms may be mixed in one batch):

- with the Kafka Connect envelope (``value.converter.schemas.enable=true``)::

      {"schema": {"type": "struct", "fields": [...]},
       "payload": {"before": {...}, "after": {...}, "source": {...}, "op": "u",
                   "ts_ms": 1718000000123}}

- without it: the payload object alone.

Mapping to change events:

=========================  ===============================================================
Debezium                   cdc_sink
=========================  ===============================================================
op ``c``, ``r``, ``u``     ``upsert`` of ``after``: every column of ``after`` is set (a
                           ``null`` is a real null) except unchanged TOASTed values (the
                           ``unavailable_value_placeholder``: absent, the column keeps its
                           value); key columns are taken from ``after``
op ``d``                   ``delete`` of ``before``'s key; a delete without ``before``
                           (``REPLICA IDENTITY NOTHING``) takes its key from the Kafka
                           message key (``keys`` of :meth:`DebeziumDecoder.decode_with_meta`)
op ``t`` (truncate)        the canonical ``truncate`` (every live row of the table is
                           deleted at that point of the event order); ``truncate="reject"``
                           rejects it instead
op ``m`` (message)         skipped: counted in :attr:`Decoded.skipped` and
                           :attr:`Decoded.messages`
tombstone (null or empty   skipped: neither decoded nor rejected, counted in
value, ``null``, or a      :attr:`Decoded.skipped`
null ``payload``)
=========================  ===============================================================

A column of ``after`` that the table does not have is a reject (``unknown column``)
unless the decoder is built with ``ignore_unknown_columns=True``; in ``before`` of a
delete only the key (and the sequence column) are read. On a table with a
``sequence_column`` S, the event's ``seq`` is by default the value of S in ``after``
(``before`` for deletes): S must then be a column of the source table (e.g. a version
counter). With ``sequence_source="lsn"`` (PostgreSQL ``source.lsn``), ``"binlog"``
(MySQL: the number of ``source.file``, e.g. 3 for ``mysql-bin.000003``, shifted left 32
bits, plus ``source.pos`` and ``source.row``) or ``"ts_ms"`` (``source.ts_ms``), the seq
is the event's source position instead, S is written from it, and key-only deletes
work on sequence tables.

``ts_ms`` (:attr:`Decoded.ts_ms`) is ``source.ts_ms`` (when the change happened in the
database), else the payload's ``ts_ms`` (when the connector processed it).

A malformed envelope never raises: a schema that is not a Kafka Connect struct schema
(nested deeper than 64 levels, ``fields``/``parameters`` of the wrong JSON type, a
decimal ``scale`` that is not an integer in 0..38, a Kafka Connect ``Decimal`` without
its ``scale``) rejects its events with a reason,
and any exception that still escapes the vectorized decode is isolated by bisection to
the messages that raise it (rejected, the reason naming the exception class).

Value encodings (Debezium's defaults and the usual alternatives), per column type:

- dates: integers (days, ``io.debezium.time.Date``) or ISO strings;
- timestamps: integers in the unit of the field's schema name
  (``io.debezium.time.Timestamp``/``org.apache.kafka.connect.data.Timestamp``: ms,
  ``MicroTimestamp``: us, ``NanoTimestamp``: ns) or ISO strings (``ZonedTimestamp``).
  Without the envelope, integers are in ``timestamp_unit`` (default microseconds);
- decimals: base64 of the big-endian two's-complement unscaled integer at the field's
  ``scale`` parameter (``decimal.handling.mode=precise``, the default), decimal strings
  (``string``) or numbers (``double``), or ``{"scale", "value"}`` objects
  (``VariableScaleDecimal``, unconstrained ``NUMERIC``: accepted when exact at the
  column's scale and within its precision). A decimal string is base64 when the field's
  schema type is ``bytes``, text when it is ``string``; without the envelope,
  ``decimal_handling`` decides (default ``"precise"``, at the column's scale). A value
  beyond the column's precision is rejected, never wrapped;
- floats: numbers, or the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` that
  JsonConverter writes; a finite literal beyond the type's range is rejected;
- ISO timestamps with 7 to 9 fraction digits are truncated to microseconds, like
  ``NanoTimestamp`` integers; dates and timestamps outside 0001-01-01..9999-12-31 (such
  as PostgreSQL ``infinity``, written as 9223372036825200000) are rejected;
- binary: base64 strings, or Debezium geometries (``{"wkb": base64, "srid": n}``,
  ``io.debezium.data.geometry.Geometry``/``Geography``: the column holds the WKB bytes,
  as the Avro decoder's); other types as in the native JSON format.

The envelope's ``schema`` objects are deduplicated (hashing their bytes with Arrow) and
parsed once per distinct schema text, across calls too (a router decodes each table's
events of a batch in a call of its own), so hints cost nothing per event. As the schema is
most of an enveloped event's bytes and repeats in every event of a table, events that start
with exactly the same ``{"schema": ...,`` prefix as the first one are cut down to their
payload before they are indexed when they are a good part of the run (one vectorized
comparison; see
:func:`~cdc_sink.formats._debezium_schema.strip_shared_schema`). Decoding is vectorized
like the native JSON format (:mod:`cdc_sink.formats._jsonscan`).

Modules: the decoder is here (its run in named phases: envelope and body, ops, row
columns, keys from message keys, seq, timestamps); the envelope schema's sharing and
hints are in :mod:`._debezium_schema`, source positions as seq in
:mod:`._debezium_source`, and the encoders (:func:`encode_debezium`, the registry's
:func:`debezium_encoder`) in :mod:`._debezium_encode`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa

from cdc_sink.batch import OP_CODES, OP_DELETE, OP_UPSERT
from cdc_sink.formats._arrays import (
    Parts,
    binary_parts,
    check_bool,
    check_choice,
    key_parts,
    new_reasons,
    no_reason,
    position_array,
    refuse,
    refuse_each,
    sub_parts,
)
from cdc_sink.formats._arrays_runs import Columns, decode_in_runs
from cdc_sink.formats._base import Decoded, Decoder, FormatName
from cdc_sink.formats._debezium_encode import debezium_encoder, encode_debezium
from cdc_sink.formats._debezium_events import (
    Body,
    Ops,
    Row,
    event_body,
    event_ts,
    fill_key,
    placeholder_forms,
    scan_budget,
)
from cdc_sink.formats._debezium_schema import (
    ENVELOPE,
    Defaults,
    SchemaHints,
    Shared,
    key_fields,
    row_fields,
    strip_shared_schema,
)
from cdc_sink.formats._debezium_source import SOURCE, source_seq
from cdc_sink.formats._jsongrammar import check_grammar
from cdc_sink.formats._jsonmembers import (
    children,
    column_array,
    index_top,
    member_kind,
    named_members,
    refuse_members,
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
from cdc_sink.formats._jsonstrings import match_strings
from cdc_sink.formats.value_ranges import UNIT_MS, UNIT_NS, UNIT_US
from cdc_sink.schema import Column, TableSchema

__all__ = ["UNAVAILABLE_VALUE", "DebeziumDecoder", "debezium_encoder", "encode_debezium"]

OP_TRUNCATE: int = OP_CODES.get("truncate", -1)
UNAVAILABLE_VALUE = "__debezium_unavailable_value"
"""Debezium's default ``unavailable.value.placeholder`` (unchanged TOASTed values)."""
_SEQUENCE_SOURCES = ("column", "lsn", "binlog", "ts_ms")
_OPS = ("c", "r", "u", "d", "t", "m")
_UNITS: dict[str, int] = {"ms": UNIT_MS, "us": UNIT_US, "ns": UNIT_NS}


class DebeziumDecoder(Decoder):
    """Decoder of Debezium JSON change events (see the module docstring); vectorized.

    Every option can be given to :func:`~cdc_sink.formats.get_decoder` too. Where an
    event's envelope schema states a field's encoding (timestamp unit, decimal scale and
    form), the schema wins over the defaults below.

    Args:
        timestamp_unit: Unit of integer timestamps in events without the envelope.
        decimal_handling: Debezium's ``decimal.handling.mode`` of events without the
            envelope: ``"precise"`` (a decimal string is base64 of the unscaled bytes at
            the column's scale), ``"string"`` (decimal text) or ``"double"`` (JSON
            numbers; a string is then read as decimal text).
        ignore_unknown_columns: Ignore columns of ``after`` the table does not have
            (by default they reject the event).
        strict: Also check the full JSON grammar with Arrow's parser.
        unavailable_value_placeholder: Debezium's ``unavailable.value.placeholder``: a
            column holding it (as a string; in a binary column also as its base64 or
            base64-url-safe form) is an unchanged TOASTed value, decoded as *absent*
            (the column keeps its value). A ``hex:`` prefix gives the placeholder's
            bytes in hexadecimal, as in Debezium. ``None`` turns the check off.
        truncate: ``"apply"`` (a truncate event, ``op: "t"``, becomes the canonical
            truncate: every live row of the table is deleted at that point of the
            event order) or ``"reject"`` (it is rejected with a reason).
        sequence_source: Where the ``seq`` of a table with a sequence column comes
            from: ``"column"`` (the sequence column of the row), ``"lsn"``
            (``source.lsn``, PostgreSQL), ``"binlog"`` (MySQL ``source.file`` number
            << 32 | ``source.pos``, plus ``source.row``) or ``"ts_ms"``
            (``source.ts_ms``; a last resort: it is not unique). With a source position,
            the table's sequence column is written from it (a column of that name in
            the row is ignored) and deletes carrying only their key get a seq too.

    Raises:
        InvalidOption: An option value is invalid (the error names the option).
    """

    name: ClassVar[FormatName] = "debezium"
    reads_keys: ClassVar[bool] = True  # the key of a delete without a before image

    def __init__(
        self,
        *,
        timestamp_unit: Literal["ms", "us", "ns"] = "us",
        decimal_handling: Literal["precise", "string", "double"] = "precise",
        ignore_unknown_columns: bool = False,
        strict: bool = True,
        unavailable_value_placeholder: str | bytes | None = UNAVAILABLE_VALUE,
        truncate: Literal["apply", "reject"] = "apply",
        sequence_source: Literal["column", "lsn", "binlog", "ts_ms"] = "column",
    ) -> None:
        self.timestamp_unit = check_choice("timestamp_unit", timestamp_unit, tuple(_UNITS))
        self.decimal_handling = check_choice(
            "decimal_handling", decimal_handling, ("precise", "string", "double")
        )
        self.ignore_unknown_columns = check_bool("ignore_unknown_columns", ignore_unknown_columns)
        self.strict = check_bool("strict", strict)
        self.unavailable_value_placeholder = unavailable_value_placeholder
        self._placeholders = placeholder_forms(unavailable_value_placeholder)
        self.truncate = check_choice("truncate", truncate, ("apply", "reject"))
        self.sequence_source = check_choice("sequence_source", sequence_source, _SEQUENCE_SOURCES)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restores a pickled decoder (older pickles lack the newer options)."""
        defaults = {
            "unavailable_value_placeholder": UNAVAILABLE_VALUE,
            "truncate": "apply",
            "sequence_source": "column",
        }
        self.__dict__.update({**defaults, **state})
        if "_placeholders" not in state:
            self._placeholders = placeholder_forms(self.unavailable_value_placeholder)

    def decode_with_meta(
        self,
        values: pa.BinaryArray | pa.LargeBinaryArray,
        schema: TableSchema,
        *,
        position: np.ndarray | None = None,
        keys: pa.BinaryArray | pa.LargeBinaryArray | None = None,
    ) -> Decoded:
        """Decodes Debezium message values (see :meth:`Decoder.decode_with_meta`).

        Tombstones and logical decoding messages are skipped and counted in
        :attr:`Decoded.skipped` (messages also in :attr:`Decoded.messages`). ``keys``
        (the Kafka message keys, aligned with ``values``) give the key of an event whose
        row lacks it: a delete without a ``before`` image (``REPLICA IDENTITY NOTHING``,
        or a table without a primary key). The values are processed in runs of a few MB,
        each vectorized, then validated together.
        """
        parts = binary_parts(values)
        pos = None if position is None else position_array(position, parts.n)
        kparts = key_parts(keys, parts.n)
        # Envelope schemas are cut off each run (see strip_shared_schema): a run of
        # enveloped events holds about a quarter as much event data per byte.
        live = np.flatnonzero(parts.valid & (parts.lengths > 10))
        enveloped = (
            len(live) and parts.data[int(parts.starts[live[0]]) :][:10].tobytes() == b'{"schema":'
        )

        def run(lo: int, hi: int) -> Columns:
            kp = None if kparts is None else sub_parts(kparts, lo, hi)
            return self._decode_run(sub_parts(parts, lo, hi), kp, schema)

        return decode_in_runs(parts, pos, schema, RUN_BYTES * (4 if enveloped else 1), run)

    def _decode_run(self, parts: Parts, kparts: Parts | None, schema: TableSchema) -> Columns:
        """Decodes one run of events, phase by phase. The phases run in the order their
        reject reasons take precedence (an event keeps the first reason it is given)."""
        parts, shared = strip_shared_schema(parts)
        reasons = new_reasons(parts.n)
        tomb = ~parts.valid | (parts.lengths == 0) | _is_null_literal(parts)
        budget = scan_budget(schema, self.ignore_unknown_columns)
        sc = scan(parts, ~tomb, max_level=4, budget=budget)
        m, (schema_m, payload_m) = index_top(parts, sc, ENVELOPE, reasons)
        body, tomb = event_body(parts, m, schema_m, payload_m, tomb, reasons)
        ops = self._ops(parts, m, body, tomb, reasons)
        row = self._row(parts, m, body, ops, schema, shared, reasons)
        self._missing_keys(kparts, ops, schema, row, reasons)
        source = named_members(
            parts, m, children(m, body.source_m), SOURCE, reasons, what="source member"
        )
        seq = self._seq(parts, m, source, ops, schema, row, reasons)
        ts = event_ts(parts, m, source[0], body.ts_m, reasons)
        if self.strict:
            check_grammar(parts, no_reason(reasons) & ops.live & ~sc.verified, reasons)
        # tombstones and messages leave the batch without being rejects
        return Columns(
            op=ops.op,
            keys=row.keys,
            values=row.values,
            seq=seq,
            reasons=reasons,
            ts_ms=ts,
            skip=ops.skip,
            messages=ops.message,
        )

    # ------------------------------------------------------------------ run phases
    def _ops(
        self, parts: Parts, m: Members, body: Body, tomb: np.ndarray, reasons: np.ndarray
    ) -> Ops:
        """Each event's op (``m`` and tombstones skipped) and the row object it applies."""
        code = string_codes(parts, m, body.op_m, _OPS)
        message = ~tomb & (code == 5) & no_reason(reasons)
        skip = tomb | message
        live = ~skip
        is_truncate = live & (code == 4)
        if self.truncate == "reject":
            refuse(
                reasons, is_truncate, "truncate event rejected (decoder option truncate='reject')"
            )
        elif OP_TRUNCATE < 0:  # pragma: no cover - the canonical batch predates truncate
            refuse(reasons, is_truncate, "truncate events are not supported")
        refuse(reasons, live & (body.op_m < 0), "event has no 'op'")
        refuse_members(
            reasons,
            parts,
            m,
            body.op_m[live & (body.op_m >= 0) & (code < 0)],
            "unknown Debezium op {raw}",
        )
        is_delete = code == 3
        op = np.where(is_delete, OP_DELETE, np.where(is_truncate, OP_TRUNCATE, OP_UPSERT))
        row_m = np.where(is_delete, body.before_m, np.where(is_truncate, -1, body.after_m))
        row_kind = member_kind(m, row_m)
        # a delete without a 'before' object takes its key from the Kafka message key
        keyless_delete = live & is_delete & (row_kind != KIND_OBJECT)
        refuse(
            reasons,
            keyless_delete & (row_kind >= 0) & (row_kind != KIND_NULL),
            "'before' is not an object",
        )
        refuse(
            reasons,
            live & ~is_delete & ~is_truncate & (row_kind != KIND_OBJECT),
            "'after' is missing or not an object",
        )
        return Ops(
            op=op.astype(np.int8),
            skip=skip,
            message=message,
            live=live,
            is_delete=is_delete,
            is_truncate=is_truncate,
            row_m=row_m,
            keyless_delete=keyless_delete,
        )

    def _row(
        self,
        parts: Parts,
        m: Members,
        body: Body,
        ops: Ops,
        schema: TableSchema,
        shared: Shared | None,
        reasons: np.ndarray,
    ) -> Row:
        """The columns of each event's row object (``after``, or ``before`` of a delete)."""
        cols = children(m, ops.row_m)
        cols = cols[m.level[cols] == body.level[m.event[cols]] + 1]
        ccode = match_strings(
            parts.data,
            m.name_start[cols],
            m.name_end[cols],
            m.name_escaped[cols],
            [c.name for c in schema.columns],
        )
        if not self.ignore_unknown_columns:
            refuse_members(
                reasons,
                parts,
                m,
                cols[(ccode < 0) & ~ops.is_delete[m.event[cols]]],
                "unknown column {name!r}",
                use_name=True,
            )
        hints = SchemaHints(parts, m, body.schema_m, shared, row_fields, self._defaults(), reasons)
        key_names = set(schema.primary_key)
        row = Row(keys={}, key_given={}, values={})
        for i, c in enumerate(schema.columns):
            is_key, is_seq = c.name in key_names, c.name == schema.sequence_column
            if is_seq and self.sequence_source != "column":
                continue  # the sequence column is written from the source position
            sel = cols[ccode == i]
            if not is_key and not is_seq:
                sel = sel[~ops.is_delete[m.event[sel]]]  # a delete sets nothing
            if self._placeholders and not is_key:
                sel = sel[~self._is_placeholder(parts, m, sel, c)]  # TOAST: absent
            arr = column_array(
                parts, m, sel, c, c.type, parts.n, reasons, hints(c, hints.schema_id[m.event[sel]])
            )
            present = np.zeros(parts.n, dtype=bool)
            present[m.event[sel]] = True
            if is_key:
                row.keys[c.name] = arr
                row.key_given[c.name] = present
            else:
                row.values[c.name] = (arr, present)
        return row

    def _missing_keys(
        self, kparts: Parts | None, ops: Ops, schema: TableSchema, row: Row, reasons: np.ndarray
    ) -> None:
        """Keys the row lacks: from the Kafka message key (or a reject without one)."""
        lacking = np.zeros(len(reasons), dtype=bool)
        for kname in schema.primary_key:
            lacking |= ~row.key_given[kname]
        lacking &= ops.live & ~ops.is_truncate & no_reason(reasons)
        if kparts is not None and lacking.any():
            self._keys_from_messages(
                kparts, np.flatnonzero(lacking), schema, row.keys, row.key_given, reasons
            )
        if kparts is None:
            refuse(
                reasons,
                ops.keyless_delete & lacking,
                "delete without a 'before' row and without a message key (its key is needed)",
            )

    def _seq(
        self,
        parts: Parts,
        m: Members,
        source: np.ndarray,
        ops: Ops,
        schema: TableSchema,
        row: Row,
        reasons: np.ndarray,
    ) -> pa.Array | None:
        """The ``seq`` of each event: the sequence column of its row, or its source
        position (``sequence_source``); ``None`` without a sequence column."""
        if schema.sequence_column is None:
            return None
        need = ops.live & ~ops.is_truncate
        if self.sequence_source != "column":
            return source_seq(self.sequence_source, parts, m, reasons, need, *source)
        s_arr, s_present = row.values[schema.sequence_column]
        given = s_present & np.asarray(s_arr.is_valid(), dtype=bool)
        refuse(reasons, need & ~given, f"seq is missing (no {schema.sequence_column!r} in the row)")
        return s_arr.cast(pa.int64())

    # ------------------------------------------------------------------ helpers
    def _defaults(self) -> Defaults:
        return Defaults(unit=_UNITS[self.timestamp_unit], base64=self.decimal_handling == "precise")

    def _is_placeholder(self, parts: Parts, m: Members, sel: np.ndarray, c: Column) -> np.ndarray:
        """Which members of ``sel`` are the unavailable-value placeholder (TOAST)."""
        hit = np.zeros(len(sel), dtype=bool)
        txt = np.flatnonzero(m.kind[sel] == KIND_STRING)
        if not len(txt):
            return hit
        forms = self._placeholders if pa.types.is_binary(c.type) else self._placeholders[:1]
        s = sel[txt]
        codes = match_strings(
            parts.data, m.value_start[s] + 1, m.value_end[s] - 1, m.value_escaped[s], forms
        )
        hit[txt] = codes >= 0
        return hit

    def _keys_from_messages(
        self,
        kparts: Parts,
        need: np.ndarray,
        schema: TableSchema,
        keys: dict[str, pa.Array],
        key_given: dict[str, np.ndarray],
        reasons: np.ndarray,
    ) -> None:
        """Fills the key columns events ``need`` lack from their Kafka message keys
        (``{"schema", "payload": {...}}`` or the key object alone)."""
        kp = Parts(
            buffer=kparts.buffer,
            data=kparts.data,
            starts=kparts.starts[need],
            ends=kparts.ends[need],
            valid=kparts.valid[need],
        )
        kreasons = new_reasons(len(need))
        km, members, hints = self._key_members(
            kp, kreasons, scan_budget(schema, self.ignore_unknown_columns)
        )
        kcols = schema.key_columns
        kcode = match_strings(
            kp.data,
            km.name_start[members],
            km.name_end[members],
            km.name_escaped[members],
            [c.name for c in kcols],
        )
        for i, c in enumerate(kcols):
            sel = members[kcode == i]
            arr = column_array(
                kp,
                km,
                sel,
                c,
                c.type,
                len(need),
                kreasons,
                hints(c, hints.schema_id[km.event[sel]]),
            )
            fill_key(c, arr, km.event[sel], need, keys, key_given, kreasons)
        hit = ~no_reason(kreasons)
        rows = need[hit]
        refuse_each(reasons, rows, [str(r) for r in kreasons[hit]])

    def _key_members(
        self, kp: Parts, kreasons: np.ndarray, budget: Budget
    ) -> tuple[Members, np.ndarray, SchemaHints]:
        """Indexes message keys: the members of each key object (or of its envelope's
        payload, in document order) and their envelope schema hints."""
        missing = ~kp.valid | (kp.lengths == 0) | _is_null_literal(kp)
        refuse(kreasons, missing, "the row lacks its key and the message key is null")
        ksc = scan(kp, ~missing, max_level=2, budget=budget)
        km, (kschema_m, kpayload_m) = index_top(
            kp,
            ksc,
            ENVELOPE,
            kreasons,
            prefix="message key: ",
            what="message key member",
        )
        enveloped = (member_kind(km, kpayload_m) == KIND_OBJECT) & (kschema_m >= 0)
        l1 = np.flatnonzero(km.level == 1)
        members = np.concatenate([l1[~enveloped[km.event[l1]]], children(km, kpayload_m, level=2)])
        members.sort()
        hints = SchemaHints(kp, km, kschema_m, None, key_fields, self._defaults(), kreasons)
        if self.strict:
            check_grammar(kp, no_reason(kreasons) & ~ksc.verified, kreasons)
        return km, members, hints


def _is_null_literal(parts: Parts) -> np.ndarray:
    """Values that are exactly the JSON literal ``null`` (a tombstone's JSON form)."""
    lit = parts.valid & (parts.lengths == 4)
    at = parts.starts[lit]
    d = parts.data
    hit = (
        (d[at] == ord("n"))
        & (d[at + 1] == ord("u"))
        & (d[at + 2] == ord("l"))
        & (d[at + 3] == ord("l"))
    )
    out = np.zeros(parts.n, dtype=bool)
    out[np.flatnonzero(lit)[hit]] = True
    return out
