"""The reader process of the change stream's SIGKILL test: a local Spark whose streaming
query reads a table's change feed and keeps a downstream copy of it
(:mod:`tests.changefeed.stream_copy`), from its checkpoint.

    python -m tests.changefeed.stream_reader SOURCE COPY CHECKPOINT LOCAL_DIR [--available-now]

Prints ``applied <batch id>`` after each micro-batch. Runs until killed, or with
``--available-now`` until it has read every version committed when it started (then
exits 0).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import cdc_sink
import cdc_sink.spark
from cdc_sink.spark.session import local_spark
from tests.changefeed.stream_copy import apply_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("source")
    p.add_argument("copy")
    p.add_argument("checkpoint")
    p.add_argument("local_dir")
    p.add_argument("--available-now", action="store_true")
    args = p.parse_args(argv)
    spark = local_spark(
        "change-stream-reader",
        with_kafka=False,
        extra_conf={"spark.local.dir": args.local_dir, "spark.driver.memory": "512m"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    cdc_sink.spark.register(spark)
    copy = cdc_sink.open_table(args.copy)

    def each(df: DataFrame, batch_id: int) -> None:
        apply_records(copy, df.toArrow(), batch_id)
        print(f"applied {batch_id}", flush=True)  # the test kills after such lines

    writer = (
        spark.readStream.format("cdc_sink")
        .option("readChangeFeed", "true")
        .option("startingVersion", 1)
        .option("maxVersionsPerTrigger", 50)
        .load(args.source)
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
