"""The queries the Spark read benchmarks run (``spark_read.py`` and ``delta_read.py``'s
worker, which runs in another virtualenv: this module imports nothing)."""

from __future__ import annotations

#: columns of the benchmark table: ``id`` and ``c1`` .. ``c19``
N_COLUMNS = 20


def queries(rows: int) -> dict[str, str]:
    """Query name -> SQL over the view ``t`` of a ``rows``-row benchmark table: a full
    scan, a narrow aggregate, a 1% key range and a count."""
    everything = ", ".join(["sum(id)"] + [f"sum(c{i})" for i in range(1, N_COLUMNS)])
    return {
        "full scan (sum of 20 columns)": f"SELECT {everything} FROM t",
        "sum(c1)": "SELECT sum(c1) FROM t",
        "1% of keys: sum(c1) WHERE id < rows/100": (
            f"SELECT sum(c1) FROM t WHERE id < {rows // 100}"
        ),
        "count(*)": "SELECT count(*) FROM t",
    }
