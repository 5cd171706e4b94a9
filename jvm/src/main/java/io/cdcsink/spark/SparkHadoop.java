package io.cdcsink.spark;

import io.cdcsink.format.CdcSinkFormatException;
import io.cdcsink.format.ReadPlan;
import io.cdcsink.format.VersionNotRetainedException;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.SparkSession;

/** The active session's Hadoop configuration, and format errors as Spark shows them. */
final class SparkHadoop {
  private SparkHadoop() {}

  /**
   * The active session's Hadoop configuration (the SparkContext's, with the session's SQL
   * settings on top, as Spark's own file sources read it).
   */
  static Configuration sessionConf() {
    SparkSession active = SparkSession.active();
    if (active instanceof org.apache.spark.sql.classic.SparkSession classic) {
      return classic.sessionState().newHadoopConf();
    }
    return new Configuration(active.sparkContext().hadoopConfiguration());
  }

  /** Resolves {@code options}' version, a format error as an unchecked exception. */
  static ReadPlan resolve(ReadOptions options, Configuration base) {
    try {
      return options.resolve(base);
    } catch (CdcSinkFormatException e) {
      throw unchecked(e);
    }
  }

  /** {@code options}' table at {@code version} or {@code timestampMs} (both null: latest). */
  static ReadPlan resolveAt(ReadOptions options, Configuration base, Long version, Long timestampMs) {
    try {
      return ReadPlan.resolve(options.path, options.hadoopConf(base), version, timestampMs);
    } catch (CdcSinkFormatException e) {
      throw unchecked(e);
    }
  }

  /** {@code e} as an unchecked exception whose message names the table and the cause. */
  static RuntimeException unchecked(CdcSinkFormatException e) {
    if (e instanceof VersionNotRetainedException) {
      return new IllegalArgumentException("cdc_sink: " + e.getMessage(), e);
    }
    return new IllegalStateException("cdc_sink: " + e.getMessage(), e);
  }
}
