package io.cdcsink.format;

/** One retained version of the history (docs/format.md §8.7). */
public final class VersionInfo implements java.io.Serializable {
  private static final long serialVersionUID = 1L;
  private final long version;
  private final long commitTimeMs;
  private final String operation;
  private final String appId;
  private final Long batchId;

  public VersionInfo(long version, long commitTimeMs, String operation, String appId, Long batchId) {
    this.version = version;
    this.commitTimeMs = commitTimeMs;
    this.operation = operation;
    this.appId = appId;
    this.batchId = batchId;
  }

  public long version() { return version; }
  public long commitTimeMs() { return commitTimeMs; }
  public String operation() { return operation; }
  /** The writer's application id, or null. */
  public String appId() { return appId; }
  /** The writer's batch id, or null. */
  public Long batchId() { return batchId; }

  @Override
  public String toString() {
    return "v" + version + "@" + commitTimeMs + " " + operation;
  }
}
