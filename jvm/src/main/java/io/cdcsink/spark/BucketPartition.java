package io.cdcsink.spark;

import io.cdcsink.format.BucketPlan;
import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark partition: one bucket of the resolved version (its snapshot and segments). */
final class BucketPartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  final int bucket;
  final BucketPlan plan;

  BucketPartition(int bucket, BucketPlan plan) {
    this.bucket = bucket;
    this.plan = plan;
  }
}
