package io.cdcsink.spark;

import io.cdcsink.format.ChangeBucketPlan;
import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark partition of a change-feed read: one bucket's changes of the range. */
final class ChangeFeedPartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  final ChangeBucketPlan plan;

  ChangeFeedPartition(ChangeBucketPlan plan) {
    this.plan = plan;
  }
}
