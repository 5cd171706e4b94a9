"""A realistic, deterministic e-commerce orders CDC stream (the demo's data).

An order is placed (``insert``), paid and shipped (partial ``update`` of ``status`` or
``payment_status`` with ``updated_at``), sometimes amended (``upsert`` of ``amount`` and
``items``), delivered or refunded; some are cancelled (``delete``) while new or paid.
A few orders arrive from a legacy system as an ``upsert`` of a key not seen before
(unset columns take their defaults: ``status`` becomes ``"new"``). Upstream retries
re-send a few old events (an older ``seq``: the sink must drop them as *stale*, also
after a delete). About one record in a hundred is malformed:

============== ================================================================
kind           what is sent
============== ================================================================
bad_json       bytes that do not decode (a truncated JSON / garbage rowv2 record)
unknown_column an update that sets ``coupon_code`` (no such column)
wrong_type     an update that sets ``items`` to ``"three"``
missing_key    an update of an order that was never placed (not in Debezium
               style: a Debezium ``u`` is an upsert)
============== ================================================================

Everything follows from the seed. Events are native event dicts with JSON-friendly
values (decimals and timestamps as strings), ``seq`` a per-stream counter. With
``style="full_rows"`` (Debezium), every change is an ``upsert`` of the full row image.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from cdc_sink.schema import TableSchema

__all__ = [
    "MALFORMED_KINDS",
    "ORDERS_SCHEMA",
    "OrderRecord",
    "generate_orders",
    "orders_schema",
]

ORDERS_SCHEMA: dict[str, Any] = {
    "columns": [
        {"name": "order_id", "type": "int64", "nullable": False},
        {"name": "customer_id", "type": "int64"},
        {"name": "status", "type": "string", "default": "new"},
        {"name": "amount", "type": "decimal128(12, 2)"},
        {"name": "currency", "type": "string"},
        {"name": "payment_status", "type": "string"},
        {"name": "items", "type": "int32"},
        {"name": "created_at", "type": "timestamp[us, UTC]"},
        {"name": "updated_at", "type": "timestamp[us, UTC]"},
        {"name": "seq", "type": "int64"},
    ],
    "primary_key": ["order_id"],
    "num_buckets": 4,
    "sequence_column": "seq",
}
"""The orders table (the same as ``streaming_jobs/orders_schema.json``)."""

Kind = Literal["valid", "stale", "bad_json", "unknown_column", "wrong_type", "missing_key"]
MALFORMED_KINDS: frozenset[str] = frozenset(
    {"bad_json", "unknown_column", "wrong_type", "missing_key"}
)
"""Kinds of record the sink must dead-letter."""

_CURRENCIES = ("USD", "USD", "USD", "EUR", "EUR", "GBP", "JPY")
_NEXT_STATUS = {"new": "paid", "paid": "shipped", "shipped": "delivered"}
_FIRST_ORDER_ID = 100_001
_MISSING_ORDER_ID = 900_000_001  # never placed: updates of these are rejected
_EPOCH = dt.datetime(2025, 3, 1, 9, 0, tzinfo=dt.timezone.utc)


@lru_cache(maxsize=1)
def orders_schema() -> TableSchema:
    """The orders :class:`TableSchema`."""
    return TableSchema.from_dict(ORDERS_SCHEMA)


@dataclass(frozen=True)
class OrderRecord:
    """One record of the stream.

    Attributes:
        index: Position in the stream.
        event: The native event (for ``bad_json``: the event whose encoding is broken).
        kind: ``valid``, ``stale`` (an old event re-sent) or a malformed kind.
    """

    index: int
    event: dict[str, Any]
    kind: Kind = "valid"

    @property
    def malformed(self) -> bool:
        """Whether the sink must reject this record."""
        return self.kind in MALFORMED_KINDS

    @property
    def decodable(self) -> bool:
        """Whether the record decodes into an event (a ``bad_json`` record does not)."""
        return self.kind != "bad_json"


def _ts(t: dt.datetime) -> str:
    return t.isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass
class _State:
    rng: random.Random
    style: str
    seq: int = 0
    clock: dt.datetime = _EPOCH
    next_id: int = _FIRST_ORDER_ID
    live: dict[int, dict[str, Any]] = field(default_factory=dict)
    live_ids: list[int] = field(default_factory=list)  # for O(1) random choice
    first_events: dict[int, dict[str, Any]] = field(default_factory=dict)
    replayable: list[int] = field(default_factory=list)
    missing_next: int = _MISSING_ORDER_ID

    def tick(self) -> tuple[int, str]:
        self.seq += 1
        self.clock += dt.timedelta(
            milliseconds=self.rng.randint(5, 900), microseconds=self.rng.randint(0, 999)
        )
        return self.seq, _ts(self.clock)

    def add(self, oid: int, row: dict[str, Any]) -> None:
        self.live[oid] = row
        self.live_ids.append(oid)

    def remove(self, oid: int) -> None:
        del self.live[oid]
        i = self.live_ids.index(oid)
        self.live_ids[i] = self.live_ids[-1]
        self.live_ids.pop()

    def pick(self, pred: Any = None, tries: int = 8) -> int | None:
        for _ in range(tries):
            if not self.live_ids:
                return None
            oid = self.live_ids[self.rng.randrange(len(self.live_ids))]
            if pred is None or pred(self.live[oid]):
                return oid
        return None

    def emit(self, op: str, oid: int, sets: dict[str, Any] | None, seq: int) -> dict[str, Any]:
        """The event of a change (a full-row upsert in ``full_rows`` style)."""
        if self.style == "full_rows" and op != "delete":
            row = self.live[oid]
            full = {k: v for k, v in row.items() if k != "order_id"}
            full["seq"] = seq
            return {"op": "upsert", "key": {"order_id": oid}, "set": full, "seq": seq}
        e: dict[str, Any] = {"op": op, "key": {"order_id": oid}, "seq": seq}
        if sets is not None:
            e["set"] = sets
        return e


def _amount(rng: random.Random) -> str:
    cents = int(rng.lognormvariate(8.3, 0.9))  # median about 40.00, long tail
    return str(decimal.Decimal(max(cents, 99)).scaleb(-2))


def _place(st: _State) -> dict[str, Any]:
    oid = st.next_id
    st.next_id += 1
    seq, now = st.tick()
    rng = st.rng
    sets: dict[str, Any] = {
        "customer_id": rng.randint(1, 2_000),
        "amount": _amount(rng),
        "currency": rng.choice(_CURRENCIES),
        "payment_status": "pending",
        "items": rng.randint(1, 8),
        "created_at": now,
        "updated_at": now,
    }
    if rng.random() < 0.5:
        sets["status"] = "new"  # else the column default ("new") applies
    row = {"order_id": oid, "status": "new", **sets, "seq": seq}
    st.add(oid, row)
    event = st.emit("insert", oid, sets, seq)
    st.first_events[oid] = event
    st.replayable.append(oid)
    return event


def _legacy_import(st: _State) -> dict[str, Any]:
    """An upsert of a new key that sets only some columns (the others: defaults)."""
    oid = st.next_id
    st.next_id += 1
    seq, now = st.tick()
    sets = {
        "customer_id": st.rng.randint(1, 2_000),
        "amount": _amount(st.rng),
        "currency": "USD",
        "updated_at": now,
    }
    row = {
        "order_id": oid,
        "status": "new",
        "payment_status": None,
        "items": None,
        "created_at": None,
        **sets,
        "seq": seq,
    }
    st.add(oid, row)
    return st.emit("upsert", oid, sets, seq)


def _advance_status(st: _State, oid: int) -> dict[str, Any]:
    row = st.live[oid]
    seq, now = st.tick()
    sets: dict[str, Any] = {"status": _NEXT_STATUS[row["status"]], "updated_at": now}
    if sets["status"] == "paid" and row["payment_status"] in ("pending", "authorized", None):
        sets["payment_status"] = "captured"
    row.update(sets, seq=seq)
    return st.emit("update", oid, sets, seq)


def _payment(st: _State, oid: int) -> dict[str, Any]:
    row = st.live[oid]
    seq, now = st.tick()
    nxt = {"pending": "authorized", "authorized": "captured", None: "authorized"}
    if row["status"] == "delivered" and row["payment_status"] == "captured":
        sets: dict[str, Any] = {"payment_status": "refunded", "status": "returned"}
    else:
        sets = {"payment_status": nxt.get(row["payment_status"], "captured")}
    sets["updated_at"] = now
    row.update(sets, seq=seq)
    return st.emit("update", oid, sets, seq)


def _amend(st: _State, oid: int) -> dict[str, Any]:
    row = st.live[oid]
    seq, now = st.tick()
    sets = {"items": int(row["items"] or 1) + 1, "amount": _amount(st.rng), "updated_at": now}
    row.update(sets, seq=seq)
    return st.emit("upsert", oid, sets, seq)


def _cancel(st: _State, oid: int) -> dict[str, Any]:
    seq, _ = st.tick()
    event = st.emit("delete", oid, None, seq)
    st.remove(oid)
    return event


def _malformed(st: _State, kind: str) -> dict[str, Any]:
    seq, now = st.tick()
    oid = st.pick() or _FIRST_ORDER_ID
    if kind == "unknown_column":
        return _malformed_update(st, oid, {"coupon_code": "SPRING25", "updated_at": now}, seq)
    if kind == "wrong_type":
        return _malformed_update(st, oid, {"items": "three", "updated_at": now}, seq)
    if kind == "missing_key":
        st.missing_next += 1
        return {
            "op": "update",
            "key": {"order_id": st.missing_next},
            "seq": seq,
            "set": {"status": "shipped", "updated_at": now},
        }
    # bad_json: a plausible event whose bytes get truncated on the wire
    return _malformed_update(st, oid, {"status": "paid", "updated_at": now}, seq)


def _malformed_update(st: _State, oid: int, sets: dict[str, Any], seq: int) -> dict[str, Any]:
    """A malformed change of a live order: the columns ``sets`` (in ``full_rows`` style,
    the order's whole row with them, as a Debezium connector sends). The order's state
    is unchanged: the sink rejects the change."""
    if st.style == "full_rows" and oid in st.live:
        full = {k: v for k, v in st.live[oid].items() if k != "order_id"}
        full.update(sets, seq=seq)
        return {"op": "upsert", "key": {"order_id": oid}, "set": full, "seq": seq}
    return {"op": "update", "key": {"order_id": oid}, "seq": seq, "set": sets}


def generate_orders(
    n: int,
    *,
    seed: int = 7,
    malformed_rate: float = 0.01,
    stale_rate: float = 0.005,
    style: Literal["partial", "full_rows"] = "partial",
) -> list[OrderRecord]:
    """The first ``n`` records of the orders stream of ``seed``.

    Args:
        n: Number of records.
        seed: Everything follows from it (same seed and options, same records).
        malformed_rate: Share of malformed records (kinds cycle through
            :data:`MALFORMED_KINDS`; at least one of each when ``n`` >= 200).
        stale_rate: Share of re-sent old events (dropped as stale by the sink).
        style: ``"partial"`` (partial updates) or ``"full_rows"`` (every change is an
            upsert of the full row image, as a Debezium connector sends).

    Returns:
        The records, in produce order.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    rng = random.Random(seed)
    st = _State(rng=rng, style=style)
    kinds = ["bad_json", "unknown_column", "wrong_type", "missing_key"]
    if style == "full_rows":
        kinds.remove("missing_key")
    out: list[OrderRecord] = []
    # Malformed records at fixed, seeded positions: at least one of each kind.
    n_bad = max(len(kinds) if n >= 200 else 0, round(n * malformed_rate))
    bad_at = dict(
        zip(
            sorted(rng.sample(range(n // 10, n), min(n_bad, max(0, n - n // 10)))),
            (kinds[i % len(kinds)] for i in range(n_bad)),
            strict=False,
        )
    )
    for i in range(n):
        kind = bad_at.get(i)
        if kind is not None:
            out.append(OrderRecord(i, _malformed(st, kind), kind))  # type: ignore[arg-type]
            continue
        r = rng.random()
        if r < stale_rate and st.replayable and i > 50:
            old = st.replayable[rng.randrange(len(st.replayable))]
            first = st.first_events[old]
            row = st.live.get(old)
            if row is None or row["seq"] > first["seq"]:  # changed or deleted since
                out.append(OrderRecord(i, json.loads(json.dumps(first)), "stale"))
                continue
        if len(st.live) < 20 or r < 0.30:
            event = _place(st)
        elif r < 0.32:
            event = _legacy_import(st)
        else:
            event = _change(st, rng.random())
        out.append(OrderRecord(i, event))
    return out


def _change(st: _State, r: float) -> dict[str, Any]:
    if r < 0.45:
        oid = st.pick(lambda row: row["status"] in _NEXT_STATUS)
        if oid is not None:
            return _advance_status(st, oid)
    elif r < 0.70:
        oid = st.pick(lambda row: row["payment_status"] != "refunded")
        if oid is not None:
            return _payment(st, oid)
    elif r < 0.92:
        oid = st.pick(lambda row: row["status"] in ("new", "paid"))
        if oid is not None:
            return _amend(st, oid)
    else:
        oid = st.pick(lambda row: row["status"] in ("new", "paid"))
        if oid is not None:
            return _cancel(st, oid)
    return _place(st)
