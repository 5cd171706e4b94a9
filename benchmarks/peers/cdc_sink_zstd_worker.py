"""Peer benchmark worker: cdc_sink with zstd snapshot pages
(``TableOptions(page_compression="zstd")``; the default is lz4), for the disk comparison.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cdc_sink_worker import CdcSink
from workload import run_worker

from cdc_sink.table import TableOptions


class CdcSinkZstd(CdcSink):
    """One cdc_sink table whose snapshot pages are zstd-compressed."""

    options = TableOptions(page_compression="zstd")


if __name__ == "__main__":
    run_worker(CdcSinkZstd)
