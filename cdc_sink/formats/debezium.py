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
decimal ``scale`` that is not an integer in 0..38) rejects its events with a reason,
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
- binary: base64 strings; other types as in the native JSON format.

The envelope's ``schema`` objects are deduplicated (hashing their bytes with Arrow) and
parsed once per distinct schema, so hints cost nothing per event. As the schema is most
of an enveloped event's bytes and repeats in every event of a table, events that start
with exactly the same ``{"schema": ...,`` prefix as the first one are cut down to their
payload before they are indexed (one vectorized comparison; see
:func:`_strip_shared_schema`). Decoding is vectorized like the native JSON format
(:mod:`cdc_sink.formats._jsonscan`).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.changes import OP_CODES, OP_DELETE, OP_UPSERT
from cdc_sink.errors import InvalidOption
from cdc_sink.formats import TS_MISSING, Decoded, Decoder, FormatName
from cdc_sink.formats._arrays import (
    Columns,
    Parts,
    assemble,
    binary_parts,
    check_bool,
    check_choice,
    decode_guarded,
    event_ranges,
    gather,
    merge_columns,
    new_reasons,
    no_reason,
    position_array,
    refuse,
    refuse_each,
    spans,
    sub_parts,
)
from cdc_sink.formats._jsonscan import (
    KIND_NULL,
    KIND_OBJECT,
    KIND_STRING,
    RUN_BYTES,
    Members,
    arrow_validate,
    match_strings,
    scan,
    skip_ws,
)
from cdc_sink.formats._jsonvalues import (
    UNIT_DAYS,
    UNIT_MS,
    UNIT_NS,
    UNIT_TIME_OF_DAY,
    UNIT_US,
    Hints,
    column_array,
    first_members,
    int_member,
    member_kind,
    refuse_members,
)
from cdc_sink.schema import Column, TableSchema

__all__ = ["UNAVAILABLE_VALUE", "DebeziumDecoder", "encode_debezium"]

OP_TRUNCATE: int = OP_CODES.get("truncate", -1)
UNAVAILABLE_VALUE = "__debezium_unavailable_value"
"""Debezium's default ``unavailable.value.placeholder`` (unchanged TOASTed values)."""
_ENVELOPE = ("schema", "payload")
_BODY = ("before", "after", "source", "op", "ts_ms")
_SOURCE = ("ts_ms", "lsn", "file", "pos", "row")
_SEQUENCE_SOURCES = ("column", "lsn", "binlog", "ts_ms")
_OPS = ("c", "r", "u", "d", "t", "m")
_UNITS: dict[str, int] = {"ms": UNIT_MS, "us": UNIT_US, "ns": UNIT_NS}
_TS_UNIT_BY_NAME = {
    "io.debezium.time.Timestamp": UNIT_MS,
    "org.apache.kafka.connect.data.Timestamp": UNIT_MS,
    "io.debezium.time.MicroTimestamp": UNIT_US,
    "io.debezium.time.NanoTimestamp": UNIT_NS,
    "io.debezium.time.Date": UNIT_DAYS,  # a date in a timestamp column: its midnight UTC
    "org.apache.kafka.connect.data.Date": UNIT_DAYS,
    "io.debezium.time.Time": UNIT_TIME_OF_DAY,
    "io.debezium.time.MicroTime": UNIT_TIME_OF_DAY,
    "io.debezium.time.NanoTime": UNIT_TIME_OF_DAY,
    "org.apache.kafka.connect.data.Time": UNIT_TIME_OF_DAY,
}
_DECIMAL = "org.apache.kafka.connect.data.Decimal"


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

    def __init__(self, *, timestamp_unit: Literal["ms", "us", "ns"] = "us",
                 decimal_handling: Literal["precise", "string", "double"] = "precise",
                 ignore_unknown_columns: bool = False, strict: bool = True,
                 unavailable_value_placeholder: str | bytes | None = UNAVAILABLE_VALUE,
                 truncate: Literal["apply", "reject"] = "apply",
                 sequence_source: Literal["column", "lsn", "binlog", "ts_ms"] = "column",
                 ) -> None:
        self.timestamp_unit = check_choice("timestamp_unit", timestamp_unit, tuple(_UNITS))
        self.decimal_handling = check_choice("decimal_handling", decimal_handling,
                                             ("precise", "string", "double"))
        self.ignore_unknown_columns = check_bool("ignore_unknown_columns",
                                                 ignore_unknown_columns)
        self.strict = check_bool("strict", strict)
        self.unavailable_value_placeholder = unavailable_value_placeholder
        self._placeholders = _placeholder_forms(unavailable_value_placeholder)
        self.truncate = check_choice("truncate", truncate, ("apply", "reject"))
        self.sequence_source = check_choice("sequence_source", sequence_source,
                                            _SEQUENCE_SOURCES)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restores a pickled decoder (older pickles lack the newer options)."""
        defaults = {"unavailable_value_placeholder": UNAVAILABLE_VALUE, "truncate": "apply",
                    "sequence_source": "column"}
        self.__dict__.update({**defaults, **state})
        if "_placeholders" not in state:
            self._placeholders = _placeholder_forms(self.unavailable_value_placeholder)

    def decode_with_meta(self, values: pa.BinaryArray | pa.LargeBinaryArray,
                         schema: TableSchema, *,
                         position: np.ndarray | None = None,
                         keys: pa.BinaryArray | pa.LargeBinaryArray | None = None) -> Decoded:
        """Decodes Debezium message values (see :meth:`Decoder.decode_with_meta`).

        Tombstones and logical decoding messages are skipped and counted in
        :attr:`Decoded.skipped` (messages also in :attr:`Decoded.messages`). ``keys``
        (the Kafka message keys, aligned with ``values``) give the key of an event whose
        row lacks it: a delete without a ``before`` image (``REPLICA IDENTITY NOTHING``,
        or a table without a primary key). The values are processed in runs of a few MB,
        each vectorized, then validated together.
        """
        parts = binary_parts(values)
        pos = position_array(position, parts.n)
        kparts = None
        if keys is not None:
            kparts = binary_parts(keys)
            if kparts.n != parts.n:
                raise ValueError(f"keys must have one entry per value ({parts.n}), "
                                 f"got {kparts.n}")
        # Envelope schemas are cut off each run (see _strip_shared_schema): a run of
        # enveloped events holds about a quarter as much event data per byte.
        live = np.flatnonzero(parts.valid & (parts.lengths > 10))
        enveloped = len(live) and parts.data[int(parts.starts[live[0]]):][:10].tobytes() \
            == b'{"schema":'

        def run(lo: int, hi: int) -> Columns:
            kp = None if kparts is None else sub_parts(kparts, lo, hi)
            return self._decode_run(sub_parts(parts, lo, hi), kp, schema)

        pieces = [p for lo, hi in event_ranges(parts, RUN_BYTES * (4 if enveloped else 1))
                  for p in decode_guarded(run, lo, hi, schema)]
        if not pieces:
            pieces = [self._decode_run(parts, kparts, schema)]
        return assemble(schema, merge_columns(pieces, schema), pos)

    def _decode_run(self, parts: Parts, kparts: Parts | None, schema: TableSchema) -> Columns:
        parts, shared = _strip_shared_schema(parts)
        n = parts.n
        reasons = new_reasons(n)
        tomb = ~parts.valid | (parts.lengths == 0) | _is_null_literal(parts)
        sc = scan(parts, ~tomb, max_level=4)
        bad_structure = np.flatnonzero(~no_reason(sc.reasons))
        reasons[bad_structure] = sc.reasons[bad_structure]
        m = sc.members
        data = parts.data

        # ---- envelope and body
        l1 = np.flatnonzero(m.level == 1)
        env_codes = match_strings(data, m.name_start[l1], m.name_end[l1], m.name_escaped[l1],
                                  _ENVELOPE)
        schema_m, payload_m = first_members(m, l1, env_codes, _ENVELOPE, n, reasons)
        payload_kind = member_kind(m, payload_m)
        tomb |= payload_kind == KIND_NULL
        refuse(reasons, (payload_kind >= 0) & (payload_kind != KIND_OBJECT) & ~tomb,
               "'payload' is not an object")
        envelope = payload_kind == KIND_OBJECT
        schema_kind = member_kind(m, schema_m)
        refuse(reasons, envelope & (schema_kind >= 0) & (schema_kind != KIND_OBJECT)
               & (schema_kind != KIND_NULL), "'schema' is not an object")
        l2 = np.flatnonzero(m.level == 2)
        in_payload = (m.parent[l2] >= 0) & (m.parent[l2] == payload_m[m.event[l2]])
        body = np.concatenate([l1[~envelope[m.event[l1]]], l2[in_payload]])
        body.sort()
        codes = match_strings(data, m.name_start[body], m.name_end[body], m.name_escaped[body],
                              _BODY)
        before_m, after_m, source_m, op_m, ts_m = first_members(m, body, codes, _BODY, n,
                                                                reasons)
        body_level = np.where(envelope, 2, 1)

        # ---- op
        op_kind = member_kind(m, op_m)
        code = np.full(n, -1, dtype=np.int64)
        so = np.flatnonzero(op_kind == KIND_STRING)
        mo = op_m[so]
        code[so] = match_strings(data, m.value_start[mo] + 1, m.value_end[mo] - 1,
                                 m.value_escaped[mo], _OPS)
        message = ~tomb & (code == 5) & no_reason(reasons)
        skip = tomb | message
        live = ~skip
        is_truncate = live & (code == 4)
        if self.truncate == "reject":
            refuse(reasons, is_truncate, "truncate event rejected (decoder option "
                                         "truncate='reject')")
        elif OP_TRUNCATE < 0:  # pragma: no cover - the canonical batch predates truncate
            refuse(reasons, is_truncate, "truncate events are not supported")
        refuse(reasons, live & (op_m < 0), "event has no 'op'")
        refuse_members(reasons, parts, m, op_m[live & (op_m >= 0) & (code < 0)],
                       "unknown Debezium op {raw}")
        is_delete = code == 3
        op = np.where(is_delete, OP_DELETE, np.where(is_truncate, OP_TRUNCATE, OP_UPSERT))
        op = op.astype(np.int8)
        row_m = np.where(is_delete, before_m, np.where(is_truncate, -1, after_m))
        row_kind = member_kind(m, row_m)
        # a delete without a 'before' object takes its key from the Kafka message key
        keyless_delete = live & is_delete & (row_kind != KIND_OBJECT)
        refuse(reasons, keyless_delete & (row_kind >= 0) & (row_kind != KIND_NULL),
               "'before' is not an object")
        refuse(reasons, live & ~is_delete & ~is_truncate & (row_kind != KIND_OBJECT),
               "'after' is missing or not an object")

        # ---- columns of the row object
        child = np.flatnonzero(m.level >= 2)
        ce = m.event[child]
        cols = child[(m.parent[child] >= 0) & (m.parent[child] == row_m[ce])
                     & (m.level[child] == body_level[ce] + 1)]
        names = [c.name for c in schema.columns]
        ccode = match_strings(data, m.name_start[cols], m.name_end[cols], m.name_escaped[cols],
                              names)
        if not self.ignore_unknown_columns:
            refuse_members(reasons, parts, m, cols[(ccode < 0) & ~is_delete[m.event[cols]]],
                           "unknown column {name!r}", use_name=True)
        schema_id, hints_of = _schema_hints(parts, m, schema_m, shared, _row_fields,
                                            self._defaults(), reasons)
        from_source = self.sequence_source != "column"
        key_names = set(schema.primary_key)
        keys: dict[str, pa.Array] = {}
        key_given: dict[str, np.ndarray] = {}
        vals: dict[str, tuple[pa.Array, np.ndarray]] = {}
        for i, c in enumerate(schema.columns):
            sel = cols[ccode == i]
            is_seq = c.name == schema.sequence_column
            if is_seq and from_source:
                continue  # the sequence column is written from the source position
            if c.name not in key_names and not is_seq:
                sel = sel[~is_delete[m.event[sel]]]  # a delete sets nothing
            if self._placeholders and c.name not in key_names:
                sel = sel[~self._is_placeholder(parts, m, sel, c)]  # TOAST: absent
            hints = hints_of(c, schema_id[m.event[sel]])
            arr = column_array(parts, m, sel, c, c.type, n, reasons, hints)
            present = np.zeros(n, dtype=bool)
            present[m.event[sel]] = True
            if c.name in key_names:
                keys[c.name] = arr
                key_given[c.name] = present
                continue
            vals[c.name] = (arr, present)

        # ---- keys the row lacks: from the Kafka message key
        lacking = np.zeros(n, dtype=bool)
        for kname in schema.primary_key:
            lacking |= ~key_given[kname]
        lacking &= live & ~is_truncate & no_reason(reasons)
        if kparts is not None and lacking.any():
            self._keys_from_messages(kparts, np.flatnonzero(lacking), schema, keys,
                                     key_given, reasons)
        if kparts is None:
            refuse(reasons, keyless_delete & lacking, "delete without a 'before' row and "
                                                      "without a message key (its key is needed)")

        # ---- seq
        src = np.flatnonzero((m.level >= 2) & (m.parent >= 0))
        src = src[m.parent[src] == source_m[m.event[src]]]
        s_codes = match_strings(data, m.name_start[src], m.name_end[src],
                                m.name_escaped[src], _SOURCE)
        src_ts_m, lsn_m, file_m, pos_m, srow_m = first_members(
            m, src, s_codes, _SOURCE, n, reasons, what="source member")
        seq = None
        if schema.sequence_column is not None:
            if from_source:
                seq = self._source_seq(parts, m, reasons, live & ~is_truncate, src_ts_m,
                                       lsn_m, file_m, pos_m, srow_m)
            else:
                s_arr, s_present = vals[schema.sequence_column]
                given = s_present & np.asarray(s_arr.is_valid(), dtype=bool)
                refuse(reasons, live & ~is_truncate & ~given,
                       f"seq is missing (no {schema.sequence_column!r} in the row)")
                seq = s_arr.cast(pa.int64())

        # ---- timestamps: source.ts_ms, else ts_ms
        src_ts, src_given = int_member(parts, m, src_ts_m, reasons,
                                       "source.ts_ms {raw} is not an integer")
        ts_v, ts_given = int_member(parts, m, ts_m, reasons, "ts_ms {raw} is not an integer")
        ts_v = np.where(src_given, src_ts, ts_v)
        ts_given |= src_given
        ts = np.where(ts_given, ts_v, TS_MISSING) if ts_given.any() else None

        if self.strict:
            arrow_validate(parts, no_reason(reasons) & live, reasons)
        # tombstones and messages leave the batch without being rejects
        return Columns(op=op, keys=keys, values=vals, seq=seq, reasons=reasons, ts_ms=ts,
                       skip=skip, messages=message)

    # ------------------------------------------------------------------ helpers
    def _defaults(self) -> _Defaults:
        return _Defaults(unit=_UNITS[self.timestamp_unit],
                         base64=self.decimal_handling == "precise")

    def _is_placeholder(self, parts: Parts, m: Members, sel: np.ndarray, c: Column
                        ) -> np.ndarray:
        """Which members of ``sel`` are the unavailable-value placeholder (TOAST)."""
        hit = np.zeros(len(sel), dtype=bool)
        txt = np.flatnonzero(m.kind[sel] == KIND_STRING)
        if not len(txt):
            return hit
        forms = self._placeholders if pa.types.is_binary(c.type) else self._placeholders[:1]
        s = sel[txt]
        codes = match_strings(parts.data, m.value_start[s] + 1, m.value_end[s] - 1,
                              m.value_escaped[s], forms)
        hit[txt] = codes >= 0
        return hit

    def _keys_from_messages(self, kparts: Parts, need: np.ndarray, schema: TableSchema,
                            keys: dict[str, pa.Array], key_given: dict[str, np.ndarray],
                            reasons: np.ndarray) -> None:
        """Fills the key columns events ``need`` lack from their Kafka message keys
        (``{"schema", "payload": {...}}`` or the key object alone)."""
        kp = Parts(buffer=kparts.buffer, data=kparts.data, starts=kparts.starts[need],
                   ends=kparts.ends[need], valid=kparts.valid[need])
        k = len(need)
        kreasons = new_reasons(k)
        missing = ~kp.valid | (kp.lengths == 0) | _is_null_literal(kp)
        refuse(kreasons, missing, "the row lacks its key and the message key is null")
        sc = scan(kp, ~missing, max_level=2)
        bad = np.flatnonzero(~no_reason(sc.reasons))
        kreasons[bad] = [f"message key: {r}" for r in sc.reasons[bad]]
        km = sc.members
        l1 = np.flatnonzero(km.level == 1)
        env = match_strings(kp.data, km.name_start[l1], km.name_end[l1], km.name_escaped[l1],
                            _ENVELOPE)
        kschema_m, kpayload_m = first_members(km, l1, env, _ENVELOPE, k, kreasons,
                                              what="message key member")
        enveloped = (member_kind(km, kpayload_m) == KIND_OBJECT) & (kschema_m >= 0)
        l2 = np.flatnonzero(km.level == 2)
        in_payload = (km.parent[l2] >= 0) & (km.parent[l2] == kpayload_m[km.event[l2]])
        members = np.concatenate([l1[~enveloped[km.event[l1]]], l2[in_payload]])
        members.sort()
        kcols = schema.key_columns
        kcode = match_strings(kp.data, km.name_start[members], km.name_end[members],
                              km.name_escaped[members], [c.name for c in kcols])
        schema_id, hints_of = _schema_hints(kp, km, kschema_m, None, _key_fields,
                                            self._defaults(), kreasons)
        if self.strict:
            arrow_validate(kp, no_reason(kreasons), kreasons)
        for i, c in enumerate(kcols):
            sel = members[kcode == i]
            arr = column_array(kp, km, sel, c, c.type, k, kreasons,
                               hints_of(c, schema_id[km.event[sel]]))
            got = np.zeros(k, dtype=bool)
            got[km.event[sel]] = True
            take = got & ~key_given[c.name][need]
            refuse(kreasons, ~got & ~key_given[c.name][need],
                   f"key column {c.name!r} is in neither the row nor the message key")
            full_idx = np.full(len(reasons), -1, dtype=np.int64)
            full_idx[need[take]] = np.flatnonzero(take)
            fill = arr.take(pa.array(full_idx, mask=full_idx < 0))
            use = np.zeros(len(reasons), dtype=bool)
            use[need[take]] = True
            keys[c.name] = pc.if_else(pa.array(use), fill, keys[c.name])
            key_given[c.name] |= use
        hit = ~no_reason(kreasons)
        rows = need[hit]
        refuse_each(reasons, rows, [str(r) for r in kreasons[hit]])

    def _source_seq(self, parts: Parts, m: Members, reasons: np.ndarray, need: np.ndarray,
                    ts_m: np.ndarray, lsn_m: np.ndarray, file_m: np.ndarray,
                    pos_m: np.ndarray, row_m: np.ndarray) -> pa.Array:
        """The ``seq`` of each event from its source position (``sequence_source``)."""
        n = len(need)
        if self.sequence_source == "lsn":
            v, given = int_member(parts, m, lsn_m, reasons, "source.lsn {raw} is not an integer")
            refuse(reasons, need & ~given, "seq is missing (no source.lsn)")
        elif self.sequence_source == "ts_ms":
            v, given = int_member(parts, m, ts_m, reasons,
                                  "source.ts_ms {raw} is not an integer")
            refuse(reasons, need & ~given, "seq is missing (no source.ts_ms)")
        else:  # binlog
            pos, given = int_member(parts, m, pos_m, reasons,
                                    "source.pos {raw} is not an integer")
            row, _ = int_member(parts, m, row_m, reasons, "source.row {raw} is not an integer")
            fk = member_kind(m, file_m)
            has_file = np.flatnonzero(fk == KIND_STRING)
            fm = file_m[has_file]
            number = np.full(n, -1, dtype=np.int64)
            if len(fm):
                names = spans(parts, m.value_start[fm] + 1, m.value_end[fm] - 1)
                digits = pc.extract_regex(names.cast(pa.binary()).cast(pa.string(), safe=False),
                                          r"\.(?P<n>[0-9]{1,9})$").field("n")
                num = np.asarray(pc.cast(digits, pa.int64()).fill_null(-1).to_numpy(
                    zero_copy_only=False), dtype=np.int64)
                number[has_file] = num
            refuse_members(reasons, parts, m, file_m[(fk >= 0) & (number < 0) & need],
                           "source.file {raw} is not a binlog file name (name.NNNNNN)")
            refuse(reasons, need & ~given, "seq is missing (no source.pos)")
            refuse(reasons, need & (number < 0), "seq is missing (no source.file)")
            refuse(reasons, need & given & ((pos < 0) | (pos >= 1 << 32)),
                   "source.pos is outside 0..2**32-1")
            refuse(reasons, need & ((row < 0) | (row >= 1 << 31)),
                   "source.row is outside 0..2**31-1")
            ok = need & given & (number >= 0) & (pos >= 0) & (pos < 1 << 32) & (row >= 0) \
                & (row < 1 << 31)
            v = np.where(ok, (number << 32) + pos + row, 0)
            given = ok
        return pa.array(v, pa.int64(), mask=~given)


@dataclass
class _Shared:
    """Events that began with the same envelope prefix ``{"schema": S,`` (cut off)."""

    mask: np.ndarray
    schema: bytes


def _strip_shared_schema(parts: Parts) -> tuple[Parts, _Shared | None]:
    """Cuts the envelope schema off the events that repeat the first event's.

    Kafka Connect's JSON converter writes ``{"schema":S,"payload":P}`` with the same S
    for every event of a table, and S is most of the bytes. The first event is indexed
    alone to find its prefix ``{"schema":S,``; every event starting with exactly those
    bytes (one vectorized comparison) is rewritten as ``{"payload":P}`` into a compact
    copy of the run, and is given S by :meth:`DebeziumDecoder._schema_hints`. The prefix
    is valid JSON in the first event, so the grammar check of the rest still covers the
    whole event.
    """
    live = np.flatnonzero(parts.valid & (parts.lengths > 12))
    if len(live) < 2:
        return parts, None
    e = int(live[0])
    d = parts.data
    s0 = int(parts.starts[e])
    if d[s0:s0 + 10].tobytes() != b'{"schema":':
        return parts, None
    one = sub_parts(parts, e, e + 1)
    sc = scan(one, np.ones(1, dtype=bool), max_level=1)
    m = sc.members
    if sc.reasons[0] is not None or len(m) < 2:
        return parts, None
    names = match_strings(d, m.name_start[:2], m.name_end[:2], m.name_escaped[:2], _ENVELOPE)
    cut = int(skip_ws(d, m.name_start[1:2] - 2, -1)[0])  # the comma before "payload"
    if names.tolist() != [0, 1] or m.kind[0] != KIND_OBJECT or d[cut] != ord(","):
        return parts, None
    size = cut + 1 - s0
    cand = parts.valid & (parts.lengths > size)
    same = pc.equal(spans(parts, parts.starts, parts.starts + size, valid=cand),
                    pa.scalar(d[s0:cut + 1].tobytes(), pa.binary_view()))
    shared = np.asarray(same.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
    if shared.sum() < 2:
        return parts, None
    begin = np.where(shared, parts.starts + size - 1, parts.starts)
    lengths = parts.ends - begin
    buf = gather(d, begin, lengths)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    buf[starts[shared]] = ord("{")
    schema_text = d[int(m.value_start[0]):int(m.value_end[0])].tobytes()
    out = Parts(buffer=pa.py_buffer(buf), data=buf, starts=starts, ends=ends,
                valid=parts.valid)
    return out, _Shared(mask=shared, schema=schema_text)


@dataclass
class _Defaults:
    """Encodings of fields the envelope does not describe (decoder options)."""

    unit: int
    base64: bool


_MAX_SCHEMA_DEPTH = 64
"""Deepest nesting accepted in an envelope schema (Debezium's are a handful deep)."""


def _schema_hints(parts: Parts, m: Members, schema_m: np.ndarray, shared: _Shared | None,
                  fields_of: Callable[[Any], dict[str, dict[str, Any]]], defaults: _Defaults,
                  reasons: np.ndarray) -> tuple[np.ndarray, Any]:
    """Distinct envelope schemas, parsed once each.

    An envelope schema that is not a valid Kafka Connect schema (not JSON, nested too
    deeply, members of the wrong JSON type, a decimal scale that is not an integer in
    0..38) refuses its events with a reason.

    Returns:
        The schema id of each event (-1: no envelope schema) and a function giving
        the :class:`Hints` of a column's members from their schema ids.
    """
    n = parts.n
    has = np.flatnonzero(member_kind(m, schema_m) == KIND_OBJECT)
    schema_id = np.full(n, -1, dtype=np.int64)
    fields: list[dict[str, dict[str, Any]]] = []
    errors: list[str | None] = []

    def add(text: bytes | None) -> None:
        try:
            fields.append(fields_of(_load_schema(text)))
            errors.append(None)
        except _BadSchema as exc:
            fields.append({})
            errors.append(f"invalid envelope schema: {exc}")

    if len(has):
        sm = schema_m[has]
        enc = pc.dictionary_encode(spans(parts, m.value_start[sm], m.value_end[sm]))
        schema_id[has] = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)
        for text in enc.dictionary.to_pylist():
            add(text)
    if shared is not None:
        schema_id[shared.mask] = len(fields)
        add(shared.schema)
    for u, err in enumerate(errors):
        if err is not None:
            refuse(reasons, schema_id == u, err)

    def hints_of(c: Column, ids: np.ndarray) -> Hints:
        if not (pa.types.is_timestamp(c.type) or pa.types.is_decimal(c.type)):
            return Hints(connect=True)
        unit = np.full(len(fields) + 1, defaults.unit, dtype=np.int64)
        b64 = np.full(len(fields) + 1, defaults.base64, dtype=bool)
        scale = np.full(len(fields) + 1, getattr(c.type, "scale", 0), dtype=np.int64)
        for u, fs in enumerate(fields):
            f = fs.get(c.name)
            if f is None:
                continue
            unit[u] = _TS_UNIT_BY_NAME.get(f.get("name"), defaults.unit)  # type: ignore[arg-type]
            if pa.types.is_decimal(c.type):
                b64[u] = f.get("type") == "bytes"
                params = f.get("parameters") or {}
                scale[u] = _scale(params.get("scale"), int(scale[u]))
        return Hints(ts_unit=unit[ids], dec_base64=b64[ids], dec_scale=scale[ids],
                     connect=True)

    return schema_id, hints_of


class _BadSchema(Exception):
    """An envelope schema that is not a valid Kafka Connect schema."""


def _load_schema(text: bytes | None) -> Any:
    """Parses an envelope schema; deep nesting is refused (Python's parser raises
    ``RecursionError`` beyond its limit; anything deeper than Debezium writes is refused
    below it)."""
    if text is None:
        return None
    try:
        s = json.loads(text)
    except RecursionError:
        raise _BadSchema(f"nested deeper than {_MAX_SCHEMA_DEPTH} levels") from None
    except ValueError as exc:
        raise _BadSchema(f"not JSON ({type(exc).__name__})") from None
    if _depth(s) > _MAX_SCHEMA_DEPTH:
        raise _BadSchema(f"nested deeper than {_MAX_SCHEMA_DEPTH} levels")
    return s


def _depth(v: Any) -> int:
    """Nesting depth of a parsed JSON value (iterative)."""
    best = 0
    stack = [(v, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict):
            best = max(best, d)
            stack.extend((y, d + 1) for y in x.values())
        elif isinstance(x, list):
            best = max(best, d)
            stack.extend((y, d + 1) for y in x)
    return best


def _scale(v: Any, default: int) -> int:
    """A decimal field's ``scale`` parameter (int or integer text) in 0..38, or -1
    (which refuses the field's values)."""
    if v is None:
        return default
    if isinstance(v, str) and v.strip().lstrip("-").isdigit() and len(v) < 10:
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 38:
        return -1
    return v


def _struct_fields(s: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(s, dict):
        raise _BadSchema(f"{what} is not an object")
    fs = s.get("fields")
    if fs is None:
        return []
    if not isinstance(fs, list):
        raise _BadSchema(f"{what}.fields is not an array")
    for f in fs:
        if not isinstance(f, dict):
            raise _BadSchema(f"{what}.fields holds a non-object")
        params = f.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise _BadSchema(f"field {f.get('field')!r}: parameters is not an object")
        if isinstance(params, dict) and _scale(params.get("scale"), 0) < 0:
            raise _BadSchema(f"field {f.get('field')!r}: decimal scale "
                             f"{str(params.get('scale'))[:40]!r} is not an integer in 0..38")
        for k in ("field", "name", "type"):
            if f.get(k) is not None and not isinstance(f.get(k), str):
                raise _BadSchema(f"field {str(f.get('field'))[:40]!r}: {k} is not a string")
    return fs


def _row_fields(s: Any) -> dict[str, dict[str, Any]]:
    """Field schemas of the row struct (``after``, else ``before``) of an envelope schema.

    Raises:
        _BadSchema: The schema is not a Kafka Connect struct schema.
    """
    out: dict[str, dict[str, Any]] = {}
    if s is None:
        return out
    for f in _struct_fields(s, "schema"):
        if f.get("field") in ("before", "after"):
            for g in _struct_fields(f, f"schema.{f['field']}"):
                if isinstance(g.get("field"), str):
                    out.setdefault(g["field"], g)
    return out


def _key_fields(s: Any) -> dict[str, dict[str, Any]]:
    """Field schemas of a message key's struct schema."""
    if s is None:
        return {}
    return {f["field"]: f for f in _struct_fields(s, "key schema")
            if isinstance(f.get("field"), str)}


def _placeholder_forms(placeholder: str | bytes | None) -> tuple[str, ...]:
    """The JSON string forms of the placeholder: the text itself (string columns, and
    binary columns in ``binary.handling.mode=hex``), then base64 and base64-url-safe of
    its bytes (binary columns in the ``bytes``/``base64``/``base64-url-safe`` modes).

    Raises:
        InvalidOption: The placeholder is not a non-empty string/bytes (``hex:`` + hex).
    """
    if placeholder is None:
        return ()
    opt = "unavailable_value_placeholder"
    if isinstance(placeholder, str) and placeholder.startswith("hex:"):
        try:
            raw = bytes.fromhex(placeholder[4:])
        except ValueError:
            raise InvalidOption(f"decoder option {opt!r}: {placeholder!r} is not hex:<hex "
                                f"digits>", option=opt) from None
    elif isinstance(placeholder, str):
        raw = placeholder.encode("utf-8")
    elif isinstance(placeholder, bytes):
        raw = placeholder
    else:
        raise InvalidOption(f"decoder option {opt!r} must be a string, bytes or None, got "
                            f"{placeholder!r}", option=opt)
    if not raw:
        raise InvalidOption(f"decoder option {opt!r} must not be empty", option=opt)
    text = raw.decode("utf-8", "replace")
    forms = [text, base64.b64encode(raw).decode("ascii"),
             base64.urlsafe_b64encode(raw).decode("ascii")]
    return tuple(dict.fromkeys(forms))


def _is_null_literal(parts: Parts) -> np.ndarray:
    """Values that are exactly the JSON literal ``null`` (a tombstone's JSON form)."""
    lit = parts.valid & (parts.lengths == 4)
    at = parts.starts[lit]
    d = parts.data
    hit = ((d[at] == ord("n")) & (d[at + 1] == ord("u")) & (d[at + 2] == ord("l"))
           & (d[at + 3] == ord("l")))
    out = np.zeros(parts.n, dtype=bool)
    out[np.flatnonzero(lit)[hit]] = True
    return out


# ====================================================================== encoding
_CONNECT_TYPES = {
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "float32": "float", "float64": "double", "bool": "boolean", "string": "string",
    "binary": "bytes",
}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _field_schema(c: Column, decimal_handling: str) -> dict[str, Any]:
    t = c.type
    f: dict[str, Any] = {"field": c.name, "optional": c.nullable}
    if pa.types.is_date32(t):
        f.update(type="int32", name="io.debezium.time.Date", version=1)
    elif pa.types.is_timestamp(t):
        f.update(type="int64", name="io.debezium.time.MicroTimestamp", version=1)
    elif pa.types.is_decimal(t):
        if decimal_handling == "string":
            f.update(type="string")
        else:
            f.update(type="bytes", name=_DECIMAL, version=1,
                     parameters={"scale": str(t.scale),
                                 "connect.decimal.precision": str(t.precision)})
    else:
        from cdc_sink.schema import type_to_str

        f.update(type=_CONNECT_TYPES[type_to_str(t)])
    return f


def _debezium_value(v: Any, c: Column, decimal_handling: str) -> Any:
    t = c.type
    if v is None:
        return None
    if pa.types.is_date32(t):
        if isinstance(v, str):
            v = dt.date.fromisoformat(v)
        return (v - dt.date(1970, 1, 1)).days if isinstance(v, dt.date) else v
    if pa.types.is_timestamp(t):
        if isinstance(v, str):
            v = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
        if isinstance(v, dt.datetime):
            v = v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)
            return (v - _EPOCH) // dt.timedelta(microseconds=1)
        return v
    if pa.types.is_decimal(t):
        d = decimal.Decimal(str(v))
        if decimal_handling == "string":
            return str(d)
        with decimal.localcontext(decimal.Context(prec=120)):
            unscaled = int(d.scaleb(t.scale).to_integral_value())
        size = max(1, (unscaled.bit_length() + 8) // 8)
        return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode("ascii")
    if pa.types.is_binary(t):
        return base64.b64encode(bytes(v)).decode("ascii")
    return v


def encode_debezium(op: str, before: Mapping[str, Any] | None,
                    after: Mapping[str, Any] | None, schema: TableSchema, *, envelope: bool,
                    ts_ms: int | None = None, source_ts_ms: int | None = None,
                    decimal_handling: Literal["precise", "string"] = "precise") -> bytes:
    """Encodes one Debezium change event as JSON (tests and demos; per event).

    Dates are written as days (``io.debezium.time.Date``), timestamps as microseconds
    (``MicroTimestamp``), decimals as base64 unscaled bytes (``precise``) or strings,
    binaries as base64.

    Args:
        op: Debezium op: ``c``, ``r``, ``u``, ``d`` (or ``t``/``m``).
        before: Row before the change (column name → value), or ``None``.
        after: Row after the change, or ``None``.
        schema: The table schema (columns of ``before``/``after`` must be in it).
        envelope: Wrap in ``{"schema", "payload"}`` with Kafka Connect field schemas.
        ts_ms: Payload ``ts_ms``.
        source_ts_ms: ``source.ts_ms``.
        decimal_handling: Debezium ``decimal.handling.mode`` to imitate.

    Returns:
        The message value.
    """
    def row(r: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if r is None:
            return None
        return {k: _debezium_value(v, schema.column(k), decimal_handling) for k, v in r.items()}

    source: dict[str, Any] = {"version": "2.7.0.Final", "connector": "cdc_sink",
                              "name": "cdc_sink", "db": "demo", "table": "demo"}
    if source_ts_ms is not None:
        source["ts_ms"] = source_ts_ms
    payload: dict[str, Any] = {"before": row(before), "after": row(after), "source": source,
                               "op": op}
    if ts_ms is not None:
        payload["ts_ms"] = ts_ms
    if not envelope:
        return json.dumps(payload, separators=(",", ":")).encode("utf-8")
    row_schema = {"type": "struct", "optional": True, "name": "demo.Value",
                  "fields": [_field_schema(c, decimal_handling) for c in schema.columns]}
    env_schema = {
        "type": "struct", "optional": False, "name": "demo.Envelope", "version": 1,
        "fields": [dict(row_schema, field="before"), dict(row_schema, field="after"),
                   {"type": "struct", "optional": False, "field": "source",
                    "name": "io.debezium.connector.demo.Source", "fields": [
                        {"type": "string", "optional": False, "field": "version"},
                        {"type": "int64", "optional": True, "field": "ts_ms"}]},
                   {"type": "string", "optional": False, "field": "op"},
                   {"type": "int64", "optional": True, "field": "ts_ms"}],
    }
    return json.dumps({"schema": env_schema, "payload": payload},
                      separators=(",", ":")).encode("utf-8")
