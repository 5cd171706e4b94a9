"""The in-memory column tablet of one bucket (docs/architecture.md §5; the Doris MemTablet
design).

``MemTablet`` is the public face; ``keyindex``, ``keystore``, ``column`` and ``fold``
are its parts: the hash index, the key columns, base pages + deltas, and per-key folding
of a batch's events.
"""

from cdc_sink.tablet.memtablet import ApplyResult, MemTablet, TabletOptions

__all__ = ["ApplyResult", "MemTablet", "TabletOptions"]
