"""The in-memory column tablet of one bucket (docs/architecture.md §5; the Doris MemTablet
design).

``MemTablet`` is the public face; ``keyindex``, ``keystore``, ``column``, ``fold``,
``apply`` and ``reads`` are its parts: the hash index, the key columns, base pages +
deltas, per-key folding of a batch's events, the phases of applying a batch, and scans
and point lookups of a version.
"""

from cdc_sink.tablet.apply import ApplyResult
from cdc_sink.tablet.memtablet import MemTablet, TabletOptions

__all__ = ["ApplyResult", "MemTablet", "TabletOptions"]
