#!/usr/bin/env bash
# The job image's entry point: spark-submit streaming_jobs/cdc_to_tablets.py "$@".
#
# Spark's Kafka source comes from the jars resolved at build time (no network needed).
# Environment: SPARK_MASTER (default local[2]), SPARK_DRIVER_MEMORY (default 1g),
# SPARK_SUBMIT_ARGS (more spark-submit arguments, split on spaces),
# CDC_SINK_METRICS_HOST/CDC_SINK_METRICS_PORT (the job's /metrics endpoint, added as
# --metrics-host/--metrics-port unless given as arguments; empty port: no endpoint).
# "--help" (the default command) prints the job's options.
set -euo pipefail
job=/opt/cdc_sink/streaming_jobs/cdc_to_tablets.py

if [ "$#" -eq 0 ] || [ "$1" = "--help" ] || [ "$1" = "-h" ]; then
  exec python "$job" --help
fi

extra=()
if [ -n "${CDC_SINK_METRICS_PORT:-}" ] && grep -q -- '--metrics-port' "$job"; then
  case " $* " in
    *" --metrics-port"*) ;;
    *) extra+=(--metrics-port "$CDC_SINK_METRICS_PORT") ;;
  esac
  case " $* " in
    *" --metrics-host"*) ;;
    *) extra+=(--metrics-host "${CDC_SINK_METRICS_HOST:-127.0.0.1}") ;;
  esac
fi

jars="$(python -c 'from cdc_sink.kafka.jars import spark_kafka_conf; print(spark_kafka_conf()["spark.jars"])')"
# shellcheck disable=SC2206  # SPARK_SUBMIT_ARGS is split on spaces on purpose
submit=(spark-submit --master "${SPARK_MASTER:-local[2]}"
        --driver-memory "${SPARK_DRIVER_MEMORY:-1g}" --jars "$jars"
        --conf spark.ui.enabled=false --conf spark.sql.session.timeZone=UTC
        --conf spark.sql.execution.arrow.pyspark.enabled=true
        ${SPARK_SUBMIT_ARGS:-})
exec "${submit[@]}" "$job" "${extra[@]}" "$@"
