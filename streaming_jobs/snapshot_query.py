"""Example snapshot queries: read one version of a cdc_sink table with Spark.

::

    spark-submit --master 'local[2]' streaming_jobs/snapshot_query.py \\
      --table-path /data/orders --version 42 --group-by status --sum amount

    # newest version committed at or before a time; any SQL over the snapshot (view "t")
    spark-submit streaming_jobs/snapshot_query.py --table-path /data/orders \\
      --timestamp 2025-03-01T12:00:00Z \\
      --sql "SELECT currency, count(*) AS n, sum(amount) AS total FROM t GROUP BY currency"

The read is repeatable: every action on the DataFrame reads the version fixed when it
was created (``versionAsOf``/``timestampAsOf``, default the latest), also while the
streaming job keeps committing. No Kafka jars are needed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    """The script's arguments."""
    p = argparse.ArgumentParser(
        prog="snapshot_query", description="Query one version of a cdc_sink table."
    )
    p.add_argument("--table-path", required=True, help="the cdc_sink table directory")
    at = p.add_mutually_exclusive_group()
    at.add_argument("--version", type=int, default=None, help="version (default latest)")
    at.add_argument(
        "--timestamp",
        default=None,
        help="newest version committed at or before this time (ISO 8601 or epoch milliseconds)",
    )
    p.add_argument("--columns", default=None, help="comma-separated columns to read")
    p.add_argument("--where", default=None, help="SQL filter, e.g. \"status = 'paid'\"")
    p.add_argument("--group-by", default=None, help="column to aggregate by")
    p.add_argument(
        "--sum",
        action="append",
        default=[],
        metavar="COLUMN",
        help="column to sum per group (repeatable)",
    )
    p.add_argument("--sql", default=None, help="SQL over the snapshot, as view 't'")
    p.add_argument("--show", type=int, default=10, help="rows to show (default 10)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the query and prints the results."""
    args = build_parser().parse_args(argv)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import cdc_sink
    import cdc_sink.spark

    # Fix the version once (a timestamp resolves to the version committed at or before
    # it), so the header and every action below describe the same snapshot.
    table = cdc_sink.open_table(args.table_path)
    version = table.resolve_version(args.version, _timestamp(args.timestamp))
    spark = SparkSession.builder.appName("cdc_sink-snapshot-query").getOrCreate()
    cdc_sink.spark.register(spark)
    reader = spark.read.format("cdc_sink").option("versionAsOf", version)
    if args.columns:
        reader = reader.option("columns", args.columns)
    df = reader.load(args.table_path)
    if args.where:
        df = df.where(args.where)
    print(f"{args.table_path} at version {version} (latest {table.version})")
    df.printSchema()
    print(f"rows: {df.count()}")
    df.show(args.show, truncate=False)
    if args.group_by:
        aggs = [F.count(F.lit(1)).alias("rows")]
        aggs += [F.sum(c).alias(f"sum_{c}") for c in args.sum]
        (df.groupBy(args.group_by).agg(*aggs).orderBy(F.desc("rows")).show(100, truncate=False))
    if args.sql:
        df.createOrReplaceTempView("t")
        spark.sql(args.sql).show(args.show, truncate=False)
    return 0


def _timestamp(text: str | None) -> object:
    if text is None:
        return None
    from cdc_sink.cli import parse_timestamp

    return parse_timestamp(text)


if __name__ == "__main__":
    sys.exit(main())
