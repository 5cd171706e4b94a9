package io.cdcsink.format;

/** The requested version (or time) is older than the oldest readable version of the table. */
public final class VersionNotRetainedException extends CdcSinkFormatException {
  private static final long serialVersionUID = 1L;
  private final long oldestReadable;

  public VersionNotRetainedException(String message, long oldestReadable) {
    super(message);
    this.oldestReadable = oldestReadable;
  }

  /** The oldest version the table can still be read at. */
  public long oldestReadable() {
    return oldestReadable;
  }
}
