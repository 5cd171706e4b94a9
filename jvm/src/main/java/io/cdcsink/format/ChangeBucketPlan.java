package io.cdcsink.format;

/** What one executor needs to read one bucket's changes of a {@link ChangePlan}. */
public final class ChangeBucketPlan implements java.io.Serializable {
  private static final long serialVersionUID = 1L;

  private ChangeBucketPlan() {}

  public int bucket() { throw new UnsupportedOperationException("not yet"); }
}
