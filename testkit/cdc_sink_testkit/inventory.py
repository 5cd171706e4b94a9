"""A whole Debezium-captured database as a stream, and what every table must hold.

:func:`inventory_stream` writes the change events a Debezium connector (MySQL or
PostgreSQL flavor) would send for the ``inventory`` database of Debezium's tutorial, one
topic per table (``<prefix>.inventory.<table>``), as Kafka Connect's JsonConverter
(``schemas.enable=true``) or Confluent's Avro converter writes them, and keeps the
reference model of the tables: :meth:`InventoryStream.reference` (at the end) and
:meth:`InventoryStream.reference_at` (after the first ``n`` messages).

    stream = inventory_stream("postgres", "json", seed=7, events=2000)
    for m in stream.messages():            # produce in this order
        producer.produce(m.topic, key=m.key, value=m.value)
    expected = stream.reference()          # "postgres.inventory.customers" -> pa.Table

The tables are the tutorial's (``customers``, ``addresses``, ``orders``, ``products``,
``products_on_hand``, ``geom``, with its rows as the initial snapshot) and three more:
``order_lines`` (composite key ``order_number, line_no``; ``DECIMAL(10,2)``,
``DATETIME(6)`` as ``MicroTimestamp`` and ``TIMESTAMP(6)`` as ``ZonedTimestamp``),
``customer_events`` (no primary key: Debezium sends null keys; users name
:attr:`InventoryStream.no_key_columns` as its key) and ``promotions`` (created
mid-stream). In the order of time, the stream holds:

1. snapshot reads (op ``r``, ``source.snapshot`` true) of every initial row;
2. transactions of interleaved inserts, updates and deletes across the tables (each
   delete followed by its tombstone, as ``tombstones.on.delete=true`` does; a primary key
   update of ``promotions`` as a delete, its tombstone and a create), framed by
   ``BEGIN``/``END`` records on ``<prefix>.transaction`` (the envelopes carry their
   ``transaction`` block) and heartbeats on ``__debezium-heartbeat.<prefix>`` now and
   then; at fixed shares of the stream: ``ALTER TABLE customers ADD COLUMN phone
   VARCHAR(20)`` (a new optional field), the first event of ``promotions``, ``ADD COLUMN
   loyalty INT NOT NULL DEFAULT 0`` (a required field with a default), the widening of
   ``products_on_hand.quantity`` from ``INT`` to ``BIGINT`` (Connect ``int32`` to
   ``int64``, followed by a quantity beyond the ``int32`` range), with
   ``refused_change=True`` ``orders.quantity`` changed from ``INT`` to ``VARCHAR`` (an
   incompatible change: the reference of ``orders`` stops before it), and (PostgreSQL only)
   ``TRUNCATE order_lines`` (op ``t``, no key).

Both flavors run the same workload; their messages differ in the ``source`` block
(MySQL: ``db``, ``table``, binlog ``file``/``pos``/``row``; PostgreSQL: ``db``,
``schema``, ``table``, ``txId``, ``lsn``), in the qualified table names (MySQL
``inventory.<table>``, PostgreSQL ``postgres.inventory.<table>``: Debezium's example
database ``postgres``, schema ``inventory``), in ``products.weight`` (MySQL ``FLOAT``:
Connect ``float``; PostgreSQL ``FLOAT``, i.e. double precision: ``double``), geometries'
SRID (MySQL 0, PostGIS none) and the truncate (after which their random choices part).
Update and delete events carry the full ``before`` row (MySQL ``binlog_row_image=FULL``,
PostgreSQL ``REPLICA IDENTITY FULL``).

Avro: each schema version is registered with the registry client given
(``register(subject, schema) -> id``): values under ``<topic>-value`` (the envelope
``<prefix>.inventory.<table>.Envelope`` with ``Value`` rows), keys under ``<topic>-key``
(``<prefix>.inventory.<table>.Key``); a column added or widened registers a new version
(a new id). The refused change's schema is registered under ``<topic>-value-refused``, as
a registry that checks compatibility refuses it under the stream's subject (the decoder
reads a message's writer schema by its id, whatever the subject).

The reference applies Debezium's semantics to each table's change events in order: ``c``
and ``r`` insert the ``after`` row, ``u`` replaces the row with ``after`` (full rows), ``d``
deletes the row of ``before``'s key, ``t`` empties the table; tombstones, heartbeats and
transaction records change nothing. A row written before a column was added holds the
column's default (MySQL fills existing rows so), and values are those the sink's columns
hold (dates as ``date32``, both timestamp kinds as ``timestamp[us, UTC]``, decimals as
``decimal128``, geometries as their WKB bytes).

Everything follows from the seed.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import random
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import pyarrow as pa

from cdc_sink_testkit.avro_connect import avro_datum, avro_schema

__all__ = [
    "DATABASE_TABLES",
    "HEARTBEAT_SCHEMA",
    "TRANSACTION_SCHEMA",
    "InventoryStream",
    "KafkaRecordProducer",
    "Message",
    "RecordProducer",
    "SchemaRegistrar",
    "inventory_stream",
]

Flavor = Literal["mysql", "postgres"]
Encoding = Literal["json", "avro"]

DATABASE_TABLES: tuple[str, ...] = (
    "customers",
    "addresses",
    "orders",
    "products",
    "products_on_hand",
    "geom",
    "order_lines",
    "customer_events",
    "promotions",
)
"""The source tables (unqualified), in the order their snapshot reads come."""

_UTC = dt.timezone.utc
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)
_START = dt.datetime(2026, 3, 2, 8, 0, tzinfo=_UTC)
_VERSION = "2.7.3.Final"
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Message:
    """One Kafka record of the stream (``key``/``value`` None: a null key, a tombstone)."""

    topic: str
    key: bytes | None
    value: bytes | None


class RecordProducer(Protocol):
    """A Kafka producer of raw records (:class:`cdc_sink.kafka.producer.RawProducer` is one)."""

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None = None
    ) -> None:
        """Queues one record."""

    def flush(self, timeout: float = 30.0) -> int:
        """Waits for the queued records' deliveries."""


class KafkaRecordProducer:
    """confluent_kafka's producer as a :class:`RecordProducer`.

    Args:
        bootstrap: The brokers.
    """

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None = None
    ) -> None:
        """Queues one record."""
        kw: dict[str, Any] = {} if partition is None else {"partition": partition}
        self.p.produce(topic, key=key, value=value, **kw)

    def flush(self, timeout: float = 30.0) -> int:
        """Waits for the queued records' deliveries; how many are still queued."""
        return int(self.p.flush(timeout))


class SchemaRegistrar(Protocol):
    """A schema registry client (:class:`cdc_sink_testkit.registry.LocalRegistry` is one)."""

    def register(self, subject: str, schema: object) -> int:
        """Registers an Avro schema (a JSON-able object) under ``subject``; its id."""


