"""The CDC streaming job for ``spark-submit``: a thin script around :func:`cdc_sink.job.main`.

The job lives in the package (``cdc-sink run …``, ``python -m cdc_sink.job …``); this
file is what ``spark-submit`` runs on a cluster whose driver has cdc_sink installed::

    spark-submit --master spark://… \\
      --jars "$(python -c 'from cdc_sink.kafka.jars import spark_kafka_conf as c; \\
print(c()["spark.jars"])')" \\
      streaming_jobs/cdc_to_tablets.py \\
      --bootstrap-servers kafka:9092 --topic orders \\
      --table-path /data/orders --schema-file streaming_jobs/orders_schema.json \\
      --checkpoint /data/checkpoints/orders --trigger '1 second' \\
      --dead-letter kafka://kafka:9092/orders.dead-letter

Every flag, and the settings file and environment variables, are described in
:mod:`cdc_sink.job` (``--help`` lists them).
"""

from __future__ import annotations

import sys

from cdc_sink.job import *  # noqa: F403  (the job's names, for callers of this script)
from cdc_sink.job import main

if __name__ == "__main__":
    sys.exit(main())
