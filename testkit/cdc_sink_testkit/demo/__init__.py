"""The demo: a realistic orders CDC stream, its expected table state, and the runner.

    from cdc_sink_testkit.demo import generate_orders, orders_schema, ExpectedTable
    records = generate_orders(10_000, seed=7)     # deterministic from the seed
    expected = ExpectedTable(orders_schema())
    expected.apply_all(r.event if r.decodable else None for r in records)

:func:`cdc_sink_testkit.demo.runner.run_demo` (``cdc-sink demo``) runs it end to end through a
local Kafka broker and Spark; importing this package imports neither.
"""

from cdc_sink_testkit.demo.expected import ExpectedTable, diff_rows, normalize_row
from cdc_sink_testkit.demo.orders import (
    MALFORMED_KINDS,
    ORDERS_SCHEMA,
    OrderRecord,
    generate_orders,
    orders_schema,
)

__all__ = [
    "MALFORMED_KINDS",
    "ORDERS_SCHEMA",
    "ExpectedTable",
    "OrderRecord",
    "diff_rows",
    "generate_orders",
    "normalize_row",
    "orders_schema",
]
