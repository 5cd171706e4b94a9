package io.cdcsink.format;

/** What one bucket of a version consists of: its snapshot and the segments after it. */
public final class BucketPlan implements java.io.Serializable {
  private static final long serialVersionUID = 1L;
}
