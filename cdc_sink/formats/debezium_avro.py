"""The ``debezium-avro`` format: Debezium change events in Avro, through a schema registry.

What Kafka Connect's Avro converter (Confluent's, or Apicurio's in Confluent mode) writes
for a Debezium connector: each message value (and key) in Confluent's wire format (magic
byte 0, a 4-byte schema id, the Avro binary of the envelope record ``before``, ``after``,
``source``, ``op``, ``ts_ms``, ``transaction``), the schemas in a schema registry
(:mod:`.avro_wire`). The events mean what they mean in Debezium JSON
(:mod:`.debezium`), with the same options and the same rejects, so one table can be fed
from either:

=========================  ===============================================================
Debezium                   cdc_sink
=========================  ===============================================================
op ``c``, ``r``, ``u``     ``upsert`` of ``after``: every field of ``after`` that is a
                           column is set (a null is a real null) except TOAST placeholders
                           (``unavailable_value_placeholder``: absent)
op ``d``                   ``delete`` of ``before``'s key; without ``before``, the key is
                           read from the Kafka message key (Avro too)
op ``t``                   the canonical ``truncate`` (``truncate="reject"``: a reject)
op ``m``                   skipped and counted (:attr:`Decoded.messages`)
tombstone (null or empty)  skipped and counted (:attr:`Decoded.skipped`)
=========================  ===============================================================

Debezium's logical types are read from the Avro schema (``connect.name`` and
``logicalType``) as the JSON decoder reads them from the envelope schema; see
:mod:`._avro_values`. Source positions as ``seq``: ``sequence_source`` as in
:class:`~.debezium.DebeziumDecoder`.

Decoding: the messages' headers are read at once and the schemas of their distinct ids
fetched (once per process; a registry that cannot be reached raises
:class:`~.avro_wire.SchemaRegistryUnavailable` before anything is decoded, so the batch
fails and nothing is dead-lettered); then each run of messages is decoded one schema
group at a time, field by field across the group's records (:mod:`._avro_read`), and the
groups' columns merged in message order (:mod:`._avro_rows`). A message that does not fit
its schema, names an unknown schema id or is not in the wire format is a reject.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.batch import OP_CODES, OP_DELETE, OP_UPSERT
from cdc_sink.errors import InvalidOption
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
    scatter,
    sub_parts,
)
from cdc_sink.formats._arrays_runs import Columns, decode_in_runs
from cdc_sink.formats._avro_encode import debezium_avro_encoder
from cdc_sink.formats._avro_evolution import (
    RegistryEvolution,
    SchemaEvolutionError,
    schema_changes,
)
from cdc_sink.formats._avro_read import Reader, Val, padded
from cdc_sink.formats._avro_rows import (
    RunColumns,
    field_column,
    int_field,
    restrict,
    text_field,
)
from cdc_sink.formats._avro_schema import Node
from cdc_sink.formats._avro_values import raw_text
from cdc_sink.formats._base import TS_MISSING, Decoded, Decoder, FormatName, SchemaEvolution
from cdc_sink.formats._debezium_events import placeholder_forms
from cdc_sink.formats._debezium_source import binlog_numbers, binlog_seq
from cdc_sink.formats.avro_wire import (
    HEADER_BYTES,
    MAX_NEW_IDS,
    RegistrySettings,
    SchemaLookup,
    fetch_schemas,
    wire_headers,
)
from cdc_sink.formats.debezium import UNAVAILABLE_VALUE
from cdc_sink.formats.value_ranges import UNIT_MS, UNIT_NS, UNIT_US
from cdc_sink.schema import TableSchema

__all__ = ["DebeziumAvroDecoder", "SchemaEvolutionError", "debezium_avro_encoder"]

OP_TRUNCATE: int = OP_CODES.get("truncate", -1)
_OPS = b"crudtm"
_OP_CODE = np.full(256, -1, dtype=np.int8)
_OP_CODE[np.frombuffer(_OPS, np.uint8)] = np.arange(len(_OPS), dtype=np.int8)
_UNITS = {"ms": UNIT_MS, "us": UNIT_US, "ns": UNIT_NS}
_SEQUENCE_SOURCES = ("column", "lsn", "binlog", "ts_ms")
RUN_BYTES = 256 << 10
"""Bytes of messages decoded together (a run), each run one pass per schema group: few
enough that a run of the smallest events (a few dozen bytes each, a column array of
every field of each) takes a bounded multiple of its bytes."""


class DebeziumAvroDecoder(Decoder):
    """Decoder of Debezium events in Avro with a schema registry (module docstring).

    Args:
        registry_url: Base URL of the schema registry's Confluent API (Apicurio:
            ``http://host:port/apis/ccompat/v7``). Needed to decode any message.
        registry_timeout: Seconds every registry call may take.
        registry_auth: ``"user:password"`` for HTTP basic auth.
        registry_ssl: TLS files: ``ca_location``, ``certificate_location``,
            ``key_location``.
        registry_max_new_ids: How many schema ids this process has not looked up yet one
            batch may name (more fail the batch with ``TooManySchemaIds`` before any
            request: messages naming ids the registry never gave).
        timestamp_unit: Unit of integer timestamp fields whose schema names none.
        ignore_unknown_columns: Ignore fields of ``after`` the table does not have.
        unavailable_value_placeholder: As :class:`~.debezium.DebeziumDecoder`'s.
        truncate: ``"apply"`` or ``"reject"`` (as the JSON decoder's).
        sequence_source: ``"column"``, ``"lsn"``, ``"binlog"`` or ``"ts_ms"`` (as the JSON
            decoder's).
        schema_evolution: ``"none"`` (a field the table lacks is an unknown column) or
            ``"add_columns"``: the sink adds the new optional fields of the registry's
            schemas to the table before it decodes a batch (:meth:`schema_changes`).

    Raises:
        InvalidOption: An option value is invalid (the error names the option).
    """

    name: ClassVar[FormatName] = "debezium-avro"
    reads_keys: ClassVar[bool] = True

    def __init__(
        self,
        *,
        registry_url: str | None = None,
        registry_timeout: float = 10.0,
        registry_auth: str | None = None,
        registry_ssl: Mapping[str, str] | None = None,
        registry_max_new_ids: int = MAX_NEW_IDS,
        timestamp_unit: Literal["ms", "us", "ns"] = "us",
        ignore_unknown_columns: bool = False,
        unavailable_value_placeholder: str | bytes | None = UNAVAILABLE_VALUE,
        truncate: Literal["apply", "reject"] = "apply",
        sequence_source: Literal["column", "lsn", "binlog", "ts_ms"] = "column",
        schema_evolution: Literal["none", "add_columns"] = "none",
    ) -> None:
        self.registry: RegistrySettings | None = None
        if registry_url is not None:
            self.registry = RegistrySettings.from_options(
                registry_url, registry_timeout, registry_auth, registry_ssl
            )
        if type(registry_max_new_ids) is not int or registry_max_new_ids < 1:
            raise InvalidOption(
                "decoder option 'registry_max_new_ids' must be an int >= 1, "
                f"got {registry_max_new_ids!r}",
                option="registry_max_new_ids",
            )
        self.registry_max_new_ids = registry_max_new_ids
        self.timestamp_unit = check_choice("timestamp_unit", timestamp_unit, tuple(_UNITS))
        self.ignore_unknown_columns = check_bool("ignore_unknown_columns", ignore_unknown_columns)
        forms = placeholder_forms(unavailable_value_placeholder)
        self._placeholders = tuple(f.encode("utf-8") for f in forms)
        self._raw_placeholder = _raw(unavailable_value_placeholder)
        self.truncate = check_choice("truncate", truncate, ("apply", "reject"))
        self.sequence_source = check_choice("sequence_source", sequence_source, _SEQUENCE_SOURCES)
        self.schema_evolution = check_choice(
            "schema_evolution", schema_evolution, ("none", "add_columns")
        )

    def evolution(self) -> SchemaEvolution | None:
        """With ``schema_evolution="add_columns"``, the columns of the registry's schemas
        (:class:`~._avro_evolution.RegistryEvolution`, calling :meth:`schema_changes`)."""
        return RegistryEvolution(self) if self.schema_evolution == "add_columns" else None

    def schema_changes(self, ids: Iterable[int], schema: TableSchema) -> list[tuple[str, str]]:
        """The columns (name, type) the table must gain to take the rows of the schemas
        ``ids`` (the optional fields it lacks); empty unless ``schema_evolution`` is
        ``"add_columns"``.

        Raises:
            SchemaRegistryUnavailable: The registry could not be reached.
            SchemaEvolutionError: A change the table cannot take (a type change, a key
                column missing from the rows, a new required field), naming the schema's
                subjects and versions and the field.
        """
        wanted = sorted(set(int(i) for i in ids))
        if self.schema_evolution != "add_columns" or not wanted:
            return []
        if self.registry is None:
            raise InvalidOption(
                "the 'debezium-avro' decoder needs the decoder option 'registry_url'",
                option="registry_url",
            )
        lookups = fetch_schemas(self.registry, wanted, max_new_ids=self.registry_max_new_ids)
        return schema_changes(self.registry, lookups, wanted, schema)

    def decode_with_meta(
        self,
        values: pa.BinaryArray | pa.LargeBinaryArray,
        schema: TableSchema,
        *,
        position: np.ndarray | None = None,
        keys: pa.BinaryArray | pa.LargeBinaryArray | None = None,
    ) -> Decoded:
        """Decodes message values (see :meth:`Decoder.decode_with_meta`).

        Raises:
            SchemaRegistryUnavailable: The registry could not be reached for a schema id
                that is not cached yet (nothing is decoded); ``SchemaRegistryMismatch``
                when it knows none of the batch's ids and looks like the wrong registry.
            TooManySchemaIds: The batch names more new schema ids than
                ``registry_max_new_ids``.
            InvalidOption: A message needs a schema and no ``registry_url`` was given.
        """
        parts = binary_parts(values)
        pos = position_array(position, parts.n)
        kparts = key_parts(keys, parts.n)
        lookups = self.schema_lookups(parts, kparts)
        data = padded(parts.data)
        kdata = None if kparts is None else padded(kparts.data)

        def run(lo: int, hi: int) -> Columns:
            kp = None if kparts is None else sub_parts(kparts, lo, hi)
            return self._decode_run(sub_parts(parts, lo, hi), data, kp, kdata, schema, lookups)

        return decode_in_runs(parts, pos, schema, RUN_BYTES, run)

    # ------------------------------------------------------------------ phases
    def schema_lookups(self, parts: Parts, kparts: Parts | None) -> dict[int, SchemaLookup]:
        """The schemas of every id named by a value or key (fetched before decoding, so
        an unreachable registry fails the batch rather than refusing its events)."""
        scratch = new_reasons(parts.n)
        ids = wire_headers(parts, parts.valid & (parts.lengths > 0), scratch)
        wanted = set(np.unique(ids[ids >= 0]).tolist())
        if kparts is not None:
            kids = wire_headers(kparts, kparts.valid & (kparts.lengths > 0), new_reasons(kparts.n))
            wanted |= set(np.unique(kids[kids >= 0]).tolist())
        if not wanted:
            return {}
        if self.registry is None:
            raise InvalidOption(
                "the 'debezium-avro' decoder needs the decoder option 'registry_url'",
                option="registry_url",
            )
        return fetch_schemas(self.registry, wanted, max_new_ids=self.registry_max_new_ids)

    def _decode_run(
        self,
        parts: Parts,
        data: np.ndarray,
        kparts: Parts | None,
        kdata: np.ndarray | None,
        schema: TableSchema,
        lookups: dict[int, SchemaLookup],
    ) -> Columns:
        """Decodes one run of messages, schema group by schema group."""
        n = parts.n
        reasons = new_reasons(n)
        out = RunColumns(n, schema)
        out.skip[:] = ~parts.valid | (parts.lengths == 0)  # tombstones
        ids = wire_headers(parts, ~out.skip, reasons)
        for sid in np.unique(ids[ids >= 0]).tolist():
            rows = np.flatnonzero((ids == sid) & no_reason(reasons))
            found = lookups[sid]
            if found.node is None:
                refuse(reasons, _mask(n, rows), f"malformed event: {found.error}")
                continue
            self._decode_group(parts, data, rows, found.node, sid, schema, out, reasons)
        keys = {k: out.merged(out.keys[k], schema.column(k).type) for k in schema.primary_key}
        need = out.op >= 0
        need &= (out.op != OP_TRUNCATE) & no_reason(reasons) & ~out.skip
        lacking = np.zeros(n, dtype=bool)
        for k in schema.primary_key:
            lacking |= need & ~(keys[k][1] & np.asarray(keys[k][0].is_valid(), dtype=bool))
        if lacking.any():
            self._keys_from_messages(kparts, kdata, lacking, schema, keys, lookups, reasons)
        seq = None
        if schema.sequence_column is not None:
            seq = pa.nulls(n, pa.int64())
            if out.seq:
                rows = np.concatenate([r for r, _ in out.seq])
                seq = scatter(pa.concat_arrays([a for _, a in out.seq]), rows, n)
        values = {
            c.name: out.merged(out.values[c.name], c.type)
            for c in schema.value_columns
            if c.name in out.values
        }
        ts = out.ts if (out.ts != TS_MISSING).any() else None
        return Columns(
            op=np.where(out.op < 0, OP_UPSERT, out.op).astype(np.int8),
            keys={k: v[0] for k, v in keys.items()},
            values=values,
            seq=seq,
            reasons=reasons,
            ts_ms=ts,
            skip=out.skip,
            messages=out.message,
        )

    def _decode_group(
        self,
        parts: Parts,
        data: np.ndarray,
        rows: np.ndarray,
        env: Node,
        sid: int,
        schema: TableSchema,
        out: RunColumns,
        reasons: np.ndarray,
    ) -> None:
        """Decodes the events ``rows`` of the run, all written with schema ``sid``."""
        g = len(rows)
        greasons = new_reasons(g)
        if env.kind != "record" or env.field("op") is None:
            refuse(
                reasons,
                _mask(out.n, rows),
                f"malformed event: schema id {sid} is not a Debezium change event envelope "
                "(no 'op' field)",
            )
            return
        val = Reader(
            data, parts.starts[rows] + HEADER_BYTES, parts.ends[rows], greasons
        ).read_record(env)
        code = self._ops(val, g, greasons, parts)
        live = no_reason(greasons)
        is_delete = live & (code == 3)
        is_truncate = live & (code == 4)
        message = live & (code == 5)
        upsert = live & (code >= 0) & (code <= 2)
        after = _record(val, "after")
        before = _record(val, "before")
        has_after = np.zeros(g, dtype=bool)
        if after is not None:
            has_after[after.rows] = True
        refuse(greasons, upsert & ~has_after, "'after' is missing or not an object")
        if self.truncate == "reject":
            refuse(
                greasons, is_truncate, "truncate event rejected (decoder option truncate='reject')"
            )
        src = _record(val, "source")
        rowcols = self._row_columns(
            parts,
            None if after is None else restrict(after, upsert & no_reason(greasons)),
            None if before is None else restrict(before, is_delete & no_reason(greasons)),
            schema,
            g,
            greasons,
        )
        seq = self._seq(src, rowcols, is_delete | upsert, schema, g, parts, greasons)
        # commit the group's columns into the run
        op = np.where(is_delete, OP_DELETE, np.where(is_truncate, OP_TRUNCATE, OP_UPSERT))
        out.op[rows] = np.where(no_reason(greasons) & ~message, op, -1).astype(np.int8)
        out.skip[rows] |= message
        out.message[rows] |= message
        for where, name, col in rowcols:
            out.put(where, name, rows, col)
        if seq is not None:
            out.seq.append((rows, seq))
        src_ts, src_given = int_field(src, "ts_ms", g)
        ts, ts_given = int_field(val, "ts_ms", g)
        out.ts[rows] = np.where(src_given, src_ts, np.where(ts_given, ts, TS_MISSING))
        bad = ~no_reason(greasons)
        reasons[rows[bad]] = greasons[bad]

    def _ops(self, val: Val, g: int, greasons: np.ndarray, parts: Parts) -> np.ndarray:
        """Each event's op code (index in ``crudtm``; -1: none or unknown)."""
        code = np.full(g, -1, dtype=np.int8)
        opv, _ = val.children["op"].nonnull()
        if opv.starts is None or opv.ends is None:
            refuse(greasons, np.ones(g, bool), "event has no 'op'")
            return code
        one = (opv.ends - opv.starts) == 1
        c = np.where(one, _OP_CODE[parts.data[np.where(one, opv.starts, 0)]], -1)
        code[opv.rows] = c
        has = np.zeros(g, dtype=bool)
        has[opv.rows] = True
        refuse(greasons, ~has & no_reason(greasons), "event has no 'op'")
        bad = opv.rows[c < 0]
        if len(bad):
            for i in np.flatnonzero(c < 0).tolist():  # reject path
                r = int(opv.rows[i])
                if greasons[r] is None:
                    greasons[r] = f"unknown Debezium op {raw_text(opv, i, parts)}"
        return code

    def _row_columns(
        self,
        parts: Parts,
        after: Val | None,
        before: Val | None,
        schema: TableSchema,
        g: int,
        greasons: np.ndarray,
    ) -> list[tuple[str, str, Any]]:
        """The columns of the events' rows: ``after`` of upserts (every column),
        ``before`` of deletes (keys, and the sequence column)."""
        unit = _UNITS[self.timestamp_unit]
        if after is not None and not self.ignore_unknown_columns:
            known = set(schema.names)
            for fname, _ in after.node.fields:
                if fname not in known:
                    refuse(greasons, _mask(g, after.rows), f"unknown column {fname!r}")
                    break
        out: list[tuple[str, str, Any]] = []
        keyset = set(schema.primary_key)
        for c in schema.columns:
            is_key, is_seq = c.name in keyset, c.name == schema.sequence_column
            if is_seq and self.sequence_source != "column":
                continue
            ph = () if is_key or not self._placeholders else self._forms_for(c)
            cols = []
            for rec in (after, before):
                if rec is None or (rec is before and not (is_key or is_seq)):
                    continue
                col = field_column(rec, c, c.type, g, parts, greasons, unit=unit, placeholders=ph)
                if col is not None:
                    cols.append(col)
            if not cols:
                continue
            col = cols[0]
            for other in cols[1:]:
                col.values = pc.if_else(pa.array(other.present), other.values, col.values)
                col.present = col.present | other.present
                col.given = col.given | other.given
            out.append(("keys" if is_key else "values", c.name, col))
        return out

    def _forms_for(self, c: Any) -> tuple[bytes, ...]:
        """Placeholder forms of a column: its text for strings, its raw bytes (and its
        base64 forms, for base64 strings) for binary columns."""
        if pa.types.is_binary(c.type):
            return (self._raw_placeholder, *self._placeholders[1:])
        return self._placeholders[:1]

    def _seq(
        self,
        src: Val | None,
        rowcols: list[tuple[str, str, Any]],
        need: np.ndarray,
        schema: TableSchema,
        g: int,
        parts: Parts,
        greasons: np.ndarray,
    ) -> pa.Array | None:
        """The seq of each event of the group (None: the table has no sequence column)."""
        s = schema.sequence_column
        if s is None:
            return None
        mode = self.sequence_source
        if mode == "column":
            col = next((c for w, name, c in rowcols if name == s), None)
            given = np.zeros(g, bool) if col is None else col.given
            refuse(greasons, need & ~given, f"seq is missing (no {s!r} in the row)")
            return pa.nulls(g, pa.int64()) if col is None else col.values.cast(pa.int64())
        if mode in ("lsn", "ts_ms"):
            v, given = int_field(src, mode, g)
            refuse(greasons, need & ~given, f"seq is missing (no source.{mode})")
            return pa.array(v, pa.int64(), mask=~given)
        pos, given = int_field(src, "pos", g)
        row, _ = int_field(src, "row", g)
        names = text_field(src, "file", g, parts)
        number = binlog_numbers(names)
        bad_name = need & np.asarray(names.is_valid(), dtype=bool) & (number < 0)
        for i in np.flatnonzero(bad_name & no_reason(greasons)).tolist():  # reject path
            raw = str(names[i].as_py())[:60]
            greasons[i] = f"source.file {raw!r} is not a binlog file name (name.NNNNNN)"
        v, ok = binlog_seq(greasons, need, number, pos, given, row)
        return pa.array(v, pa.int64(), mask=~ok)

    def _keys_from_messages(
        self,
        kparts: Parts | None,
        kdata: np.ndarray | None,
        lacking: np.ndarray,
        schema: TableSchema,
        keys: dict[str, tuple[pa.Array, np.ndarray]],
        lookups: dict[int, SchemaLookup],
        reasons: np.ndarray,
    ) -> None:
        """Fills the key columns events lack from their Avro message keys."""
        if kparts is None or kdata is None:
            refuse(
                reasons,
                lacking,
                "delete without a 'before' row and without a message key (its key is needed)",
            )
            return
        need = np.flatnonzero(lacking)
        kp = Parts(
            kparts.buffer, kparts.data, kparts.starts[need], kparts.ends[need], kparts.valid[need]
        )
        kreasons = new_reasons(len(need))
        null = ~kp.valid | (kp.lengths == 0)
        refuse(kreasons, null, "the row lacks its key and the message key is null")
        ids = wire_headers(kp, ~null, kreasons, "message key: ")
        got: dict[str, list[tuple[np.ndarray, pa.Array, np.ndarray]]] = {k: [] for k in keys}
        for sid in np.unique(ids[ids >= 0]).tolist():
            rows = np.flatnonzero((ids == sid) & no_reason(kreasons))
            found = lookups[sid]
            if found.node is None or found.node.kind != "record":
                why = found.error or f"schema id {sid} is not a record"
                refuse(kreasons, _mask(len(need), rows), f"message key: {why}")
                continue
            gre = new_reasons(len(rows))
            val = Reader(kdata, kp.starts[rows] + HEADER_BYTES, kp.ends[rows], gre).read_record(
                found.node
            )
            for k in keys:
                c = schema.column(k)
                col = field_column(
                    val, c, c.type, len(rows), kp, gre, unit=_UNITS[self.timestamp_unit]
                )
                if col is not None:
                    got[k].append((rows, col.values, col.given))
            bad = ~no_reason(gre)
            kreasons[rows[bad]] = ["message key: " + str(r) for r in gre[bad]] if bad.any() else []
        for k, (arr, present) in keys.items():
            pieces = got[k]
            kgiven = np.zeros(len(need), dtype=bool)
            if pieces:
                krows = np.concatenate([p[0] for p in pieces])
                karr = pa.concat_arrays([p[1] for p in pieces])
                kgiven[krows] = np.concatenate([p[2] for p in pieces])
                vals = scatter(karr, krows, len(need))
            else:
                vals = pa.nulls(len(need), arr.type)
            lacks = ~(present[need] & np.asarray(arr.is_valid(), dtype=bool)[need])
            refuse(
                kreasons,
                lacks & ~kgiven & no_reason(kreasons),
                f"key column {k!r} is in neither the row nor the message key",
            )
            use = np.zeros(len(present), dtype=bool)
            use[need[lacks & kgiven]] = True
            full = np.full(len(present), -1, dtype=np.int64)
            full[need] = np.arange(len(need))
            fill = vals.take(pa.array(full, mask=full < 0))
            keys[k] = (pc.if_else(pa.array(use), fill, arr), present | use)
        hit = ~no_reason(kreasons)
        for r, why in zip(need[hit].tolist(), kreasons[hit].tolist(), strict=True):
            if reasons[r] is None:
                reasons[r] = why


def _record(val: Val, name: str) -> Val | None:
    """The non-null record value of field ``name`` of the envelope (None: no field)."""
    f = val.children.get(name)
    if f is None:
        return None
    rec, _ = f.nonnull()
    return rec if rec.node.kind == "record" else None


def _mask(n: int, rows: np.ndarray) -> np.ndarray:
    m = np.zeros(n, dtype=bool)
    m[rows] = True
    return m


def _raw(placeholder: str | bytes | None) -> bytes:
    """The placeholder's bytes (``hex:`` text as in Debezium)."""
    if placeholder is None:
        return b""
    if isinstance(placeholder, bytes):
        return placeholder
    if placeholder.startswith("hex:"):
        return bytes.fromhex(placeholder[4:])
    return placeholder.encode("utf-8")