# ----------------------------------------------------------------------------- columns
@dataclass(frozen=True)
class _Col:
    """A source column: its Debezium (Kafka Connect) type and its sink column type.

    ``kind``: ``int16``, ``int32``, ``int64``, ``float``, ``double``, ``string``,
    ``enum``, ``date``, ``micro_ts``, ``zoned_ts``, ``decimal``, ``geometry``.
    """

    name: str
    kind: str
    optional: bool = False
    default: Any = None
    precision: int = 0
    scale: int = 0
    allowed: tuple[str, ...] = ()

    def connect(self) -> dict[str, Any]:
        """The field's Kafka Connect schema, as Debezium writes it."""
        f: dict[str, Any]
        simple = ("int16", "int32", "int64", "float", "double", "string")
        if self.kind in simple:
            f = {"type": self.kind}
        elif self.kind == "enum":
            f = {
                "type": "string",
                "name": "io.debezium.data.Enum",
                "version": 1,
                "parameters": {"allowed": ",".join(self.allowed)},
            }
        elif self.kind == "date":
            f = {"type": "int32", "name": "io.debezium.time.Date", "version": 1}
        elif self.kind == "micro_ts":
            f = {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1}
        elif self.kind == "zoned_ts":
            f = {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1}
        elif self.kind == "decimal":
            f = {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "version": 1,
                "parameters": {
                    "scale": str(self.scale),
                    "connect.decimal.precision": str(self.precision),
                },
            }
        elif self.kind == "geometry":
            f = {
                "type": "struct",
                "fields": [
                    {"type": "bytes", "optional": False, "field": "wkb"},
                    {"type": "int32", "optional": True, "field": "srid"},
                ],
                "name": "io.debezium.data.geometry.Geometry",
                "version": 1,
            }
        else:  # pragma: no cover - the module's own tables only
            raise ValueError(f"unknown column kind {self.kind!r}")
        f["optional"] = self.optional
        if self.default is not None:
            f["default"] = self.default
        f["field"] = self.name
        return f

    def arrow(self) -> pa.DataType:
        """The column's type in the sink (as its schema evolution maps the Connect type)."""
        return _ARROW[self.kind](self)

    def wire(self, v: Any) -> Any:
        """A value (a Python value of the column) as JsonConverter writes it."""
        if v is None:
            return None
        if self.kind == "date":
            return (v - _EPOCH.date()).days
        if self.kind == "micro_ts":
            return (v - _EPOCH) // dt.timedelta(microseconds=1)
        if self.kind == "zoned_ts":
            return v.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if self.kind == "decimal":
            unscaled = int(v.scaleb(self.scale))
            size = max(1, (unscaled.bit_length() + 8) // 8)
            return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()
        if self.kind == "geometry":
            wkb, srid = v
            return {"wkb": base64.b64encode(wkb).decode(), "srid": srid}
        if self.kind == "string" and not isinstance(v, str):
            return str(v)  # the refused change: an int column now VARCHAR
        return v

    def reference(self, v: Any) -> Any:
        """A value as the sink's column holds it (a geometry: its WKB)."""
        return v[0] if self.kind == "geometry" and v is not None else v


_TS_UTC = pa.timestamp("us", tz="UTC")
_ARROW: dict[str, Callable[[_Col], pa.DataType]] = {
    "int16": lambda c: pa.int16(),
    "int32": lambda c: pa.int32(),
    "int64": lambda c: pa.int64(),
    "float": lambda c: pa.float32(),
    "double": lambda c: pa.float64(),
    "string": lambda c: pa.string(),
    "enum": lambda c: pa.string(),
    "date": lambda c: pa.date32(),
    "micro_ts": lambda c: _TS_UTC,
    "zoned_ts": lambda c: _TS_UTC,
    "decimal": lambda c: pa.decimal128(c.precision, c.scale),
    "geometry": lambda c: pa.binary(),
}


def _c(name: str, kind: str, **kw: Any) -> _Col:
    return _Col(name, kind, **kw)


def _opt(name: str, kind: str, **kw: Any) -> _Col:
    return _Col(name, kind, optional=True, **kw)


_ADDRESS_TYPES = ("SHIPPING", "BILLING", "LIVING")


def _initial_columns(flavor: Flavor) -> dict[str, list[_Col]]:
    weight = "float" if flavor == "mysql" else "double"
    return {
        "customers": [
            _c("id", "int32"),
            _c("first_name", "string"),
            _c("last_name", "string"),
            _c("email", "string"),
        ],
        "addresses": [
            _c("id", "int32"),
            _c("customer_id", "int32"),
            _c("street", "string"),
            _c("city", "string"),
            _c("state", "string"),
            _c("zip", "string"),
            _c("type", "enum", allowed=_ADDRESS_TYPES),
        ],
        "orders": [
            _c("order_number", "int32"),
            _c("order_date", "date"),
            _c("purchaser", "int32"),
            _c("quantity", "int32"),
            _c("product_id", "int32"),
        ],
        "products": [
            _c("id", "int32"),
            _c("name", "string"),
            _opt("description", "string"),
            _opt("weight", weight),
        ],
        "products_on_hand": [_c("product_id", "int32"), _c("quantity", "int32")],
        "geom": [_c("id", "int32"), _c("g", "geometry"), _opt("h", "geometry")],
        "order_lines": [
            _c("order_number", "int32"),
            _c("line_no", "int16"),
            _c("product_id", "int32"),
            _c("quantity", "int32"),
            _c("unit_price", "decimal", precision=10, scale=2),
            _c("created_at", "micro_ts"),
            _opt("updated_at", "zoned_ts"),
        ],
        "customer_events": [
            _c("event_id", "int64"),
            _c("customer_id", "int32"),
            _c("kind", "string"),
            _opt("detail", "string"),
            _c("occurred_at", "micro_ts"),
        ],
        "promotions": [
            _c("id", "int32"),
            _c("code", "string"),
            _c("discount", "decimal", precision=5, scale=2),
            _opt("valid_until", "zoned_ts"),
        ],
    }


_KEYS: dict[str, tuple[str, ...]] = {
    "customers": ("id",),
    "addresses": ("id",),
    "orders": ("order_number",),
    "products": ("id",),
    "products_on_hand": ("product_id",),
    "geom": ("id",),
    "order_lines": ("order_number", "line_no"),
    "customer_events": (),
    "promotions": ("id",),
}
_NO_KEY_TABLE = "customer_events"


def _qualified(flavor: Flavor, table: str) -> str:
    """``inventory.customers`` (MySQL), ``postgres.inventory.customers`` (PostgreSQL)."""
    return f"inventory.{table}" if flavor == "mysql" else f"postgres.inventory.{table}"


_NO_KEY_COLUMNS = ("event_id",)
_REFUSED_TABLE = "orders"

# ------------------------------------------------------------------ the tutorial's rows
_CUSTOMERS = [
    (1001, "Sally", "Thomas", "sally.thomas@acme.com"),
    (1002, "George", "Bailey", "gbailey@foobar.com"),
    (1003, "Edward", "Walker", "ed@walker.com"),
    (1004, "Anne", "Kretchmar", "annek@noanswer.org"),
]
_ADDRESSES = [
    (10, 1001, "3183 Moore Avenue", "Euless", "Texas", "76036", "SHIPPING"),
    (11, 1001, "2389 Hidden Valley Road", "Harrisburg", "Pennsylvania", "17116", "BILLING"),
    (12, 1002, "281 Riverside Drive", "Augusta", "Georgia", "30901", "BILLING"),
    (13, 1003, "3787 Brownton Road", "Columbus", "Mississippi", "39701", "SHIPPING"),
    (14, 1003, "2458 Lost Creek Road", "Bethlehem", "Pennsylvania", "18018", "SHIPPING"),
    (15, 1003, "4800 Simpson Square", "Hillsdale", "Oklahoma", "74637", "BILLING"),
    (16, 1004, "1289 University Hill Road", "Canehill", "Arkansas", "72717", "LIVING"),
]
_PRODUCTS = [
    (101, "scooter", "Small 2-wheel scooter", 3.14),
    (102, "car battery", "12V car battery", 8.1),
    (103, "12-pack drill bits", "12-pack of drill bits with sizes ranging from #40 to #3", 0.8),
    (104, "hammer", "12oz carpenter's hammer", 0.75),
    (105, "hammer", "14oz carpenter's hammer", 0.875),
    (106, "hammer", "16oz carpenter's hammer", 1.0),
    (107, "rocks", "box of assorted rocks", 5.3),
    (108, "jacket", "water resistent black wind breaker", 0.1),
    (109, "spare tire", "24 inch spare tire", 22.2),
]
_ON_HAND = [(101, 3), (102, 8), (103, 18), (104, 4), (105, 5), (106, 0), (107, 44), (108, 2)]
_ON_HAND.append((109, 5))
_ORDERS = [
    (10001, dt.date(2016, 1, 16), 1001, 1, 102),
    (10002, dt.date(2016, 1, 17), 1002, 2, 105),
    (10003, dt.date(2016, 2, 19), 1002, 2, 106),
    (10004, dt.date(2016, 2, 21), 1003, 1, 107),
]
_FIRST_NAMES = ("Ada", "Brook", "Carmen", "Dmitri", "Elif", "Femi", "Grace", "Hiro", "Ines")
_LAST_NAMES = ("Okafor", "Lindqvist", "Moreau", "Tanaka", "Silva", "Novak", "Haddad", "Ruiz")
_CITIES = (
    ("Austin", "Texas", "73301"),
    ("Portland", "Oregon", "97201"),
    ("Madison", "Wisconsin", "53703"),
    ("Boise", "Idaho", "83702"),
    ("Savannah", "Georgia", "31401"),
)
_STREETS = ("Maple Street", "Oak Avenue", "Cedar Lane", "Pine Road", "Elm Court")


def _wkb_point(x: float, y: float) -> bytes:
    return struct.pack("<BIdd", 1, 1, x, y)


def _wkb_line(points: Sequence[tuple[float, float]]) -> bytes:
    return struct.pack("<BII", 1, 2, len(points)) + b"".join(
        struct.pack("<dd", x, y) for x, y in points
    )


def _wkb_polygon(ring: Sequence[tuple[float, float]]) -> bytes:
    return struct.pack("<BIII", 1, 3, 1, len(ring)) + b"".join(
        struct.pack("<dd", x, y) for x, y in ring
    )


# ------------------------------------------------------------------------ the events
@dataclass(frozen=True)
class _Event:
    """One message in the generator's terms (the reference replays these).

    ``op``: ``c``/``r``/``u``/``d``/``t`` for a change event of ``table``, None for a
    tombstone (of ``table``) or a heartbeat or transaction record (``table`` None).
    ``row``: the change's ``after`` (c/r/u) or ``before`` (d) as Python values.
    """

    topic: str
    key_schema: dict[str, Any] | None
    key: dict[str, Any] | None
    value_schema: dict[str, Any] | None = None
    payload: dict[str, Any] | None = None
    table: str | None = None
    op: str | None = None
    row: dict[str, Any] | None = None
    columns: tuple[_Col, ...] = ()


@dataclass
class _TableState:
    name: str
    columns: list[_Col]
    key: tuple[str, ...]
    rows: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    value_schema: dict[str, Any] | None = None
    key_schema: dict[str, Any] | None = None

    def col(self, name: str) -> _Col:
        return next(c for c in self.columns if c.name == name)

    def key_of(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row[k] for k in (self.key or _NO_KEY_COLUMNS))


class _Generator:
    """Writes the stream's events (see the module docstring), keeping the source state."""

    def __init__(
        self, flavor: Flavor, seed: int, events: int, prefix: str, refused_change: bool
    ) -> None:
        self.flavor = flavor
        self.rng = random.Random(seed)
        self.target = events
        self.prefix = prefix
        self.refused_change = refused_change
        self.clock = _START
        self.out: list[_Event] = []
        self.changes = 0
        self.pos = 154  # binlog position / LSN
        self.tx_id = 600
        self.tx: dict[str, Any] | None = None
        self.refused_from: int | None = None
        self.tables = {
            name: _TableState(name, cols, _KEYS[name])
            for name, cols in _initial_columns(flavor).items()
        }
        for t in self.tables.values():
            self._new_schema(t)
        self.next_id = {"customers": 1005, "addresses": 17, "orders": 10005, "products": 110}
        self.next_id.update({"geom": 4, "customer_events": 1, "promotions": 1})

    # -- names
    @property
    def db(self) -> str:
        return "inventory" if self.flavor == "mysql" else "postgres"

    @property
    def connector(self) -> str:
        return "mysql" if self.flavor == "mysql" else "postgresql"

    def qualified(self, table: str) -> str:
        return _qualified(self.flavor, table)

    def topic(self, table: str) -> str:
        return f"{self.prefix}.inventory.{table}"

    # -- schemas
    def _new_schema(self, t: _TableState) -> None:
        """The table's value and key schemas after a DDL change (or at the start)."""
        ns = f"{self.prefix}.inventory.{t.name}"
        row = {
            "type": "struct",
            "fields": [c.connect() for c in t.columns],
            "optional": True,
            "name": f"{ns}.Value",
        }
        t.value_schema = {
            "type": "struct",
            "fields": [
                dict(row, field="before"),
                dict(row, field="after"),
                self._source_schema(),
                _TRANSACTION_BLOCK,
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
                {"type": "int64", "optional": True, "field": "ts_us"},
                {"type": "int64", "optional": True, "field": "ts_ns"},
            ],
            "optional": False,
            "name": f"{ns}.Envelope",
            "version": 1,
        }
        t.key_schema = None
        if t.key:
            t.key_schema = {
                "type": "struct",
                "fields": [t.col(k).connect() for k in t.key],
                "optional": False,
                "name": f"{ns}.Key",
            }

    def _source_schema(self) -> dict[str, Any]:
        fields = _MYSQL_SOURCE if self.flavor == "mysql" else _PG_SOURCE
        return {
            "type": "struct",
            "fields": [
                {"type": t, "optional": opt, "field": n, **({"default": False} if d else {})}
                for n, t, opt, d in fields
            ],
            "optional": False,
            "name": f"io.debezium.connector.{self.connector}.Source",
            "field": "source",
        }

    # -- time and positions
    def tick(self) -> int:
        """Advances the clock; the event time in ms."""
        self.clock += dt.timedelta(microseconds=self.rng.randint(3_000, 400_000))
        return (self.clock - _EPOCH) // dt.timedelta(milliseconds=1)

    def _source(self, table: str, snapshot: bool, ts_ms: int, row: int) -> dict[str, Any]:
        self.pos += self.rng.randint(40, 400) if row == 0 else 0
        common = {
            "version": _VERSION,
            "connector": self.connector,
            "name": self.prefix,
            "ts_ms": ts_ms,
            "ts_us": ts_ms * 1000,
            "ts_ns": ts_ms * 1_000_000,
            "snapshot": snapshot,
            "db": self.db,
        }
        if self.flavor == "mysql":
            return {
                **common,
                "table": table,
                "server_id": 0 if snapshot else 223344,
                "gtid": None if self.tx is None else self.tx["id"],
                "file": "mysql-bin.000003",
                "pos": 154 if snapshot else self.pos,
                "row": 0 if snapshot else row,
                "thread": None if snapshot else 7,
                "query": None,
            }
        return {
            **common,
            "sequence": None if snapshot else json.dumps([str(self.pos - 24), str(self.pos)]),
            "schema": "inventory",
            "table": table,
            "txId": self.tx_id,
            "lsn": self.pos,
            "xmin": None,
        }

    # -- emitting
    def change(self, table: str, op: str, row: dict[str, Any] | None, *, row_no: int = 0) -> None:
        """Emits one change event of ``table`` (``row``: after for c/r/u, before for d;
        an update's before is the row's current state) and applies it to the state."""
        t = self.tables[table]
        ts = self.tick()
        snapshot = op == "r"
        before = t.rows[t.key_of(row)] if row is not None and op in ("u", "d") else None
        after = row if op in ("c", "r", "u") else None
        wire = {c.name: c for c in t.columns}
        tx = None
        if self.tx is not None:
            self.tx["total"] += 1
            coll = f"inventory.{table}"
            self.tx["collections"][coll] = self.tx["collections"].get(coll, 0) + 1
            tx = {
                "id": self.tx["id"],
                "total_order": self.tx["total"],
                "data_collection_order": self.tx["collections"][coll],
            }
        payload = {
            "before": None if before is None else {k: wire[k].wire(v) for k, v in before.items()},
            "after": None if after is None else {k: wire[k].wire(v) for k, v in after.items()},
            "source": self._source(table, snapshot, ts, row_no),
            "transaction": tx,
            "op": op,
            "ts_ms": ts + 7,
            "ts_us": (ts + 7) * 1000 + 250,
            "ts_ns": (ts + 7) * 1_000_000 + 250_125,
        }
        if op == "t":
            t.rows.clear()
            key = None
        else:
            ref = after if after is not None else before
            assert ref is not None
            key = {k: wire[k].wire(ref[k]) for k in t.key} if t.key else None
            if op == "d":
                del t.rows[t.key_of(ref)]
            else:
                t.rows[t.key_of(ref)] = dict(ref)
        key_schema = t.key_schema if key is not None else None
        topic, name, cols = self.topic(table), self.qualified(table), tuple(t.columns)
        row = None if op == "t" else dict(after if after is not None else before or {})
        self.out.append(
            _Event(topic, key_schema, key, t.value_schema, payload, name, op, row, cols)
        )
        if self.refused_from is None and self._is_refused(t):
            self.refused_from = len(self.out) - 1
        self.changes += 1
        if op == "d":  # its tombstone
            self.out.append(_Event(topic, key_schema, key, table=name, columns=cols))

    def _is_refused(self, t: _TableState) -> bool:
        return t.name == _REFUSED_TABLE and t.col("quantity").kind == "string"

    def insert(self, table: str, row: dict[str, Any], *, row_no: int = 0) -> None:
        self.change(table, "c", row, row_no=row_no)

    def update(self, table: str, key: tuple[Any, ...], **sets: Any) -> None:
        t = self.tables[table]
        self.change(table, "u", {**t.rows[key], **sets})

    def delete(self, table: str, key: tuple[Any, ...]) -> None:
        self.change(table, "d", dict(self.tables[table].rows[key]))

    def rekey(self, table: str, key: tuple[Any, ...], **new_key: Any) -> None:
        """An update of a row's primary key: Debezium sends a delete of the old key (and
        its tombstone), then a create of the new one."""
        row = self.tables[table].rows[key]
        self.delete(table, key)
        self.insert(table, {**row, **new_key})

    def begin(self) -> None:
        """Starts a transaction (a BEGIN record on ``<prefix>.transaction``)."""
        self.tx_id += 1
        txid = (
            f"5bf0c9a4-1d2e-11f0-9a3b-0242ac120002:{self.tx_id}"
            if self.flavor == "mysql"
            else f"{self.tx_id}:{self.pos}"
        )
        self.tx = {"id": txid, "total": 0, "collections": {}}
        self._tx_record("BEGIN", None, None)

    def end(self) -> None:
        """Ends the transaction (an END record with its counts)."""
        assert self.tx is not None
        colls = [
            {"data_collection": k, "event_count": v} for k, v in self.tx["collections"].items()
        ]
        self._tx_record("END", self.tx["total"], colls)
        self.tx = None

    def _tx_record(self, status: str, count: int | None, colls: list[Any] | None) -> None:
        assert self.tx is not None
        payload = {
            "status": status,
            "id": self.tx["id"],
            "event_count": count,
            "data_collections": colls,
            "ts_ms": self.tick(),
        }
        key = {"id": self.tx["id"]}
        self.out.append(
            _Event(f"{self.prefix}.transaction", _TX_KEY, key, TRANSACTION_SCHEMA, payload)
        )

    def heartbeat(self) -> None:
        """A heartbeat record on ``__debezium-heartbeat.<prefix>``."""
        key = {"serverName": self.prefix}
        value = {"ts_ms": self.tick()}
        self.out.append(
            _Event(f"__debezium-heartbeat.{self.prefix}", _HB_KEY, key, HEARTBEAT_SCHEMA, value)
        )

    # -- DDL
    def add_column(self, table: str, col: _Col, fill: Any) -> None:
        t = self.tables[table]
        t.columns.append(col)
        for row in t.rows.values():
            row[col.name] = fill
        self._new_schema(t)

    def change_type(self, table: str, name: str, kind: str, convert: Callable[[Any], Any]) -> None:
        t = self.tables[table]
        t.columns = [_Col(c.name, kind, c.optional) if c.name == name else c for c in t.columns]
        for row in t.rows.values():
            row[name] = convert(row[name])
        self._new_schema(t)

    # -- the workload
    def run(self) -> None:
        self.snapshot()
        start = self.changes
        span = max(1, self.target - start)
        milestones: list[tuple[float, Callable[[], None]]] = [
            (0.25, lambda: self.add_column("customers", _opt("phone", "string"), None)),
            (0.35, self.first_promotion),
            (0.45, lambda: self.add_column("customers", _c("loyalty", "int32", default=0), 0)),
            (0.55, self.widen_on_hand),
        ]
        if self.refused_change:
            milestones.append((0.65, lambda: self.change_type("orders", "quantity", "string", str)))
        if self.flavor == "postgres":
            milestones.append((0.75, self.truncate_order_lines))
        since_heartbeat = 0
        while self.changes < self.target:
            while milestones and self.changes - start >= milestones[0][0] * span:
                milestones.pop(0)[1]()
            self.begin()
            self.operation()
            self.end()
            since_heartbeat += 1
            if since_heartbeat >= 60:
                self.heartbeat()
                since_heartbeat = 0
        for _, step in milestones:  # a short stream still shows every change
            step()

    def snapshot(self) -> None:
        for cid, first, last, email in _CUSTOMERS:
            row = {"id": cid, "first_name": first, "last_name": last, "email": email}
            self.change("customers", "r", row)
        for a in _ADDRESSES:
            names = ("id", "customer_id", "street", "city", "state", "zip", "type")
            self.change("addresses", "r", dict(zip(names, a, strict=True)))
        for o in _ORDERS:
            fields = ("order_number", "order_date", "purchaser", "quantity", "product_id")
            self.change("orders", "r", dict(zip(fields, o, strict=True)))
        for pid, name, desc, weight in _PRODUCTS:
            row = {"id": pid, "name": name, "description": desc, "weight": weight}
            self.change("products", "r", row)
        for pid, qty in _ON_HAND:
            self.change("products_on_hand", "r", {"product_id": pid, "quantity": qty})
        srid = 0 if self.flavor == "mysql" else None
        geoms = [
            _wkb_point(1, 1),
            _wkb_line([(2, 1), (6, 6)]),
            _wkb_polygon([(0, 5), (2, 5), (2, 7), (0, 7), (0, 5)]),
        ]
        for i, g in enumerate(geoms, start=1):
            self.change("geom", "r", {"id": i, "g": (g, srid), "h": None})
        for onum, _, _, qty, pid in _ORDERS:
            self.change("order_lines", "r", self._line(onum, 1, pid, qty))
        for cid, *_ in _CUSTOMERS:
            self.change("customer_events", "r", self._event_row(cid, "signup", None))

    def _line(self, onum: int, line_no: int, pid: int, qty: int) -> dict[str, Any]:
        cents = self.rng.randint(199, 250_000)
        return {
            "order_number": onum,
            "line_no": line_no,
            "product_id": pid,
            "quantity": qty,
            "unit_price": decimal.Decimal(cents).scaleb(-2),
            "created_at": self.clock,
            "updated_at": self.clock if self.rng.random() < 0.7 else None,
        }

    def _event_row(self, cid: int, kind: str, detail: str | None) -> dict[str, Any]:
        return {
            "event_id": self._new_id("customer_events"),
            "customer_id": cid,
            "kind": kind,
            "detail": detail,
            "occurred_at": self.clock,
        }

    def _pick(self, table: str) -> tuple[Any, ...] | None:
        rows = self.tables[table].rows
        if not rows:
            return None
        return list(rows)[self.rng.randrange(len(rows))]  # (in the order rows came)

    def _new_id(self, table: str) -> int:
        n = self.next_id[table]
        self.next_id[table] += 1
        return n

    def operation(self) -> None:
        """One transaction's changes, chosen at random."""
        ops: list[tuple[int, Callable[[], bool]]] = [
            (8, self.new_customer),
            (18, self.place_order),
            (8, self.update_customer),
            (5, self.update_address),
            (3, self.delete_address),
            (4, self.update_product),
            (2, self.new_product),
            (8, self.restock),
            (4, self.cancel_order),
            (5, self.update_order_line),
            (10, self.log_event),
            (3, self.purge_events),
            (2, self.update_event),
            (2, self.change_geom),
        ]
        if self.next_id["promotions"] > 1:
            ops.append((4, self.change_promotion))
        weights = [w for w, _ in ops]
        while not self.rng.choices([op for _, op in ops], weights)[0]():
            pass  # that change had nothing to change: choose again

    def new_customer(self) -> bool:
        cid = self._new_id("customers")
        first, last = self.rng.choice(_FIRST_NAMES), self.rng.choice(_LAST_NAMES)
        row: dict[str, Any] = {
            "id": cid,
            "first_name": first,
            "last_name": last,
            "email": f"{first}.{last}{cid}@example.com".lower(),
        }
        cols = {c.name for c in self.tables["customers"].columns}
        if "phone" in cols:
            row["phone"] = (
                f"+1-555-{self.rng.randint(0, 9999):04d}" if self.rng.random() < 0.6 else None
            )
        if "loyalty" in cols:
            row["loyalty"] = 0
        self.insert("customers", row)
        city, state, zip_ = self.rng.choice(_CITIES)
        self.insert(
            "addresses",
            {
                "id": self._new_id("addresses"),
                "customer_id": cid,
                "street": f"{self.rng.randint(1, 9999)} {self.rng.choice(_STREETS)}",
                "city": city,
                "state": state,
                "zip": zip_,
                "type": self.rng.choice(_ADDRESS_TYPES),
            },
        )
        self.insert("customer_events", self._event_row(cid, "signup", None))
        return True

    def place_order(self) -> bool:
        cust, prod = self._pick("customers"), self._pick("products_on_hand")
        if cust is None or prod is None:
            return False
        onum = self._new_id("orders")
        qty = self.rng.randint(1, 5)
        self.insert(
            "orders",
            {
                "order_number": onum,
                "order_date": self.clock.date(),
                "purchaser": cust[0],
                "quantity": qty,
                "product_id": prod[0],
            },
        )
        for line_no in range(1, self.rng.randint(1, 3) + 1):
            pid = prod[0] if line_no == 1 else (self._pick("products_on_hand") or prod)[0]
            self.insert(
                "order_lines",
                self._line(onum, line_no, pid, self.rng.randint(1, 4)),
                row_no=line_no - 1,
            )
        on_hand = self.tables["products_on_hand"].rows[prod]["quantity"]
        self.update("products_on_hand", prod, quantity=max(0, on_hand - qty))
        self.insert("customer_events", self._event_row(cust[0], "order", f"order {onum}"))
        return True

    def update_customer(self) -> bool:
        key = self._pick("customers")
        if key is None:
            return False
        t = self.tables["customers"]
        row = t.rows[key]
        sets: dict[str, Any] = {}
        names = {c.name for c in t.columns}
        r = self.rng.random()
        if "loyalty" in names and r < 0.4:
            sets["loyalty"] = row["loyalty"] + self.rng.randint(1, 50)
        elif "phone" in names and r < 0.7:
            sets["phone"] = f"+1-555-{self.rng.randint(0, 9999):04d}"
        else:
            sets["email"] = f"{row['first_name']}.{self.rng.randint(1, 999)}@mail.example".lower()
        self.update("customers", key, **sets)
        return True

    def update_address(self) -> bool:
        key = self._pick("addresses")
        if key is None:
            return False
        city, state, zip_ = self.rng.choice(_CITIES)
        street = f"{self.rng.randint(1, 9999)} {self.rng.choice(_STREETS)}"
        self.update("addresses", key, street=street, city=city, state=state, zip=zip_)
        return True

    def delete_address(self) -> bool:
        if len(self.tables["addresses"].rows) < 6:
            return False
        key = self._pick("addresses")
        assert key is not None
        self.delete("addresses", key)
        return True

    def update_product(self) -> bool:
        key = self._pick("products")
        if key is None:
            return False
        if self.rng.random() < 0.5:
            self.update("products", key, weight=round(self.rng.uniform(0.1, 30.0), 3))
        else:
            self.update(
                "products", key, description=self.rng.choice(("refurbished", None, "new model"))
            )
        return True

    def new_product(self) -> bool:
        pid = self._new_id("products")
        name = self.rng.choice(("widget", "gadget", "lantern", "kettle", "drone"))
        weight = round(self.rng.uniform(0.1, 30.0), 3) if self.rng.random() < 0.8 else None
        self.insert(
            "products", {"id": pid, "name": name, "description": f"{name} #{pid}", "weight": weight}
        )
        self.insert("products_on_hand", {"product_id": pid, "quantity": self.rng.randint(0, 100)})
        return True

    def restock(self) -> bool:
        key = self._pick("products_on_hand")
        if key is None:
            return False
        qty = self.tables["products_on_hand"].rows[key]["quantity"]
        self.update("products_on_hand", key, quantity=qty + self.rng.randint(1, 50))
        return True

    def cancel_order(self) -> bool:
        orders = self.tables["orders"].rows
        if len(orders) < 5:
            return False
        key = self._pick("orders")
        assert key is not None
        lines = self.tables["order_lines"].rows
        for lk in sorted(k for k in lines if k[0] == key[0]):
            self.delete("order_lines", lk)
        purchaser = orders[key]["purchaser"]
        self.delete("orders", key)
        self.insert("customer_events", self._event_row(purchaser, "cancel", f"order {key[0]}"))
        return True

    def update_order_line(self) -> bool:
        key = self._pick("order_lines")
        if key is None:
            return False
        row = self.tables["order_lines"].rows[key]
        price = (row["unit_price"] * decimal.Decimal("0.9")).quantize(decimal.Decimal("0.01"))
        self.update(
            "order_lines",
            key,
            quantity=row["quantity"] + 1,
            unit_price=price,
            updated_at=self.clock,
        )
        return True

    def log_event(self) -> bool:
        key = self._pick("customers")
        if key is None:
            return False
        kind = self.rng.choice(("login", "logout", "view", "search"))
        detail = self.rng.choice((None, "web", "mobile"))
        self.insert("customer_events", self._event_row(key[0], kind, detail))
        return True

    def purge_events(self) -> bool:
        rows = self.tables["customer_events"].rows
        if len(rows) < 20:
            return False
        for key in sorted(rows)[: self.rng.randint(1, 3)]:
            self.delete("customer_events", key)
        return True

    def update_event(self) -> bool:
        key = self._pick("customer_events")
        if key is None:
            return False
        self.update("customer_events", key, detail=f"reviewed {self.rng.randint(1, 99)}")
        return True

    def change_geom(self) -> bool:
        srid = 0 if self.flavor == "mysql" else None
        point = (_wkb_point(self.rng.uniform(-90, 90), self.rng.uniform(-90, 90)), srid)
        r = self.rng.random()
        key = self._pick("geom")
        if r < 0.5 or key is None:
            self.insert("geom", {"id": self._new_id("geom"), "g": point, "h": None})
        elif r < 0.8:
            self.update("geom", key, h=point)
        else:
            self.delete("geom", key)
        return True

    def change_promotion(self) -> bool:
        key = self._pick("promotions")
        r = self.rng.random()
        if r < 0.5 or key is None:
            self.insert("promotions", self._promotion())
        elif r < 0.75:
            disc = decimal.Decimal(self.rng.randint(100, 9000)).scaleb(-2)
            self.update("promotions", key, discount=disc)
        elif r < 0.85:
            self.rekey("promotions", key, id=self._new_id("promotions"))
        else:
            self.delete("promotions", key)
        return True

    def _promotion(self) -> dict[str, Any]:
        pid = self._new_id("promotions")
        until = self.clock + dt.timedelta(days=self.rng.randint(1, 60))
        return {
            "id": pid,
            "code": f"SPRING{pid:03d}",
            "discount": decimal.Decimal(self.rng.randint(100, 5000)).scaleb(-2),
            "valid_until": until if self.rng.random() < 0.8 else None,
        }

    # -- milestones
    def first_promotion(self) -> None:
        self.begin()
        self.insert("promotions", self._promotion())
        self.end()

    def widen_on_hand(self) -> None:
        """``quantity`` INT -> BIGINT, then a restock beyond the int32 range."""
        self.change_type("products_on_hand", "quantity", "int64", int)
        key = self._pick("products_on_hand")
        assert key is not None
        self.begin()
        self.update("products_on_hand", key, quantity=_INT32_MAX + 1 + self.rng.randint(1, 10**9))
        self.end()

    def truncate_order_lines(self) -> None:
        self.begin()
        self.change("order_lines", "t", None)
        self.end()


_COMMON_SOURCE = [  # (field, type, optional, default false): every connector's first
    ("version", "string", False, False),
    ("connector", "string", False, False),
    ("name", "string", False, False),
    ("ts_ms", "int64", False, False),
    ("ts_us", "int64", False, False),
    ("ts_ns", "int64", False, False),
    ("snapshot", "boolean", True, True),
    ("db", "string", False, False),
]
_MYSQL_SOURCE = [  # then the documented order of each connector's own
    *_COMMON_SOURCE,
    ("table", "string", True, False),
    ("server_id", "int64", False, False),
    ("gtid", "string", True, False),
    ("file", "string", False, False),
    ("pos", "int64", False, False),
    ("row", "int32", False, False),
    ("thread", "int64", True, False),
    ("query", "string", True, False),
]
_PG_SOURCE = [
    *_COMMON_SOURCE,
    ("sequence", "string", True, False),
    ("schema", "string", False, False),
    ("table", "string", False, False),
    ("txId", "int64", True, False),
    ("lsn", "int64", True, False),
    ("xmin", "int64", True, False),
]
_TRANSACTION_BLOCK: dict[str, Any] = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": False, "field": "total_order"},
        {"type": "int64", "optional": False, "field": "data_collection_order"},
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


def _common_struct(name: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    """A Connect struct schema of Debezium's ``io.debezium.connector.common`` (required,
    version 1)."""
    return {
        "type": "struct",
        "fields": fields,
        "optional": False,
        "name": f"io.debezium.connector.common.{name}",
        "version": 1,
    }


def _field(type_: str, name: str, *, optional: bool = False) -> dict[str, Any]:
    return {"type": type_, "optional": optional, "field": name}


_HB_KEY = _common_struct("ServerNameKey", [_field("string", "serverName")])
HEARTBEAT_SCHEMA = _common_struct("Heartbeat", [_field("int64", "ts_ms")])
"""Debezium's heartbeat value schema (``SchemaFactory.heartbeatValueSchema``)."""
_TX_KEY = _common_struct("TransactionMetadataKey", [_field("string", "id")])
TRANSACTION_SCHEMA = _common_struct(
    "TransactionMetadataValue",
    [
        _field("string", "status"),
        _field("string", "id"),
        _field("int64", "event_count", optional=True),
        {
            "type": "array",
            "items": {
                "type": "struct",
                "fields": [_field("string", "data_collection"), _field("int64", "event_count")],
                "optional": True,
                "name": "event.collection",
                "version": 1,
            },
            "optional": True,
            "field": "data_collections",
        },
        _field("int64", "ts_ms"),
    ],
)
"""Debezium's transaction metadata value schema (``SchemaFactory.transactionValueSchema``)."""


# --------------------------------------------------------------------------- encoding
class _JsonWriter:
    """Kafka Connect's JsonConverter with ``schemas.enable=true`` (each schema's text
    written once, as the converter caches it)."""

    def __init__(self) -> None:
        self._texts: dict[int, tuple[bytes, dict[str, Any]]] = {}

    def _write(self, schema: dict[str, Any], payload: Any) -> bytes:
        found = self._texts.get(id(schema))
        if found is None:  # (holds the schema: its id stays its own)
            found = self._texts[id(schema)] = (_json(schema), schema)
        return b'{"schema":' + found[0] + b',"payload":' + _json(payload) + b"}"

    def key(self, topic: str, schema: dict[str, Any], payload: Any) -> bytes:
        return self._write(schema, payload)

    def value(self, topic: str, schema: dict[str, Any], payload: Any) -> bytes:
        return self._write(schema, payload)


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


class _AvroWriter:
    """Confluent's Avro converter: each schema registered once, then Confluent's wire
    format (magic byte 0, the 4-byte id, the fastavro datum)."""

    def __init__(self, registry: SchemaRegistrar, refused: Callable[[dict[str, Any]], bool]):
        from cdc_sink.utils.extras import require

        require("fastavro", feature="Avro inventory streams")
        import fastavro

        self._fastavro = fastavro
        self.registry = registry
        self.refused = refused
        self._by_object: dict[tuple[str, int], tuple[int, Any, dict[str, Any]]] = {}
        self._by_text: dict[tuple[str, str], tuple[int, Any]] = {}

    def _schema(self, subject: str, connect: dict[str, Any]) -> tuple[int, Any]:
        """The id and parsed Avro schema of ``connect`` under ``subject`` (registered once
        per distinct schema, as Kafka Connect's converter caches it)."""
        found = self._by_object.get((subject, id(connect)))
        if found is None:
            avro = avro_schema(connect)
            text = json.dumps(avro, sort_keys=True)
            known = self._by_text.get((subject, text))
            if known is None:
                sid = self.registry.register(subject, avro)
                known = self._by_text[(subject, text)] = (sid, self._fastavro.parse_schema(avro))
            found = (*known, connect)  # holds connect: its id stays its own
            self._by_object[(subject, id(connect))] = found
        return found[0], found[1]

    def _write(self, subject: str, connect: dict[str, Any], payload: Any) -> bytes:
        sid, parsed = self._schema(subject, connect)
        buf = io.BytesIO()
        self._fastavro.schemaless_writer(buf, parsed, avro_datum(connect, payload))
        return b"\x00" + sid.to_bytes(4, "big") + buf.getvalue()

    def key(self, topic: str, schema: dict[str, Any], payload: Any) -> bytes:
        return self._write(f"{topic}-key", schema, payload)

    def value(self, topic: str, schema: dict[str, Any], payload: Any) -> bytes:
        suffix = "-refused" if self.refused(schema) else ""
        return self._write(f"{topic}-value{suffix}", schema, payload)


# ----------------------------------------------------------------------------- stream
@dataclass
class InventoryStream:
    """A Debezium stream of the inventory database and its reference model.

    Made by :func:`inventory_stream` (see the module docstring for what it holds).

    Attributes:
        flavor: ``mysql`` or ``postgres``: the connector whose messages these are.
        encoding: ``json`` (JsonConverter, schemas enabled) or ``avro`` (Confluent wire
            format, schema ids from the registry given).
        seed: The seed everything follows from.
        topic_prefix: Debezium's ``topic.prefix``.
        tables: Qualified table name -> its topic, for every table of the stream.
        no_key_table: The qualified name of the table without a primary key.
        no_key_columns: The columns a user names as that table's key.
        refused_table: With ``refused_change``: the table whose type change the sink
            refuses (else None).
        refused_from: The index of that table's first message with the changed schema.
    """

    flavor: Flavor
    encoding: Encoding
    seed: int
    topic_prefix: str = "dbserver1"
    tables: dict[str, str] = field(default_factory=dict)
    no_key_table: str = ""
    no_key_columns: tuple[str, ...] = _NO_KEY_COLUMNS
    refused_table: str | None = None
    refused_from: int | None = None
    _events: list[_Event] = field(default_factory=list, repr=False)
    _messages: list[Message] = field(default_factory=list, repr=False)
    _keys: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)

    def messages(self) -> list[Message]:
        """Every message, in produce order (a topic's messages in their table's order)."""
        return list(self._messages)

    def topics(self) -> list[str]:
        """Every topic the stream writes: the tables', then the transaction and heartbeat
        topics (create them before producing; one partition each keeps Debezium's order)."""
        prefix = self.topic_prefix
        return [*self.tables.values(), f"{prefix}.transaction", f"__debezium-heartbeat.{prefix}"]

    def produce(self, producer: RecordProducer, *, partition: int | None = 0) -> int:
        """Produces every message in order and waits for their delivery.

        Args:
            producer: The producer.
            partition: The partition of every record (a keyless record would otherwise go
                to any partition, out of its table's order); None: the key decides.

        Returns:
            The number of records produced.
        """
        for m in self._messages:
            producer.produce(m.topic, m.key, m.value, partition=partition)
        producer.flush()
        return len(self._messages)

    def qualified(self, table: str) -> str:
        """The qualified name of a source table (``customers`` -> ``inventory.customers``
        for MySQL, ``postgres.inventory.customers`` for PostgreSQL).

        Raises:
            KeyError: ``table`` is not one of :data:`DATABASE_TABLES`.
        """
        if table not in DATABASE_TABLES:
            raise KeyError(f"no table {table!r} in the inventory database")
        return _qualified(self.flavor, table)

    def key_columns(self, table: str) -> tuple[str, ...]:
        """The key columns of a table (qualified name): its primary key, or for the
        table without one :attr:`no_key_columns`."""
        return self._keys[table]

    def events_by_table(self) -> dict[str, int]:
        """Change events (``c``/``r``/``u``/``d``/``t``; not tombstones) per table."""
        out = dict.fromkeys(self.tables, 0)
        for e in self._events:
            if e.table is not None and e.op is not None:
                out[e.table] += 1
        return out

    def reference(self) -> dict[str, pa.Table]:
        """What every table must hold at the end (see :meth:`reference_at`)."""
        return self.reference_at(len(self._events))

    def reference_at(self, n: int) -> dict[str, pa.Table]:
        """What every table must hold after the first ``n`` messages: qualified name ->
        its rows sorted by key, with the columns and types of the table's latest schema
        among those messages (rows from before a column was added hold its default).
        Tables without a message yet are left out; the refused table stops before
        :attr:`refused_from`.

        Raises:
            ValueError: ``n`` is not in ``0..len(messages())``.
        """
        if not 0 <= n <= len(self._events):
            raise ValueError(f"n must be in 0..{len(self._events)}, got {n}")
        rows: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
        columns: dict[str, tuple[_Col, ...]] = {}
        stop = len(self._events) if self.refused_from is None else self.refused_from
        for i, e in enumerate(self._events[:n]):
            if e.table is None or e.op is None:
                continue
            if e.table == self.refused_table and i >= stop:
                continue
            live = rows.setdefault(e.table, {})
            columns[e.table] = e.columns
            if e.op == "t":
                live.clear()
                continue
            assert e.row is not None
            key = tuple(e.row[k] for k in self._keys[e.table])
            if e.op == "d":
                live.pop(key, None)
            else:
                live[key] = e.row
        return {name: _to_arrow(rows[name], columns[name]) for name in rows}


def _to_arrow(rows: Mapping[tuple[Any, ...], Mapping[str, Any]], cols: Sequence[_Col]) -> pa.Table:
    """A table's rows (sorted by key) as Arrow; a column a row lacks holds its default."""
    ordered = [rows[k] for k in sorted(rows)]
    arrays = [
        pa.array([c.reference(r.get(c.name, c.default)) for r in ordered], c.arrow()) for c in cols
    ]
    schema = pa.schema([pa.field(c.name, c.arrow(), nullable=c.optional) for c in cols])
    return pa.Table.from_arrays(arrays, schema=schema)


def inventory_stream(
    flavor: Flavor,
    encoding: Encoding,
    *,
    seed: int = 7,
    events: int = 2000,
    registry: SchemaRegistrar | None = None,
    topic_prefix: str = "dbserver1",
    refused_change: bool = False,
) -> InventoryStream:
    """The Debezium stream of the inventory database (see the module docstring).

    Args:
        flavor: ``mysql`` or ``postgres``.
        encoding: ``json`` or ``avro`` (needs ``registry`` and fastavro).
        seed: Everything follows from it.
        events: Change events to write, snapshot reads included (the stream ends at the
            first transaction boundary at or after it, so it may hold a few more).
        registry: The schema registry client (Avro: each schema version is registered).
        topic_prefix: Debezium's ``topic.prefix``.
        refused_change: Change ``orders.quantity`` from ``INT`` to ``VARCHAR`` mid-stream.

    Raises:
        ValueError: An unknown flavor or encoding, Avro without a registry, or fewer
            than 200 events (the stream's schema changes need room).
    """
    if flavor not in ("mysql", "postgres"):
        raise ValueError(f"flavor must be 'mysql' or 'postgres', got {flavor!r}")
    if encoding not in ("json", "avro"):
        raise ValueError(f"encoding must be 'json' or 'avro', got {encoding!r}")
    if encoding == "avro" and registry is None:
        raise ValueError("an Avro inventory stream needs a schema registry client")
    if events < 200:
        raise ValueError(f"events must be >= 200, got {events}")
    gen = _Generator(flavor, seed, events, topic_prefix, refused_change)
    gen.run()
    writer: _JsonWriter | _AvroWriter
    if encoding == "json":
        writer = _JsonWriter()
    else:
        assert registry is not None
        refused = gen.tables[_REFUSED_TABLE]

        def is_refused(schema: dict[str, Any]) -> bool:
            return refused_change and schema is refused.value_schema

        writer = _AvroWriter(registry, is_refused)
    messages = [
        Message(
            e.topic,
            None
            if e.key is None or e.key_schema is None
            else writer.key(e.topic, e.key_schema, e.key),
            None
            if e.payload is None or e.value_schema is None
            else writer.value(e.topic, e.value_schema, e.payload),
        )
        for e in gen.out
    ]
    tables = {gen.qualified(t): gen.topic(t) for t in DATABASE_TABLES}
    keys = {gen.qualified(t): _KEYS[t] or _NO_KEY_COLUMNS for t in DATABASE_TABLES}
    return InventoryStream(
        flavor=flavor,
        encoding=encoding,
        seed=seed,
        topic_prefix=topic_prefix,
        tables=tables,
        no_key_table=gen.qualified(_NO_KEY_TABLE),
        refused_table=gen.qualified(_REFUSED_TABLE) if refused_change else None,
        refused_from=gen.refused_from,
        _events=gen.out,
        _messages=messages,
        _keys=keys,
    )
