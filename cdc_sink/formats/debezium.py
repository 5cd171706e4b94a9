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
                           ``null`` is a real null); key columns are taken from ``after``
op ``d``                   ``delete`` of ``before``'s key
tombstone (null or empty   skipped: neither decoded nor rejected, counted in
value, ``null``, or a      :attr:`Decoded.skipped`
null ``payload``)
op ``t`` (truncate),       rejected with a reason (not row changes)
``m`` (message)
=========================  ===============================================================

A column of ``after`` that the table does not have is a reject (``unknown column``)
unless the decoder is built with ``ignore_unknown_columns=True``; in ``before`` of a
delete only the key (and the sequence column) are read. On a table with a
``sequence_column`` S, the event's ``seq`` is the value of S in ``after`` (``before``
for deletes): S must be a column of the source table (e.g. a version counter).

``ts_ms`` (:attr:`Decoded.ts_ms`) is ``source.ts_ms`` (when the change happened in the
database), else the payload's ``ts_ms`` (when the connector processed it).

Value encodings (Debezium's defaults and the usual alternatives), per column type:

- dates: integers (days, ``io.debezium.time.Date``) or ISO strings;
- timestamps: integers in the unit of the field's schema name
  (``io.debezium.time.Timestamp``/``org.apache.kafka.connect.data.Timestamp``: ms,
  ``MicroTimestamp``: us, ``NanoTimestamp``: ns) or ISO strings (``ZonedTimestamp``).
  Without the envelope, integers are in ``timestamp_unit`` (default microseconds);
- decimals: base64 of the big-endian two's-complement unscaled integer at the field's
  ``scale`` parameter (``decimal.handling.mode=precise``, the default), decimal strings
  (``string``) or numbers (``double``). A decimal string is base64 when the field's
  schema type is ``bytes``, text when it is ``string``; without the envelope,
  ``decimal_handling`` decides (default ``"precise"``, at the column's scale);
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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.changes import OP_DELETE, OP_UPSERT
from cdc_sink.formats import TS_MISSING, Decoded, Decoder, FormatName
from cdc_sink.formats._arrays import (
    Columns,
    Parts,
    assemble,
    binary_parts,
    event_ranges,
    gather,
    merge_columns,
    new_reasons,
    no_reason,
    position_array,
    refuse,
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
    UNIT_MS,
    UNIT_NS,
    UNIT_US,
    Hints,
    column_array,
    first_members,
    int_member,
    member_kind,
    refuse_members,
)
from cdc_sink.schema import Column, TableSchema

__all__ = ["DebeziumDecoder", "encode_debezium"]

_ENVELOPE = ("schema", "payload")
_BODY = ("before", "after", "source", "op", "ts_ms")
_OPS = ("c", "r", "u", "d", "t", "m")
_UNITS: dict[str, int] = {"ms": UNIT_MS, "us": UNIT_US, "ns": UNIT_NS}
_TS_UNIT_BY_NAME = {
    "io.debezium.time.Timestamp": UNIT_MS,
    "org.apache.kafka.connect.data.Timestamp": UNIT_MS,
    "io.debezium.time.MicroTimestamp": UNIT_US,
    "io.debezium.time.NanoTimestamp": UNIT_NS,
}
_DECIMAL = "org.apache.kafka.connect.data.Decimal"


class DebeziumDecoder(Decoder):
    """Decoder of Debezium JSON change events (see the module docstring); vectorized.

    Args:
        timestamp_unit: Unit of integer timestamps in events without the envelope.
        decimal_handling: How decimal strings are read in events without the envelope:
            ``"precise"`` (base64 unscaled bytes at the column's scale) or ``"string"``.
        ignore_unknown_columns: Ignore columns of ``after`` the table does not have
            (by default they reject the event).
        strict: Also check the full JSON grammar with Arrow's parser.
    """

    name: ClassVar[FormatName] = "debezium"

    def __init__(self, *, timestamp_unit: Literal["ms", "us", "ns"] = "us",
                 decimal_handling: Literal["precise", "string"] = "precise",
                 ignore_unknown_columns: bool = False, strict: bool = True) -> None:
        if timestamp_unit not in _UNITS:
            raise ValueError(f"timestamp_unit must be one of {list(_UNITS)}")
        if decimal_handling not in ("precise", "string"):
            raise ValueError("decimal_handling must be 'precise' or 'string'")
        self.timestamp_unit = timestamp_unit
        self.decimal_handling = decimal_handling
        self.ignore_unknown_columns = ignore_unknown_columns
        self.strict = strict

    def decode_with_meta(self, values: pa.BinaryArray | pa.LargeBinaryArray,
                         schema: TableSchema, *,
                         position: np.ndarray | None = None) -> Decoded:
        """Decodes Debezium message values (see :meth:`Decoder.decode_with_meta`).

        Tombstones are skipped and counted in :attr:`Decoded.skipped`. The values are
        processed in runs of a few MB, each vectorized, then validated together.
        """
        parts = binary_parts(values)
        pos = position_array(position, parts.n)
        # Envelope schemas are cut off each run (see _strip_shared_schema): a run of
        # enveloped events holds about a quarter as much event data per byte.
        live = np.flatnonzero(parts.valid & (parts.lengths > 10))
        enveloped = len(live) and parts.data[int(parts.starts[live[0]]):][:10].tobytes() \
            == b'{"schema":'
        pieces = [self._decode_run(sub_parts(parts, lo, hi), schema)
                  for lo, hi in event_ranges(parts, RUN_BYTES * (4 if enveloped else 1))]
        if not pieces:
            pieces = [self._decode_run(parts, schema)]
        return assemble(schema, merge_columns(pieces, schema), pos)

    def _decode_run(self, parts: Parts, schema: TableSchema) -> Columns:
        parts, shared = _strip_shared_schema(parts)
        n = parts.n
        reasons = new_reasons(n)
        tomb = ~parts.valid | (parts.lengths == 0) | _is_null_literal(parts)
        sc = scan(parts, ~tomb, max_level=3)
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
        live = ~tomb
        refuse(reasons, live & (code == 4), "truncate events are not supported")
        refuse(reasons, live & (code == 5), "logical decoding messages are not supported")
        refuse(reasons, live & (op_m < 0), "event has no 'op'")
        refuse_members(reasons, parts, m, op_m[live & (op_m >= 0) & (code < 0)],
                       "unknown Debezium op {raw}")
        is_delete = code == 3
        op = np.where(is_delete, OP_DELETE, OP_UPSERT).astype(np.int8)
        row_m = np.where(is_delete, before_m, after_m)
        row_kind = member_kind(m, row_m)
        refuse(reasons, live & is_delete & (row_kind != KIND_OBJECT),
               "delete without a 'before' row (its key is needed)")
        refuse(reasons, live & ~is_delete & (row_kind != KIND_OBJECT),
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
        schema_id, hints_of = self._schema_hints(parts, m, schema_m, shared)
        key_names = set(schema.primary_key)
        keys: dict[str, pa.Array] = {}
        vals: dict[str, tuple[pa.Array, np.ndarray]] = {}
        for i, c in enumerate(schema.columns):
            sel = cols[ccode == i]
            is_seq = c.name == schema.sequence_column
            if c.name not in key_names and not is_seq:
                sel = sel[~is_delete[m.event[sel]]]  # a delete sets nothing
            hints = hints_of(c, schema_id[m.event[sel]])
            arr = column_array(parts, m, sel, c, c.type, n, reasons, hints)
            if c.name in key_names:
                keys[c.name] = arr
                continue
            present = np.zeros(n, dtype=bool)
            present[m.event[sel]] = True
            vals[c.name] = (arr, present)

        seq = None
        if schema.sequence_column is not None:
            s_arr, s_present = vals[schema.sequence_column]
            given = s_present & np.asarray(s_arr.is_valid(), dtype=bool)
            refuse(reasons, live & ~given,
                   f"seq is missing (no {schema.sequence_column!r} in the row)")
            seq = s_arr.cast(pa.int64())

        # ---- timestamps: source.ts_ms, else ts_ms
        src = np.flatnonzero((m.level >= 2) & (m.parent >= 0))
        src = src[m.parent[src] == source_m[m.event[src]]]
        sts_codes = match_strings(data, m.name_start[src], m.name_end[src],
                                  m.name_escaped[src], ("ts_ms",))
        (src_ts_m,) = first_members(m, src, sts_codes, ("ts_ms",), n, reasons,
                                    what="source member")
        src_ts, src_given = int_member(parts, m, src_ts_m, reasons,
                                       "source.ts_ms {raw} is not an integer")
        ts_v, ts_given = int_member(parts, m, ts_m, reasons, "ts_ms {raw} is not an integer")
        ts_v = np.where(src_given, src_ts, ts_v)
        ts_given |= src_given
        ts = np.where(ts_given, ts_v, TS_MISSING) if ts_given.any() else None

        if self.strict:
            arrow_validate(parts, no_reason(reasons) & live, reasons)
        # tombstones leave the batch without being rejects
        return Columns(op=op, keys=keys, values=vals, seq=seq, reasons=reasons, ts_ms=ts,
                       skip=tomb)

    # ------------------------------------------------------------------ schema hints
    def _schema_hints(self, parts: Parts, m: Members, schema_m: np.ndarray,
                      shared: _Shared | None) -> tuple[np.ndarray, Any]:
        """Distinct envelope schemas, parsed once each.

        Returns:
            The schema id of each event (-1: no envelope schema) and a function giving
            the :class:`Hints` of a column's members from their schema ids.
        """
        n = parts.n
        has = np.flatnonzero(member_kind(m, schema_m) == KIND_OBJECT)
        schema_id = np.full(n, -1, dtype=np.int64)
        fields: list[dict[str, dict[str, Any]]] = []
        if len(has):
            sm = schema_m[has]
            enc = pc.dictionary_encode(spans(parts, m.value_start[sm], m.value_end[sm]))
            schema_id[has] = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)
            for text in enc.dictionary.to_pylist():
                fields.append(_row_fields(text))
        if shared is not None:
            schema_id[shared.mask] = len(fields)
            fields.append(_row_fields(shared.schema))
        default_unit = _UNITS[self.timestamp_unit]
        default_b64 = self.decimal_handling == "precise"

        def hints_of(c: Column, ids: np.ndarray) -> Hints | None:
            if not (pa.types.is_timestamp(c.type) or pa.types.is_decimal(c.type)):
                return None
            unit = np.full(len(fields) + 1, default_unit, dtype=np.int64)
            b64 = np.full(len(fields) + 1, default_b64, dtype=bool)
            scale = np.full(len(fields) + 1, getattr(c.type, "scale", 0), dtype=np.int64)
            for u, fs in enumerate(fields):
                f = fs.get(c.name)
                if f is None:
                    continue
                unit[u] = _TS_UNIT_BY_NAME.get(str(f.get("name")), default_unit)
                if pa.types.is_decimal(c.type):
                    b64[u] = f.get("type") == "bytes"
                    params = f.get("parameters") or {}
                    try:
                        scale[u] = int(params.get("scale", scale[u]))
                    except (TypeError, ValueError):
                        scale[u] = -1  # refused by the decimal conversion
            return Hints(ts_unit=unit[ids], dec_base64=b64[ids], dec_scale=scale[ids])

        return schema_id, hints_of


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


def _row_fields(text: bytes | None) -> dict[str, dict[str, Any]]:
    """Field schemas of the row struct (``after``, else ``before``) of an envelope schema."""
    try:
        s = json.loads(text or b"null")
    except ValueError:
        return {}
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(s, dict):
        return out
    for f in s.get("fields") or []:
        if isinstance(f, dict) and f.get("field") in ("before", "after"):
            for g in f.get("fields") or []:
                if isinstance(g, dict) and isinstance(g.get("field"), str):
                    out.setdefault(g["field"], g)
    return out


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
